"""(a) Eager per-call latency of each public fp4 entry point, patched vs pristine.

Five arms in one process: P1/P2 two private copies of the patched tree, Q1/Q2 two of the
pristine tree (same loader, ``trees.load``), I the installed package.  The arms are
interleaved (``common.interleaved_arms``); patched/pristine is the per-round
sqrt(P1*P2)/sqrt(Q1*Q2), pristine/pristine and patched/patched are the method's noise."""

from __future__ import annotations

import difflib
import dis
import functools
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from . import common
from .common import interleaved_arms, log, summary, sync

# P1/P2: two private copies of the patched tree; Q1/Q2: two of the pristine tree;
# I: the installed package (``import flashinfer``), as users import it.
ARMS = ("P1", "P2", "Q1", "Q2", "I")


PRIVATE_NAMES = {
    "P1": "_fi_patched_a",
    "P2": "_fi_patched_b",
    "Q1": "_fi_pristine_a",
    "Q2": "_fi_pristine_b",
}


def arm_ratios(times: dict[str, list[float]]) -> dict[str, Any]:
    """Per-round ratios of the five arms (median, 95% CI, quantiles)."""
    p1, p2, q1, q2, i = (times[a] for a in ARMS)
    n = len(p1)
    per = {
        # the figure: geometric mean of the two patched copies over that of the two pristine
        "patched/pristine": [math.sqrt(p1[r] * p2[r] / (q1[r] * q2[r])) for r in range(n)],
        "P1/Q1": [p1[r] / q1[r] for r in range(n)],
        "P2/Q2": [p2[r] / q2[r] for r in range(n)],
        "P1/Q2": [p1[r] / q2[r] for r in range(n)],
        "P2/Q1": [p2[r] / q1[r] for r in range(n)],
        # the method's own noise: two copies of one tree
        "pristine/pristine": [q2[r] / q1[r] for r in range(n)],
        "patched/patched": [p2[r] / p1[r] for r in range(n)],
        # the first run's method: installed package vs a private copy
        "installed/patched_copy": [i[r] / p1[r] for r in range(n)],
        "installed/pristine_copy": [i[r] / q1[r] for r in range(n)],
    }
    return {k: summary(v) for k, v in per.items()}


