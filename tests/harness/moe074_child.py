"""Child-interpreter side of test_fused_moe_074.py: flashinfer-python 0.7.4's fp4
fused-MoE entry points on a simulated SM100.

0.7.4 reshaped the trtllm fp4 MoE API (routed top-k ids may be an ``(ids, weights)``
tuple, fused shared experts, valid hidden sizes, a 4over6 recipe, a workspace
buffer), so the cases and the launcher model live here; the checks are
moe_child.py's.  Same protocol: the parent puts a pristine or patched
tree first on sys.path and calls :func:`main` with a JSON request; the result is
one ``RESULT:`` JSON line.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

import fi_child
import moe_child
import torch
from fi_child import cuda
from moe_child import BF16, EVERY_VERSION, F8, F32, I32, U8, Case, EntryPoints, Row

from fp4graph.verify import simulate

T, H, INTER, E, K = 40, 512, 256, 16, 4  # tokens, hidden, intermediate, experts, top-k


# --- the case tables ---------------------------------------------------------------------
#
# A case whose ``raises`` is set is an error case (its name ends in "!"): its eager call
# raises and the op's fake must raise the same error; the others must trace fullgraph to
# one op whose fake equals the eager metadata (tests/flashinfer/test_fused_moe_074.py).


def weights(sf: int) -> tuple:
    return (
        cuda(E, 2 * INTER, H // 2, dtype=U8),
        cuda(E, 2 * INTER, H // sf, dtype=F8),
        cuda(E, H, INTER // 2, dtype=U8),
        cuda(E, H, INTER // sf, dtype=F8),
        cuda(E, dtype=F32),
        cuda(E, dtype=F32),
        cuda(E, dtype=F32),
    )


def activations(act: str) -> tuple:
    if act == "nvfp4":
        return cuda(T, H // 2, dtype=U8), cuda(T, H // 16, dtype=F8)
    if act == "nvfp4-no-scale":
        return cuda(T, H // 2, dtype=U8), None
    if act == "mxfp8":
        return cuda(T, H, dtype=F8), cuda(T, H // 32, dtype=F8)
    return cuda(T, H), None  # bf16 activations, mxfp4 weights


class Trt:
    """One trtllm_fp4_block_scale_(routed_)moe case.  ``routed``: None (routing logits),
    "packed" (``score << 16 | expert id`` top-k ids) or "unpacked" (an ``(ids, weights)``
    tuple); ``act``: the activations; ``out_shape``: an output= tensor; ``replay``: a
    routing_replay_out; ``lora`` (routed only): a gemm1_lora_delta; ``routing``: the
    RoutingMethodType member, if passed; ``routing_bias``: pass the routing bias (else
    None); ``kw``: the call's other keywords."""

    def __init__(
        self,
        name: str,
        *,
        raises: bool = False,
        routed: str | None = None,
        act: str = "nvfp4",
        out_shape: tuple[int, int] | None = None,
        replay: bool = False,
        lora: bool = False,
        routing: str | None = None,
        **kw: Any,
    ) -> None:
        self.name, self.raises, self.routed, self.act = name, raises, routed, act
        self.out_shape, self.replay, self.lora = out_shape, replay, lora
        self.routing, self.kw = routing, kw
        routed_entry = "trtllm_fp4_block_scale_routed_moe"
        self.entry = "trtllm_fp4_block_scale_moe" if routed is None else routed_entry

    def build(self) -> tuple:
        routed = self.routed
        sf = 16 if self.act.startswith("nvfp4") else 32
        if routed is None:
            routing: Any = cuda(T, E, dtype=F32)
        elif routed == "packed":
            routing = cuda(T, K, dtype=I32)
        else:
            routing = (cuda(T, K, dtype=I32), cuda(T, K, dtype=BF16))
        extra = ()
        if self.out_shape is not None:
            extra += (cuda(*self.out_shape, dtype=BF16),)
        if self.replay:
            extra += (cuda(T, K, dtype=torch.int16),)
        if self.lora:  # routed only: [num_tokens, top_k, 2 * intermediate] bf16
            extra += (cuda(T, K, 2 * INTER, dtype=BF16),)
        return (routing, cuda(E, dtype=BF16), *activations(self.act), *weights(sf), *extra)

    def bind(self, api: EntryPoints) -> Callable[..., Any]:
        lora, replay = self.lora, self.replay
        kw = dict(self.kw)
        if self.routing is not None:
            kw = {"routing_method_type": getattr(api.RoutingMethodType, self.routing), **kw}
        fn = (
            api.trtllm_fp4_block_scale_moe
            if self.routed is None
            else api.trtllm_fp4_block_scale_routed_moe
        )

        def call(routing, bias, hs, hss, w1, w1s, w2, w2s, o1, o1g, o2, *extra):  # type: ignore[no-untyped-def]
            kwargs = dict(kw)
            extra = list(extra)
            if lora:
                kwargs["gemm1_lora_delta"] = extra.pop()
                # With gate scales eager pre-scales the delta by indexing a CUDA tensor,
                # which a CPU build of torch cannot do even for fake tensors.
                o1g = None
            if replay:
                kwargs["routing_replay_out"] = extra.pop()
            if extra:
                kwargs["output"] = extra.pop()
            if not kwargs.pop("routing_bias", False):
                bias = None
            return fn(
                routing, bias, hs, hss, w1, w1s, None, None, None, None, w2, w2s, None,
                o1, o1g, o2, E, K, kwargs.pop("n_group", None), kwargs.pop("topk_group", None),
                INTER, 0, E, kwargs.pop("routed_scaling_factor", None), **kwargs,
            )  # fmt: skip

        return call

    def row(self) -> Row:
        raises = EVERY_VERSION if self.raises else None
        return Row(self.name, self.entry, self.build, self.bind, raises=raises)


