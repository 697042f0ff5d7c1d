"""fp4graph benchmarks: eager overhead, fullgraph + CUDA-graph speed-up, warm-up cost.

    python benchmarks/bench_fp4.py --pristine flashinfer_python-0.6.3-py3-none-any.whl \
        --out benchmarks/results

The patched flashinfer is the one installed in the environment (``import flashinfer``); the
pristine wheel of the same version is loaded beside it (benchmarks/_pristine.py).  Sections:

  warmup  (c) first-call JIT build through ``flashinfer.fp4_warmup(device)`` in a fresh
          process with an empty JIT cache, then ``fp4_warmup`` in a fresh process on the
          warm cache (and again in-process).
  eager   (a) per-call latency of each public fp4 op, patched vs pristine, interleaved in
          one process (alternating order per round), with an A/A control.
  block   (b) 32 layers of [RMSNorm -> fp4_quantize -> GEMM -> residual add] at M = 1, 8, 64:
          eager vs torch.compile(fullgraph=True, mode="reduce-overhead") vs an sglang-like
          piecewise split (Dynamo graph split at the residual-add op, pieces captured as
          CUDA graphs, split op eager); kernel time summed with torch.profiler.

Below SM100, FlashInfer's fp4 kernels are compiled out (``#if __CUDA_ARCH__ >= 1000``): the
kernels launch and do nothing, so SM90 figures measure host overhead and graph mechanics,
never fp4 math.  The JSON and the README say so on every SM90 figure.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch  # custom-op schemas below are inferred from annotations in this module

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

SM90_NOTE = (
    "SM{cap}: FlashInfer fp4 kernels are compiled out below SM100 (#if __CUDA_ARCH__ >= 1000); "
    "they launch and do nothing, so these figures measure host overhead and CUDA-graph "
    "mechanics, not fp4 math."
)


# --------------------------------------------------------------------------------------
# helpers


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "benchmarks", "src"],
            capture_output=True,
            text=True,
        )
        if os.environ.get("FP4GRAPH_COMMIT"):
            return os.environ["FP4GRAPH_COMMIT"]
        commit = out.stdout.strip() or "unknown"
        return commit + ("-dirty" if dirty.stdout.strip() else "")
    except OSError:
        return os.environ.get("FP4GRAPH_COMMIT", "unknown")


def bootstrap_ci(values: list[float], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of the median."""
    import random

    rng = random.Random(seed)
    k = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=k)) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def quantiles(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=20)
    return {
        "p05": q[0],
        "p25": q[4],
        "median": statistics.median(values),
        "p75": q[14],
        "p95": q[18],
    }


# --------------------------------------------------------------------------------------
# (c) warm-up cost

WARMUP_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
import flashinfer
t2 = time.perf_counter()
dev = torch.device("cuda")
res = {"torch_init_s": t1 - t0, "import_flashinfer_s": t2 - t1}
if hasattr(flashinfer, "fp4_warmup"):
    res["method"] = "flashinfer.fp4_warmup(device)"
    t = time.perf_counter(); names = flashinfer.fp4_warmup(dev); torch.cuda.synchronize()
    res["first_s"] = time.perf_counter() - t
    res["modules"] = list(names)
    t = time.perf_counter(); flashinfer.fp4_warmup(dev); torch.cuda.synchronize()
    res["again_in_process_s"] = time.perf_counter() - t
else:
    res["method"] = "first eager flashinfer.fp4_quantize call (no fp4_warmup: pristine wheel)"
    x = torch.randn(16, 4096, dtype=torch.bfloat16, device=dev)
    gs = torch.ones(1, device=dev)
    t = time.perf_counter(); flashinfer.fp4_quantize(x, gs); torch.cuda.synchronize()
    res["first_s"] = time.perf_counter() - t
    t = time.perf_counter(); flashinfer.fp4_quantize(x, gs); torch.cuda.synchronize()
    res["again_in_process_s"] = time.perf_counter() - t
