"""Child-interpreter side of the fused-MoE fp4 op tests (test_fused_moe_ops.py).

Like fi_child.py (whose helpers this reuses): the parent puts a pristine or patched
flashinfer tree first on sys.path and calls :func:`main` with a JSON request; the
result comes back as one ``RESULT:`` JSON line.

Entry points: ``cutlass_fused_moe`` (SM100 and SM120) and
``trtllm_fp4_block_scale_moe`` / ``trtllm_fp4_block_scale_routed_moe`` (SM100 only;
on SM120 their C++ launcher refuses to run).  Output metadata is rendered by
:func:`meta`; a size the op only knows at run time (an unbacked SymInt, e.g. the
padded row count of the trtllm ``gemm2_output``) is rendered as ``"?"``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import fi_child
import torch
from fi_child import compiling_flag, cuda, has_op
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from fp4graph.verify import simulate

BF16 = torch.bfloat16
U8 = torch.uint8
I32 = torch.int32
F32 = torch.float32
F8 = torch.float8_e4m3fn

VERSION: tuple[int, ...] = (0, 0, 0)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:3])


def fake_mode() -> FakeTensorMode:
    # A ShapeEnv lets fakes return sizes known only at run time (unbacked SymInts).
    return FakeTensorMode(allow_non_fake_inputs=True, shape_env=ShapeEnv())


def _dim(x: Any) -> Any:
    if isinstance(x, torch.SymInt):
        try:
            return int(x)
        except Exception:  # unbacked
            return "?"
    return int(x)


def meta(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return [[_dim(s) for s in t.shape], str(t.dtype), [_dim(s) for s in t.stride()]]
    if isinstance(t, (tuple, list)):
        return [type(t).__name__, [meta(x) for x in t]]
    return repr(t)


def meta_matches(real: Any, fake: Any) -> bool:
    """``fake`` equals ``real`` where a "?" (run-time size) matches any size."""
    if fake == "?":
        return isinstance(real, int)
    if isinstance(real, list) and isinstance(fake, list):
        return len(real) == len(fake) and all(map(meta_matches, real, fake))
    return real == fake


Case = tuple[str, str, Callable[[], tuple], Callable[..., Any]]


def swiglu_keyword(fn: Callable[..., Any]) -> dict[str, Any]:
    """The keyword that asks ``fn`` for a SwiGLU activation, as its signature names it:
    ``activation_type=ActivationType.Swiglu`` (0.6.3 and later), or 0.6.1's
    ``gated_act_type=GatedActType.SwiGlu`` of the trtllm entry points."""
    from flashinfer.fused_moe import core

    params = inspect.signature(fn).parameters
    if "activation_type" in params:
        return {"activation_type": core.ActivationType.Swiglu}
    if "gated_act_type" in params:
        return {"gated_act_type": core.GatedActType.SwiGlu}
    raise TypeError(f"{fn.__name__}{inspect.signature(fn)} names no activation parameter")


# --- the case tables -------------------------------------------------------------------
#
# One Row per case: its name, the entry point it calls, the versions that have it, its
# inputs, the call, and the expected outcome: ``raises`` is the first version whose eager
# call raises (an error case: its name ends in "!", eager and the op's fake must raise
# the same error, and it is not traced); otherwise the case must trace fullgraph to one
# op whose fake equals the eager metadata (tests/flashinfer/test_fused_moe_ops.py).


class EntryPoints(NamedTuple):
    """What the calls are made of, imported when the cases are made (forward_all puts
    recorders in their place first)."""

    cutlass_fused_moe: Callable[..., Any]
    trtllm_fp4_block_scale_moe: Callable[..., Any]
    trtllm_fp4_block_scale_routed_moe: Callable[..., Any]
    ActivationType: Any
    RoutingMethodType: Any


Bind = Callable[[EntryPoints], Callable[..., Any]]
EVERY_VERSION = (0,)


@dataclass(frozen=True)
class Row:
    name: str  # the key of its results (without the "!" of an error case)
    entry: str  # the public entry point called
    inputs: Callable[[], tuple]  # builds the inputs, under FakeTensorMode
    call: Bind  # makes the call from the entry points
    since: tuple[int, ...] = EVERY_VERSION  # the first version that has the case
    raises: tuple[int, ...] | None = None  # the first version whose eager call raises

    def case(self, api: EntryPoints, version: tuple[int, ...]) -> Case:
        error = self.raises is not None and version >= self.raises
        return (self.name + ("!" if error else ""), self.entry, self.inputs, self.call(api))


class Sizes(NamedTuple):
    tokens: int
    hidden: int
    inter: int
    experts: int
    top_k: int


# --- cutlass_fused_moe (SM100 / SM120) ---

CUTLASS_SIZES = Sizes(tokens=24, hidden=256, inter=128, experts=8, top_k=2)


def nvfp4_scales(gated: bool = True) -> list[torch.Tensor]:
    T, H, inter, E, K = CUTLASS_SIZES
    n1 = (2 if gated else 1) * inter
    return [
        cuda(1, dtype=F32),  # fc1 activation global scale
        cuda(E, n1, H // 16 // 4, dtype=I32),  # fc1 weight block scales
        cuda(E, dtype=F32),  # fc1 dequant
        cuda(1, dtype=F32),  # fc2 activation global scale
        cuda(E, H, inter // 16 // 4, dtype=I32),  # fc2 weight block scales
        cuda(E, dtype=F32),  # fc2 dequant
    ]


def nvfp4_inputs(gated: bool = True, quantized_input: bool = True) -> tuple:
    T, H, inter, E, K = CUTLASS_SIZES
    n1 = (2 if gated else 1) * inter
    x = cuda(T, H // 2, dtype=U8) if quantized_input else cuda(T, H)
    x_sf = cuda(T * H // 16, dtype=U8) if quantized_input else None
    return (
        x,
        cuda(T, K, dtype=I32),
        cuda(T, K, dtype=F32),
        cuda(E, n1, H // 2, dtype=U8).view(torch.long),
        cuda(E, H, inter // 2, dtype=U8).view(torch.long),
        nvfp4_scales(gated),
        x_sf,
    )


def nvfp4_inputs_and_output(cols: int) -> Callable[[], tuple]:
    """nvfp4_inputs() and a (tokens, cols) bf16 output."""
    return lambda: (*nvfp4_inputs(), cuda(CUTLASS_SIZES.tokens, cols))


def bf16_inputs() -> tuple:
    """Unquantized activations and weights, fc1 biases."""
    T, H, inter, E, K = CUTLASS_SIZES
    return (
        cuda(T, H),
        cuda(T, K, dtype=I32),
        cuda(T, K, dtype=F32),
        cuda(E, 2 * inter, H),
        cuda(E, H, inter),
        cuda(E, 2 * inter, dtype=BF16),
    )


def cutlass_nvfp4(**kw: Any) -> Bind:
    """``cutlass_fused_moe(x, ids, scales, w1, w2, BF16, quant_scales, input_sf=x_sf, **kw)``"""

    def bind(api: EntryPoints) -> Callable[..., Any]:
        cfm = api.cutlass_fused_moe
        return lambda x, ids, sc, w1, w2, qs, xsf: cfm(
            x, ids, sc, w1, w2, BF16, qs, input_sf=xsf, **kw
        )

    return bind


def cutlass_sglang_out(api: EntryPoints) -> Callable[..., Any]:
    """SGLang's call (modelopt_quant.py): keywords, output=, enum activation, tune size."""
    cfm = api.cutlass_fused_moe
    return lambda x, ids, sc, w1, w2, qs, xsf, o: cfm(
        output=o,
        input=x,
        token_selected_experts=ids,
        token_final_scales=sc,
        fc1_expert_weights=w1,
        fc2_expert_weights=w2,
        output_dtype=BF16,
        input_sf=xsf,
        quant_scales=qs,
        ep_size=1,
        ep_rank=0,
        tp_size=1,
        tp_rank=0,
        tune_max_num_tokens=x.shape[0],
        activation_type=api.ActivationType.Swiglu,
        enable_alltoall=False,
    )


