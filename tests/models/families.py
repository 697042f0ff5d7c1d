"""The model families of the whole-model simulation: one data row each.

A row is the architecture sglang resolves, its ``kind`` ("dense" or "moe": MoE rows
also run with ``--moe-runner-backend flashinfer_cutlass``), a tiny Hugging Face
``config.json`` (the real model's shape, scaled down; ModelOpt NVFP4 quantization as
NVIDIA's NVFP4 checkpoints declare it), the server arguments that select the
variant (e.g. ``disable_shared_experts_fusion``) and ``expect``: attributes the
built model must have (proof the variant is the one meant).  Add a family by
adding a row.
"""

from __future__ import annotations

import copy
from typing import Any

# ModelOpt NVFP4 as `config.json` declares it (hf_quant_config.json's content, flat).
NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ["lm_head"]}
# MLA models: NVFP4 checkpoints keep attention in BF16 (sglang's MLA absorbs
# kv_b_proj into bf16 w_kc / w_vc and has no NVFP4 path for it).
NVFP4_MOE_ONLY_ATTENTION_BF16 = {**NVFP4, "ignore": ["lm_head", "model.layers.*.self_attn*"]}

_COMMON = {
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "quantization_config": NVFP4,
}


def _config(architecture: str, model_type: str, **fields: Any) -> dict[str, Any]:
    return copy.deepcopy({"architectures": [architecture], "model_type": model_type, **_COMMON, **fields})


# DeepSeek-V3's routing (256 experts in 8 groups, top 4 groups, top 8 experts, one
# shared expert: sglang fuses it into the routed experts only for exactly this).
_DEEPSEEK_V3 = dict(
    intermediate_size=512,
    moe_intermediate_size=128,
    n_routed_experts=256,
    n_shared_experts=1,
    num_experts_per_tok=8,
    n_group=8,
    topk_group=4,
    topk_method="noaux_tc",
    scoring_func="sigmoid",
    norm_topk_prob=True,
    routed_scaling_factor=2.5,
    first_k_dense_replace=1,
    moe_layer_freq=1,
    q_lora_rank=128,
    kv_lora_rank=128,
    qk_nope_head_dim=64,
    qk_rope_head_dim=64,
    v_head_dim=64,
    num_key_value_heads=4,
    rope_scaling=None,
    quantization_config=NVFP4_MOE_ONLY_ATTENTION_BF16,
)

ROWS: dict[str, dict[str, Any]] = {
    "llama": {
        "architecture": "LlamaForCausalLM",
        "kind": "dense",
        "config": _config("LlamaForCausalLM", "llama", intermediate_size=512, head_dim=64),
    },
    "qwen3": {
        "architecture": "Qwen3ForCausalLM",
        "kind": "dense",
        "config": _config("Qwen3ForCausalLM", "qwen3", intermediate_size=512, head_dim=64),
    },
    "qwen3-moe": {
        "architecture": "Qwen3MoeForCausalLM",
        "kind": "moe",
        "config": _config(
            "Qwen3MoeForCausalLM",
            "qwen3_moe",
            intermediate_size=512,
            moe_intermediate_size=256,
            head_dim=64,
            num_experts=8,
            num_experts_per_tok=2,
            decoder_sparse_step=1,
            norm_topk_prob=True,
            mlp_only_layers=[],
        ),
    },
    # The shared expert fused into the routed experts (sglang's default for this
    # routing): routing through sgl_kernel's moe_fused_gate.
    "deepseek-v3": {
        "architecture": "DeepseekV3ForCausalLM",
        "kind": "moe",
        "config": _config("DeepseekV3ForCausalLM", "deepseek_v3", **_DEEPSEEK_V3),
        "expect": {"num_fused_shared_experts": 1},
    },
    # --disable-shared-experts-fusion: routing through flashinfer's fused_topk_deepseek.
    "deepseek-v3-no-fusion": {
        "architecture": "DeepseekV3ForCausalLM",
        "kind": "moe",
        "config": _config("DeepseekV3ForCausalLM", "deepseek_v3", **_DEEPSEEK_V3),
        "server_args": {"disable_shared_experts_fusion": True},
        "expect": {"num_fused_shared_experts": 0},
    },
    "glm4-moe": {
        "architecture": "Glm4MoeForCausalLM",
        "kind": "moe",
        "config": _config(
            "Glm4MoeForCausalLM",
            "glm4_moe",
            intermediate_size=512,
            moe_intermediate_size=256,
            head_dim=64,
            partial_rotary_factor=0.5,
            n_routed_experts=8,
            n_shared_experts=1,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
            norm_topk_prob=True,
            routed_scaling_factor=2.5,
            first_k_dense_replace=1,
            use_qk_norm=True,
            attention_bias=True,
        ),
        "expect": {"num_fused_shared_experts": 1},
    },
}


def row(name: str) -> dict[str, Any]:
    """The family ``name`` as a JSON-able dict (``name`` included)."""
    return {"name": name, **copy.deepcopy(ROWS[name])}


def names(kind: str | None = None) -> list[str]:
    return [n for n, r in ROWS.items() if kind is None or r["kind"] == kind]