TRTLLM_CASES: tuple[Trt, ...] = (
    Trt("trtllm-nvfp4", routing="Renormalize"),
    Trt("trtllm-nvfp4-out", out_shape=(T, H), routing="Renormalize"),
    Trt("trtllm-nvfp4-unfinalized", routing="Renormalize", do_finalize=False),
    Trt(
        "trtllm-nvfp4-deepseek",
        routing="DeepSeekV3",
        routing_bias=True,
        n_group=4,
        topk_group=2,
        routed_scaling_factor=2.5,
    ),
    Trt("trtllm-nvfp4-replay", replay=True, routing="Renormalize"),
    Trt("trtllm-mxfp8", act="mxfp8", routing="Renormalize"),
    Trt("trtllm-bf16", act="bf16", routing="Renormalize"),
    Trt("trtllm-nvfp4-no-scale", raises=True, act="nvfp4-no-scale", routing="Renormalize"),
    Trt("trtllm-out-wrong-rows", raises=True, out_shape=(T + 1, H), routing="Renormalize"),
    Trt("trtllm-out-too-wide", raises=True, out_shape=(T, 2 * H), routing="Renormalize"),
    Trt("routed-packed", routed="packed", routing="Renormalize"),
    Trt("routed-packed-unfinalized", routed="packed", routing="Renormalize", do_finalize=False),
    Trt("routed-unpacked-out", routed="unpacked", out_shape=(T, H)),
    Trt("routed-unpacked-unfinalized", routed="unpacked", do_finalize=False),
    Trt("routed-packed-lora", routed="packed", lora=True),
    Trt("routed-unpacked-lora-unfinalized", routed="unpacked", lora=True, do_finalize=False),
)


# cutlass_fused_moe (SM100 and SM120): packed NVFP4 weights, the 0.7.4 test's inputs.
cT, cH, cI, cE, cK = 64, 256, 512, 8, 2