def cutlass_fp16_out_pdl(api: EntryPoints) -> Callable[..., Any]:
    cfm = api.cutlass_fused_moe
    return lambda x, ids, sc, w1, w2, qs, xsf: cfm(
        x, ids, sc, w1, w2, torch.float16, qs, enable_pdl=True
    )


def cutlass_relu2_ep(api: EntryPoints) -> Callable[..., Any]:
    cfm = api.cutlass_fused_moe
    return lambda x, ids, sc, w1, w2, qs, xsf: cfm(
        x,
        ids,
        sc,
        w1,
        w2,
        BF16,
        qs,
        input_sf=xsf,
        ep_size=2,
        ep_rank=1,
        tp_size=2,
        tp_rank=1,
        activation_type=api.ActivationType.Relu2,
    )


def cutlass_bf16_biases(api: EntryPoints) -> Callable[..., Any]:
    cfm = api.cutlass_fused_moe
    return lambda x, ids, sc, w1, w2, b1: cfm(
        x, ids, sc, w1, w2, BF16, None, fc1_expert_biases=b1, activation_type=3
    )


def cutlass_nvfp4_output(api: EntryPoints) -> Callable[..., Any]:
    cfm = api.cutlass_fused_moe
    return lambda x, ids, sc, w1, w2, qs, xsf, o: cfm(
        x, ids, sc, w1, w2, BF16, qs, input_sf=xsf, output=o
    )


