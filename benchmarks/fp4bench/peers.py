"""(p) Peers: one kernel, every project's way of making it traceable, side by side.

Every design wraps the same public ``fp4_quantize`` of a private copy of the pristine
flashinfer tree (0.6.3 in the published run), except ``ours``, which is the patched
tree's own public function.  Each wrapper below is written here from the design its
project published (read, not copied):

- ``pristine``: the upstream function as it is (not traceable: the seed failure).
- ``pristine_b``: a second private copy of it (the method's noise).
- ``ours``: the series (``utils.trace_as``: torch.compiler.substitute_in_graph for Dynamo,
  one ``is_exporting()`` test for non-strict torch.export).
- ``custom_op``: an always-dispatch ``torch.library.custom_op`` (no device types), called as
  ``torch.ops.<ns>.<name>``; the shape of flashinfer's own ``torch.ops.flashinfer.fp4_quantize``
  (0.6.12+).
- ``sglang_extern``: sglang 0.5.12 / 0.5.23 ``register_custom_op_from_extern``: schema from
  ``torch.library.infer_schema``, ``Library.define`` + ``impl`` for the CUDA key + a fake,
  the caller gets ``torch.ops.sglang.<name>``.
- ``sglang_direct``: sglang 0.5.23's ``_call_directly_in_eager`` shortcut (its
  ``register_custom_op`` path) over such an op: plain CUDA tensors, no grad, no modes, no
  profiler and not compiling call the function itself; anything else goes to the op.
- ``vllm``: vLLM's ``vllm::flashinfer_*`` style: ``torch.library.custom_op(...,
  device_types="cuda")`` with a fake, called through a thin module-level function.
- ``amd_on`` / ``amd_off``: AMD-Ecosystem/flashinfer #210: with
  ``FLASHINFER_USE_TORCH_CUSTOM_OPS=1`` the function itself becomes a
  ``torch.library.custom_op``; without it a compile guard wraps it (here: raise while
  compiling, our reading of ``_guard_compile``).  #210 decorates flashinfer's inner
  functions; here the public one, so that every design wraps the same call.
- ``trtllm_fast``: TensorRT-LLM's ``fast_custom_op``: ``Library.define`` + ``impl`` for the
  CUDA key, returned as a small object whose ``__call__`` calls ``torch.ops.<ns>.<name>``.

Per design: eager us per call at M = 1, 16, 256 (interleaved arms, ratio to ``pristine``
with a bootstrap interval), the replay time per call inside a captured CUDA graph (all
designs capture the same kernels), and the time Dynamo takes to trace a 32-layer
[RMSNorm -> fp4 -> use] block (``fullgraph=True``, ``backend`` = capture only).
"""

import dataclasses
import functools
import statistics
import time
import types
from collections.abc import Callable
from typing import Any

import torch

from . import common
from .common import interleaved_arms, log, summary, sync

NS = "fp4peers"  # one torch.library namespace per design below: NS + "_" + design
ROUNDS_TRACE = 3
LAYERS = 32

Kernel = Callable[..., tuple[torch.Tensor, torch.Tensor]]


@dataclasses.dataclass(frozen=True)
class Design:
    name: str
    desc: str
    fn: Callable[..., Any]  # called as fn(x, global_scale)


def _round_up(x: int, y: int) -> int:
    return (x + y - 1) // y * y


