"""What a whole-model report must show, shared by the tests of tests/models: the ops
sglang's piecewise graphs hold (captured or split), the replay's batch size and the NSA
half of a patched DSA (GLM-5 / DeepSeek-V3.2) report; what each sglang release measured
pristine (without a stack) does with each family (:data:`PRISTINE_RELEASES`; a release
that then got a stack: :data:`PRISTINE_OF_STACKS`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness import tables

if TYPE_CHECKING:
    from harness.models.simulation import SglangStack

FP4_QUANTIZE = "sglang.flashinfer_fp4_quantize"
FP4_GEMM = "sglang.fp4_gemm"
ATTENTION = "sglang.unified_attention_with_output"
# Attention as a split op: 0.5.15+ run an MLA model's absorbed bmm and attention in one
# (models/deepseek_common/attention_forward_methods/forward_mla.py, 0.5.16 :1066).
ATTENTION_OPS = (ATTENTION, "sglang.mla_bmm_then_unified_attention")
MOE = "sglang.moe_forward_piecewise_cuda_graph_impl"
NSA_TOPK = "sglang.k_cache_and_topk_result"
# sglang's all-reduce ops at TP > 1: outplace inside captured pieces, inplace a split op.
OUTPLACE_ALL_REDUCE = "sglang.outplace_all_reduce"
INPLACE_ALL_REDUCE = "sglang.inplace_all_reduce"
# A prefill batch that is not a capture size: the runner pads it (capture sizes are
# multiples of 4 up to 16 tokens in these cases).
REPLAY_TOKENS = 11
# What sglang's ServerArgs picks for DSA models on SM120 (fp8 KV cache for major >= 10):
# 0.5.9 server_args.py _set_default_nsa_backends (flashmla_auto / flashmla_kv), 0.5.10+
# trtllm / trtllm (README: none of them has SM120 kernels in the pinned wheels).  None: the
# series keeps piecewise off for NSA models (nsa-piecewise-off), so no NSA row runs there.
# Every sglang stack needs a row (NSA_TABLE).
NSA_BACKENDS_ON_SM120: dict[str, tuple[str, str] | None] = {
    "0.5.8": None,
    "0.5.8.post1": None,
    "0.5.9": ("flashmla_auto", "flashmla_kv"),
    "0.5.10": ("trtllm", "trtllm"),
    "0.5.10.post1": ("trtllm", "trtllm"),
    "0.5.11": ("trtllm", "trtllm"),
    "0.5.12": ("trtllm", "trtllm"),
    "0.5.12.post1": ("trtllm", "trtllm"),
}

NSA_TABLE = tables.Table("tests/harness/models/expected.py: NSA_BACKENDS_ON_SM120", NSA_BACKENDS_ON_SM120)


# 0.5.12 and 0.5.12.post1 (EXPECT_BY_RELEASE, below).
_V32_UNFUSED: dict[str, dict[str, Any]] = {"deepseek-v3.2": {"num_fused_shared_experts": 0}}

# Where a release decides otherwise than a family row's ``expect`` (families.py), read from
# its code: sglang release -> {family: the values it gives}; ``{}``: as the rows say.  Every
# sglang stack needs a row (EXPECT_TABLE): read the new release's code for each family.
EXPECT_BY_RELEASE: dict[str, dict[str, dict[str, Any]]] = {
    "0.5.8": {},
    "0.5.8.post1": {},
    "0.5.9": {},
    "0.5.10": {},
    "0.5.10.post1": {},
    "0.5.11": {},
    # 0.5.12 fuses the shared expert only where architectures[0] is DeepseekV3ForCausalLM
    # (models/deepseek_v2.py:2425, determine_num_fused_shared_experts), and no longer reads a
    # deepseek_v32 config as deepseek_v3 (0.5.11: _load_deepseek_v32_model), so V3.2 is not.
    "0.5.12": _V32_UNFUSED,
    "0.5.12.post1": _V32_UNFUSED,
}

EXPECT_TABLE = tables.Table("tests/harness/models/expected.py: EXPECT_BY_RELEASE", EXPECT_BY_RELEASE)


def release_expect(sglang: str, family: str) -> dict[str, Any]:
    """What release ``sglang`` decides for ``family`` otherwise than its row (:data:`EXPECT_BY_RELEASE`)."""
    return EXPECT_TABLE.row(sglang).get(family, {})


def expect(sglang: str, family: str, row: Mapping[str, Any]) -> dict[str, Any]:
    """What the report of ``family`` on ``sglang`` must hold: its row's ``expect``, with the
    release's own decisions (:data:`EXPECT_BY_RELEASE`)."""
    return {**row.get("expect", {}), **release_expect(sglang, family)}