print("WARMUP_JSON " + json.dumps(res))
"""


def run_warmup_child(workspace: pathlib.Path) -> dict[str, Any]:
    env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(workspace))
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", WARMUP_CHILD], capture_output=True, text=True, env=env, timeout=900
    )
    wall = time.perf_counter() - t
    for line in proc.stdout.splitlines():
        if line.startswith("WARMUP_JSON "):
            res: dict[str, Any] = json.loads(line[len("WARMUP_JSON ") :])
            res["process_wall_s"] = wall
            return res
    raise RuntimeError(
        f"warm-up child failed rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def bench_warmup(workspace: pathlib.Path) -> dict[str, Any]:
    log(f"warmup: cold JIT cache at {workspace}")
    cold = run_warmup_child(workspace)
    log(f"warmup: cold first={cold['first_s']:.2f}s; warm-cache process next")
    warm = run_warmup_child(workspace)
    log(f"warmup: warm-cache first={warm['first_s'] * 1e3:.1f} ms")
    return {"cold_cache": cold, "warm_cache": warm}


# --------------------------------------------------------------------------------------
# (a) eager per-call latency, patched vs pristine, one process


def time_batch(fn: Callable[[], Any], calls: int) -> float:

    t = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - t) / calls / 1e3  # us per call


def interleaved(
    fa: Callable[[], Any], fb: Callable[[], Any], rounds: int, calls: int
) -> dict[str, Any]:
    """Per round, one batch of each, order alternating (AB, BA, AB, ...); ratio b/a per round."""
    for _ in range(3):
        time_batch(fa, calls)
        time_batch(fb, calls)
    ta: list[float] = []
    tb: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            if r % 2 == 0:
                a = time_batch(fa, calls)
                b = time_batch(fb, calls)
            else:
                b = time_batch(fb, calls)
                a = time_batch(fa, calls)
            ta.append(a)
            tb.append(b)
    finally:
        gc.enable()
    ratios = [b / a for a, b in zip(ta, tb, strict=True)]
    lo, hi = bootstrap_ci(ratios)
    return {
        "a_us": statistics.median(ta),
        "b_us": statistics.median(tb),
        "ratio_median": statistics.median(ratios),
        "ratio_ci95": [lo, hi],
        "ratio_quantiles": quantiles(ratios),
        "rounds": rounds,
        "calls_per_batch": calls,
    }


def eager_cases(fi: Any, prist: dict[str, Any], m: int, k: int, sm100: bool) -> dict[str, tuple]:
    """op name -> (make patched closure, make pristine closure).

    Factories, so that the A/A control compares two closures built the same way."""

    dev = torch.device("cuda")
    x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
    gs = ((448 * 6) / x.float().abs().max()).reshape(1)
    x3 = x.unsqueeze(0)
    sf_lin = torch.randint(0, 255, (m, k // 16), dtype=torch.uint8, device=dev)
    mask = torch.tensor([m], dtype=torch.int32, device=dev)
    x3_2k = torch.randn(1, m, 2 * k, dtype=torch.bfloat16, device=dev)
    q, pa = prist["fp4_quantization"], prist["activation"]
    cases: dict[str, tuple] = {
        "fp4_quantize": (
            lambda: lambda: fi.fp4_quantize(x, gs),
            lambda: lambda: q.fp4_quantize(x, gs),
        ),
        "nvfp4_quantize": (
            lambda: lambda: fi.nvfp4_quantize(x, gs),
            lambda: lambda: q.nvfp4_quantize(x, gs),
        ),
        "mxfp4_quantize": (
            lambda: lambda: fi.mxfp4_quantize(x),
            lambda: lambda: q.mxfp4_quantize(x),
        ),
        "block_scale_interleave": (
            lambda: lambda: fi.block_scale_interleave(sf_lin),
            lambda: lambda: q.block_scale_interleave(sf_lin),
        ),
        "nvfp4_batched_quantize": (
            lambda: lambda: fi.nvfp4_batched_quantize(x3, gs),
            lambda: lambda: q.nvfp4_batched_quantize(x3, gs),
        ),
        "scaled_fp4_grouped_quantize": (
            lambda: lambda: fi.scaled_fp4_grouped_quantize(x3, mask, gs),
            lambda: lambda: q.scaled_fp4_grouped_quantize(x3, mask, gs),
        ),
        "silu_and_mul_scaled_nvfp4_experts_quantize": (
            lambda: lambda: fi.silu_and_mul_scaled_nvfp4_experts_quantize(x3_2k, mask, gs),
            lambda: lambda: pa.silu_and_mul_scaled_nvfp4_experts_quantize(x3_2k, mask, gs),
        ),
    }
    if sm100 and "gemm" in prist:
        n = k
        w = torch.randn(n, k, dtype=torch.bfloat16, device=dev)
        wgs = ((448 * 6) / w.float().abs().max()).reshape(1)
        wq, wsf = fi.fp4_quantize(w, wgs)
        xq, xsf = fi.fp4_quantize(x, gs)
        alpha = (1.0 / (gs * wgs)).float()
        g = prist["gemm"]
        cases["mm_fp4(cutlass)"] = (
            lambda: (
                lambda: fi.mm_fp4(xq, wq.T, xsf, wsf.T, alpha, torch.bfloat16, backend="cutlass")
            ),
            lambda: (
                lambda: g.mm_fp4(xq, wq.T, xsf, wsf.T, alpha, torch.bfloat16, backend="cutlass")
            ),
        )
    return cases


def guard_cost_ns(n: int = 200_000) -> dict[str, float]:
    """Host cost of the check each patched public function adds on its eager path."""

    def empty() -> None:
        return None

    res: dict[str, float] = {}
    for label, fn in (
        ("torch.compiler.is_compiling()", torch.compiler.is_compiling),
        ("empty Python call", empty),
    ):
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter_ns() - t) / n)
        res[label] = best
    return res


def bench_eager(
    fi: Any,
    prist: dict[str, Any],
    tokens: list[int],
    k: int,
    rounds: int,
    calls: int,
    sm100: bool,
    only: set[str] | None,
) -> list[dict[str, Any]]:

    rows: list[dict[str, Any]] = []
    for m in tokens:
        for name, (make_patched, make_pristine) in eager_cases(fi, prist, m, k, sm100).items():
            if only and name not in only:
                continue
            patched, pristine = make_patched(), make_pristine()
            row: dict[str, Any] = {"op": name, "M": m, "K": k}
            try:
                patched()
                pristine()
                torch.cuda.synchronize()
            except Exception as e:  # an op this GPU / version cannot run
                row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"
                log(f"eager {name} M={m}: skipped ({row['skipped']})")
                rows.append(row)
                continue
            # A/A control: the patched op through a second closure built the same way.
            patched_again = make_patched()
            ab = interleaved(patched, pristine, rounds, calls)
            aa = interleaved(patched, patched_again, rounds, calls)
            row.update(
                patched_us=ab["a_us"],
                pristine_us=ab["b_us"],
                # the goal is patched/pristine <= 1.02: report that direction
                ratio_patched_over_pristine=1.0 / ab["ratio_median"],
                ratio_ci95=[1.0 / ab["ratio_ci95"][1], 1.0 / ab["ratio_ci95"][0]],
                aa_ratio=aa["ratio_median"],
                aa_ci95=aa["ratio_ci95"],
                ab_detail=ab,
                aa_detail=aa,
            )
            log(
                f"eager {name:44s} M={m:5d}: patched {ab['a_us']:7.2f} us, pristine "
                f"{ab['b_us']:7.2f} us, patched/pristine {row['ratio_patched_over_pristine']:.4f} "
                f"[{row['ratio_ci95'][0]:.4f}, {row['ratio_ci95'][1]:.4f}]; A/A {aa['ratio_median']:.4f} "
                f"[{aa['ratio_ci95'][0]:.4f}, {aa['ratio_ci95'][1]:.4f}]"
            )
            rows.append(row)
    return rows


# --------------------------------------------------------------------------------------
# (b) host-bound block


def make_block(
    fi: Any, k: int, layers: int, sm100: bool, device: str = "cuda"
) -> tuple[Callable, Any]:
    """The 32-layer block and its split op.  Returns (block(x) -> x, split-op overload)."""
    dev = torch.device(device)
    torch.manual_seed(0)
    gs = torch.tensor([1.0], device=dev)  # any fixed global scale: timing only

    # Residual add as an opaque, mutating op: the piecewise split point (sglang splits at
    # attention ops that write into a pre-allocated output the same way).  In eager it is
    # one add kernel, as `x + y` is.
    lib_ns = "fp4bench"

    @torch.library.custom_op(f"{lib_ns}::residual_add", mutates_args=("out",))
    def residual_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
        torch.add(x, y, out=out)

    @residual_add.register_fake
    def _(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
        return None

    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        if torch.compiler.is_compiling():
            torch.ops.fp4bench.residual_add(x, y, out)
        else:
            torch.add(x, y, out=out)
        return out

    if sm100:
        ws = []
        for _ in range(layers):
            w = torch.randn(k, k, dtype=torch.bfloat16, device=dev) * 0.02
            wgs = ((448 * 6) / w.float().abs().max()).reshape(1)
            wq, wsf = fi.fp4_quantize(w, wgs)
            ws.append((wq, wsf, (1.0 / (gs * wgs)).float()))

        def gemm(q: Any, sf: Any, h: Any, w: Any) -> Any:
            wq, wsf, alpha = w
            return fi.mm_fp4(q, wq.T, sf, wsf.T, alpha, torch.bfloat16, backend="cutlass")

        gemm_desc = "flashinfer.mm_fp4(backend='cutlass') on the fp4 activations"
    else:
        ws = [torch.randn(k, k, dtype=torch.bfloat16, device=dev) * 0.02 for _ in range(layers)]

        # Stand-in for mm_fp4 below SM100: consumes the fp4 outputs (so the quantize is not
        # dead code) and computes the bf16 product of the same shape.  Same pattern as the
        # patch: an opaque op while compiling, the plain function in eager.
        @torch.library.custom_op(f"{lib_ns}::gemm_standin", mutates_args=())
        def gemm_standin(
            q: torch.Tensor, sf: torch.Tensor, h: torch.Tensor, w: torch.Tensor
        ) -> torch.Tensor:
            return torch.mm(h, w)

        @gemm_standin.register_fake
        def _(q: torch.Tensor, sf: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return h.new_empty((h.shape[0], w.shape[1]))

        def gemm(q: Any, sf: Any, h: Any, w: Any) -> Any:
            if torch.compiler.is_compiling():
                return torch.ops.fp4bench.gemm_standin(q, sf, h, w)
            return torch.mm(h, w)

        gemm_desc = "bf16 torch.mm stand-in (opaque op consuming the fp4 outputs)"

    def block(x: torch.Tensor) -> torch.Tensor:
        for w in ws:
            h = torch.nn.functional.rms_norm(x, (k,))
            q, sf = fi.fp4_quantize(h, gs)
            x = add(x, gemm(q, sf, h, w))
        return x

    block.gemm_desc = gemm_desc  # type: ignore[attr-defined]
    return block, torch.ops.fp4bench.residual_add.default


class _GraphPiece:
    """One piece of the split graph: run eagerly twice per input shape, then captured in a
    CUDA graph and replayed (sglang's CUDAPiecewiseBackend does this per batch size, all
    pieces in one shared memory pool).  Inputs whose address differs from the captured one
    are copied in (after the first captured call every address is static here)."""

    pool: Any = None

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.entries: dict[tuple, Any] = {}
        self.seen: dict[tuple, int] = {}
        self.copies = 0

    def __call__(self, *args: Any) -> Any:
        import torch

        key = tuple(
            (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else repr(a) for a in args
        )
        entry = self.entries.get(key)
        if entry is None:
            n = self.seen.get(key, 0)
            self.seen[key] = n + 1
            if n < 2 or not torch.cuda.is_available():
                return self.fn(*args)
            if _GraphPiece.pool is None:
                _GraphPiece.pool = torch.cuda.graph_pool_handle()
            static = list(args)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=_GraphPiece.pool):
                out = self.fn(*static)
            entry = self.entries[key] = (g, static, out)
        g, static, out = entry
        for a, s in zip(args, static, strict=True):
            if isinstance(a, torch.Tensor) and a.data_ptr() != s.data_ptr():
                s.copy_(a)
                self.copies += 1
        g.replay()
        return out


def piecewise_backend(split_ops: set[Any], stats: dict[str, Any]) -> Callable:
    """A minimal sglang-style piecewise backend: split the Dynamo graph at ``split_ops``
    (each split op its own submodule, run eagerly), capture every other piece in a CUDA
    graph per input shape.  Pieces run as FX code ("eager" piece compiler)."""
    from torch.fx.passes.split_module import split_module

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        part: dict[str, int] = {}
        pid = 0
        split_ids: set[int] = set()
        for node in gm.graph.nodes:
            if node.op in ("placeholder", "output"):
                continue
            target = node.target
            if isinstance(target, torch._ops.OpOverloadPacket):
                target = target.default
            if node.op == "call_function" and target in split_ops:
                pid += 1
                part[node.name] = pid
                split_ids.add(pid)
                pid += 1
            else:
                part[node.name] = pid
        split = split_module(gm, None, lambda n: part[n.name], keep_original_order=True)
        pieces = 0
        for name, sub in list(split.named_children()):
            idx = int(name.rsplit("_", 1)[1])
            if idx in split_ids:
                continue
            # as vLLM / sglang do: shadow the submodule with a plain callable
            split.__dict__[name] = _GraphPiece(sub)
            stats.setdefault("objects", []).append(split.__dict__[name])  # type: ignore[attr-defined]
            pieces += 1
        stats["pieces"] = pieces
        stats["split_ops"] = len(split_ids)
        return split

    return backend


TOP_KERNELS: dict[str, list[tuple[str, float]]] = {}


def kernel_sum_us(fn: Callable[[], Any], iters: int = 20, label: str = "") -> float:
    """Summed device time per call (us) from torch.profiler; the 8 largest kernels (us per
    call) are kept in TOP_KERNELS[label] to show where the time goes."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    avgs = [(ev.key, ev.self_device_time_total / iters) for ev in prof.key_averages()]
    if label:
        TOP_KERNELS[label] = sorted(avgs, key=lambda kv: -kv[1])[:8]
    return sum(t for _, t in avgs)


