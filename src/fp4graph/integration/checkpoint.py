"""A tiny Llama with random weights, saved as ModelOpt writes an NVFP4 checkpoint.

What sglang's ``modelopt_fp4`` loader reads (``ModelOptFp4Config`` /
``ModelOptFp4LinearMethod``, sglang 0.5.9 ... 0.5.11), per quantized linear ``<p>``:

- ``<p>.weight``          uint8 [out, in/2]: two e2m1 codes per byte, even element low nibble;
- ``<p>.weight_scale``    float8_e4m3fn [out, in/16]: per-16-element block scales;
- ``<p>.weight_scale_2``  float32 []: per-tensor scale, amax(W) / (6 * 448);
- ``<p>.input_scale``     float32 []: per-tensor activation scale, amax(x) / (6 * 448);

so that W ~= e2m1 * weight_scale * weight_scale_2.  ``lm_head`` stays bf16 and is listed in
``exclude_modules`` / ``ignore``, as ModelOpt exports it.  ``hf_quant_config.json`` has
ModelOpt's nested form; ``config.json`` carries the same in its flat ``quantization_config``
form (``convert_hf_quant_config_format``).  The tokenizer is byte-level (no merges), built
with the ``tokenizers`` library, so nothing is downloaded.

Run as ``python -m fp4graph.integration.checkpoint OUT_DIR`` in a venv with torch,
safetensors and tokenizers (the sglang venv has all three).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

GROUP_SIZE = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
MODELOPT_VERSION = "0.37.0"  # the producer version written in the configs
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TinyLlama:
    """Shapes: every quantized K and N is a multiple of 32 and K/16 of 4 at tp <= 8, so
    sglang's weight padding and scale swizzling have nothing to pad."""

    num_layers: int = 2
    hidden_size: int = 1024
    intermediate_size: int = 2048
    num_heads: int = 8
    num_kv_heads: int = 8
    head_dim: int = 128
    vocab_size: int = 320  # 256 bytes + 2 specials, padded
    max_position_embeddings: int = 4096
    rope_theta: float = 500000.0
    seed: int = 0
    # Activation amax the input scales are made for (RMSNorm output of a random model).
    activation_amax: float = 8.0

    def linears(self) -> dict[str, tuple[int, int]]:
        """Quantized linears of one layer: name -> (out_features, in_features)."""
        q = self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        h, i = self.hidden_size, self.intermediate_size
        return {
            "self_attn.q_proj": (q, h),
            "self_attn.k_proj": (kv, h),
            "self_attn.v_proj": (kv, h),
            "self_attn.o_proj": (h, q),
            "mlp.gate_proj": (i, h),
            "mlp.up_proj": (i, h),
            "mlp.down_proj": (h, i),
        }


def hf_quant_config() -> dict[str, Any]:
    """``hf_quant_config.json`` as ModelOpt's export writes it for NVFP4."""
    return {
        "producer": {"name": "modelopt", "version": MODELOPT_VERSION},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": GROUP_SIZE,
            "exclude_modules": ["lm_head"],
        },
    }


def config_quantization_config() -> dict[str, Any]:
    """``config.json``'s ``quantization_config`` (ModelOpt's convert_hf_quant_config_format)."""
    scheme = {"dynamic": False, "num_bits": 4, "type": "float", "group_size": GROUP_SIZE}
    return {
        "config_groups": {
            "group_0": {
                "input_activations": dict(scheme),
                "weights": dict(scheme),
                "targets": ["Linear"],
            }
        },
        "ignore": ["lm_head"],
        "quant_algo": "NVFP4",
        "producer": {"name": "modelopt", "version": MODELOPT_VERSION},
        "quant_method": "modelopt",
    }


def model_config(spec: TinyLlama) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_layers,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": spec.vocab_size,
        "bos_token_id": 256,
        "eos_token_id": 257,
        "torch_dtype": "bfloat16",
        "quantization_config": config_quantization_config(),
    }


# Linears sglang fuses (QKVParallelLinear, MergedColumnParallelLinear) keep one
# weight_scale_2 (the max over shards): ModelOpt exports them with a shared amax.
FUSED_GROUPS = (
    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    ("mlp.gate_proj", "mlp.up_proj"),
)