def assert_nsa(stack: SglangStack, report: dict[str, Any]) -> None:
    """The NSA half of a patched GLM-5 / DeepSeek-V3.2 report."""
    nsa = report["nsa"]
    assert nsa["backend"] == "NativeSparseAttnBackend" and nsa["kv_pool"] == "NSATokenToKVPool", nsa
    assert nsa["kv_cache_dtype"] == "fp8_e4m3" and nsa["page_size"] == 64, nsa
    backends = NSA_TABLE.row(stack.sglang)
    assert backends is not None, f"{NSA_TABLE.name} says no NSA row runs on sglang {stack.sglang}"
    assert (nsa["prefill"], nsa["decode"]) == backends, nsa
    layers = nsa["indexers"]
    assert layers >= 1, nsa
    for pieces in report["graphs"]:
        split = [p["ops"] for p in pieces if p["split"]]
        # Each layer: the indexer's k-cache store + top-k, then attention, each a split op of its own.
        assert split.count([NSA_TOPK]) == layers and split.count([ATTENTION]) == layers, pieces
        captured = [k for p in pieces if not p["split"] for k in p["kernels"]]
        assert not [k for k in captured if k.startswith(("deep_gemm.", "sgl_kernel.fast_topk"))], pieces
    # The split op's body ran (between captured pieces): fp8 MQA logits and top-k on each call.
    calls = report["split_op_calls"]
    assert calls.get("k_cache_and_topk_result", 0) > 0, calls
    assert report["kernel_calls"].get("deep_gemm::fp8_mqa_logits", 0) >= calls["k_cache_and_topk_result"], report
    replay = report["replay"]
    assert replay["static_tokens"] > replay["tokens"] == REPLAY_TOKENS, replay
    assert replay["split_op_calls"] == {"k_cache_and_topk_result": layers, "unified_attention_with_output": layers}
    # Padding sliced off before the indexer's logits and (where FlashMLA runs) the attention kernel.
    assert replay["kernel_rows"]["deep_gemm::fp8_mqa_logits"] == [REPLAY_TOKENS], replay
    for kernel in ("sgl_kernel::sparse_prefill_fwd", "sgl_kernel::fast_topk_transform_ragged_fused"):
        assert replay["kernel_rows"].get(kernel, [REPLAY_TOKENS]) == [REPLAY_TOKENS], replay


