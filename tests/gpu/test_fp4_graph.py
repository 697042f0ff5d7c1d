"""FlashInfer fp4 ops on a real GPU: warm-up, fullgraph compile, CUDA-graph capture/replay.

Run with the patched flashinfer installed in the environment (``nox -s gpu``)::

    python -m pytest -m gpu tests/gpu -q

What is checked:

- ``flashinfer.fp4_warmup(device)`` JIT-builds and loads the fp4 modules; a second call
  is cheap; ``modules=["quantization"]`` loads that kind only, a kind the device lacks
  raises ValueError; capturing an fp4 op in a CUDA graph in a fresh process without the
  warm-up raises the RuntimeError that names the module and
  ``fp4_warmup(device, modules=['quantization'])``.
- Each public fp4 entry point (and layout) inside a small block compiled with
  ``torch.compile(fullgraph=True, mode="reduce-overhead")``: the graph is captured and
  replayed (no cudagraph skips, static output addresses, the bf16 part of the block
  follows fresh inputs on every replay); the compiled outputs have the shapes, strides
  and dtypes of the op's fake (traced under FakeTensorMode) and of the eager call.
- The eager public call captured in a plain ``torch.cuda.CUDAGraph`` after warm-up
  (what sglang's piecewise runner does for the pieces it runs eagerly).
- Numerics, only on SM100 and newer: eager == compiled bitwise, and both equal to the
  pure-PyTorch reference (``fp4graph.verify.nvfp4``) within e2m1 rounding.  Below SM100 the
  fp4 kernels are compiled out (``#if __CUDA_ARCH__ >= 1000``), their outputs are
  uninitialised memory, and these tests skip saying so.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (nox -s gpu)", allow_module_level=True)
flashinfer = pytest.importorskip("flashinfer")

from fp4graph.verify import nvfp4 as fp4ref  # noqa: E402

CAP = torch.cuda.get_device_capability()
SM100 = CAP[0] >= 10
NUMERICS_SKIP = (
    f"SM{CAP[0]}{CAP[1]}: FlashInfer's fp4 kernels are compiled out below SM100 "
    "(#if __CUDA_ARCH__ >= 1000 in quantization_utils.cuh); their outputs are "
    "uninitialised memory, so fp4 numerics cannot be checked on this GPU"
)
requires_sm100 = pytest.mark.skipif(not SM100, reason=NUMERICS_SKIP)
K = 256  # K/16 = 16 and K/32 = 8 keep 0.6.3's scale reshape valid in every layout
DEV = torch.device("cuda")


@pytest.fixture(scope="module")
def fi() -> Any:
    if not hasattr(flashinfer, "fp4_warmup"):
        pytest.fail(
            f"flashinfer at {flashinfer.__file__} has no fp4_warmup: it is not the fp4graph-"
            "patched wheel; install wheels/flashinfer_python-*+fp4graph.*.whl into this "
            "environment (nox -s gpu does)"
        )
    return flashinfer


@pytest.fixture(scope="module")
def warm(fi: Any) -> list[str]:
    return list(fi.fp4_warmup(DEV))


def test_warmup_builds_and_loads_the_fp4_modules(fi: Any, warm: list[str]) -> None:
    assert warm and all(isinstance(n, str) for n in warm)
    assert any("fp4" in n for n in warm), warm
    t = time.perf_counter()
    again = fi.fp4_warmup(DEV)
    assert time.perf_counter() - t < 2.0
    assert isinstance(again, list)


def test_warmup_selects_module_kinds(fi: Any, warm: list[str]) -> None:
    if "modules" not in inspect.signature(fi.fp4_warmup).parameters:
        pytest.fail(f"flashinfer {fi.__version__} has no fp4_warmup(modules=...): an older fp4graph build")
    quant = fi.fp4_warmup(DEV, modules=["quantization"])
    # Loaded by the `warm` fixture already: listed by its getter.
    assert len(quant) == 1 and "quantization" in quant[0], quant
    assert fi.fp4_warmup(DEV, modules=[]) == []
    if CAP[0] not in (10, 11, 12):
        with pytest.raises(ValueError, match="moe_cutlass"):
            fi.fp4_warmup(DEV, modules=["moe_cutlass"])


def test_capture_without_warmup_raises_a_clear_error(fi: Any) -> None:
    code = textwrap.dedent(
        """
        import torch, flashinfer
        x = torch.randn(16, 256, dtype=torch.bfloat16, device="cuda")
        gs = torch.ones(1, device="cuda")
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                flashinfer.fp4_quantize(x, gs)
        except RuntimeError as e:
            # capture_end may raise on exit; the op's error is then the context
            print("RAISED", repr(e), "| context:", repr(e.__context__))
        else:
            print("NO ERROR")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert "RAISED" in proc.stdout, out[-3000:]
    assert "fp4_warmup(device, modules=['quantization'])" in proc.stdout, out[-3000:]


