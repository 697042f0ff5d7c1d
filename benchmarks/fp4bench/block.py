"""(b) Host-bound block: 32 x [RMSNorm -> fp4_quantize -> GEMM -> residual add], eager
against several compiled + CUDA-graph variants (``BLOCK_VARIANTS``), with the summed kernel
time, kernels per layer and the top kernels (torch.profiler)."""

from __future__ import annotations

import functools
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from . import common
from .common import log, sync

LIB = "fp4bench"


def _ops(sm100: bool) -> dict[str, Any]:
    """Register the harness's opaque ops once: the residual add (the piecewise split point,
    mutating a pre-allocated output as sglang's attention ops do) and the bf16 GEMM stand-in
    below SM100 (consumes the fp4 outputs so the quantize is not dead code)."""
    if hasattr(_ops, "done"):
        return _ops.done  # type: ignore[attr-defined,no-any-return]

    @torch.library.custom_op(f"{LIB}::residual_add", mutates_args=("out",))
    def residual_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
        torch.add(x, y, out=out)

    @residual_add.register_fake
    def _(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
        return None

    @torch.library.custom_op(f"{LIB}::gemm_standin", mutates_args=())
    def gemm_standin(
        q: torch.Tensor, sf: torch.Tensor, h: torch.Tensor, w: torch.Tensor
    ) -> torch.Tensor:
        return torch.mm(h, w)

    @gemm_standin.register_fake
    def _(q: torch.Tensor, sf: torch.Tensor, h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return h.new_empty((h.shape[0], w.shape[1]))

    _ops.done = {"residual_add": torch.ops.fp4bench.residual_add.default}  # type: ignore[attr-defined]
    return _ops.done  # type: ignore[attr-defined,no-any-return]


def _smoke_fi() -> Any:
    """CPU stand-in for flashinfer in --smoke: the patch's pattern (custom op + fake,
    public function dispatching to it while compiling)."""
    import types

    @torch.library.custom_op(f"{LIB}::smoke_fp4q", mutates_args=())
    def fp4q(x: torch.Tensor, gs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m, k = x.shape
        return x.new_zeros((m, k // 2), dtype=torch.uint8), x.new_zeros(
            ((m + 127) // 128 * 128, k // 16), dtype=torch.uint8
        )

    @fp4q.register_fake
    def _(x: torch.Tensor, gs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m, k = x.shape
        return x.new_empty((m, k // 2), dtype=torch.uint8), x.new_empty(
            ((m + 127) // 128 * 128, k // 16), dtype=torch.uint8
        )

    def fp4_quantize(x: torch.Tensor, gs: torch.Tensor) -> Any:
        if torch.compiler.is_compiling():
            return torch.ops.fp4bench.smoke_fp4q(x, gs)
        return fp4q(x, gs)

    return types.SimpleNamespace(fp4_quantize=fp4_quantize)


class Layers:
    """The per-layer functions of the block, eager/compiling dispatch as the patch does."""

    def __init__(self, fi: Any, k: int, sm100: bool, dev: torch.device) -> None:
        _ops(sm100)
        self.fi, self.k, self.sm100 = fi, k, sm100
        self.gs = torch.tensor([1.0], device=dev)  # any fixed global scale: timing only

    def gemm(self, q: Any, sf: Any, h: Any, w: Any) -> Any:
        if self.sm100:
            wq, wsf, alpha = w
            return self.fi.mm_fp4(q, wq.T, sf, wsf.T, alpha, torch.bfloat16, backend="cutlass")
        if torch.compiler.is_compiling():
            return torch.ops.fp4bench.gemm_standin(q, sf, h, w)
        return torch.mm(h, w)

    @staticmethod
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        if torch.compiler.is_compiling():
            torch.ops.fp4bench.residual_add(x, y, out)
        else:
            torch.add(x, y, out=out)
        return out

    def layer(self, style: str, x: torch.Tensor, w: Any) -> torch.Tensor:
        k = self.k
        if style == "probe":  # issue 7's probe script (not in this repository), exactly
            h = torch.nn.functional.rms_norm(x, (k,))
            qq, sf = self.fi.fp4_quantize(h, self.gs)
            return x + (h @ w) + qq[:, :1].float().to(x.dtype) * 0
        h = torch.nn.functional.rms_norm(x, (k,))
        q, sf = self.fi.fp4_quantize(h, self.gs)
        y = self.gemm(q, sf, h, w)
        if style == "fused_add":  # plain add: inductor may fuse it into the next RMSNorm
            return x + y
        return self.add(x, y)  # "harness": opaque mutating add, the split point


def closure_block(layers: Layers, ws: list[Any], style: str) -> Callable:
    """Weights in a Python list the function closes over: Dynamo lifts them as graph inputs
    that are NOT static, so a cudagraph tree copies them into its own buffers on every
    replay.  (The first H200 run and the probe built their blocks this way.)"""

    def block(x: torch.Tensor) -> torch.Tensor:
        for w in ws:
            x = layers.layer(style, x, w)
        return x

    return block


class StaticBlock(torch.nn.Module):
    """Weights as nn.Module parameters, as in a served model: static inputs for CUDA graphs."""

    def __init__(self, layers: Layers, ws: list[Any], style: str) -> None:
        super().__init__()
        self.layers, self.style = layers, style
        self.sm100 = layers.sm100
        if layers.sm100:
            self.wq = torch.nn.ParameterList(
                [torch.nn.Parameter(t[0], requires_grad=False) for t in ws]
            )
            self.wsf = torch.nn.ParameterList(
                [torch.nn.Parameter(t[1], requires_grad=False) for t in ws]
            )
            self.alpha = torch.nn.ParameterList(
                [torch.nn.Parameter(t[2], requires_grad=False) for t in ws]
            )
        else:
            self.w = torch.nn.ParameterList(
                [torch.nn.Parameter(t, requires_grad=False) for t in ws]
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sm100:
            for wq, wsf, alpha in zip(self.wq, self.wsf, self.alpha, strict=True):
                x = self.layers.layer(self.style, x, (wq, wsf, alpha))
        else:
            for w in self.w:
                x = self.layers.layer(self.style, x, w)
        return x


class ManualGraph:
    """Whole-call CUDA graph of an already-compiled callable (what sglang's runners do):
    warm up on a side stream, capture once per input shape, copy a new input into the
    captured one when its address differs, replay."""

    pool: Any = None

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.fn = fn
        self.entries: dict[tuple, Any] = {}
        self.copies = 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if common.SMOKE:
            return self.fn(x)
        key = (tuple(x.shape), x.dtype)
        entry = self.entries.get(key)
        if entry is None:
            static = x.clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    self.fn(static)
            torch.cuda.current_stream().wait_stream(s)
            if ManualGraph.pool is None:
                ManualGraph.pool = torch.cuda.graph_pool_handle()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=ManualGraph.pool):
                out = self.fn(static)
            entry = self.entries[key] = (g, static, out)
        g, static, out = entry
        if x.data_ptr() != static.data_ptr():
            static.copy_(x)
            self.copies += 1
        g.replay()
        return out  # type: ignore[no-any-return]


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
        key = tuple(
            (tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else repr(a) for a in args
        )
        entry = self.entries.get(key)
        if entry is None:
            n = self.seen.get(key, 0)
            self.seen[key] = n + 1
            if n < 2 or common.SMOKE or not torch.cuda.is_available():
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
        split = split_module(gm, None, lambda n: part[n.name], keep_original_order=True)  # type: ignore[arg-type]
        pieces = 0
        for name, sub in list(split.named_children()):
            idx = int(name.rsplit("_", 1)[1])
            if idx in split_ids:
                continue
            # as vLLM / sglang do: shadow the submodule with a plain callable
            split.__dict__[name] = _GraphPiece(sub)
            stats.setdefault("objects", []).append(split.__dict__[name])
            pieces += 1
        stats["pieces"] = pieces
        stats["split_ops"] = len(split_ids)
        return split

    return backend


# name -> (style, weights, mode, what it stands for).  Order = priority (a deadline skips
# the tail).  weights: "closure" (non-static graph inputs) or "params" (nn.Module params).
BLOCK_VARIANTS: dict[str, tuple[str, str, str, str]] = {
    "eager": ("harness", "params", "eager", "eager (the baseline)"),
    "ro_closure": (
        "harness",
        "closure",
        "reduce-overhead",
        "fullgraph inductor + cudagraph trees, weights closed over (the first run)",
    ),
    "ro": (
        "harness",
        "params",
        "reduce-overhead",
        "fullgraph inductor + cudagraph trees, weights as module parameters",
    ),
    "eager_graph": (
        "harness",
        "params",
        "backend=eager+graph",
        "fullgraph backend='eager' (sglang's 'eager' compiler) + one manual CUDA graph",
    ),
    "piecewise": (
        "harness",
        "params",
        "piecewise",
        "Dynamo graph split at the 32 residual-add ops, FX pieces in CUDA graphs (sglang-like)",
    ),
    "inductor_graph": (
        "harness",
        "params",
        "inductor+graph",
        "fullgraph inductor (no cudagraphs) + one manual CUDA graph",
    ),
    "aot_eager_graph": (
        "harness",
        "params",
        "backend=aot_eager+graph",
        "fullgraph backend='aot_eager' + one manual CUDA graph",
    ),
    "ro_fused_add": (
        "fused_add",
        "params",
        "reduce-overhead",
        "as 'ro' with a plain residual add (no split op): inductor fuses add + RMSNorm",
    ),
    "probe_eager": ("probe", "params", "eager", "the probe's block, eager"),
    "probe_ro_closure": (
        "probe",
        "closure",
        "reduce-overhead",
        "the probe's block and method exactly (weights closed over)",
    ),
    "probe_ro": (
        "probe",
        "params",
        "reduce-overhead",
        "the probe's block, weights as module parameters",
    ),
}


def kernel_profile(fn: Callable[[], Any], iters: int, layers: int) -> dict[str, Any]:
    """Device time per call from torch.profiler (CUDA activity): the sum, the kernel count
    per layer and the top kernels (us and launches per call)."""
    from torch.profiler import ProfilerActivity, profile

    if common.SMOKE:
        return {"sum_us": float("nan"), "kernels_per_layer": float("nan"), "top": []}
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    ev = [
        (e.key, e.self_device_time_total / iters, e.count / iters)
        for e in prof.key_averages()
        if e.self_device_time_total > 0
    ]
    ev.sort(key=lambda t: -t[1])
    return {
        "sum_us": sum(t for _, t, _ in ev),
        "kernels_per_layer": sum(c for _, _, c in ev) / layers,
        "top": [{"kernel": k[:160], "us": t, "per_call": c} for k, t, c in ev[:12]],
    }


def time_rounds(
    fns: dict[str, Callable[[], Any]], iters: dict[str, int], reps: int
) -> dict[str, dict[str, float]]:
    """Median of ``reps`` timed loops per variant, the variants interleaved per repetition."""
    for name, fn in fns.items():
        for _ in range(3):
            if name.startswith(("ro", "probe_ro")):
                torch.compiler.cudagraph_mark_step_begin()
            fn()
    sync()
    per: dict[str, list[float]] = {n: [] for n in fns}
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            for name, fn in fns.items():
                if name.startswith(("ro", "probe_ro")):
                    torch.compiler.cudagraph_mark_step_begin()
                t = time.perf_counter_ns()
                for _ in range(iters[name]):
                    fn()
                sync()
                per[name].append((time.perf_counter_ns() - t) / iters[name] / 1e3)
    finally:
        gc.enable()
    return {
        n: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
        for n, v in per.items()
    }


def bench_block(
    fi: Any,
    tokens: list[int],
    k: int,
    layers: int,
    sm100: bool,
    variants: list[str],
    deadline: float,
    reps: int,
) -> dict[str, Any]:
    for opt in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, opt):
            setattr(torch._dynamo.config, opt, 256)
    dev = torch.device("cpu" if common.SMOKE else "cuda")
    torch.manual_seed(0)
    L = Layers(fi, k, sm100, dev)
    if sm100:
        ws: list[Any] = []
        for _ in range(layers):
            w = torch.randn(k, k, dtype=torch.bfloat16, device=dev) * 0.02
            wgs = ((448 * 6) / w.float().abs().max()).reshape(1)
            wq, wsf = fi.fp4_quantize(w, wgs)
            ws.append((wq, wsf, (1.0 / (L.gs * wgs)).float()))
        gemm_desc = "flashinfer.mm_fp4(backend='cutlass') on the fp4 activations"
    else:
        ws = [torch.randn(k, k, dtype=torch.bfloat16, device=dev) * 0.02 for _ in range(layers)]
        gemm_desc = "bf16 torch.mm stand-in (opaque op consuming the fp4 outputs; eager: torch.mm)"
    split_op = _ops(sm100)["residual_add"]

    modules: dict[str, Callable] = {}

    def base(style: str, weights: str) -> Callable:
        key = f"{style}/{weights}"
        if key not in modules:
            if weights == "closure":
                modules[key] = closure_block(L, ws, style)
            else:
                modules[key] = StaticBlock(L, ws, style)
        return modules[key]

    stats: dict[str, Any] = {}
    compiled: dict[str, Callable] = {}
    for v in variants:
        style, weights, mode, _ = BLOCK_VARIANTS[v]
        b = base(style, weights)
        if mode == "eager":
            compiled[v] = b
        elif mode == "reduce-overhead":
            compiled[v] = torch.compile(b, fullgraph=True, dynamic=False, mode="reduce-overhead")
        elif mode == "inductor+graph":
            compiled[v] = ManualGraph(torch.compile(b, fullgraph=True, dynamic=False))
        elif mode == "backend=eager+graph":
            compiled[v] = ManualGraph(
                torch.compile(b, fullgraph=True, dynamic=False, backend="eager")
            )
        elif mode == "backend=aot_eager+graph":
            compiled[v] = ManualGraph(
                torch.compile(b, fullgraph=True, dynamic=False, backend="aot_eager")
            )
        elif mode == "piecewise":
            compiled[v] = torch.compile(
                b, fullgraph=True, dynamic=False, backend=piecewise_backend({split_op}, stats)
            )
        else:
            raise ValueError(mode)

    rows: list[dict[str, Any]] = []
    for m in tokens:
        if time.monotonic() > deadline:
            log(f"block: deadline reached, M={m} and later skipped")
            break
        x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
        row: dict[str, Any] = {"M": m, "K": k, "layers": layers, "variants": {}}
        refs = {
            "harness": base("harness", "params")(x).clone(),
            "probe": base("probe", "params")(x).clone(),
            "fused_add": base("harness", "params")(x).clone(),
        }
        ready: dict[str, Callable[[], Any]] = {}
        for v in variants:
            if time.monotonic() > deadline:
                log(f"block M={m}: deadline reached, {v} and later skipped")
                break
            style, weights, mode, desc = BLOCK_VARIANTS[v]
            fn = compiled[v]
            torch._dynamo.utils.counters.clear()
            vr: dict[str, Any] = {"mode": mode, "style": style, "weights": weights, "desc": desc}
            try:
                t = time.perf_counter()
                for _ in range(3):
                    if mode == "reduce-overhead":
                        torch.compiler.cudagraph_mark_step_begin()
                    out = fn(x)
                sync()
                vr["compile_s"] = time.perf_counter() - t
                vr["max_abs_diff_vs_eager"] = float((out.float() - refs[style].float()).abs().max())
                vr["graph_breaks"] = sum(torch._dynamo.utils.counters["graph_break"].values())
                vr["cudagraph_skips"] = dict(torch._dynamo.utils.counters["inductor"]).get(
                    "cudagraph_skips", 0
                )
            except Exception as e:
                import traceback

                traceback.print_exc()
                vr["error"] = f"{type(e).__name__}: {e}"[-2000:]
                log(f"block M={m} {v}: FAILED {vr['error'][:300]}")
                row["variants"][v] = vr
                continue
            row["variants"][v] = vr
            ready[v] = functools.partial(fn, x)
        if not ready:
            rows.append(row)
            continue
        iters = {
            v: (3 if common.SMOKE else (20 if "eager" in v and "graph" not in v else 100))
            for v in ready
        }
        times = time_rounds(ready, iters, 2 if common.SMOKE else reps)
        for v, fn in ready.items():
            vr = row["variants"][v]
            vr["time"] = times[v]
            if v.startswith(("ro", "probe_ro")):
                torch.compiler.cudagraph_mark_step_begin()
            kp = kernel_profile(fn, 5 if BLOCK_VARIANTS[v][2] == "eager" else 20, layers)
            vr["kernels"] = kp
            vr["over_kernel_sum"] = times[v]["median_us"] / kp["sum_us"] if kp["sum_us"] else None
        if "piecewise" in ready:
            row["variants"]["piecewise"]["pieces"] = stats.get("pieces")
            row["variants"]["piecewise"]["piece_input_copies"] = sum(
                p.copies for p in stats.get("objects", [])
            )
        for v in ready:
            if isinstance(compiled[v], ManualGraph):
                row["variants"][v]["input_copies"] = compiled[v].copies  # type: ignore[attr-defined]
        for base_name in ("eager", "probe_eager"):
            if base_name not in ready:
                continue
            base_us = row["variants"][base_name]["time"]["median_us"]
            style = BLOCK_VARIANTS[base_name][0]
            for v in ready:
                if BLOCK_VARIANTS[v][0] == style or (style == "harness" and v == "ro_fused_add"):
                    row["variants"][v]["speedup_vs_" + base_name] = (
                        base_us / row["variants"][v]["time"]["median_us"]
                    )
        e_us = row["variants"].get("eager", {}).get("time", {}).get("median_us")
        parts = []
        for v in ready:
            vr = row["variants"][v]
            sp = vr.get("speedup_vs_eager") or vr.get("speedup_vs_probe_eager")
            parts.append(
                f"{v} {vr['time']['median_us']:.0f}us"
                + (f" {sp:.1f}x" if sp and BLOCK_VARIANTS[v][2] != "eager" else "")
                + (
                    f" k{vr['kernels']['sum_us']:.0f}us/{vr['over_kernel_sum']:.2f}"
                    f"/{vr['kernels']['kernels_per_layer']:.1f}kpl"
                    if vr.get("over_kernel_sum")
                    else ""
                )
            )
        log(f"block M={m} (eager {e_us}): " + "; ".join(parts))
        rows.append(row)
    return {"gemm": gemm_desc, "rows": rows}
