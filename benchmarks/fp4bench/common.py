"""What every section shares: the log line, the device sync, the in-process A/B method
(Latin-square rounds of interleaved arms, per-round ratios, bootstrap intervals)."""

from __future__ import annotations

import gc
import os
import pathlib
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from typing import Any

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]

# --smoke: CPU, tiny sizes; checks the script only (set by bench_fp4.main)
SMOKE = False

SM90_NOTE = (
    "SM{cap}: FlashInfer fp4 kernels are compiled out below SM100 (#if __CUDA_ARCH__ >= 1000); "
    "they launch and do nothing, so these figures measure host overhead and CUDA-graph "
    "mechanics, not fp4 math."
)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sync() -> None:
    if torch.cuda.is_available() and not SMOKE:
        torch.cuda.synchronize()


def git_commit() -> str:
    if os.environ.get("FP4GRAPH_COMMIT"):
        return os.environ["FP4GRAPH_COMMIT"]
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "benchmarks", "src"],
            capture_output=True,
            text=True,
        )
        commit = out.stdout.strip() or "unknown"
        return commit + ("-dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def bootstrap_ci(values: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of the median."""
    rng = random.Random(seed)
    k = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=k)) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def summary(values: list[float]) -> dict[str, Any]:
    lo, hi = bootstrap_ci(values)
    q = statistics.quantiles(values, n=20) if len(values) >= 2 else [values[0]] * 19
    return {
        "median": statistics.median(values),
        "ci95": [lo, hi],
        "p05": q[0],
        "p25": q[4],
        "p75": q[14],
        "p95": q[18],
    }


def time_batch(fn: Callable[[], Any], calls: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter_ns() - t) / calls / 1e3  # us per call


def round_orders(arms: tuple[str, ...], rounds: int) -> list[tuple[str, ...]]:
    """Cyclic Latin square, reversed every other cycle: each arm takes each position equally
    often and follows each other arm about equally often."""
    n = len(arms)
    orders = []
    for r in range(rounds):
        rot = r % n
        order = arms[rot:] + arms[:rot]
        if (r // n) % 2:
            order = tuple(reversed(order))
        orders.append(order)
    return orders


def interleaved_arms(
    fns: dict[str, Callable[[], Any]], rounds: int, calls: int
) -> dict[str, list[float]]:
    arms = tuple(fns)
    for _ in range(3):
        for a in arms:
            time_batch(fns[a], calls)
    times: dict[str, list[float]] = {a: [] for a in arms}
    gc.collect()
    gc.disable()
    try:
        for order in round_orders(arms, rounds):
            for a in order:
                times[a].append(time_batch(fns[a], calls))
    finally:
        gc.enable()
    return times

