"""What a whole-model report must show, shared by the tests of tests/models: the ops
sglang's piecewise graphs hold (captured or split), the replay's batch size and the NSA
half of a patched DSA (GLM-5 / DeepSeek-V3.2) report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.models.simulation import SglangStack

FP4_QUANTIZE = "sglang.flashinfer_fp4_quantize"
FP4_GEMM = "sglang.fp4_gemm"
ATTENTION = "sglang.unified_attention_with_output"
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
# trtllm / trtllm (README: none of them has SM120 kernels in the pinned wheels).
NSA_BACKENDS_ON_SM120 = {
    "0.5.9": ("flashmla_auto", "flashmla_kv"),
    "0.5.10.post1": ("trtllm", "trtllm"),
    "0.5.11": ("trtllm", "trtllm"),
}


def assert_nsa(stack: SglangStack, report: dict[str, Any]) -> None:
    """The NSA half of a patched GLM-5 / DeepSeek-V3.2 report."""
    nsa = report["nsa"]
    assert nsa["backend"] == "NativeSparseAttnBackend" and nsa["kv_pool"] == "NSATokenToKVPool", nsa
    assert nsa["kv_cache_dtype"] == "fp8_e4m3" and nsa["page_size"] == 64, nsa
    if stack.sglang in NSA_BACKENDS_ON_SM120:
        assert (nsa["prefill"], nsa["decode"]) == NSA_BACKENDS_ON_SM120[stack.sglang], nsa
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