# --- sglang releases measured pristine (pinned in patches/stacks.toml without a stack) --


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the whole-model simulation measured for a family on a pristine release, with
    the release's torch.compile piecewise runner selected as a user selects it there.

    ``error`` empty: works pristine (0 graph breaks, the fp4 ops in captured pieces);
    otherwise the first error's text holds ``error`` and its traceback ``where``
    (``file", line N``; the harness's own, ``harness``: not measured).  ``piecewise_off``: the release's own decision that keeps the
    family out of piecewise unless enforced (file:line); the family is traced as if it
    were on (``--enforce-piecewise-cuda-graph``)."""

    error: str = ""
    where: str = ""
    piecewise_off: str = ""
    # The prefill backend the release resolves for this family when the user names none,
    # where it is not the release's (``disabled`` by an auto-disable rule, file:line).
    default_prefill: str = ""
    # The error is the harness's, not the release's (what the simulation lacks, file:line
    # of the release code it meets): the family is not measured there; the row holds the
    # gap to its error until the harness follows.
    harness_gap: str = ""
    # What the family does on the simulated SM121 (GB10) where it differs from SM120.
    sm121: Outcome | None = None
    # The error comes while the server and its model are built (the release's ServerArgs,
    # weight loading), before any CUDA graph: the report's stage is ``build``.
    at_build: bool = False

    @property
    def works(self) -> bool:
        return not self.error and not self.piecewise_off and not self.harness_gap

    def on(self, gpu: str) -> Outcome:
        """The outcome on ``gpu`` (``sm120`` / ``sm121``)."""
        return self.sm121 if gpu == "sm121" and self.sm121 is not None else self


WORKS = Outcome()


@dataclasses.dataclass(frozen=True)
class PristineRelease:
    """An sglang release measured pristine: its pins (from the wheel's METADATA, checked
    against it), the prefill CUDA graph backend it starts with, and one
    :class:`Outcome` per family it has (``fp4graph.model.families``).  ``no_piecewise``:
    the release refuses torch.compile piecewise itself (file:line); every family is
    not applicable, and its outcome is that refusal."""

    flashinfer: str
    torch: str
    transformers: str
    default_prefill: str
    families: Mapping[str, Outcome]
    no_piecewise: str = ""
    # The release turns piecewise off itself when CUDA graphs are (``--disable-cuda-graph``,
    # the second start order; file:line): there a family that builds gets no piecewise runner.
    piecewise_needs_cuda_graph: str = ""


# sglang 0.5.12.post1 wraps flashinfer.fp4_quantize in its own op (fp4_utils.py) and turns
# piecewise off for NSA (DSA) models: configs/model_config.py:1558 lists their
# architectures, server_args.py:1309 disables piecewise for them.  Enforced, the attention
# split op's schema lacks topk_indices (PR #23351 is upstream from 0.5.13).
_NSA_0512 = Outcome(
    error="sglang::unified_attention_with_output() expected at most",
    where='srt/layers/radix_attention.py", line 133',
    piecewise_off="configs/model_config.py:1558 (piecewise_cuda_graph_disabled_model_archs), "
                  "server_args.py:1309",
)

_ALL_WORK = {
    "llama": WORKS, "qwen3": WORKS, "qwen3-moe": WORKS, "deepseek-v3": WORKS,
    "deepseek-v3-no-fusion": WORKS, "glm4-moe": WORKS, "glm5": WORKS, "deepseek-v3.2": WORKS,
}
# Up to 0.5.13.post1: sglang's own piecewise runner, on unless a rule turns it off.
_PIECEWISE_ON = "piecewise (torch.compile, PiecewiseCudaGraphRunner), on by default"

_PRISTINE_0512 = PristineRelease(
    flashinfer="0.6.11.post1", torch="2.11.0", transformers="5.6.0", default_prefill=_PIECEWISE_ON,
    families={**_ALL_WORK, "glm5": _NSA_0512, "deepseek-v3.2": _NSA_0512},
)

# What each stack's release does pristine (tests/models/test_models.py holds the stack's
# pristine side to its row): a release measured pristine before it got a stack (its series
# fixes what breaks here), or None: the seed error, every family stopping in the piecewise
# compile (test_models.py SEED_ERROR, EARLIER_FAILURES, NSA_PRISTINE_FAILURES).  Every
# sglang stack needs a row (PRISTINE_OF_STACKS_TABLE).
PRISTINE_OF_STACKS: dict[str, PristineRelease | None] = {
    "0.5.8": None,
    "0.5.8.post1": None,
    "0.5.9": None,
    "0.5.10": None,
    "0.5.10.post1": None,
    "0.5.11": None,
    # Stacks sglang-0.5.12 and sglang-0.5.12.post1: the #23351 backport
    # (nsa-piecewise-cuda-graph).  0.5.12 (the same pins; .post1 changed DeepSeek-V4 and
    # speculative code) measures as 0.5.12.post1, file:line included.
    "0.5.12": _PRISTINE_0512,
    "0.5.12.post1": _PRISTINE_0512,
}

_BREAKABLE = ("`breakable` (BreakableCudaGraphBackend, no torch.compile), on by default; `tc_piecewise` "
              "opt-in (`--cuda-graph-backend-prefill tc_piecewise`)")
_MLA = ("deepseek-v3", "deepseek-v3-no-fusion", "glm5", "deepseek-v3.2")
# 0.5.17 / 0.5.18: GLM-5 (tc_piecewise selected) captures (22 graphs, 0 breaks) and breaks
# in the first replay of a batch that is not a capture size: load_batch builds the attention
# metadata from the unpadded batch (prefill_cuda_graph_runner.py:1600, 0.5.18 :1646, "TC_PIECEWISE use the
# eager init_forward_metadata path"), the graphs replay at the padded size, and the attention
# split op body, run eagerly, hands FlashInfer's SM120 sparse MLA (GLM-5's FP8 KV cache path,
# dsa_backend.py:2131 / :2133 -> kernels/ops/attention/flash_mla_sm120.py:622) 11 seq_lens
# for 12 query tokens: FlashInfer (0.6.15.post1 mla/_core.py:521, 0.6.17 :533) refuses them.
# DeepSeek-V3.2 takes flashmla_sparse there (a stand-in kernel, no shape check).
# The simulated SM121 (GB10, a CUDA 13.0 torch) does the same, file:line included.
_GLM5_0517 = Outcome(
    error="seq_lens for SM120 sparse MLA v32/GLM must be shaped either",
    where='srt/layers/attention/dsa_backend.py", line 2131',
)
_GLM5_0518 = dataclasses.replace(_GLM5_0517, where='srt/layers/attention/dsa_backend.py", line 2133')

# 0.5.19: GLM-5 (8 heads, as a --tp 8 rank of the real model: families.py) captures and
# breaks in the first padded replay as on 0.5.18, dsa_backend.py:2134 -> FlashInfer 0.6.18
# mla/_core.py:534; SM121 the same.
_GLM5_0519 = Outcome(
    error="seq_lens for SM120 sparse MLA v32/GLM must be shaped either",
    where='srt/layers/attention/dsa_backend.py", line 2134',
)


def _mla_off(where: str) -> dict[str, Outcome]:
    """The MLA families of a 0.5.15+ release whose breakable prefill default is disabled for
    MLA attention (``_disable_breakable_cudagraph_if_incompatible``, ``where``): they
    work with tc_piecewise selected."""
    off = f"`disabled` by default: breakable prefill graphs are off for MLA attention ({where})"
    return {name: dataclasses.replace(WORKS, default_prefill=off) for name in _MLA}


NSA_NAMES = ("glm5", "deepseek-v3.2")

# 0.5.20+: the prefill default is `breakable` (no torch.compile); selected, tc_piecewise
# traces each MoE layer (and DeepSeek's MLA) into layers/attention/dsa/utils.py:118
# is_dsa_enable_prefill_cp, whose is_musa() (lru_cache, which Dynamo traces through) imports
# torchada, a package sglang does not require: Dynamo's "Import failure", an error under
# fullgraph, before any MoE op.  Llama and Qwen3 never ask.
_IMPORT_TORCHADA = Outcome(error="Import failure", where='srt/utils/common.py", line 227')
# 0.5.22+ removed tc_piecewise: --cuda-graph-backend-prefill refuses it
# (model_executor/cuda_graph_config.py:240 parse_cuda_graph_backend_arg), as does
# --cuda-graph-config (:185); the backend module stays, unreachable.
_REMOVED = Outcome(error="tc_piecewise was removed", where='model_executor/cuda_graph_config.py", line 240')
_NO_PIECEWISE = "`--cuda-graph-backend-prefill tc_piecewise` refused (`model_executor/cuda_graph_config.py:240`)"
_FROM_0520 = {
    "llama": WORKS, "qwen3": WORKS, "qwen3-moe": _IMPORT_TORCHADA, "deepseek-v3": _IMPORT_TORCHADA,
    "deepseek-v3-no-fusion": _IMPORT_TORCHADA, "glm4-moe": _IMPORT_TORCHADA,
    "deepseek-v3.2": _IMPORT_TORCHADA,
    # GLM-5 too (from dsa_backend.py:117), SM121 the same.
    "glm5": _IMPORT_TORCHADA,
}

# 0.5.21: the same torchada import (srt/utils/common.py:226, from dsa/utils.py:117, reached
# through layers/layer_boundary/layout.py:173).  Qwen3's model forward has no annotations,
# and tc_piecewise infers the dynamic dims from them (srt/compilation/compile.py:125, from
# runner_backend/tc_piecewise_cuda_graph_backend.py:146): no dims, no compile.
_IMPORT_TORCHADA_0521 = Outcome(error="Import failure", where='srt/utils/common.py", line 226')
_FROM_0521 = {
    **dict.fromkeys(("qwen3-moe", "deepseek-v3", "deepseek-v3-no-fusion", "glm4-moe"), _IMPORT_TORCHADA_0521),
    "llama": WORKS,
    "qwen3": Outcome(error="No dynamic dims inferred", where='srt/compilation/compile.py", line 125'),
    # GLM-5 and DeepSeek-V3.2 too (the DSA backend's JIT top-k module asks the device for
    # its cluster occupancy first, kernels/jit/utils/occupancy.py:31: stand_ins.ClusterProbe).
    "deepseek-v3.2": _IMPORT_TORCHADA_0521,
    "glm5": _IMPORT_TORCHADA_0521,
}

# 0.5.4 ... 0.5.7: piecewise is opt-in (--enable-piecewise-cuda-graph), measured under
# the test venv's CPU torch 2.13.0 and transformers 5.6.0 (the releases pin torch 2.8.0 /
# 2.9.1 and transformers 4.57.1, 0.5.6.post1 5.0.0rc0).
_OPT_IN = "none: piecewise opt-in (`--enable-piecewise-cuda-graph`)"
# 0.5.6.post1 / 0.5.6.post2: with no --attention-backend an MHA model gets trtllm_mha on any
# Blackwell (server_args.py, 0.5.6.post2 :1382 ``is_blackwell()``: major 10 or 12), which
# _handle_attention_backend_compatibility then refuses off SM100: the server does not start
# on SM12x.  (0.5.6 picks flashinfer there, 0.5.7 trtllm_mha only where is_sm100_supported.)
# Named (--attention-backend flashinfer), Llama and Qwen3-MoE meet the seed error
# (docs/coverage.md; measured with the scratch driver, not held here).
_TRTLLM_MHA = "TRTLLM MHA backend is only supported on Blackwell GPUs (SM100)"


def _trtllm_mha_refused(line: int) -> Outcome:
    return Outcome(error=_TRTLLM_MHA, where=f'srt/server_args.py", line {line}', at_build=True)


# The seed error: FlashInfer's fp4_quantize, called raw by the ModelOpt fp4 linear, asks
# jit/cpp_ext.py:67 get_cuda_version (nvcc --version, a subprocess) inside the compile
# (flashinfer 0.5.2 and 0.5.3 alike).
_SEED_JIT = Outcome(error="Attempted to call function marked as skipped", where='flashinfer/jit/cpp_ext.py", line 67')


def _downsized_moe(line: int, weight: str = "w13") -> Outcome:
    """A MoE family's downsized row: loading, the release checks that the fp4 MoE weight
    scales' last dim is a multiple of 16 (w13: hidden size / 16, DeepSeek's 128 -> 8; w2:
    moe_intermediate_size / 16, Qwen3-MoE's and GLM-4-MoE's 128 -> 8)."""
    size = "hidden size (128)" if weight == "w13" else "moe_intermediate_size (128)"
    return Outcome(
        error=f"Expected {weight}_weight_scale.dim(2) to be divisible by 16",
        where=f'layers/quantization/modelopt_quant.py", line {line}', at_build=True,
        harness_gap=f"the family's downsized {size}: modelopt_quant.py:{line} wants the fp4 MoE "
                    f"{weight} weight scales' last dim (size / 16) a multiple of 16",
    )


def _dense_and_downsized_moe(dense: Outcome, line: int) -> dict[str, Outcome]:
    """A release before 0.5.8: Llama and Qwen3 as ``dense``; the MoE families stop at its
    fp4 MoE weight-scale check (``modelopt_quant.py:line``, :func:`_downsized_moe`)."""
    return {"llama": dense, "qwen3": dense,
            **dict.fromkeys(("qwen3-moe", "glm4-moe"), _downsized_moe(line, "w2")),
            **dict.fromkeys(_DEEPSEEK, _downsized_moe(line))}


# 0.5.4.post3 ... 0.5.5.post2: the piecewise backend's import (compilation/compile.py:137 /
# :140, in the first piecewise compile) reaches cuda_piecewise_backend.py:12, which imports
# weak_ref_tensor_jit: torch.utils.cpp_extension.load of weak_ref_tensor.cpp, a source the
# wheel does not ship (upstream PR #13204 adds it to the package data; 0.5.5.post3 has no
# such module).  Every model with piecewise on.
_NO_WEAK_REF_CPP = Outcome(error="No such file or directory", where='srt/compilation/weak_ref_tensor_jit.py", line 8')
_DEEPSEEK = ("deepseek-v3", "deepseek-v3-no-fusion", "deepseek-v3.2")
# 0.5.6.post1's configs/model_config.py:361 reads rope_scaling["factor"] for DeepSeek; under
# the venv's transformers 5.6.0 a config's rope_scaling is its rope_parameters (no factor).
_ROPE_FACTOR = Outcome(
    error="KeyError: 'factor'", where='srt/configs/model_config.py", line 361', at_build=True,
    harness_gap="the test venv's transformers 5.6.0 (0.5.6.post1 pins 5.0.0rc0): rope_scaling without "
                "'factor' (configs/model_config.py:361)",
)

# 0.5.4, 0.5.4.post1: the NVFP4 MoE method refuses every GPU but SM100
# (ModelOptNvFp4FusedMoEMethod.__init__, modelopt_quant.py:906 ``is_sm100_supported()``: major
# 10), so an NVFP4 MoE model does not load on SM12x, piecewise or not, before any weight
# (0.5.4.post2 asks ``is_blackwell_supported()`` there).  Dense models meet 0.5.4.post3's
# missing weak_ref_tensor.cpp.
_MOE_SM100_ONLY = Outcome(error="Current platform does not support NVFP4 quantization",
                          where='layers/quantization/modelopt_quant.py", line 907', at_build=True)
_MOE_ON_SM100_ONLY = {"llama": _NO_WEAK_REF_CPP, "qwen3": _NO_WEAK_REF_CPP,
                      **dict.fromkeys(("qwen3-moe", "glm4-moe", *_DEEPSEEK), _MOE_SM100_ONLY)}

PRISTINE_RELEASES: dict[str, PristineRelease] = {
    # flashinfer 0.4.1 is an sdist only on PyPI: its tree is the wheel built from it
    # (fp4graph.wheels.trees).
    "0.5.4": PristineRelease(
        flashinfer="0.4.1", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_MOE_ON_SM100_ONLY,
    ),
    "0.5.4.post1": PristineRelease(
        flashinfer="0.4.1", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_MOE_ON_SM100_ONLY,
    ),
    "0.5.4.post2": PristineRelease(
        flashinfer="0.4.1", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_dense_and_downsized_moe(_NO_WEAK_REF_CPP, 1438),
    ),
    "0.5.4.post3": PristineRelease(
        flashinfer="0.5.0", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_dense_and_downsized_moe(_NO_WEAK_REF_CPP, 1463),
    ),
    "0.5.5": PristineRelease(
        flashinfer="0.5.0", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_dense_and_downsized_moe(_NO_WEAK_REF_CPP, 1490),
    ),
    "0.5.5.post1": PristineRelease(
        flashinfer="0.5.0", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_dense_and_downsized_moe(_NO_WEAK_REF_CPP, 1490),
    ),
    "0.5.5.post2": PristineRelease(
        flashinfer="0.5.0", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_dense_and_downsized_moe(_NO_WEAK_REF_CPP, 1490),
    ),
    # 0.5.5.post3 (flashinfer 0.5.2): ModelRunner.__init__ builds the piecewise runner;
    # Llama and Qwen3 meet the seed error (the fp4 linear calls fp4_quantize at
    # modelopt_quant.py:1109).
    "0.5.5.post3": PristineRelease(
        flashinfer="0.5.2", torch="2.8.0", transformers="4.57.1", default_prefill=_OPT_IN,
        piecewise_needs_cuda_graph="model_executor/model_runner.py:1520 (can_run_piecewise_cuda_graph)",
        families=_dense_and_downsized_moe(_SEED_JIT, 1534),
    ),
    # 0.5.6: flashinfer is the MHA default on SM12x; Llama and Qwen3 meet the seed error
    # (fp4_quantize imported raw at layers/quantization/modelopt_quant.py:65, called at :1201).
    "0.5.6": PristineRelease(
        flashinfer="0.5.3", torch="2.9.1", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_dense_and_downsized_moe(_SEED_JIT, 1637),
    ),
    "0.5.6.post1": PristineRelease(
        flashinfer="0.5.3", torch="2.9.1", transformers="5.0.0rc0", default_prefill=_OPT_IN,
        families={**dict.fromkeys(("llama", "qwen3", "qwen3-moe", "glm4-moe"), _trtllm_mha_refused(1441)),
                  **dict.fromkeys(_DEEPSEEK, _ROPE_FACTOR)},
    ),
    "0.5.6.post2": PristineRelease(
        flashinfer="0.5.3", torch="2.9.1", transformers="4.57.1", default_prefill=_OPT_IN,
        families={**dict.fromkeys(("llama", "qwen3", "qwen3-moe", "glm4-moe"), _trtllm_mha_refused(1471)),
                  **dict.fromkeys(_DEEPSEEK, _downsized_moe(1637))},
    ),
    # 0.5.7: flashinfer again the MHA default on SM12x (trtllm_mha only where
    # is_sm100_supported); Llama and Qwen3 meet the seed error (modelopt_quant.py:1215).
    "0.5.7": PristineRelease(
        flashinfer="0.5.3", torch="2.9.1", transformers="4.57.1", default_prefill=_OPT_IN,
        families=_dense_and_downsized_moe(_SEED_JIT, 1517),
    ),
    # 0.5.13 (0.5.13.post1 changed only the speculative v2 workers): every family traces.
    "0.5.13": PristineRelease(
        flashinfer="0.6.12", torch="2.11.0", transformers="5.8.1", default_prefill=_PIECEWISE_ON,
        families=_ALL_WORK,
    ),
    # PR #23351 upstream: NSA models in piecewise, the indexer's top-k a split op.
    "0.5.13.post1": PristineRelease(
        flashinfer="0.6.12", torch="2.11.0", transformers="5.8.1", default_prefill=_PIECEWISE_ON,
        families=_ALL_WORK,
    ),
    # The runner-backend refactor: PrefillCudaGraphRunner with a per-phase backend
    # (model_executor/cuda_graph_config.py); tc_piecewise is the prefill default, selected
    # here with --cuda-graph-backend-prefill tc_piecewise.
    "0.5.14": PristineRelease(
        flashinfer="0.6.12", torch="2.11.0", transformers="5.8.1",
        default_prefill="`tc_piecewise` (torch.compile, TcPiecewiseCudaGraphBackend), on by default",
        families=_ALL_WORK,
    ),
    # 0.5.15 ...: breakable (no torch.compile) is the prefill default; tc_piecewise is
    # selected with --cuda-graph-backend-prefill tc_piecewise, an explicit choice that the
    # release's auto-disable rules leave alone.
    "0.5.15": PristineRelease(
        flashinfer="0.6.12", torch="2.11.0", transformers="5.12.1",
        default_prefill=_BREAKABLE,
        families={**_ALL_WORK, **_mla_off("server_args.py:3352")},
    ),
    # 0.5.15.post1: the same pins, the same server_args.py.
    "0.5.15.post1": PristineRelease(
        flashinfer="0.6.12", torch="2.11.0", transformers="5.12.1",
        default_prefill=_BREAKABLE,
        families={**_ALL_WORK, **_mla_off("server_args.py:3352")},
    ),
    "0.5.16": PristineRelease(
        flashinfer="0.6.14", torch="2.11.0", transformers="5.12.1",
        default_prefill=_BREAKABLE,
        families={**_ALL_WORK, **_mla_off("server_args.py:3774")},
    ),
    # 0.5.17 keeps breakable for DSA models ("MLA attention (non-DSA)", server_args.py:4469).
    "0.5.17": PristineRelease(
        flashinfer="0.6.15.post1", torch="2.11.0", transformers="5.12.1",
        default_prefill=_BREAKABLE,
        families={**_ALL_WORK, **{name: o for name, o in _mla_off("server_args.py:4469").items()
                                  if name not in NSA_NAMES}, "glm5": _GLM5_0517},
    ),
    # 0.5.18 drops the MLA rule: breakable is the default for every family.  DeepSeek-V3.2's
    # trtllm MLA decode (FlashInfer 0.6.17 mla/_core.py:2267) imports the CuTe DSL: the
    # release's nvidia-cutlass-dsl pin is on the child's path (pinned_python.cute_dsl_path).
    "0.5.18": PristineRelease(
        flashinfer="0.6.17", torch="2.13.0", transformers="5.12.1",
        default_prefill=_BREAKABLE,
        families={**_ALL_WORK, "glm5": _GLM5_0518},
    ),
    # 0.5.19 (resolve_once, the runtime context): every family but GLM-5 traces (_GLM5_0519).
    "0.5.19": PristineRelease(
        flashinfer="0.6.18", torch="2.13.0", transformers="5.12.1",
        default_prefill=_BREAKABLE,
        families={**_ALL_WORK, "glm5": _GLM5_0519},
    ),
    "0.5.20": PristineRelease(
        flashinfer="0.6.18", torch="2.13.0", transformers="5.12.1",
        default_prefill=_BREAKABLE, families=_FROM_0520,
    ),
    "0.5.21": PristineRelease(
        flashinfer="0.6.18", torch="2.13.0", transformers="5.12.1",
        default_prefill=_BREAKABLE, families=_FROM_0521,
    ),
    "0.5.22": PristineRelease(
        flashinfer="0.7.1", torch="2.14.1", transformers="5.19.0",
        default_prefill="`breakable` (no torch.compile); `tc_piecewise` removed",
        families=dict.fromkeys(_FROM_0520, _REMOVED), no_piecewise=_NO_PIECEWISE,
    ),
    "0.5.23": PristineRelease(
        flashinfer="0.7.2", torch="2.14.1", transformers="5.19.0",
        default_prefill="`breakable` (no torch.compile); `tc_piecewise` removed",
        families=dict.fromkeys(_FROM_0520, _REMOVED), no_piecewise=_NO_PIECEWISE,
    ),
}


PRISTINE_OF_STACKS_TABLE = tables.Table("tests/harness/models/expected.py: PRISTINE_OF_STACKS", PRISTINE_OF_STACKS)
PRISTINE_TABLE = tables.Table("tests/harness/models/expected.py: PRISTINE_RELEASES", PRISTINE_RELEASES,
                              stacked=False)


def pristine_release(sglang: str) -> PristineRelease:
    """The measured row of ``sglang``; a release pinned without a stack has to have one."""
    try:
        return PRISTINE_TABLE.row(sglang)
    except tables.MissingRow as exc:
        raise tables.MissingRow(
            f"{exc}; sglang {sglang} is pinned in patches/stacks.toml without a stack: measure it "
            "(tests/models/test_releases.py, FP4GRAPH_MODELS=full) and add the row"
        ) from None


def describe(report: dict[str, Any]) -> str:
    """A failed report for an assertion message: its fields, then its error and traceback."""
    brief = {k: v for k, v in report.items() if k not in ("graphs", "traceback", "error_text")}
    return f"{brief}\n{report.get('error_text', '')[:2000]}\n{report.get('traceback', '')[-4000:]}"


def assert_release_outcome(sglang: str, family: str, gpu: str, cuda_graph: bool, report: dict[str, Any]) -> None:
    """``report`` (``family`` on pristine sglang ``sglang``, simulated ``gpu``, decode CUDA
    graphs on or off) does what the release's row says: tests/models/test_releases.py (its
    own FlashInfer) and test_flashinfer_only.py (ours, beside an nvcc 12.8)."""
    from harness.models import families

    release = pristine_release(sglang)
    outcome = release.families[family].on(gpu)
    text = report.get("error_text", "") + report.get("traceback", "")
    if release.no_piecewise:  # 0.5.22+: the selection is refused
        assert not report["ok"] and outcome.error in text and outcome.where in text, describe(report)
        return
    if outcome.at_build:  # 0.5.4 ... 0.5.6.post2: the server or the model is refused first
        assert report["stage"] == "build" and outcome.error in text and outcome.where in text, describe(report)
        return
    if release.piecewise_needs_cuda_graph and not cuda_graph:
        # 0.5.5.post3: --disable-cuda-graph turns piecewise off; the server starts without it.
        assert report["ok"] and report["piecewise_runner"] is None and not report["graphs"], describe(report)
        return
    assert report["stage"] != "build", describe(report)
    # The release's own decision, with the family's row as a user starts it (no enforce flag).
    assert report["piecewise_by_default"] is (not outcome.piecewise_off), describe(report)
    # 0.5.14+: the prefill backend ServerArgs resolves when the user names none is the row's.
    default = report["default_prefill_backend"]
    by_default = outcome.default_prefill or release.default_prefill
    assert default is None or by_default.startswith(f"`{default}`"), (default, by_default)
    if outcome.error:
        assert not report["ok"], describe(report)
        assert outcome.error in report.get("error_text", "") and outcome.where in text, describe(report)
        return
    assert report["ok"], describe(report)
    assert report["piecewise_runner"] and report["graph_breaks_piecewise"] == 0, describe(report)
    assert report["graphs"] and report["captures"] > 0, describe(report)
    for pieces in report["graphs"]:
        captured = [op for p in pieces if not p["split"] for op in p["ops"]]
        split = [op for p in pieces if p["split"] for op in p["ops"]]
        assert FP4_QUANTIZE in captured and FP4_GEMM in captured, pieces
        assert set(ATTENTION_OPS) & set(split), pieces
        assert not set(ATTENTION_OPS) & set(captured), pieces
        if families.ROWS[family]["kind"] == "moe":
            assert MOE in captured, pieces