def time_loop(fn: Callable[[], Any], iters: int, reps: int = 7) -> dict[str, float]:

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    per: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            t = time.perf_counter_ns()
            for _ in range(iters):
                fn()
            torch.cuda.synchronize()
            per.append((time.perf_counter_ns() - t) / iters / 1e3)
    finally:
        gc.enable()
    return {"median_us": statistics.median(per), "min_us": min(per), "max_us": max(per)}


def bench_block(fi: Any, tokens: list[int], k: int, layers: int, sm100: bool) -> dict[str, Any]:

    for opt in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, opt):
            setattr(torch._dynamo.config, opt, 64)
    block, split_op = make_block(fi, k, layers, sm100)
    rows: list[dict[str, Any]] = []
    # static shapes: one compile (and one set of graphs) per M, as sglang captures per size
    full = torch.compile(block, fullgraph=True, dynamic=False, mode="reduce-overhead")
    stats: dict[str, Any] = {}
    piecewise = torch.compile(
        block, fullgraph=True, dynamic=False, backend=piecewise_backend({split_op}, stats)
    )
    for m in tokens:
        torch._dynamo.utils.counters.clear()
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        row: dict[str, Any] = {"M": m, "K": k, "layers": layers}
        ref = block(x)
        t = time.perf_counter()
        for _ in range(3):
            out_full = full(x)
        torch.cuda.synchronize()
        row["compile_full_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(3):
            out_pw = piecewise(x)
        torch.cuda.synchronize()
        row["compile_piecewise_s"] = time.perf_counter() - t
        row["cudagraph_skips"] = dict(torch._dynamo.utils.counters["inductor"]).get(
            "cudagraph_skips", 0
        )
        row["graph_breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
        row["pieces"] = stats.get("pieces")
        row["split_ops"] = stats.get("split_ops")
        row["max_abs_diff_full_vs_eager"] = float((out_full.float() - ref.float()).abs().max())
        row["max_abs_diff_piecewise_vs_eager"] = float((out_pw.float() - ref.float()).abs().max())
        iters = 50 if m <= 64 else 20
        row["eager"] = time_loop(lambda x=x: block(x), iters)
        row["full_graph"] = time_loop(lambda x=x: full(x), iters * 4)
        row["piecewise"] = time_loop(lambda x=x: piecewise(x), iters * 2)
        row["piece_input_copies"] = sum(p.copies for p in stats.get("objects", []))
        row["kernel_sum_full_us"] = kernel_sum_us(lambda x=x: full(x), label="full")
        row["kernel_sum_piecewise_us"] = kernel_sum_us(lambda x=x: piecewise(x), label="pw")
        row["kernel_sum_eager_us"] = kernel_sum_us(lambda x=x: block(x), iters=5, label="eager")
        row["top_kernels_us"] = dict(TOP_KERNELS)
        e, f, p = (row[n]["median_us"] for n in ("eager", "full_graph", "piecewise"))
        row["speedup_full"] = e / f
        row["speedup_piecewise"] = e / p
        row["full_over_kernel_sum"] = f / row["kernel_sum_full_us"]
        row["piecewise_over_kernel_sum"] = p / row["kernel_sum_piecewise_us"]
        log(
            f"block M={m}: eager {e:.0f} us, full graph {f:.0f} us ({e / f:.1f}x, "
            f"{row['full_over_kernel_sum']:.2f}x kernel sum {row['kernel_sum_full_us']:.0f} us), "
            f"piecewise {p:.0f} us ({e / p:.1f}x, {row['piecewise_over_kernel_sum']:.2f}x kernel sum "
            f"{row['kernel_sum_piecewise_us']:.0f} us); compile {row['compile_full_s']:.1f}s / "
            f"{row['compile_piecewise_s']:.1f}s; skips {row['cudagraph_skips']}"
        )
        rows.append(row)
    return {"gemm": block.gemm_desc, "rows": rows}  # type: ignore[attr-defined]


def plot_block(result: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["block"]["rows"]
    meta = result["meta"]
    ms = [r["M"] for r in rows]
    series = [
        ("eager", [r["eager"]["median_us"] for r in rows]),
        ("piecewise CUDA graphs", [r["piecewise"]["median_us"] for r in rows]),
        ("fullgraph + reduce-overhead", [r["full_graph"]["median_us"] for r in rows]),
        ("summed kernel time (full graph)", [r["kernel_sum_full_us"] for r in rows]),
    ]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    width = 0.2
    for i, (label, vals) in enumerate(series):
        xs = [j + (i - 1.5) * width for j in range(len(ms))]
        bars = ax.bar(xs, vals, width, label=label)
        for b, v in zip(bars, vals, strict=True):
            ax.annotate(
                f"{v:.0f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=7
            )
    ax.set_yscale("log")
    ax.set_xticks(range(len(ms)), [f"M={m}" for m in ms])
    ax.set_ylabel("time per block call (us, log)")
    r0 = rows[0]
    ax.set_title(
        f"{r0['layers']} x [RMSNorm -> fp4_quantize -> GEMM -> add], K={r0['K']}\n"
        f"{meta['gpu']} (SM{meta['capability']}), flashinfer {meta['flashinfer']}, torch {meta['torch']}",
        fontsize=9,
    )
    ax.legend(fontsize=8, loc="upper left")
    if meta.get("sm_note"):
        fig.text(0.01, 0.01, meta["sm_note"], fontsize=6.5, wrap=True)
        fig.subplots_adjust(bottom=0.2)
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--pristine",
        type=pathlib.Path,
        required=True,
        help="pristine wheel (.whl) or unpacked tree of the same version",
    )
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results")
    ap.add_argument("--sections", default="warmup,eager,block")
    ap.add_argument("--tokens", default="1,16,256,4096", help="token counts for (a)")
    ap.add_argument("--k", type=int, default=4096, help="K for (a)")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--calls", type=int, default=20, help="calls per timed batch in (a)")
    ap.add_argument("--ops", default="", help="comma-separated subset of ops for (a)")
    ap.add_argument("--block-tokens", default="1,8,64")
    ap.add_argument("--block-k", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--workdir", type=pathlib.Path, default=None)
    args = ap.parse_args(argv)

    sections = set(args.sections.split(","))
    work = args.workdir or pathlib.Path(tempfile.mkdtemp(prefix="fp4bench-"))
    work.mkdir(parents=True, exist_ok=True)
    patched_ws = work / "ws-patched"
    pristine_ws = work / "ws-pristine"
    args.out.mkdir(parents=True, exist_ok=True)

    result: dict[str, Any] = {}
    if "warmup" in sections:  # before this process touches the GPU or imports flashinfer
        try:
            result["warmup"] = bench_warmup(patched_ws)
        except Exception as e:  # keep going: the other sections still tell something
            result["warmup"] = {"error": f"{type(e).__name__}: {e}"[-4000:]}
            log(f"warmup FAILED: {result['warmup']['error']}")
    os.environ["FLASHINFER_WORKSPACE_BASE"] = str(patched_ws)

    import _pristine
    import flashinfer as fi

    cap = torch.cuda.get_device_capability()
    cap_s = f"{cap[0]}{cap[1]}"
    sm100 = cap[0] >= 10
    pristine_tree = (
        _pristine.unpack_wheel(args.pristine, work / "pristine-tree")
        if args.pristine.suffix == ".whl"
        else args.pristine
    )
    try:
        import importlib.metadata as md

        fi_dist = md.version("flashinfer-python")
    except Exception:
        fi_dist = getattr(fi, "__version__", "?")
    result["meta"] = {
        "gpu": torch.cuda.get_device_name(),
        "capability": cap_s,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "flashinfer": fi_dist,
        "flashinfer_file": fi.__file__,
        "flashinfer_patched": hasattr(fi, "fp4_warmup"),
        "pristine": _pristine.version(pristine_tree),
        "fp4graph_commit": git_commit(),
        "patched_wheel": os.environ.get("FP4BENCH_PATCHED_WHEEL"),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "sm_note": None if sm100 else SM90_NOTE.format(cap=cap_s),
    }
    log(json.dumps(result["meta"]))
    if not result["meta"]["flashinfer_patched"]:
        log("WARNING: the installed flashinfer has no fp4_warmup: it is not the patched wheel")

    cap_slug = "".join(c if c.isalnum() else "-" for c in result["meta"]["gpu"]).strip("-").lower()
    stem = f"{cap_slug}-sm{cap_s}-flashinfer-{result['meta']['pristine']}"
    out_json = args.out / f"{stem}.json"

    def save() -> None:
        out_json.write_text(json.dumps(result, indent=1, default=str) + "\n")

    save()
    if "eager" in sections:
        t = time.perf_counter()
        prist: dict[str, Any] = {}
        for mod in ("fp4_quantization", "activation") + (("gemm",) if sm100 else ()):
            prist[mod] = _pristine.load(pristine_tree, pristine_ws, mod)
        # first pristine call builds its JIT module in its own workspace: time it
        x = torch.randn(16, args.k, dtype=torch.bfloat16, device="cuda")
        t1 = time.perf_counter()
        prist["fp4_quantization"].fp4_quantize(x, torch.ones(1, device="cuda"))
        torch.cuda.synchronize()
        result["pristine_first_call_s"] = time.perf_counter() - t1
        if hasattr(fi, "fp4_warmup"):
            fi.fp4_warmup(torch.device("cuda"))
        tokens = [int(v) for v in args.tokens.split(",")]
        only = set(args.ops.split(",")) if args.ops else None
        result["eager"] = {
            "guard_cost_ns": guard_cost_ns(),
            "method": (
                "one process; patched = installed flashinfer, pristine = the same version's "
                "files imported under a private package name; per round one batch of "
                f"{args.calls} calls of each (host clock, one synchronize per batch), order "
                "alternating per round; ratio per round; median and 95% bootstrap CI; "
                "A/A = patched vs patched through another closure"
            ),
            "rows": bench_eager(fi, prist, tokens, args.k, args.rounds, args.calls, sm100, only),
        }
        result["eager"]["seconds"] = time.perf_counter() - t
        save()

    if "block" in sections:
        t = time.perf_counter()
        try:
            result["block"] = bench_block(
                fi, [int(v) for v in args.block_tokens.split(",")], args.block_k, args.layers, sm100
            )
        except Exception as e:
            import traceback

            traceback.print_exc()
            result["block"] = {"error": f"{type(e).__name__}: {e}"[-4000:]}
        result["block"]["seconds"] = time.perf_counter() - t

    save()
    log(f"wrote {out_json}")
    if "rows" in result.get("block", {}):
        plot_block(result, args.out / f"{stem}-block.png")
        log(f"wrote {args.out / (stem + '-block.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