def eager_cases(
    arms: dict[str, dict[str, Any]], m: int, k: int, sm100: bool
) -> dict[str, dict[str, Callable[[], Any]]]:
    """op name -> {arm: closure}.  ``arms[a]`` maps module name -> module ('fp4_quantization',
    'activation', and 'gemm' on SM100+); for the installed arm every entry is the package."""
    dev = torch.device("cuda")
    x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
    gs = ((448 * 6) / x.float().abs().max()).reshape(1)
    x3 = x.unsqueeze(0)
    sf_lin = torch.randint(0, 255, (m, k // 16), dtype=torch.uint8, device=dev)
    mask = torch.tensor([m], dtype=torch.int32, device=dev)
    x3_2k = torch.randn(1, m, 2 * k, dtype=torch.bfloat16, device=dev)

    def per_arm(mod: str, name: str, *args: Any, **kwargs: Any) -> dict[str, Callable[[], Any]]:
        return {
            a: functools.partial(getattr(mods[mod], name), *args, **kwargs)
            for a, mods in arms.items()
        }

    fq = "fp4_quantization"
    cases: dict[str, dict[str, Callable[[], Any]]] = {
        "fp4_quantize": per_arm(fq, "fp4_quantize", x, gs),
        "nvfp4_quantize": per_arm(fq, "nvfp4_quantize", x, gs),
        "mxfp4_quantize": per_arm(fq, "mxfp4_quantize", x),
        "block_scale_interleave": per_arm(fq, "block_scale_interleave", sf_lin),
        "nvfp4_batched_quantize": per_arm(fq, "nvfp4_batched_quantize", x3, gs),
        "scaled_fp4_grouped_quantize": per_arm(fq, "scaled_fp4_grouped_quantize", x3, mask, gs),
        "silu_and_mul_scaled_nvfp4_experts_quantize": per_arm(
            "activation", "silu_and_mul_scaled_nvfp4_experts_quantize", x3_2k, mask, gs
        ),
    }
    if sm100 and all("gemm" in mods for mods in arms.values()):
        w = torch.randn(k, k, dtype=torch.bfloat16, device=dev)
        wgs = ((448 * 6) / w.float().abs().max()).reshape(1)
        quantize = arms["I"][fq].fp4_quantize
        wq, wsf = quantize(w, wgs)
        xq, xsf = quantize(x, gs)
        alpha = (1.0 / (gs * wgs)).float()
        cases["mm_fp4(cutlass)"] = per_arm(
            "gemm", "mm_fp4", xq, wq.T, xsf, wsf.T, alpha, torch.bfloat16, backend="cutlass"
        )
    return cases


def smoke_eager_cases(arms: dict[str, dict[str, Any]]) -> dict[str, dict[str, Callable[[], Any]]]:
    """CPU smoke: call each arm's public fp4_quantize with sf_vec_size=7, which raises
    NotImplementedError at its first check (after the guard in the patched tree)."""
    x = torch.zeros(2, 64, dtype=torch.bfloat16)

    def make(d: dict[str, Any]) -> Callable[[], Any]:
        f = d["fp4_quantization"].fp4_quantize

        def call() -> None:
            try:
                f(x, None, 7)
            except NotImplementedError:
                pass

        return call

    return {"fp4_quantize(raises)": {a: make(mods) for a, mods in arms.items()}}


def guard_cost_ns(n: int = 200_000, reps: int = 7) -> dict[str, float]:
    """Host cost (ns per call, best of ``reps``) of the checks a public function could make:
    'guarded - plain' is the first series' is_compiling() guard, 'guarded_exporting - plain'
    the is_exporting() test the series keeps for non-strict torch.export."""
    ic = torch.compiler.is_compiling
    ie = torch.compiler.is_exporting

    def empty() -> None:
        return None

    def plain(x: Any) -> Any:
        return x

    def guarded(x: Any) -> Any:
        if torch.compiler.is_compiling():
            return None
        return x

    def guarded_alias(x: Any) -> Any:  # is_compiling bound once at import
        if ic():
            return None
        return x

    def guarded_flag(x: Any) -> Any:  # NOT safe: Dynamo in torch <= 2.10 never sets the flag
        if torch.compiler._is_compiling_flag:
            return None
        return x

    def guarded_exporting(x: Any) -> Any:  # the series: one is_exporting() test
        if ie():
            return None
        return x

    cases: dict[str, Callable[[], Any]] = {
        "torch.compiler.is_compiling()": torch.compiler.is_compiling,
        "empty Python call": empty,
        "plain(x)": lambda: plain(1),
        "guarded(x)": lambda: guarded(1),
        "guarded_alias(x)": lambda: guarded_alias(1),
        "guarded_flag(x)": lambda: guarded_flag(1),
        "guarded_exporting(x)": lambda: guarded_exporting(1),
    }
    best = {k: float("inf") for k in cases}
    for _ in range(reps):  # interleaved repetitions
        for label, fn in cases.items():
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            best[label] = min(best[label], (time.perf_counter_ns() - t) / n)
    res = dict(best)
    res["guarded - plain"] = best["guarded(x)"] - best["plain(x)"]
    res["guarded_alias - plain"] = best["guarded_alias(x)"] - best["plain(x)"]
    res["guarded_flag - plain"] = best["guarded_flag(x)"] - best["plain(x)"]
    res["guarded_exporting - plain"] = best["guarded_exporting(x)"] - best["plain(x)"]
    return res


PUBLIC = {
    "fp4_quantization": (
        "fp4_quantize",
        "nvfp4_quantize",
        "mxfp4_quantize",
        "block_scale_interleave",
        "nvfp4_batched_quantize",
        "scaled_fp4_grouped_quantize",
    ),
    "activation": ("silu_and_mul_scaled_nvfp4_experts_quantize",),
}


def _instrs(fn: Any) -> list[str]:
    out = []
    for ins in dis.get_instructions(fn):
        if ins.opname in ("CACHE", "NOP", "RESUME", "EXTENDED_ARG"):
            continue
        arg = "" if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs else ins.argrepr
        out.append(f"{ins.opname} {arg}".strip())
    return out


def bytecode_diff(patched: dict[str, Any], pristine: dict[str, Any]) -> dict[str, Any]:
    """Instruction-level difference of each public function, patched vs pristine copy
    (jump offsets dropped).  Also whether each is the bare function (flashinfer_api at
    FLASHINFER_LOGLEVEL=0 returns it unwrapped)."""
    res: dict[str, Any] = {}
    for mod, names in PUBLIC.items():
        for name in names:
            fp, fq = getattr(patched[mod], name), getattr(pristine[mod], name)
            a, b = _instrs(fq), _instrs(fp)
            added, removed = [], []
            sm = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
            for tag, i1, i2, j1, j2 in sm.get_opcodes():
                if tag in ("replace", "delete"):
                    removed += a[i1:i2]
                if tag in ("replace", "insert"):
                    added += b[j1:j2]
            # what the eager path runs before the pristine body: the patched function's
            # instructions up to its first conditional jump (the guard), if it starts with one
            jumps = [i for i, s in enumerate(b) if s.startswith("POP_JUMP")]
            prefix = (
                b[: jumps[0] + 1] if jumps and b[: jumps[0] + 1] == added[: jumps[0] + 1] else []
            )
            res[name] = {
                "pristine_instructions": len(a),
                "patched_instructions": len(b),
                "added": added,
                "removed": removed,
                "eager_path_prefix": prefix,
                "unwrapped": not hasattr(fp, "__wrapped__") and not hasattr(fq, "__wrapped__"),
                "same_globals_used_otherwise": sorted(
                    set(fp.__code__.co_names) - set(fq.__code__.co_names)
                ),
            }
    return res


def bench_eager(
    arms: dict[str, dict[str, Any]],
    tokens: list[int],
    k: int,
    rounds: int,
    calls: int,
    sm100: bool,
    only: set[str] | None,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for m in tokens:
        cases = smoke_eager_cases(arms) if common.SMOKE else eager_cases(arms, m, k, sm100)
        for name, fns in cases.items():
            if only and name not in only:
                continue
            row: dict[str, Any] = {"op": name, "M": m, "K": k}
            try:
                for fn in fns.values():
                    fn()
                sync()
            except Exception as e:  # an op this GPU / version cannot run
                row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                log(f"eager {name} M={m}: skipped ({row['skipped']})")
                rows.append(row)
                continue
            times = interleaved_arms(fns, rounds, calls)
            r = arm_ratios(times)
            row.update(
                us={a: statistics.median(times[a]) for a in ARMS},
                ratios=r,
                rounds=rounds,
                calls_per_batch=calls,
            )
            pp, c1, c2, ip = (
                r["patched/pristine"],
                r["pristine/pristine"],
                r["patched/patched"],
                r["installed/pristine_copy"],
            )
            log(
                f"eager {name:44s} M={m:5d}: P {row['us']['P1']:7.2f}/{row['us']['P2']:7.2f} "
                f"Q {row['us']['Q1']:7.2f}/{row['us']['Q2']:7.2f} I {row['us']['I']:7.2f} us; "
                f"patched/pristine {pp['median']:.4f} [{pp['ci95'][0]:.4f}, {pp['ci95'][1]:.4f}]; "
                f"Q/Q {c1['median']:.4f} P/P {c2['median']:.4f}; installed/pristine "
                f"{ip['median']:.4f}"
            )
            rows.append(row)
    return rows


def eager_noise(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The method's own noise over all cells: the two same-tree controls."""
    meds, halfw = [], []
    for row in rows:
        for key in ("pristine/pristine", "patched/patched"):
            if "ratios" in row:
                s = row["ratios"][key]
                meds.append(abs(s["median"] - 1))
                halfw.append((s["ci95"][1] - s["ci95"][0]) / 2)
    if not meds:
        return {}
    return {
        "max_abs_control_median_minus_1": max(meds),
        "median_abs_control_median_minus_1": statistics.median(meds),
        "max_control_ci95_halfwidth": max(halfw),
        "median_control_ci95_halfwidth": statistics.median(halfw),
    }