def quantize_nvfp4(weight: Any, amax: Any = None) -> dict[str, Any]:
    """ModelOpt's NVFP4 export of one [out, in] weight: weight, weight_scale, weight_scale_2.

    ``amax`` is the per-tensor amax (shared by the shards of a fused linear); default the
    weight's own."""
    import torch

    from ..verify import nvfp4

    w = weight.float()
    amax = (w.abs().max() if amax is None else torch.as_tensor(amax).float()).clamp(min=1e-12)
    weight_scale_2 = (amax / (E2M1_MAX * E4M3_MAX)).to(torch.float32)
    # FlashInfer's global scale is 1 / weight_scale_2; nvfp4 then computes the e4m3 block
    # scale e4m3(amax16 / (6 * weight_scale_2)) and codes x / (scale * weight_scale_2).
    codes, sf_bits = nvfp4.quantize_rowmajor(w, 1.0 / weight_scale_2, GROUP_SIZE)
    return {
        "weight": nvfp4.pack_e2m1(codes),
        "weight_scale": sf_bits.view(torch.float8_e4m3fn),
        "weight_scale_2": weight_scale_2.reshape(()),
    }


def dequantize_nvfp4(tensors: dict[str, Any]) -> Any:
    """Inverse of :func:`quantize_nvfp4` (float32), for checks."""
    from ..verify import nvfp4

    codes = nvfp4.unpack_e2m1(tensors["weight"])
    values = nvfp4.e2m1_decode(codes)
    scale = tensors["weight_scale"].float().repeat_interleave(GROUP_SIZE, dim=-1)
    return values * scale * tensors["weight_scale_2"].float()


def state_dict(spec: TinyLlama) -> dict[str, Any]:
    """All tensors, named as a HF Llama checkpoint exported by ModelOpt names them."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed)

    def randn(*shape: int, std: float) -> Any:
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    tensors: dict[str, Any] = {}
    h = spec.hidden_size
    tensors["model.embed_tokens.weight"] = randn(spec.vocab_size, h, std=1.0).to(torch.bfloat16)
    input_scale = torch.tensor(spec.activation_amax / (E2M1_MAX * E4M3_MAX), dtype=torch.float32)
    for layer in range(spec.num_layers):
        prefix = f"model.layers.{layer}"
        tensors[f"{prefix}.input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        weights = {
            name: randn(out_f, in_f, std=in_f**-0.5)
            for name, (out_f, in_f) in spec.linears().items()
        }
        amax = {name: w.abs().max() for name, w in weights.items()}
        for group in FUSED_GROUPS:
            shared = max(amax[name] for name in group)
            amax.update({name: shared for name in group})
        for name, weight in weights.items():
            quantized = quantize_nvfp4(weight, amax[name])
            for suffix, tensor in quantized.items():
                tensors[f"{prefix}.{name}.{suffix}"] = tensor
            tensors[f"{prefix}.{name}.input_scale"] = input_scale.clone()
    tensors["model.norm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    # Large logits: a wide top-1 margin keeps greedy decoding stable across kernels.
    tensors["lm_head.weight"] = randn(spec.vocab_size, h, std=8 * h**-0.5).to(torch.bfloat16)
    return tensors


def write_tokenizer(out: pathlib.Path, spec: TinyLlama) -> None:
    """A byte-level BPE without merges: 256 byte tokens + BOS/EOS; no download."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
    )

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab[BOS], vocab[EOS] = 256, 257
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 256)]
    )
    tok.add_special_tokens([BOS, EOS])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": BOS,
                "eos_token": EOS,
                "model_max_length": spec.max_position_embeddings,
                "clean_up_tokenization_spaces": False,
                "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
            },
            indent=2,
        )
        + "\n"
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS}, indent=2) + "\n"
    )


def write_checkpoint(out: pathlib.Path, spec: TinyLlama = TinyLlama()) -> pathlib.Path:
    """Write the checkpoint into ``out`` (created); return ``out``."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    tensors = state_dict(spec)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(model_config(spec), indent=2) + "\n")
    (out / "hf_quant_config.json").write_text(json.dumps(hf_quant_config(), indent=4) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 256, "eos_token_id": 257, "do_sample": False}, indent=2) + "\n"
    )
    write_tokenizer(out, spec)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a tiny ModelOpt NVFP4 Llama checkpoint")
    parser.add_argument("out", type=pathlib.Path)
    defaults = TinyLlama()
    parser.add_argument("--layers", type=int, default=defaults.num_layers)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    path = write_checkpoint(args.out, TinyLlama(num_layers=args.layers, seed=args.seed))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
