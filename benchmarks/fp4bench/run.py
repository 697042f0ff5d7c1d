"""The run: its context (trees, workspaces, results file) and one runner per section."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import sys
import time
from typing import Any

import torch

from . import common, trees
from .block import _smoke_fi, bench_block
from .common import SM90_NOTE, git_commit, log
from .decompose import DECOMPOSE_ARMS, DECOMPOSE_OPS, bench_decompose, decompose_arms
from .eager import PRIVATE_NAMES, bench_eager, bytecode_diff, eager_noise, guard_cost_ns
from .imports import bench_imports
from .peers import bench_peers, build_designs, smoke_kernels
from .warmup import bench_warmup


@dataclasses.dataclass
class Run:
    """What the sections share: arguments, trees, JIT workspaces, the results and their file."""

    args: argparse.Namespace
    work: pathlib.Path
    fi: Any = None
    patched_tree: pathlib.Path = pathlib.Path()
    pristine_tree: pathlib.Path = pathlib.Path()
    sm100: bool = False
    out_json: pathlib.Path = pathlib.Path()
    result: dict[str, Any] = dataclasses.field(default_factory=dict)
    copies: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def patched_ws(self) -> pathlib.Path:
        return self.work / "ws-patched"

    @property
    def pristine_ws(self) -> pathlib.Path:
        return self.work / "ws-pristine"

    def save(self) -> None:
        self.out_json.write_text(json.dumps(self.result, indent=1, default=str) + "\n")

    def rounds(self) -> int:
        return 8 if common.SMOKE else int(self.args.rounds)

    def calls(self) -> int:
        return 2 if common.SMOKE else int(self.args.calls)


def start(run: Run) -> str:
    """Import flashinfer, resolve both trees, write the run's metadata; return the stem of
    the output files."""
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(run.patched_ws)
    import flashinfer as fi

    args = run.args
    run.fi = fi
    if common.SMOKE:
        cap, gpu = (12, 0), "CPU smoke run (no GPU; measures nothing)"
    elif not torch.cuda.is_available():  # (i) alone: import cost is host-side
        cap, gpu = (0, 0), f"CPU {platform.machine()} {os.cpu_count()} cores (no GPU)"
    else:
        cap, gpu = torch.cuda.get_device_capability(), torch.cuda.get_device_name()
    cap_s = f"{cap[0]}{cap[1]}"
    run.sm100 = cap[0] >= 10 and not common.SMOKE
    run.pristine_tree = trees.as_tree(args.pristine, run.work / "pristine-tree")
    run.patched_tree = (
        trees.as_tree(args.patched, run.work / "patched-tree")
        if args.patched
        else trees.installed_tree()
    )
    try:
        import importlib.metadata as md

        fi_dist = md.version("flashinfer-python")
    except Exception:
        fi_dist = getattr(fi, "__version__", "?")
    run.result["meta"] = {
        "gpu": gpu,
        "capability": cap_s,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "flashinfer": fi_dist,
        "flashinfer_file": fi.__file__,
        "flashinfer_patched": hasattr(fi, "fp4_warmup"),
        "patched_tree": str(run.patched_tree),
        "patched_tree_version": trees.version(run.patched_tree),
        "pristine": trees.version(run.pristine_tree),
        "fp4graph_commit": git_commit(),
        "patched_wheel": os.environ.get("FP4BENCH_PATCHED_WHEEL"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "sm_note": None if cap[0] >= 10 or cap[0] == 0 else SM90_NOTE.format(cap=cap_s),
    }
    log(json.dumps(run.result["meta"]))
    if not run.result["meta"]["flashinfer_patched"]:
        log("WARNING: the installed flashinfer has no fp4_warmup: it is not the patched wheel")
    slug = "".join(c if c.isalnum() else "-" for c in gpu).strip("-").lower()
    device = slug if cap[0] == 0 else f"{slug}-sm{cap_s}"
    stem = f"{device}-flashinfer-{run.result['meta']['pristine']}{args.stem_suffix}"
    run.out_json = args.out / f"{stem}.json"
    run.save()
    return stem


def load_copies(run: Run) -> dict[str, dict[str, Any]]:
    """The private copies P1, P2 (patched) and Q1, Q2 (pristine), and I (installed), each
    module name -> module; built once (the first call of a copy builds its JIT module)."""
    if run.copies:
        return run.copies
    mods = ("fp4_quantization", "activation") + (("gemm",) if run.sm100 else ())
    arms: dict[str, dict[str, Any]] = {}
    for a in ("P1", "P2", "Q1", "Q2"):
        tree, ws = (
            (run.patched_tree, run.patched_ws)
            if a[0] == "P"
            else (run.pristine_tree, run.pristine_ws)
        )
        arms[a] = {mod: trees.load(tree, ws, mod, PRIVATE_NAMES[a]) for mod in mods}
        f = arms[a]["fp4_quantization"].fp4_quantize
        if not f.__code__.co_filename.startswith(str(tree)):
            raise RuntimeError(f"arm {a} loaded {f.__code__.co_filename}")
    arms["I"] = {mod: run.fi for mod in mods}
    first_calls: dict[str, float] = {}
    if not common.SMOKE:
        x = torch.randn(16, run.args.k, dtype=torch.bfloat16, device="cuda")
        one = torch.ones(1, device="cuda")
        for a in ("Q1", "Q2", "P1", "P2", "I"):  # Q1 and P1 build the JIT modules
            t = time.perf_counter()
            arms[a]["fp4_quantization"].fp4_quantize(x, one)
            torch.cuda.synchronize()
            first_calls[a] = time.perf_counter() - t
        log(f"first calls (s) {first_calls}")
    run.result["first_calls_s"] = first_calls
    run.result["pristine_first_call_s"] = first_calls.get("Q1")
    run.copies = arms
    return arms


def tokens(spec: str) -> list[int]:
    return [1] if common.SMOKE else [int(v) for v in spec.split(",")]


def run_warmup(run: Run) -> None:
    try:
        run.result["warmup"] = bench_warmup(run.patched_ws)
    except Exception as e:  # keep going: the other sections still tell something
        run.result["warmup"] = {"error": f"{type(e).__name__}: {e}"[-4000:]}
        log(f"warmup FAILED: {run.result['warmup']['error']}")


def run_eager(run: Run) -> None:
    t = time.perf_counter()
    arms = load_copies(run)
    run.result["bytecode_diff"] = bytecode_diff(arms["P1"], arms["Q1"])
    only = set(run.args.ops.split(",")) if run.args.ops else None
    eager: dict[str, Any] = {
        "guard_cost_ns": guard_cost_ns(20_000 if common.SMOKE else 200_000),
        "method": (
            "one process, five arms: P1/P2 = two private copies of the patched tree, "
            "Q1/Q2 = two private copies of the pristine tree (same loader, "
            "benchmarks/fp4bench/trees.py), I = the installed package; per round one batch "
            f"of {run.calls()} calls of each arm (host clock, one synchronize per batch), "
            "order a cyclic Latin square reversed every other cycle; per-round ratios; "
            "median and 95% bootstrap CI. patched/pristine = sqrt(P1*P2)/sqrt(Q1*Q2); "
            "pristine/pristine = Q2/Q1 and patched/patched = P2/P1 are the method noise; "
            "installed/pristine_copy = I/Q1 is the first run's (asymmetric) method"
        ),
    }
    eager["rows"] = bench_eager(
        arms, tokens(run.args.tokens), run.args.k, run.rounds(), run.calls(), run.sm100, only
    )
    eager["noise"] = eager_noise(eager["rows"])
    eager["seconds"] = time.perf_counter() - t
    run.result["eager"] = eager
    log(f"eager: noise {eager['noise']}; guard {eager['guard_cost_ns']}")
    run.save()


def run_decompose(run: Run) -> None:
    t = time.perf_counter()
    darms = decompose_arms(
        {"patched": run.patched_tree, "pristine": run.pristine_tree},
        {"patched": run.patched_ws, "pristine": run.pristine_ws},
    )
    run.result["decompose"] = {
        "method": (
            f"one process, {len(DECOMPOSE_ARMS)} arms interleaved as in (a): Q pristine copy; "
            "P patched copy; Pu patched copy running the pristine bytecode (substitute_in_graph "
            "alone, no per-call test); Qe / Qg / Qa pristine copies running the patched source "
            "with its test written as is_exporting() (the series), "
            "torch.compiler.is_compiling() (the first series) and an import-time alias of "
            f"is_compiling; Q2 second pristine copy (noise). Ops {', '.join(DECOMPOSE_OPS)}"
        ),
        "rows": bench_decompose(
            darms, tokens(run.args.decompose_tokens), run.args.k, run.rounds(), run.calls()
        ),
        "seconds": time.perf_counter() - t,
    }
    run.save()


def run_peers(run: Run) -> None:
    t = time.perf_counter()
    if common.SMOKE:
        pristine, pristine_b, ours = smoke_kernels()
    else:
        arms = load_copies(run)
        pristine = arms["Q1"]["fp4_quantization"].fp4_quantize
        pristine_b = arms["Q2"]["fp4_quantization"].fp4_quantize
        ours = arms["P1"]["fp4_quantization"].fp4_quantize
    designs = build_designs(pristine, pristine_b, ours)
    run.result["peers"] = bench_peers(
        designs, tokens(run.args.peer_tokens), run.args.k, run.rounds(), run.calls()
    )
    run.result["peers"]["seconds"] = time.perf_counter() - t
    run.save()


def run_imports(run: Run, deadline: float = float("inf")) -> None:
    t = time.perf_counter()
    args = run.args
    run.result["imports"] = bench_imports(
        run.patched_tree,
        run.pristine_tree,
        run.work,
        2 if common.SMOKE else args.import_pairs,
        parts=tuple(p for p in args.import_parts.split(",") if p),
        deadline=deadline,
        goal=args.import_goal,
        attribution_pairs=1 if common.SMOKE else args.import_attribution_pairs,
        fork=args.import_fork,
    )
    run.result["imports"]["seconds"] = time.perf_counter() - t
    run.save()


def run_block(run: Run, deadline: float) -> None:
    t = time.perf_counter()
    args = run.args
    try:
        run.result["block"] = bench_block(
            _smoke_fi() if common.SMOKE else run.fi,
            [int(v) for v in args.block_tokens.split(",")],
            args.block_k,
            args.layers,
            run.sm100,
            [v for v in args.block_variants.split(",") if v],
            deadline,
            args.block_reps,
        )
    except Exception as e:
        import traceback

        traceback.print_exc()
        run.result["block"] = {"error": f"{type(e).__name__}: {e}"[-4000:]}
    run.result["block"]["seconds"] = time.perf_counter() - t
    run.save()