CFM = "cutlass_fused_moe"
CUTLASS_H = CUTLASS_SIZES.hidden
CUTLASS_CASES: tuple[Row, ...] = (
    Row("cutlass-nvfp4", CFM, nvfp4_inputs, cutlass_nvfp4()),
    Row("cutlass-nvfp4-out", CFM, nvfp4_inputs_and_output(CUTLASS_H), cutlass_sglang_out),
    Row(
        "cutlass-nvfp4-bf16-input-fp16-out",
        CFM,
        lambda: nvfp4_inputs(quantized_input=False),
        cutlass_fp16_out_pdl,
    ),
    Row("cutlass-nvfp4-relu2-ep", CFM, lambda: nvfp4_inputs(gated=False), cutlass_relu2_ep),
    Row("cutlass-bf16-no-quant-scales", CFM, bf16_inputs, cutlass_bf16_biases),
    Row(
        "cutlass-min-latency",
        CFM,
        nvfp4_inputs,
        cutlass_nvfp4(min_latency_mode=True),
        raises=EVERY_VERSION,
    ),
    Row(
        "cutlass-out-wrong-shape",
        CFM,
        nvfp4_inputs_and_output(CUTLASS_H // 2),
        cutlass_nvfp4_output,
        raises=EVERY_VERSION,
    ),
    Row(
        "cutlass-deepseek-fp8-block-scale",
        CFM,
        nvfp4_inputs,
        cutlass_nvfp4(use_deepseek_fp8_block_scale=True),
        raises=EVERY_VERSION,
    ),
    Row(
        "cutlass-nvfp4-linear-input-sf",
        CFM,
        nvfp4_inputs,
        cutlass_nvfp4(swizzled_input_sf=False),
        since=(0, 6, 8),
    ),
)


# --- trtllm_fp4_block_scale_(routed_)moe (SM100 only) ---

TRTLLM_SIZES = Sizes(tokens=40, hidden=512, inter=256, experts=16, top_k=4)


@dataclass(frozen=True)
class TrtInputs:
    """The inputs of a trtllm call: routing logits (routed: packed ``score << 16 | expert
    id`` top-k ids), routing bias, activations and their scales (``act``), weights and
    scales, then an ``out`` (rows, cols, dtype) output and a ``replay`` routing_replay_out
    of that dtype, if given."""

    act: str = "nvfp4"
    routed: bool = False
    logits_dtype: torch.dtype = F32
    out: tuple[int, int, torch.dtype] | None = None
    ids_dtype: torch.dtype = I32
    replay: torch.dtype | None = None

    def __call__(self) -> tuple:
        tT, tH, tI, tE, tK = TRTLLM_SIZES
        act = self.act
        sf = 16 if act.startswith("nvfp4") else 32
        if act == "nvfp4":
            hs, hs_sf = cuda(tT, tH // 2, dtype=U8), cuda(tT, tH // 16, dtype=F8)
        elif act == "nvfp4-flat-scale":  # SGLang 0.5.9 flattens the scales
            hs, hs_sf = cuda(tT, tH // 2, dtype=U8), cuda(tT * tH // 16, dtype=F8)
        elif act == "nvfp4-no-scale":
            hs, hs_sf = cuda(tT, tH // 2, dtype=U8), None
        elif act == "mxfp8":
            hs, hs_sf = cuda(tT, tH, dtype=F8), cuda(tT, tH // 32, dtype=F8)
        else:  # bf16 activations, mxfp4 weights
            hs, hs_sf = cuda(tT, tH), None
        if self.routed:
            routing = cuda(tT, tK, dtype=self.ids_dtype)
        else:
            routing = cuda(tT, tE, dtype=self.logits_dtype)
        args = (
            routing,
            cuda(tE, dtype=BF16),
            hs,
            hs_sf,
            cuda(tE, 2 * tI, tH // 2, dtype=U8),
            cuda(tE, 2 * tI, tH // sf, dtype=F8),
            cuda(tE, tH, tI // 2, dtype=U8),
            cuda(tE, tH, tI // sf, dtype=F8),
            cuda(tE, dtype=F32),
            cuda(tE, dtype=F32),
            cuda(tE, dtype=F32),
        )
        if self.out is not None:
            rows, cols, dt = self.out
            args = (*args, cuda(rows, cols, dtype=dt))
        if self.replay is not None:
            # routing_replay_out (int16 [num_tokens, top_k]) is written by the routing kernel.
            args = (*args, cuda(tT, tK, dtype=self.replay))
        return args


class TrtCall:
    """``trtllm_fp4_block_scale_(routed_)moe`` with the keywords ``kw``: ``routing`` names
    the RoutingMethodType (or is its int); ``swiglu`` asks for a SwiGLU activation as the
    entry point's signature names it; ``no_routing_bias`` passes None for the bias;
    ``with_replay``: the last input is routing_replay_out."""

    def __init__(
        self, routing: str | int, *, routed: bool = False, swiglu: bool = False, **kw: Any
    ) -> None:
        self.routing, self.routed, self.swiglu, self.kw = routing, routed, swiglu, kw

    def as_routed(self) -> TrtCall:
        return TrtCall(self.routing, routed=True, swiglu=self.swiglu, **self.kw)

    def __call__(self, api: EntryPoints) -> Callable[..., Any]:
        routed = self.routed
        fn = api.trtllm_fp4_block_scale_routed_moe if routed else api.trtllm_fp4_block_scale_moe
        method = self.routing
        if isinstance(method, str):
            method = getattr(api.RoutingMethodType, method)
        kw = {"routing_method_type": method, **self.kw}
        if self.swiglu:
            kw.update(swiglu_keyword(fn))
        return _trt_call(fn, kw)


def _trt_call(fn: Callable[..., Any], kw: dict[str, Any]) -> Callable[..., Any]:
    tT, tH, tI, tE, tK = TRTLLM_SIZES

    def call(routing, rb, hs, hss, w1, w1s, w2, w2s, o1, o1g, o2, *out):  # type: ignore[no-untyped-def]
        kwargs = dict(kw)
        if kwargs.pop("with_replay", False):  # the last input is routing_replay_out
            *out, kwargs["routing_replay_out"] = out
        if out:
            kwargs["output"] = out[0]
        if kwargs.pop("no_routing_bias", False):
            rb = None
        return fn(
            routing,
            rb,
            hs,
            hss,
            w1,
            w1s,
            None,
            None,
            None,
            None,
            w2,
            w2s,
            None,
            o1,
            o1g,
            o2,
            tE,
            tK,
            kwargs.pop("n_group", None),
            kwargs.pop("topk_group", None),
            tI,
            0,
            tE,
            kwargs.pop("routed_scaling_factor", None),
            **kwargs,
        )

    return call


MOE = "trtllm_fp4_block_scale_moe"
ROUTED = "trtllm_fp4_block_scale_routed_moe"
FULL = (TRTLLM_SIZES.tokens, TRTLLM_SIZES.hidden, BF16)
RENORMALIZE = TrtCall("Renormalize", no_routing_bias=True)
DEEPSEEK = {"n_group": 4, "topk_group": 2}

# Each runs on both entry points: "trtllm-<name>" (routing logits) and "trtllm-routed-<name>"
# (packed top-k ids).
TRTLLM_BOTH_CASES: tuple[tuple[str, TrtInputs, TrtCall], ...] = (
    ("nvfp4-renormalize", TrtInputs(), RENORMALIZE),
    (
        "nvfp4-deepseek-out",
        TrtInputs(out=FULL),
        TrtCall(
            "DeepSeekV3",
            **DEEPSEEK,
            routed_scaling_factor=2.5,
            do_finalize=True,
            tune_max_num_tokens=64,
        ),
    ),
    (
        "nvfp4-no-finalize",
        TrtInputs(logits_dtype=BF16),
        TrtCall(1, no_routing_bias=True, do_finalize=False),
    ),
    (
        "nvfp4-no-finalize-out",
        TrtInputs(out=FULL),
        TrtCall("Renormalize", no_routing_bias=True, do_finalize=False),
    ),
    (
        "bf16-mxfp4-pdl",
        TrtInputs("bf16"),
        TrtCall("Renormalize", no_routing_bias=True, enable_pdl=True, swiglu=True),
    ),
    (
        "mxfp8-mxfp4",
        TrtInputs("mxfp8"),
        TrtCall("Renormalize", no_routing_bias=True, routed_scaling_factor=1),
    ),
)

TRTLLM_CASES: tuple[Row, ...] = (
    *(Row(f"trtllm-{name}", MOE, inputs, call) for name, inputs, call in TRTLLM_BOTH_CASES),
    *(
        Row(
            f"trtllm-routed-{name}",
            ROUTED,
            dataclasses.replace(inputs, routed=True),
            call.as_routed(),
        )
        for name, inputs, call in TRTLLM_BOTH_CASES
    ),
    Row("trtllm-out-narrow", MOE, TrtInputs(out=(FULL[0], FULL[1] // 2, BF16)), RENORMALIZE),
    Row(
        "trtllm-out-wrong-rows",
        MOE,
        TrtInputs(out=(FULL[0] + 1, FULL[1], BF16)),
        RENORMALIZE,
        raises=EVERY_VERSION,
    ),
    Row(
        "trtllm-out-wrong-dtype",
        MOE,
        TrtInputs(out=(FULL[0], FULL[1], F32)),
        RENORMALIZE,
        raises=EVERY_VERSION,
    ),
    Row(
        "trtllm-routed-int64-ids",
        ROUTED,
        TrtInputs(routed=True, ids_dtype=torch.long),
        RENORMALIZE.as_routed(),
        raises=EVERY_VERSION,
    ),
    # 0.6.8 asserts that the activation scales have num_tokens rows.
    Row(
        "trtllm-nvfp4-flat-scale",
        MOE,
        TrtInputs("nvfp4-flat-scale", out=FULL),
        RENORMALIZE,
        raises=(0, 6, 8),
    ),
    Row(
        "trtllm-nvfp4-no-scale",
        MOE,
        TrtInputs("nvfp4-no-scale"),
        RENORMALIZE,
        raises=EVERY_VERSION,
    ),
    Row(
        "trtllm-nvfp4-replay-out",
        MOE,
        TrtInputs(out=FULL, replay=torch.int16),
        TrtCall("Renormalize", no_routing_bias=True, with_replay=True, norm_topk_prob=False),
        since=(0, 6, 8),
    ),
    Row(
        "trtllm-nvfp4-replay",
        MOE,
        TrtInputs(replay=torch.int16),
        TrtCall("DeepSeekV3", with_replay=True, **DEEPSEEK),
        since=(0, 6, 8),
    ),
    Row(
        "trtllm-nvfp4-replay-no-finalize",
        MOE,
        TrtInputs(replay=torch.int16),
        TrtCall("Renormalize", no_routing_bias=True, with_replay=True, do_finalize=False),
        since=(0, 6, 8),
    ),
    Row(
        "trtllm-replay-int32",
        MOE,
        TrtInputs(replay=I32),
        TrtCall("Renormalize", no_routing_bias=True, with_replay=True),
        since=(0, 6, 8),
        raises=EVERY_VERSION,
    ),
)


def entry_points() -> EntryPoints:
    from flashinfer.fused_moe import (
        RoutingMethodType,
        cutlass_fused_moe,
        trtllm_fp4_block_scale_moe,
        trtllm_fp4_block_scale_routed_moe,
    )

    # core's: 0.6.1 does not export it from flashinfer.fused_moe.
    from flashinfer.fused_moe.core import ActivationType

    return EntryPoints(
        cutlass_fused_moe,
        trtllm_fp4_block_scale_moe,
        trtllm_fp4_block_scale_routed_moe,
        ActivationType,
        RoutingMethodType,
    )


def bind(rows: tuple[Row, ...], api: EntryPoints, version: tuple[int, ...]) -> list[Case]:
    """The rows this version has, as (name, entry point, input builder, call)."""
    return [row.case(api, version) for row in rows if version >= row.since]


def cases(version: str, capability: tuple[int, int]) -> list[Case]:
    """:data:`CUTLASS_CASES`, and on SM10x :data:`TRTLLM_CASES`, that :data:`VERSION` has."""
    rows = CUTLASS_CASES + (TRTLLM_CASES if capability[0] == 10 else ())
    return bind(rows, entry_points(), VERSION)


# --- the C++ kernels, as far as output allocation goes ------------------------------


def _next_pow2(x: float) -> int:
    n = 1
    while n < x:
        n <<= 1
    return n


def trtllm_fp4_kernel_outputs(args: tuple) -> Any:
    """What the C++ ``trtllm_fp4_block_scale_moe`` (csrc/trtllm_fused_moe_kernel_launcher.cu)
    returns, transcribed for the default config (tactic -1, the smallest selected tile):
    nothing when finalizing (it fills ``output``), else ``(gemm2_output,
    expanded_idx_to_permuted_idx)`` (0.6.7 and later: ``(gemm2_output, expert_weights,
    expanded_idx_to_permuted_idx)``)."""
    hidden_states = args[4]
    num_experts, top_k = args[18], args[19]
    local_num_experts, do_finalize = args[24], args[27]
    if do_finalize:
        return None
    num_tokens, hidden_size = hidden_states.shape[0], hidden_states.shape[1]
    if hidden_states.dtype == U8:
        hidden_size *= 2
    bf16_act = hidden_states.dtype == BF16
    tiles = [8, 16, 32, 64] + ([] if bf16_act else [128, 256])
    avg = num_tokens * top_k / local_num_experts
    tile = min(max(_next_pow2(avg), tiles[0]), tiles[-1])
    i = tiles.index(tile)
    selected = {tile, *tiles[i + 1 : i + 3], *tiles[max(i - 1, 0) : i]}
    tile = min(selected)
    remaining = num_tokens * top_k
    ctas = min(num_experts, remaining)
    remaining -= ctas
    if remaining > 0:
        ctas += remaining // tile
    padded = ctas * tile
    min_tokens = -(-(128 * 1024 * 8) // (hidden_size * 16))
    rows = max(padded, min_tokens)
    dev = hidden_states.device
    gemm2_output = torch.empty(rows, hidden_size, dtype=BF16, device=dev)
    expanded_idx_to_permuted_idx = torch.empty(num_tokens * top_k, dtype=I32, device=dev)
    if VERSION < (0, 6, 7):
        return (gemm2_output, expanded_idx_to_permuted_idx)
    # 0.6.7: the launcher also returns the expert weights it was given.
    return (gemm2_output, args[2], expanded_idx_to_permuted_idx)


class _KernelModule(fi_child._StubModule):
    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name == "trtllm_fp4_block_scale_moe":
            return lambda *args: trtllm_fp4_kernel_outputs(args)
        if name == "init":  # the cutlass fused-MoE runner (its run_moe fills `output`)
            return lambda *args: fi_child._StubModule()
        return super().__getattr__(name)


def stub_kernels(
    tmp: str, module: Callable[[], Any] | None = None, *, nvcc: str | None = fi_child.NVCC_VERSION
) -> list[str]:
    """fi_child.stub_jit (``nvcc`` passed on), every module loading as ``module`` (default:
    the trtllm fp4 kernel's returned tensors, modelled); torch.from_dlpack passes torch
    tensors through (the real kernel returns TVM FFI tensors)."""
    built = fi_child.stub_jit(tmp, module or _KernelModule, nvcc=nvcc)
    from_dlpack = torch.from_dlpack

    def from_dlpack_(x: Any, *a: Any, **k: Any) -> Any:
        return x if isinstance(x, torch.Tensor) else from_dlpack(x, *a, **k)

    torch.from_dlpack = from_dlpack_  # type: ignore[assignment]
    return built


# --- the checks ----------------------------------------------------------------------


def _error(e: BaseException) -> str:
    return f"{type(e).__module__}.{type(e).__name__}: " + (str(e).splitlines() or [""])[0][:300]


def _error_lines(e: BaseException, n: int) -> str:
    """The exception's type and its first ``n`` non-empty lines, joined by " | "."""
    text = [ln.strip()[:300] for ln in str(e).splitlines() if ln.strip()][:n]
    return f"{type(e).__module__}.{type(e).__name__}: " + " | ".join(text)


def returned_inputs(got: Any, args: tuple) -> list[int]:
    """Positions in the returned list that are the caller's own tensor objects (the
    output= tensor, the weights of an ``(ids, weights)`` routing argument); eager and
    compiled calls must agree."""
    flat = [x for a in args for x in (a if isinstance(a, (list, tuple)) else [a])]
    ids = {id(a) for a in flat if isinstance(a, torch.Tensor)}
    items = got if isinstance(got, (list, tuple)) else [got]
    return [i for i, t in enumerate(items) if id(t) in ids]


def _direct_op(call: Callable[..., Any], args: tuple) -> Any:
    with compiling_flag():
        return call(*args)


def _flashinfer_targets(gm: torch.fx.GraphModule) -> list[str]:
    return sorted(
        {
            str(n.target)
            for n in gm.graph.nodes
            if n.op == "call_function" and "flashinfer" in str(n.target)
        }
    )


TORCH_VERSION: tuple[int, ...] = tuple(
    int(p) for p in torch.__version__.split("+")[0].split(".")[:2]
)
# torch >= 2.10 (pytorch#163123): fullgraph=True also allows ops whose output size is
# data-dependent (an unbacked SymInt from a fake's new_dynamic_size()); before, Dynamo
# refuses them unless torch._dynamo.config.capture_dynamic_output_shape_ops is set.
FULLGRAPH_CAPTURES_DYNAMIC_OUTPUT_SHAPES = TORCH_VERSION >= (2, 10)
DYNAMIC_SHAPE_OPERATOR = "torch._dynamo.exc.Unsupported: Dynamic shape operator"


def _compile_and_call(
    call: Callable[..., Any], args: tuple, backend: Callable[..., Any], dynamic: bool | None
) -> Any:
    """``torch.compile(call, fullgraph=True)(*args)``, called as a real caller calls it:
    outside the FakeTensorMode that made ``args`` (fake tensors carry their mode).
    Under an ambient FakeTensorMode, the compiled frame's own prologue (an
    unspecialized float argument, dynamic=True, becomes a tensor through
    torch._as_tensor_fullprec) dispatches through that mode, whose log.debug call
    torch 2.9's Dynamo then compiles as a frame of its own and refuses ("Logger not
    supported for non-export cases"): an artifact of the harness, not of the op."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with simulate.compiling(), unset_fake_temporarily():
        compiled = torch.compile(call, fullgraph=True, backend=backend, dynamic=dynamic)
        return compiled(*args)


def runnable(case_list: list[Case], only: list[str] | None) -> list[Case]:
    """The selected cases that are not error cases (whose names end in "!")."""
    return [c for c in case_list if not c[0].endswith("!") and _selected(c[0], only)]


def trace_all(
    version: str, patched: bool, dynamic_modes: list[bool | None], only: list[str] | None
) -> dict[str, Any]:
    return trace_cases(runnable(cases(version, fi_child.CAPABILITY), only), patched, dynamic_modes)


def trace_cases(
    case_list: list[Case], patched: bool, dynamic_modes: list[bool | None]
) -> dict[str, Any]:
    """Each case compiled with fullgraph=True (see the module docstring of
    test_fused_moe_ops.py for what is recorded)."""
    results: dict[str, Any] = {}
    for name, entry, build, call in case_list:
        for dynamic in dynamic_modes:
            rec: dict[str, Any] = {"entry": entry}
            results[f"{name}|dynamic={dynamic}"] = rec
            graphs: list[torch.fx.GraphModule] = []

            def backend(
                gm: torch.fx.GraphModule, example_inputs: Any, graphs: list = graphs
            ) -> Any:
                graphs.append(gm)
                return gm.forward

            torch._dynamo.reset()
            with fake_mode():
                args = build()
                try:
                    try:
                        got = _compile_and_call(call, args, backend, dynamic)
                    except torch._dynamo.exc.Unsupported as e:
                        if FULLGRAPH_CAPTURES_DYNAMIC_OUTPUT_SHAPES or not _error(e).startswith(
                            DYNAMIC_SHAPE_OPERATOR
                        ):
                            raise
                        # torch < 2.10: fullgraph=True does not turn on the capture of
                        # unbacked output sizes (the unfinalized gemm2_output rows); the
                        # caller has to.  The test checks which cases needed it.
                        rec["needed_capture_dynamic_output_shape_ops"] = _error_lines(e, 3)
                        graphs.clear()
                        torch._dynamo.reset()
                        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
                            got = _compile_and_call(call, args, backend, dynamic)
                except Exception as e:  # the pristine failure, or a regression
                    rec["ok"] = False
                    rec["error_type"] = f"{type(e).__module__}.{type(e).__name__}"
                    rec["error"] = _error(e)
                    continue
                rec["ok"] = True
                rec["meta"] = meta(got)
                rec["returned_inputs"] = returned_inputs(got, args)
                rec["graphs"] = len(graphs)
                rec["ops"] = [op for g in graphs for op in _flashinfer_targets(g)]
                if not patched:
                    continue
                # Graph breaks as torch._dynamo.explain counts them (without fullgraph).
                # Unbacked sizes (run-time row counts) need capture_dynamic_output_shape_ops
                # outside fullgraph mode; fullgraph=True (above, and SGLang) enables it itself
                # on torch >= 2.10.
                torch._dynamo.reset()
                with (
                    simulate.compiling(),
                    torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True),
                ):
                    ex = torch._dynamo.explain(call)(*args)
                rec["explain_graphs"] = ex.graph_count
                rec["graph_breaks"] = ex.graph_break_count
                rec["fake_meta"] = meta(_direct_op(call, args))
    return results


def eager_all(version: str, only: list[str] | None) -> dict[str, Any]:
    case_list = [c for c in cases(version, fi_child.CAPABILITY) if _selected(c[0], only)]
    return eager_cases(case_list)


def eager_cases(case_list: list[Case]) -> dict[str, Any]:
    """Each case's public function run eagerly (kernels stubbed) under FakeTensorMode,
    and the op's fake (the public function as non-strict torch.export runs it)."""
    results: dict[str, Any] = {}
    patched = has_op("cutlass_fused_moe")
    for name, entry, build, call in case_list:
        rec: dict[str, Any] = {"entry": entry}
        results[name] = rec
        with fake_mode():
            args = build()
            try:
                got = call(*args)
                rec["eager"] = meta(got)
                rec["returned_inputs"] = returned_inputs(got, args)
            except Exception as e:
                rec["eager_error"] = _error(e)
            if patched:
                try:
                    got = _direct_op(call, args)
                    rec["fake"] = meta(got)
                    rec["fake_returned_inputs"] = returned_inputs(got, args)
                except Exception as e:
                    rec["fake_error"] = _error(e)
    return results


def _selected(name: str, only: list[str] | None) -> bool:
    """``only``: case names or name prefixes ending in "*"."""
    if not only:
        return True
    return any(name == o or (o.endswith("*") and name.startswith(o[:-1])) for o in only)


def opcheck_all(version: str, only: list[str] | None) -> dict[str, Any]:
    return fi_child.opcheck_cases(runnable(cases(version, fi_child.CAPABILITY), only))


def forward_all(version: str, only: list[str] | None) -> dict[str, Any]:
    """Each op's real implementation calls the public function with exactly the
    arguments the caller passed (enums as ints compare equal, quant_scales=None
    comes back as None, tensors are the caller's objects)."""
    import inspect

    import flashinfer.fused_moe as pkg
    from flashinfer.fused_moe import core
    from torch._library.custom_ops import OPDEFS
    from torch.utils._python_dispatch import TorchDispatchMode

    entries = [
        "cutlass_fused_moe",
        "trtllm_fp4_block_scale_moe",
        "trtllm_fp4_block_scale_routed_moe",
    ]
    originals = {e: getattr(core, e) for e in entries}
    seen: list[dict[str, Any]] = []

    def recorder(entry: str) -> Callable[..., Any]:
        sig = inspect.signature(originals[entry])

        def rec(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            seen.append(dict(bound.arguments))
            raise _Stop

        rec.__signature__ = sig  # type: ignore[attr-defined]  # cases() reads it
        return rec

    class _Stop(Exception):
        pass

    class Capture(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func.namespace == "flashinfer":
                seen.append({"op": func, "args": args, "kwargs": kwargs or {}})
                raise _Stop
            return func(*args, **(kwargs or {}))

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return a is b
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return len(a) == len(b) and all(map(same, a, b))
        return bool(a == b) and (a is None) == (b is None)

    results: dict[str, Any] = {}
    for e in entries:
        setattr(pkg, e, recorder(e))
    try:
        case_list = cases(version, fi_child.CAPABILITY)
    finally:
        for e in entries:
            setattr(pkg, e, originals[e])
    for name, entry, build, call in case_list:
        if name.endswith("!") or not _selected(name, only):
            continue
        with fake_mode():
            args = build()
            seen.clear()
            try:
                call(*args)  # the recorder: what the caller passed
            except _Stop:
                pass
            user = seen.pop()
            try:
                with compiling_flag(), Capture():
                    originals[entry](**user)
            except _Stop:
                pass
            cap = seen.pop()
            setattr(core, entry, recorder(entry))
            try:
                OPDEFS[cap["op"]._schema.name]._init_fn(*cap["args"], **cap["kwargs"])
            except _Stop:
                pass
            finally:
                setattr(core, entry, originals[entry])
            forwarded = seen.pop()
        diff = sorted(k for k in user if not same(user[k], forwarded[k]))
        results[name] = {"entry": entry, "op": cap["op"]._schema.name, "diff": diff}
    return results


def main(request_json: str) -> None:
    global VERSION
    req = json.loads(request_json)
    VERSION = _version_tuple(req["version"])
    gpu = simulate.GPUS[req["gpu"]]
    fi_child.CAPABILITY = gpu.capability
    simulate.install(gpu)
    if torch.cuda._maybe_exchange_device is torch.cuda._exchange_device:
        # simulate.install() (e625324) gives both the same function; Dynamo keys its
        # torch.cuda handlers by function and asserts they differ.
        exchange = torch.cuda._exchange_device
        torch.cuda._maybe_exchange_device = lambda device: exchange(device)
    import flashinfer

    res: dict[str, Any] = {"version": flashinfer.__version__, "torch": torch.__version__}
    only = req.get("only")
    try:
        for mode in req["modes"]:  # one interpreter, several checks: imports dominate
            if mode == "trace":
                res["trace"] = trace_all(req["version"], req["patched"], req["dynamic"], only)
            elif mode == "eager":
                stub_kernels(req["tmp"])
                res["eager"] = eager_all(req["version"], only)
            elif mode == "forward":
                res["forward"] = forward_all(req["version"], only)
            elif mode == "opcheck":
                stub_kernels(req["tmp"])
                res["opcheck"] = opcheck_all(req["version"], only)
    except Exception:
        res["crash"] = traceback.format_exc()
    print("RESULT:" + json.dumps(res))
    sys.stdout.flush()