def cutlass_build(with_output: bool) -> Callable[[], tuple]:
    def build() -> tuple:
        qs = [
            cuda(1, dtype=F32), cuda(cE, 2 * cI, cH // 16, dtype=I32), cuda(cE, dtype=F32),
            cuda(1, dtype=F32), cuda(cE, cH, cI // 16, dtype=I32), cuda(cE, dtype=F32),
        ]  # fmt: skip
        args = (
            cuda(cT, cH), cuda(cT, cK, dtype=I32), cuda(cT, cK, dtype=F32),
            cuda(cE, 2 * cI, cH // 16, dtype=torch.int64),
            cuda(cE, cH, cI // 16, dtype=torch.int64), qs,
        )  # fmt: skip
        return args + ((cuda(cT, cH),) if with_output else ())

    return build


def cutlass(api: EntryPoints) -> Callable[..., Any]:
    cutlass_fused_moe = api.cutlass_fused_moe

    def cutlass_call(x, sel, sc, w1, w2, qs, *output):  # type: ignore[no-untyped-def]
        return cutlass_fused_moe(x, sel, sc, w1, w2, BF16, qs, output=output[0] if output else None)

    return cutlass_call


CUTLASS_CASES: tuple[Row, ...] = (
    Row("cutlass-nvfp4", "cutlass_fused_moe", cutlass_build(False), cutlass),
    Row("cutlass-nvfp4-out", "cutlass_fused_moe", cutlass_build(True), cutlass),
)


def entry_points() -> EntryPoints:
    from flashinfer.fused_moe import (
        cutlass_fused_moe,
        trtllm_fp4_block_scale_moe,
        trtllm_fp4_block_scale_routed_moe,
    )
    from flashinfer.tllm_enums import RoutingMethodType

    return EntryPoints(
        cutlass_fused_moe,
        trtllm_fp4_block_scale_moe,
        trtllm_fp4_block_scale_routed_moe,
        ActivationType=None,  # no case asks for one
        RoutingMethodType=RoutingMethodType,
    )


def cases() -> list[Case]:
    """(name, entry, build inputs, call) of :data:`TRTLLM_CASES` and :data:`CUTLASS_CASES`."""
    rows = tuple(trt.row() for trt in TRTLLM_CASES) + CUTLASS_CASES
    return moe_child.bind(rows, entry_points(), moe_child.VERSION)


def launcher_outputs(args: tuple) -> list[Any]:
    """What the C++ ``trtllm_fp4_block_scale_moe`` (csrc/trtllm_fused_moe_kernel_launcher.cu,
    ``MoeRunResultBuffers::to_ffi``) returns for these arguments: FFI[0] is the
    finalized output (borrowed from Python, so None) or the unfinalized FC2 buffer;
    unfinalized calls reserve FFI[1] for the expert weights (None when Python passed
    its own buffer); then expanded_idx_to_permuted_idx; then, with a LoRA delta, the
    gated activation output."""
    hidden_states, topk_weights, lora_delta = args[5], args[3], args[10]
    top_k, n_fused_shared = args[22], args[23] or 0
    do_finalize, valid_hidden_size = args[31], args[41]
    assert valid_hidden_size is None  # not modelled: the cases do not narrow hidden
    num_tokens, hidden_size = hidden_states.shape
    if hidden_states.dtype == U8:
        hidden_size *= 2
    dev = hidden_states.device
    expanded = torch.empty(num_tokens * (top_k + n_fused_shared), dtype=I32, device=dev)
    lora = []
    if lora_delta is not None:  # padded permuted rows, like gemm2_output's
        lora = [torch.empty(num_tokens * top_k + 24, args[26], dtype=BF16, device=dev)]
    if do_finalize:
        return [None, expanded, *lora]
    # The padded permuted row count depends on the routing; any size will do here.
    gemm2_output = torch.empty(num_tokens * top_k + 24, hidden_size, dtype=BF16, device=dev)
    weights = None
    if topk_weights is None:
        weights = torch.empty(num_tokens, top_k, dtype=BF16, device=dev)
    return [gemm2_output, weights, expanded, *lora]


class _Launcher(moe_child._KernelModule):
    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name == "trtllm_fp4_block_scale_moe":
            return lambda *args: launcher_outputs(args)
        return super().__getattr__(name)


def main(request_json: str) -> None:
    req = json.loads(request_json)
    gpu = simulate.SM100
    fi_child.CAPABILITY = gpu.capability
    moe_child.VERSION = (0, 7, 4)
    simulate.install(gpu)
    import flashinfer

    res: dict[str, Any] = {"version": flashinfer.__version__}
    try:
        for mode in req["modes"]:
            if mode == "trace":
                res["trace"] = moe_child.trace_cases(
                    moe_child.runnable(cases(), None), req["patched"], req["dynamic"]
                )
            elif mode == "eager":
                moe_child.stub_kernels(req["tmp"], _Launcher)
                res["eager"] = moe_child.eager_cases(cases())
            elif mode == "opcheck":
                moe_child.stub_kernels(req["tmp"], _Launcher)
                res["opcheck"] = fi_child.opcheck_cases(moe_child.runnable(cases(), None))
    except Exception:
        res["crash"] = traceback.format_exc()
    print("RESULT:" + json.dumps(res))
    sys.stdout.flush()