# --------------------------------------------------------------------------------------
# cases: public entry point -> (callable(x, gs), reference description)


def _cases(fi: Any) -> dict[str, Callable[..., Any]]:
    return {
        "fp4_quantize-128x4": lambda x, gs: fi.fp4_quantize(x, gs),
        "fp4_quantize-8x4": lambda x, gs: fi.fp4_quantize(x, gs, is_sf_8x4_layout=True),
        "fp4_quantize-linear": lambda x, gs: fi.fp4_quantize(x, gs, is_sf_swizzled_layout=False),
        "fp4_quantize-mxfp4": lambda x, gs: fi.fp4_quantize(x, gs, 32, True),
        "nvfp4_quantize": lambda x, gs: fi.nvfp4_quantize(x, gs),
        "mxfp4_quantize": lambda x, gs: fi.mxfp4_quantize(x),
        "block_scale_interleave": lambda x, gs: fi.block_scale_interleave(
            (x[:, : K // 16].float().abs() * 16).to(torch.uint8)
        ),
        "nvfp4_batched_quantize": lambda x, gs: fi.nvfp4_batched_quantize(x.unsqueeze(0), gs),
    }


CASES = list(_cases(flashinfer).keys())
TOKENS = [1, 130]


def _flat(out: Any) -> list[Any]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _flat(o)]


def _meta(t: Any) -> tuple[Any, ...]:
    return (tuple(t.shape), tuple(t.stride()), t.dtype)


def _inputs(m: int, seed: int) -> tuple[Any, Any, Any]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, K, dtype=torch.bfloat16, device=DEV, generator=g)
    gs = fp4ref.nvfp4_global_scale(x).to(DEV)
    w = torch.randn(K, 64, dtype=torch.bfloat16, device=DEV, generator=g)
    return x, gs, w


def _block(op: Callable[..., Any]) -> Callable[..., Any]:
    def block(x: Any, gs: Any, w: Any) -> tuple[Any, Any]:
        h = torch.nn.functional.rms_norm(x, (K,))
        return op(h, gs), h @ w  # fp4 outputs + a bf16 path that proves fresh replays

    return block


def _fake_outputs(fn: Callable[..., Any], *args: Any) -> list[Any]:
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch._dynamo.reset()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fargs = [mode.from_tensor(a) for a in args]
        out = torch.compile(fn, fullgraph=True, backend="eager")(*fargs)
    torch._dynamo.reset()
    return _flat(out)


@pytest.mark.parametrize("m", TOKENS)
@pytest.mark.parametrize("case", CASES)
def test_fullgraph_reduce_overhead_captures_and_replays(
    fi: Any, warm: list[str], case: str, m: int
) -> None:
    block = _block(_cases(fi)[case])
    x, gs, w = _inputs(m, 0)
    eager_out = block(x, gs, w)
    fake = _fake_outputs(block, x, gs, w)

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(block, fullgraph=True, mode="reduce-overhead")
    outs = []
    for seed in range(4):  # warm-up run, recording, then replays with fresh inputs
        xs, gss, ws = _inputs(m, seed)
        x.copy_(xs)
        gs.copy_(gss)
        w.copy_(ws)
        out = compiled(x, gs, w)
        ref = block(x, gs, w)
        torch.cuda.synchronize()
        torch.testing.assert_close(out[1], ref[1], rtol=2e-2, atol=2e-2)
        outs.append([t.data_ptr() for t in _flat(out)])
    skips = dict(torch._dynamo.utils.counters["inductor"]).get("cudagraph_skips", 0)
    assert skips == 0, dict(torch._dynamo.utils.counters["inductor"])
    assert outs[2] == outs[3], "replays should return the graph's static outputs"

    got = [_meta(t) for t in _flat(out)]
    assert got == [_meta(t) for t in fake], f"compiled {got} vs fake {[_meta(t) for t in fake]}"
    assert got == [_meta(t) for t in _flat(eager_out)], "compiled vs eager output metadata"
    torch._dynamo.reset()


