"""The model families: HF configs and the tensors ModelOpt exports (the integration matrix,
the whole-model simulation, the import smoke of an install).

One :class:`Family` per architecture the whole-model simulation covers (issue 11) plus the
DSA (NSA) models of issue 14.  Each family gives the ``config.json`` of a tiny model (two
sizes: ``serve``, what ``nox -s integration`` runs on an SM120 card, with kernel-friendly
dimensions; ``test``, the same structure smaller, for the CPU load test) and, from that
config, the list of tensors a ModelOpt NVFP4 export of that model holds, named as the HF
checkpoint names them (the names sglang's ``load_weights`` maps):

- every ``nn.Linear`` not matched by the family's ``exclude_modules`` is NVFP4
  (``weight`` / ``weight_scale`` / ``weight_scale_2`` / ``input_scale``); excluded ones
  keep a bf16 ``weight``, as ModelOpt leaves modules whose quantizers it disabled;
- MoE experts are per expert, ``mlp.experts.<e>.{gate,up,down}_proj`` (ModelOpt's export of
  HF MoE blocks), shared experts ``mlp.shared_experts.*``, routers bf16
  (``mlp.gate.weight``; DeepSeek-style ``e_score_correction_bias`` float32);
- linears sglang fuses into one parameter (q/k/v, gate/up, per expert too) share one
  per-tensor scale: ModelOpt unifies the amax of layers that share an input.

Which modules ModelOpt leaves unquantized follows the published checkpoints of each family:
dense and Qwen3-MoE models quantize every linear but the routers and ``lm_head``;
DeepSeek-style models (DeepSeek-V3/R1 FP4, GLM-5-NVFP4) keep attention (MLA, and the DSA
indexer) in bf16 and quantize the MLPs and experts.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
from collections.abc import Iterator, Mapping
from typing import Any

# Activation amax the input scales are made for (RMSNorm output of a random model).
ACTIVATION_AMAX = 8.0
# The transformers a family gets when the stack's sglang pins one older than the family's
# ``min_transformers`` (sglang 0.5.9 pins 4.57.1, which has no glm_moe_dsa): the version the
# CPU load test parses and loads every family with, on every release
# (tests/integration/requirements.txt).
NEWER_TRANSFORMERS = "transformers==5.6.0"


class Size(enum.Enum):
    SERVE = "serve"  # nox -s integration on an SM120 card
    TEST = "test"  # the CPU load test: same structure, smaller


class Role(enum.Enum):
    LINEAR = "linear"  # NVFP4 unless excluded; [out, in]
    BIAS = "bias"  # bf16 [out]
    NORM = "norm"  # bf16 ones
    NORM_BIAS = "norm_bias"  # bf16 zeros (LayerNorm bias)
    EMBEDDING = "embedding"  # bf16 [vocab, hidden]
    LM_HEAD = "lm_head"  # bf16 [vocab, hidden], excluded from quantization
    ROUTER = "router"  # bf16 [experts, hidden]
    ROUTER_BIAS = "router_bias"  # float32 [experts] (e_score_correction_bias)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Tensor:
    """One tensor (for LINEAR: one module) of the bf16 model before export."""

    name: str  # module name for LINEAR, tensor name otherwise
    role: Role
    shape: tuple[int, ...]
    fused: str | None = None  # LINEARs with the same key share weight_scale_2 / input_scale


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True, eq=False)
class Family:
    """One architecture: its tiny config per size and what ModelOpt exports for it.

    Families are singletons (:data:`FAMILIES`): they compare and hash by identity."""

    name: str  # the --family value
    architecture: str  # config.json architectures[0]
    model_type: str
    description: str
    base: Mapping[str, Any]  # config.json keys common to both sizes
    sizes: Mapping[Size, Mapping[str, Any]]
    moe: bool = False
    shared_experts: bool = False  # sglang's shared-experts fusion applies
    nsa: bool = False  # DSA / NSA sparse attention (index_topk & co.)
    attention_excluded: bool = False  # ModelOpt recipe leaves attention bf16
    # The first transformers release whose AutoConfig knows model_type (None: all we run).
    min_transformers: str | None = None
    # The first sglang release with a model class for ``architecture`` (None: all we pin).
    min_sglang: str | None = None

    def needs_newer_transformers(self, installed: str) -> bool:
        """Whether ``installed`` (a transformers version) predates this family's model type."""
        # Imported here: the checkpoint writer (this module, in the sglang venv) needs none.
        from packaging.version import Version

        return self.min_transformers is not None and Version(installed) < Version(self.min_transformers)

    def in_sglang(self, version: str) -> bool:
        """Whether sglang ``version`` has a model class for this family's architecture."""
        from packaging.version import Version

        return self.min_sglang is None or Version(version) >= Version(self.min_sglang)

    def shards_at(self, tp: int, size: Size = Size.SERVE) -> bool:
        """Whether this size of the model splits over ``tp`` ranks as sglang's tensor
        parallel layers need: whole attention heads per rank and, for MoE, each rank's
        gated experts with a multiple of :data:`MOE_ROWS_ALIGNMENT` rows."""
        c = self.config(size)
        if tp < 1 or c["num_attention_heads"] % tp:
            return False
        if not self.moe:
            return True
        inter: int = c["moe_intermediate_size"]
        return inter % tp == 0 and (2 * inter // tp) % MOE_ROWS_ALIGNMENT == 0

    def max_tp(self, size: Size = Size.SERVE, limit: int = 8) -> int:
        """The largest tensor-parallel size up to ``limit`` the checkpoint of ``size`` shards at."""
        return max(tp for tp in range(1, limit + 1) if self.shards_at(tp, size))

    def config(self, size: Size = Size.SERVE) -> dict[str, Any]:
        cfg: dict[str, Any] = {"architectures": [self.architecture], "model_type": self.model_type}
        cfg.update(COMMON)
        cfg.update(self.base)
        cfg.update(self.sizes[size])
        return cfg

    def exclude_modules(self, config: Mapping[str, Any]) -> list[str]:
        """``exclude_modules`` / ``ignore`` as ModelOpt writes them for this model."""
        excluded = ["lm_head"]
        layers = range(config["num_hidden_layers"])
        if self.attention_excluded:
            excluded += [f"model.layers.{i}.self_attn*" for i in layers]
        if self.model_type == "qwen3_moe":  # the HF router is an nn.Linear, its quantizer off
            excluded += [f"model.layers.{i}.mlp.gate" for i in layers]
        return excluded

    def tensors(self, config: Mapping[str, Any]) -> list[Tensor]:
        return list(_tensors(self, config))

    def is_excluded(self, module: str, config: Mapping[str, Any]) -> bool:
        return any(fnmatch.fnmatchcase(module, p) for p in self.exclude_modules(config))


# sglang's NVFP4 MoE (modelopt_quant.py, ModelOptNvFp4FusedMoEMethod, CUTLASS path) pads a
# rank's swizzled w13 block scales to 128 rows and refuses to pad gated experts: the rank's
# 2 x moe_intermediate_size / tp rows must be a multiple of 128 already (the published
# NVFP4 models meet it at --tp 8: GLM-5, DeepSeek-V3 2 x 2048 / 8 = 512).
MOE_ROWS_ALIGNMENT = 128

# Tokenizer-dependent keys (the byte-level tokenizer of checkpoint.py) and common defaults.
COMMON: dict[str, Any] = {
    "vocab_size": 320,  # 256 bytes + BOS/EOS, padded
    "bos_token_id": 256,
    "eos_token_id": 257,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
}


def _linear(name: str, out_f: int, in_f: int, fused: str | None = None) -> Tensor:
    return Tensor(name=name, role=Role.LINEAR, shape=(out_f, in_f), fused=fused)


def _gqa(p: str, c: Mapping[str, Any]) -> Iterator[Tensor]:
    h, d = c["hidden_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    for proj, out_f in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
        yield _linear(f"{p}.self_attn.{proj}", out_f, h, fused=f"{p}.self_attn.qkv")
        if c.get("attention_bias"):
            yield Tensor(name=f"{p}.self_attn.{proj}.bias", role=Role.BIAS, shape=(out_f,))
    yield _linear(f"{p}.self_attn.o_proj", h, q)
    if c["model_type"] in ("qwen3", "qwen3_moe") or c.get("use_qk_norm"):
        for norm in ("q_norm", "k_norm"):
            yield Tensor(name=f"{p}.self_attn.{norm}.weight", role=Role.NORM, shape=(d,))


def _mla(p: str, c: Mapping[str, Any], *, indexer: bool) -> Iterator[Tensor]:
    h, heads = c["hidden_size"], c["num_attention_heads"]
    qr, kvr = c["q_lora_rank"], c["kv_lora_rank"]
    nope, rope, v = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    a = f"{p}.self_attn"
    # sglang fuses q_a_proj and kv_a_proj_with_mqa (fused_qkv_a_proj_with_mqa).
    yield _linear(f"{a}.q_a_proj", qr, h, fused=f"{a}.qkv_a")
    yield Tensor(name=f"{a}.q_a_layernorm.weight", role=Role.NORM, shape=(qr,))
    yield _linear(f"{a}.q_b_proj", heads * (nope + rope), qr)
    yield _linear(f"{a}.kv_a_proj_with_mqa", kvr + rope, h, fused=f"{a}.qkv_a")
    yield Tensor(name=f"{a}.kv_a_layernorm.weight", role=Role.NORM, shape=(kvr,))
    yield _linear(f"{a}.kv_b_proj", heads * (nope + v), kvr)
    yield _linear(f"{a}.o_proj", h, heads * v)
    if indexer:
        ih, idim = c["index_n_heads"], c["index_head_dim"]
        yield _linear(f"{a}.indexer.wq_b", ih * idim, qr)
        yield _linear(f"{a}.indexer.wk", idim, h)
        yield Tensor(name=f"{a}.indexer.k_norm.weight", role=Role.NORM, shape=(idim,))
        yield Tensor(name=f"{a}.indexer.k_norm.bias", role=Role.NORM_BIAS, shape=(idim,))
        yield _linear(f"{a}.indexer.weights_proj", ih, h)


def _mlp(p: str, hidden: int, inter: int) -> Iterator[Tensor]:
    yield _linear(f"{p}.gate_proj", inter, hidden, fused=f"{p}.gate_up")
    yield _linear(f"{p}.up_proj", inter, hidden, fused=f"{p}.gate_up")
    yield _linear(f"{p}.down_proj", hidden, inter)


def _is_moe_layer(family: Family, c: Mapping[str, Any], layer: int) -> bool:
    if not family.moe:
        return False
    if family.model_type == "qwen3_moe":
        step: int = c["decoder_sparse_step"]
        return layer not in c.get("mlp_only_layers", []) and (layer + 1) % step == 0
    first: int = c["first_k_dense_replace"]
    freq: int = c.get("moe_layer_freq", 1)
    return layer >= first and layer % freq == 0


def _tensors(family: Family, c: Mapping[str, Any]) -> Iterator[Tensor]:
    h, vocab = c["hidden_size"], c["vocab_size"]
    yield Tensor(name="model.embed_tokens.weight", role=Role.EMBEDDING, shape=(vocab, h))
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        yield Tensor(name=f"{p}.input_layernorm.weight", role=Role.NORM, shape=(h,))
        yield Tensor(name=f"{p}.post_attention_layernorm.weight", role=Role.NORM, shape=(h,))
        if "kv_lora_rank" in c:
            yield from _mla(p, c, indexer=family.nsa)
        else:
            yield from _gqa(p, c)
        if not _is_moe_layer(family, c, layer):
            yield from _mlp(f"{p}.mlp", h, c["intermediate_size"])
            continue
        experts = c["num_experts"] if family.model_type == "qwen3_moe" else c["n_routed_experts"]
        yield Tensor(name=f"{p}.mlp.gate.weight", role=Role.ROUTER, shape=(experts, h))
        if c.get("topk_method") == "noaux_tc" or family.model_type == "glm4_moe":
            yield Tensor(name=f"{p}.mlp.gate.e_score_correction_bias", role=Role.ROUTER_BIAS, shape=(experts,))
        for e in range(experts):
            yield from _mlp(f"{p}.mlp.experts.{e}", h, c["moe_intermediate_size"])
        if c.get("n_shared_experts"):
            yield from _mlp(f"{p}.mlp.shared_experts", h, c["moe_intermediate_size"] * c["n_shared_experts"])
    yield Tensor(name="model.norm.weight", role=Role.NORM, shape=(h,))
    yield Tensor(name="lm_head.weight", role=Role.LM_HEAD, shape=(vocab, h))


# --- the families --------------------------------------------------------------------------

_LLAMA_LIKE = {
    "rms_norm_eps": 1e-5,
    "rope_scaling": None,
    "attention_bias": False,
    "mlp_bias": False,
}
# Every quantized K and N a multiple of 128 (and K/16 of 4): sglang's NVFP4 weight padding
# and scale swizzling have nothing to pad, and the SM120 MoE kernels take the shapes.
_GQA_SERVE = {
    "hidden_size": 1024,
    "intermediate_size": 2048,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 128,
}
_GQA_TEST = {
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
}

LLAMA = Family(
    name="llama",
    architecture="LlamaForCausalLM",
    model_type="llama",
    description="dense GQA",
    base={**_LLAMA_LIKE, "rope_theta": 500000.0},
    sizes={Size.SERVE: _GQA_SERVE, Size.TEST: _GQA_TEST},
)

QWEN3 = Family(
    name="qwen3",
    architecture="Qwen3ForCausalLM",
    model_type="qwen3",
    description="dense GQA with QK-norm",
    base={
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 2,
    },
    sizes={Size.SERVE: _GQA_SERVE, Size.TEST: _GQA_TEST},
)

QWEN3_MOE = Family(
    name="qwen3-moe",
    architecture="Qwen3MoeForCausalLM",
    model_type="qwen3_moe",
    description="MoE (softmax top-k) with QK-norm",
    moe=True,
    base={
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "num_experts_per_tok": 8,
    },
    sizes={
        Size.SERVE: {**_GQA_SERVE, "num_experts": 128, "moe_intermediate_size": 256},
        Size.TEST: {**_GQA_TEST, "num_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 128},
    },
)

# DeepSeek-V3: MLA with the kernel geometry of the real model (kv_lora_rank 512, rope 64),
# 256 routed experts + 1 shared (sglang fuses the shared expert only for exactly that),
# grouped routing (8 groups, top-4 groups, top-8 experts, sigmoid, noaux_tc).
_DEEPSEEK_ROUTING = {
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "num_nextn_predict_layers": 0,
    "attention_bias": False,
    "rms_norm_eps": 1e-6,
}
_MLA_SERVE = {"hidden_size": 1024, "intermediate_size": 2048, "moe_intermediate_size": 256, "num_hidden_layers": 2}
_MLA_TEST = {"hidden_size": 128, "intermediate_size": 256, "moe_intermediate_size": 64, "num_hidden_layers": 2}

DEEPSEEK_V3 = Family(
    name="deepseek-v3",
    architecture="DeepseekV3ForCausalLM",
    model_type="deepseek_v3",
    description="MLA, grouped routing, shared expert",
    moe=True,
    shared_experts=True,
    attention_excluded=True,
    base={
        **_DEEPSEEK_ROUTING,
        "n_group": 8,
        "topk_group": 4,
        "q_lora_rank": 512,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "ep_size": 1,
    },
    sizes={
        Size.SERVE: {**_MLA_SERVE, "num_attention_heads": 16, "num_key_value_heads": 16},
        Size.TEST: {**_MLA_TEST, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 128},
    },
)

GLM4_MOE = Family(
    name="glm4-moe",
    architecture="Glm4MoeForCausalLM",
    model_type="glm4_moe",
    description="GQA with qkv bias and QK-norm, partial RoPE, sigmoid routing, shared expert",
    moe=True,
    shared_experts=True,
    base={
        "attention_bias": True,
        "use_qk_norm": True,
        "partial_rotary_factor": 0.5,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "rms_norm_eps": 1e-5,
        "n_group": 1,
        "topk_group": 1,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "routed_scaling_factor": 2.5,
        "norm_topk_prob": True,
        "first_k_dense_replace": 1,
        "num_nextn_predict_layers": 0,
    },
    sizes={
        Size.SERVE: {**_GQA_SERVE, "num_key_value_heads": 2, "n_routed_experts": 64, "moe_intermediate_size": 256},
        Size.TEST: {**_GQA_TEST, "n_routed_experts": 16, "num_experts_per_tok": 4, "moe_intermediate_size": 128},
    },
)

# GLM-5 (GlmMoeDsaForCausalLM): DeepSeek-V3.2's layout with GLM-5's attention geometry
# (64 heads, qk_nope 192, v 256), the DSA indexer fields sglang reads (index_topk,
# index_head_dim, index_n_heads, indexer_rope_interleave), 256 + 1 experts, n_group 1.
GLM5 = Family(
    name="glm5",
    architecture="GlmMoeDsaForCausalLM",
    model_type="glm_moe_dsa",
    description="GLM-5 shape: MLA + DSA indexer, 256+1 experts (the seed's model family)",
    moe=True,
    shared_experts=True,
    nsa=True,
    attention_excluded=True,
    min_transformers="5.2.0",
    min_sglang="0.5.9",  # GlmMoeDsaForCausalLM (models/glm4_moe.py) is new in 0.5.9
    base={
        **_DEEPSEEK_ROUTING,
        "n_group": 1,
        "topk_group": 1,
        "q_lora_rank": 512,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 192,
        "qk_rope_head_dim": 64,
        "v_head_dim": 256,
        "index_topk": 2048,
        "index_head_dim": 128,
        "index_n_heads": 32,
        "indexer_rope_interleave": True,
        "rope_interleave": True,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-5,
        "attention_dropout": 0.0,
    },
    sizes={
        # moe_intermediate_size 1024: the seed's --tp 8 gives each rank 128 of it (2 x 128
        # rows of w13), as the published GLM-5's rank gets 256.
        Size.SERVE: {**_MLA_SERVE, "num_attention_heads": 64, "num_key_value_heads": 64,
                     "moe_intermediate_size": 1024},
        # 8 heads: a --tp 8 rank's share of the real model's 64, and the fewest FlashInfer
        # 0.6.18's SM120 sparse MLA has decode kernels for (mla/_sparse_mla_sm120.py
        # _DECODE_DSV3_2_DISPATCH: 8 ... 128 heads).
        Size.TEST: {**_MLA_TEST, "num_attention_heads": 8, "num_key_value_heads": 8, "q_lora_rank": 128,
                    "index_n_heads": 4},
    },
)

# DeepSeek-V3.2: transformers has no deepseek_v32 config class; sglang loads it as
# deepseek_v3 (hf_transformers_utils._load_deepseek_v32_model), as it does the real model.
DEEPSEEK_V32 = Family(
    name="deepseek-v3.2",
    architecture="DeepseekV32ForCausalLM",
    model_type="deepseek_v32",
    description="DeepSeek-V3.2 shape: MLA + DSA indexer, grouped routing",
    moe=True,
    shared_experts=True,
    nsa=True,
    attention_excluded=True,
    base={
        **DEEPSEEK_V3.base,
        "index_topk": 2048,
        "index_head_dim": 128,
        "index_n_heads": 64,
    },
    sizes={
        Size.SERVE: {**_MLA_SERVE, "num_attention_heads": 16, "num_key_value_heads": 16},
        Size.TEST: {**_MLA_TEST, "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 128,
                    "index_n_heads": 4},
    },
)

FAMILIES: dict[str, Family] = {
    f.name: f for f in (LLAMA, QWEN3, QWEN3_MOE, DEEPSEEK_V3, GLM4_MOE, GLM5, DEEPSEEK_V32)
}


def architectures(sglang_version: str) -> list[str]:
    """The model classes of the families ``sglang_version`` has (an install's import smoke)."""
    return [f.architecture for f in FAMILIES.values() if f.in_sglang(sglang_version)]


def by_architecture(architecture: str) -> Family | None:
    return next((f for f in FAMILIES.values() if f.architecture == architecture), None)
