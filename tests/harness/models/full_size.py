"""The families at the sizes users serve: each model's published ``config.json``, as data.

The Hugging Face hub is not reachable while tests run, so the numbers are transcribed here
from the model cards' ``config.json`` (the source is named per row; re-check it when a
row is added).  Only the fields that shape the model are kept (tokenizer ids aside).

A full-size case keeps every dimension and cuts only the layer count, to the fewest layers
that still hold every layer kind of the model (a dense and a MoE layer where the model has
both: ``first_k_dense_replace`` 1), and runs one rank of tensor parallel 8 (the seed's
``--tp 8``): every per-rank shape is what rank 0 of an 8-GPU server holds.  The quantization
is the family's ModelOpt NVFP4 recipe (:mod:`fp4graph.model.families`: which modules
stay bf16), as the published NVFP4 checkpoints carry it.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from fp4graph.integration import checkpoint
from fp4graph.model.families import FAMILIES


@dataclasses.dataclass(frozen=True)
class Published:
    family: str  # the fp4graph family (its architecture and NVFP4 recipe)
    source: str  # where the numbers come from
    config: dict[str, Any]  # the published config.json fields that shape the model
    # The cut: config fields replaced for the simulation (every layer kind kept).
    cut: dict[str, Any]


GLM5 = Published(
    family="glm5",
    source="zai-org/GLM-5 config.json (transformers GlmMoeDsaConfig)",
    config={
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "vocab_size": 154880,
        "hidden_size": 6144,
        "intermediate_size": 12288,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 78,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "ep_size": 1,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "q_lora_rank": 2048,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "v_head_dim": 256,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "n_group": 1,
        "topk_group": 1,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "index_topk": 2048,
        "index_n_heads": 32,
        "index_head_dim": 128,
        "indexer_rope_interleave": True,
        "rope_interleave": True,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 202752,
        "num_nextn_predict_layers": 1,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
    },
    cut={"num_hidden_layers": 2, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0},
)

DEEPSEEK_V3 = Published(
    family="deepseek-v3",
    source="deepseek-ai/DeepSeek-V3 config.json",
    config={
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": 129280,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "first_k_dense_replace": 3,
        "moe_layer_freq": 1,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "n_group": 8,
        "topk_group": 4,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "norm_topk_prob": True,
        "ep_size": 1,
        "rope_theta": 10000,
        "rope_scaling": {
            "type": "yarn",
            "factor": 40,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "max_position_embeddings": 163840,
        "num_nextn_predict_layers": 1,
        "rms_norm_eps": 1e-06,
        "hidden_act": "silu",
        "attention_bias": False,
        "tie_word_embeddings": False,
    },
    cut={"num_hidden_layers": 2, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0},
)

QWEN3_MOE = Published(
    family="qwen3-moe",
    source="Qwen/Qwen3-235B-A22B config.json",
    config={
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "moe_intermediate_size": 1536,
        "num_hidden_layers": 94,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 40960,
        "max_window_layers": 94,
        "use_sliding_window": False,
        "sliding_window": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "rms_norm_eps": 1e-06,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    },
    cut={"num_hidden_layers": 1, "max_window_layers": 1},
)

LLAMA = Published(
    family="llama",
    source="meta-llama/Llama-3.1-70B config.json",
    config={
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
    },
    cut={"num_hidden_layers": 1},
)

PUBLISHED: dict[str, Published] = {p.family: p for p in (GLM5, DEEPSEEK_V3, QWEN3_MOE, LLAMA)}
# The seed's deployment: tensor parallel over 8 GPUs; one rank is simulated.
TP = 8


def config(name: str) -> dict[str, Any]:
    """The cut full-size ``config.json`` of family ``name``, with its ModelOpt NVFP4
    ``quantization_config`` (the family's recipe) and the byte tokenizer's ids."""
    published = PUBLISHED[name]
    family = FAMILIES[published.family]
    cfg = {**copy.deepcopy(published.config), **published.cut}
    cfg.update(torch_dtype="bfloat16", bos_token_id=0, eos_token_id=1)
    cfg["quantization_config"] = checkpoint.config_quantization_config(family.exclude_modules(cfg))
    return cfg


def row(name: str) -> dict[str, Any]:
    """A tests/harness/models/families.py row for the full-size family ``name``."""
    published = PUBLISHED[name]
    family = FAMILIES[published.family]
    expect: dict[str, Any] = {}
    if family.shared_experts:
        expect["num_fused_shared_experts"] = 1
    server_args: dict[str, Any] = {"enforce_piecewise_cuda_graph": True} if family.nsa else {}
    return {
        "name": f"{name}-full",
        "architecture": family.architecture,
        "kind": "moe" if family.moe else "dense",
        "config": config(name),
        "server_args": server_args,
        "expect": expect,
        "full_size": True,
    }


def per_rank(name: str, tp: int = TP) -> dict[str, int]:
    """What one rank of ``tp`` holds of the published model (the sharded dimensions)."""
    c = PUBLISHED[name].config
    out = {
        "attention_heads": c["num_attention_heads"] // tp,
        "vocab_shard": -(-c["vocab_size"] // tp),
    }
    if "intermediate_size" in c:
        out["dense_intermediate"] = c["intermediate_size"] // tp
    if "moe_intermediate_size" in c:
        out["moe_intermediate"] = c["moe_intermediate_size"] // tp
    if "num_key_value_heads" in c and "kv_lora_rank" not in c:
        out["kv_heads"] = max(1, c["num_key_value_heads"] // tp)
    return out