def fake_fp4_quantize(
    input: torch.Tensor,
    global_scale: torch.Tensor | None = None,
    sf_vec_size: int = 16,
    sf_use_ue8m0: bool = False,
    is_sf_swizzled_layout: bool = True,
    is_sf_8x4_layout: bool = False,
    enable_pdl: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp4_quantize's outputs for what the peers table calls: 2-D row-major input, 128x4
    swizzled scales, (K / sf_vec_size) % 4 == 0."""
    m, k = input.shape
    return (
        input.new_empty((m, k // 2), dtype=torch.uint8),
        input.new_empty((_round_up(m, 128), k // sf_vec_size), dtype=torch.uint8),
    )


def _impl(kernel: Kernel) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """The wrapped function with the annotations torch.library infers a schema from."""

    def fp4_quantize(
        input: torch.Tensor,
        global_scale: torch.Tensor | None = None,
        sf_vec_size: int = 16,
        sf_use_ue8m0: bool = False,
        is_sf_swizzled_layout: bool = True,
        is_sf_8x4_layout: bool = False,
        enable_pdl: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return kernel(
            input,
            global_scale,
            sf_vec_size,
            sf_use_ue8m0,
            is_sf_swizzled_layout,
            is_sf_8x4_layout,
            enable_pdl,
        )

    return fp4_quantize


def _library_op(name: str, fn: Callable[..., Any], dispatch_key: str) -> Any:
    """``Library.define`` + ``impl`` for one dispatch key + a fake (sglang's
    direct_register_custom_op, TensorRT-LLM's fast_custom_op); returns the op packet."""
    ns = f"{NS}_{name}"
    lib = torch.library.Library(ns, "FRAGMENT")
    _LIBS.append(lib)  # an op lives as long as its Library object
    lib.define("fp4_quantize" + torch.library.infer_schema(fn, mutates_args=()))
    lib.impl("fp4_quantize", fn, dispatch_key)
    torch.library.register_fake(f"{ns}::fp4_quantize", fake_fp4_quantize, lib=lib)
    return getattr(torch.ops, ns).fp4_quantize


_LIBS: list[Any] = []


def _custom_op(name: str, fn: Callable[..., Any], device_types: str | None) -> Any:
    op = torch.library.custom_op(
        f"{NS}_{name}::fp4_quantize", fn, mutates_args=(), device_types=device_types
    )
    op.register_fake(fake_fp4_quantize)
    return op


def _sglang_direct(op_func: Callable[..., Any], op: Any) -> Callable[..., Any]:
    """sglang 0.5.23's eager shortcut as published: the registered op unless the call is
    plain eager CUDA work, then the function itself."""
    compiling = torch.compiler.is_compiling
    dispatch_modes = torch._C._len_torch_dispatch_stack
    function_modes = torch._C._is_torch_function_mode_enabled
    profiling = torch._C._autograd._profiler_enabled
    grad = torch.is_grad_enabled
    plain = (torch.Tensor, torch.nn.Parameter)

    @functools.wraps(op_func)
    def call(*args: Any, **kwargs: Any) -> Any:
        if compiling() or dispatch_modes() or function_modes() or profiling() or grad():
            return op(*args, **kwargs)
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.Tensor) and (type(a) not in plain or not a.is_cuda):
                return op(*args, **kwargs)
        return op_func(*args, **kwargs)

    return call


class _FastOp:
    """TensorRT-LLM's FastCustomOp shape: the op packet behind a slotted object."""

    __slots__ = ("_op",)

    def __init__(self, op: Any) -> None:
        self._op = op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._op(*args, **kwargs)


def _amd_guard(f: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(f)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            raise RuntimeError(f"{name} cannot be traced: set FLASHINFER_USE_TORCH_CUSTOM_OPS=1")
        return f(*args, **kwargs)

    return guarded


def build_designs(
    pristine: Kernel, pristine_b: Kernel, ours: Callable[..., Any]
) -> dict[str, Design]:
    """Every design around ``pristine`` (the same public function for all but ``ours``)."""
    key = "CPU" if common.SMOKE else "CUDA"
    dev = "cpu" if common.SMOKE else "cuda"
    impl = _impl(pristine)

    sg_op = _library_op("sglang", impl, key)
    sgd_op = _library_op("sglang_direct", impl, key)

    vllm_op = _custom_op("vllm", _vllm_impl(pristine), dev)
    _custom_op("custom_op", impl, None)
    custom = getattr(torch.ops, f"{NS}_custom_op").fp4_quantize

    def vllm_style(a: torch.Tensor, a_global_sf: torch.Tensor) -> Any:
        return vllm_op(a, a_global_sf)

    designs = [
        Design("pristine", "upstream public function", pristine),
        Design("pristine_b", "a second copy of it (noise)", pristine_b),
        Design("ours", "substitute_in_graph twin + is_exporting() test (the series)", ours),
        Design("custom_op", "always-dispatch torch.library.custom_op via torch.ops", custom),
        Design("sglang_extern", "sglang register_custom_op_from_extern (0.5.12, 0.5.23)", sg_op),
        Design(
            "sglang_direct",
            "sglang 0.5.23 _call_directly_in_eager shortcut",
            _sglang_direct(impl, sgd_op),
        ),
        Design("vllm", "vLLM custom_op(device_types='cuda') + thin wrapper", vllm_style),
        Design(
            "amd_on", "AMD #210, FLASHINFER_USE_TORCH_CUSTOM_OPS=1", _custom_op("amd", impl, None)
        ),
        Design("amd_off", "AMD #210 default: compile guard", _amd_guard(pristine, "fp4_quantize")),
        Design(
            "trtllm_fast", "TensorRT-LLM fast_custom_op", _FastOp(_library_op("trtllm", impl, key))
        ),
    ]
    return {d.name: d for d in designs}


def _vllm_impl(kernel: Kernel) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    def flashinfer_fp4_quantize(
        a: torch.Tensor, a_global_sf: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return kernel(a, a_global_sf)

    return flashinfer_fp4_quantize


def _graph_replay_us(
    fns: dict[str, Callable[[], Any]], n_calls: int, replays: int
) -> dict[str, float]:
    """Per design: one CUDA graph of ``n_calls`` calls; replay time per call (median of
    interleaved repetitions)."""
    if common.SMOKE or not torch.cuda.is_available():
        return {name: float("nan") for name in fns}
    pool = torch.cuda.graph_pool_handle()
    graphs: dict[str, Any] = {}
    for name, fn in fns.items():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool):
            for _ in range(n_calls):
                fn()
        g.replay()
        graphs[name] = g
    torch.cuda.synchronize()
    per: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(7):
        for name, g in graphs.items():
            t = time.perf_counter_ns()
            for _ in range(replays):
                g.replay()
            torch.cuda.synchronize()
            per[name].append((time.perf_counter_ns() - t) / replays / n_calls / 1e3)
    return {name: statistics.median(v) for name, v in per.items()}


def _trace(fn: Callable[..., Any], x: torch.Tensor, gs: torch.Tensor) -> dict[str, Any]:
    """Dynamo's time to trace LAYERS x [rms_norm -> fn -> use] (fullgraph, capture-only
    backend), median of ROUNDS_TRACE fresh traces; the graph's op count."""

    def block(x: torch.Tensor, gs: torch.Tensor) -> torch.Tensor:
        for _ in range(LAYERS):
            h = torch.nn.functional.rms_norm(x, (x.shape[-1],))
            q, sf = fn(h, gs)
            x = x + q[:, :1].to(x.dtype) + sf[:1, :1].to(x.dtype)
        return x

    graphs: list[torch.fx.GraphModule] = []

    def capture(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    times = []
    for _ in range(ROUNDS_TRACE):
        torch._dynamo.reset()
        graphs.clear()
        t = time.perf_counter()
        try:
            torch.compile(block, fullgraph=True, dynamic=False, backend=capture)(x, gs)
        except Exception as e:
            return {
                "error": f"{type(e).__module__}.{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            }
        sync()
        times.append(time.perf_counter() - t)
    nodes = [n for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    ops = sorted({str(n.target) for n in nodes if "fp4" in str(n.target)})
    return {
        "seconds": statistics.median(times),
        "all_s": times,
        "graphs": len(graphs),
        "fp4_ops": ops,
        "fp4_op_calls": sum(1 for n in nodes if "fp4" in str(n.target)),
    }


def bench_peers(
    designs: dict[str, Design], tokens: list[int], k: int, rounds: int, calls: int
) -> dict[str, Any]:
    dev = torch.device("cpu" if common.SMOKE else "cuda")
    rows: list[dict[str, Any]] = []
    with torch.no_grad():  # as a server runs (sglang_direct's shortcut needs it)
        for m in tokens:
            x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            gs = ((448 * 6) / x.float().abs().max()).reshape(1)
            fns: dict[str, Callable[[], Any]] = {
                name: functools.partial(d.fn, x, gs) for name, d in designs.items()
            }
            row: dict[str, Any] = {"M": m, "K": k, "rounds": rounds, "calls_per_batch": calls}
            for fn in fns.values():
                fn()
            sync()
            times = interleaved_arms(fns, rounds, calls)
            n = len(times["pristine"])
            row["us"] = {name: statistics.median(v) for name, v in times.items()}
            row["ratio_to_pristine"] = {
                name: summary([times[name][r] / times["pristine"][r] for r in range(n)])
                for name in fns
                if name != "pristine"
            }
            row["graph_replay_us"] = _graph_replay_us(fns, n_calls=32, replays=20)
            log(
                f"peers M={m:5d}: "
                + "; ".join(
                    f"{name} {row['us'][name]:.2f}us"
                    + (
                        f" x{row['ratio_to_pristine'][name]['median']:.3f}"
                        f" [{row['ratio_to_pristine'][name]['ci95'][0]:.3f},"
                        f" {row['ratio_to_pristine'][name]['ci95'][1]:.3f}]"
                        if name != "pristine"
                        else ""
                    )
                    + f" graph {row['graph_replay_us'][name]:.2f}us"
                    for name in fns
                )
            )
            rows.append(row)
        x = torch.randn(16, k, dtype=torch.bfloat16, device=dev)
        gs = ((448 * 6) / x.float().abs().max()).reshape(1)
        trace = {}
        for name, d in designs.items():
            trace[name] = _trace(d.fn, x, gs)
            log(f"peers trace {name}: {trace[name]}")
    return {
        "designs": {name: d.desc for name, d in designs.items()},
        "rows": rows,
        "trace_32_layers": trace,
        "method": (
            "one process, every design an arm of the interleaved method of (a) under "
            "torch.no_grad(); ratio = per-round design / pristine, median and 95% bootstrap "
            "CI; graph_replay_us = one CUDA graph of 32 calls per design, replay time per "
            "call; trace = Dynamo fullgraph trace of a 32-layer block, capture-only backend, "
            f"median of {ROUNDS_TRACE} fresh traces"
        ),
    }


def smoke_kernels() -> tuple[Kernel, Kernel, Callable[..., Any]]:
    """CPU stand-ins for --smoke: a "kernel" that allocates the outputs, a copy of it, and
    ``ours`` built over it the way the series builds its public functions."""

    def kernel(
        input: torch.Tensor,
        global_scale: torch.Tensor | None = None,
        sf_vec_size: int = 16,
        sf_use_ue8m0: bool = False,
        is_sf_swizzled_layout: bool = True,
        is_sf_8x4_layout: bool = False,
        enable_pdl: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, sf = fake_fp4_quantize(input, global_scale, sf_vec_size)
        return q.zero_(), sf.zero_()

    kernel_b = types.FunctionType(
        kernel.__code__, kernel.__globals__, "kernel_b", kernel.__defaults__, kernel.__closure__
    )
    _custom_op("smoke_ours", _impl(kernel), None)
    is_exporting = torch.compiler.is_exporting

    def ours(
        input: torch.Tensor,
        global_scale: torch.Tensor | None = None,
        sf_vec_size: int = 16,
        sf_use_ue8m0: bool = False,
        is_sf_swizzled_layout: bool = True,
        is_sf_8x4_layout: bool = False,
        enable_pdl: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if is_exporting():
            return traced(
                input,
                global_scale,
                sf_vec_size,
                sf_use_ue8m0,
                is_sf_swizzled_layout,
                is_sf_8x4_layout,
                enable_pdl,
            )
        return kernel(
            input,
            global_scale,
            sf_vec_size,
            sf_use_ue8m0,
            is_sf_swizzled_layout,
            is_sf_8x4_layout,
            enable_pdl,
        )

    def traced(
        input: torch.Tensor,
        global_scale: torch.Tensor | None = None,
        sf_vec_size: int = 16,
        sf_use_ue8m0: bool = False,
        is_sf_swizzled_layout: bool = True,
        is_sf_8x4_layout: bool = False,
        enable_pdl: bool | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        op = getattr(torch.ops, f"{NS}_smoke_ours").fp4_quantize
        return op(
            input,
            global_scale,
            sf_vec_size,
            sf_use_ue8m0,
            is_sf_swizzled_layout,
            is_sf_8x4_layout,
            enable_pdl,
        )  # type: ignore[no-any-return]

    torch.compiler.substitute_in_graph(ours)(traced)
    return kernel, kernel_b, ours