@pytest.mark.parametrize("case", ["fp4_quantize-128x4", "nvfp4_quantize", "mxfp4_quantize"])
def test_eager_call_captures_in_a_cuda_graph_after_warmup(
    fi: Any, warm: list[str], case: str
) -> None:
    op = _cases(fi)[case]
    x, gs, _ = _inputs(64, 1)
    op(x, gs)  # the module is loaded (warm fixture); this call only warms the allocator
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = op(x, gs)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert [_meta(t) for t in _flat(out)] == [_meta(t) for t in _flat(op(x, gs))]


# --------------------------------------------------------------------------------------
# numerics (SM100+)

REF = {
    # case -> (sf_vec_size, ue8m0, layout)
    "fp4_quantize-128x4": (16, False, "128x4"),
    "fp4_quantize-8x4": (16, False, "8x4"),
    "fp4_quantize-linear": (16, False, "linear"),
    "fp4_quantize-mxfp4": (32, True, "128x4"),
    "nvfp4_quantize": (16, False, "128x4"),
    "mxfp4_quantize": (32, True, "128x4"),
}


@requires_sm100
@pytest.mark.parametrize("m", TOKENS)
@pytest.mark.parametrize("case", CASES)
def test_eager_equals_compiled_bitwise(fi: Any, warm: list[str], case: str, m: int) -> None:
    op = _cases(fi)[case]
    x, gs, _ = _inputs(m, 7)
    eager = _flat(op(x, gs))
    torch._dynamo.reset()
    compiled = torch.compile(op, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):
        out = _flat(compiled(x, gs))
    torch.cuda.synchronize()
    for a, b in zip(eager, out, strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    torch._dynamo.reset()


@requires_sm100
@pytest.mark.parametrize("m", TOKENS)
@pytest.mark.parametrize("case", list(REF))
def test_matches_the_reference_within_e2m1_rounding(
    fi: Any, warm: list[str], case: str, m: int
) -> None:
    sf_vec, ue8m0, layout = REF[case]
    x, gs, _ = _inputs(m, 11)
    q, sf = _cases(fi)[case](x, gs)
    if case == "mxfp4_quantize":
        gs = None  # ignored by the kernel for bf16 input
    rq, rsf = fp4ref.fp4_quantize(x, gs, sf_vec, ue8m0, layout)
    rows, cols = m, K // sf_vec
    sf_gpu = fp4ref.unswizzle_sf(sf.reshape(-1).view(torch.uint8).cpu(), rows, cols, layout)
    sf_ref = fp4ref.unswizzle_sf(rsf.cpu(), rows, cols, layout)
    # scales: equal, up to a rare one-code difference from the approximate reciprocal
    assert (sf_gpu.int() - sf_ref.int()).abs().max() <= 1
    assert (sf_gpu == sf_ref).float().mean() > 0.999
    # padding of swizzled scale buffers is zero
    n = fp4ref.sf_buffer_size(rows, cols, layout)
    assert int(sf.reshape(-1).view(torch.uint8)[:n].sum()) == int(sf_gpu.sum())
    # values: decoded e2m1 within one code of the reference where the scales agree
    dq = fp4ref.e2m1_decode(fp4ref.unpack_e2m1(q.view(torch.uint8).cpu()))
    dr = fp4ref.e2m1_decode(fp4ref.unpack_e2m1(rq.cpu()))
    same_sf = (sf_gpu == sf_ref).repeat_interleave(sf_vec, dim=1)
    diff = (dq - dr).abs()
    assert bool(
        (diff[same_sf] <= fp4ref.e2m1_step(torch.maximum(dq.abs(), dr.abs()))[same_sf]).all()
    )
    assert (diff[same_sf] == 0).float().mean() > 0.99
