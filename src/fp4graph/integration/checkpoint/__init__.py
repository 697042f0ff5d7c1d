"""Tiny models with random weights, saved as ModelOpt writes an NVFP4 checkpoint.

What sglang's ``modelopt_fp4`` loader reads (``ModelOptFp4Config``,
``ModelOptFp4LinearMethod``, ``ModelOptNvFp4FusedMoEMethod``; sglang 0.5.9 ... 0.5.11), per
quantized linear ``<p>`` (an expert's ``gate_proj`` / ``up_proj`` / ``down_proj`` alike):

- ``<p>.weight``          uint8 [out, in/2]: two e2m1 codes per byte, even element low nibble;
- ``<p>.weight_scale``    float8_e4m3fn [out, in/16]: per-16-element block scales;
- ``<p>.weight_scale_2``  float32 []: per-tensor scale, amax(W) / (6 * 448);
- ``<p>.input_scale``     float32 []: per-tensor activation scale, amax(x) / (6 * 448);

so that W ~= e2m1 * weight_scale * weight_scale_2.  Modules the family's ModelOpt recipe
leaves unquantized (``lm_head``, routers, attention of DeepSeek-style models) keep a bf16
``weight`` and are listed in ``exclude_modules`` / ``ignore``.  ``hf_quant_config.json`` has
ModelOpt's nested form; ``config.json`` carries the same in its flat ``quantization_config``
form (``convert_hf_quant_config_format``).  The tokenizer is byte-level (no merges), built
with the ``tokenizers`` library, so nothing is downloaded.  The families and their tensors:
:mod:`fp4graph.model.families`.

Run as ``python -m fp4graph.integration.checkpoint OUT_DIR --family NAME`` (:mod:`.__main__`)
in a venv with torch, safetensors and tokenizers (the sglang venv has all three).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from ...model.families import ACTIVATION_AMAX, Family, Role, Size

GROUP_SIZE = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
MODELOPT_VERSION = "0.37.0"  # the producer version written in the configs
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
WEIGHTS_FILE = "model.safetensors"


def hf_quant_config(exclude_modules: Sequence[str]) -> dict[str, Any]:
    """``hf_quant_config.json`` as ModelOpt's export writes it for NVFP4."""
    return {
        "producer": {"name": "modelopt", "version": MODELOPT_VERSION},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": None,
            "group_size": GROUP_SIZE,
            "exclude_modules": list(exclude_modules),
        },
    }


def config_quantization_config(exclude_modules: Sequence[str]) -> dict[str, Any]:
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
        "ignore": list(exclude_modules),
        "quant_algo": "NVFP4",
        "producer": {"name": "modelopt", "version": MODELOPT_VERSION},
        "quant_method": "modelopt",
    }


def model_config(family: Family, size: Size = Size.SERVE) -> dict[str, Any]:
    """``config.json``: the family's tiny config plus its quantization_config."""
    config = family.config(size)
    config["quantization_config"] = config_quantization_config(family.exclude_modules(config))
    return config


def quantize_nvfp4(weight: Any, amax: Any = None) -> dict[str, Any]:
    """ModelOpt's NVFP4 export of one [out, in] weight: weight, weight_scale, weight_scale_2.

    ``amax`` is the per-tensor amax (shared by the shards of a fused linear); default the
    weight's own."""
    import torch

    w = weight.float()
    amax = w.abs().max() if amax is None else torch.as_tensor(amax).float()
    batched = quantize_nvfp4_batched(w.unsqueeze(0), amax.reshape(1))
    return {name: tensor[0] for name, tensor in batched.items()}


def quantize_nvfp4_batched(weights: Any, amax: Any) -> dict[str, Any]:
    """:func:`quantize_nvfp4` of ``weights`` [n, out, in] with per-tensor ``amax`` [n], in one
    call of the NVFP4 reference (verify.nvfp4) instead of n."""
    import torch

    from ...verify import nvfp4

    w = weights.float()
    weight_scale_2 = (amax.float().clamp(min=1e-12) / (E2M1_MAX * E4M3_MAX)).to(torch.float32)
    # FlashInfer's global scale is 1 / weight_scale_2: the e4m3 block scale is
    # e4m3(amax16 / (6 * weight_scale_2)) and the codes are x / (scale * weight_scale_2).
    # nvfp4 takes one global scale, so each tensor is divided by its weight_scale_2 first
    # and quantized with global scale 1 (the same scales and codes).
    codes, sf_bits = nvfp4.quantize_rowmajor(w / weight_scale_2.view(-1, 1, 1), 1.0, GROUP_SIZE)
    return {
        "weight": nvfp4.pack_e2m1(codes),
        "weight_scale": sf_bits.view(torch.float8_e4m3fn),
        "weight_scale_2": weight_scale_2,
    }


def dequantize_nvfp4(tensors: Mapping[str, Any]) -> Any:
    """Inverse of :func:`quantize_nvfp4` (float32), for checks."""
    from ...verify import nvfp4

    codes = nvfp4.unpack_e2m1(tensors["weight"])
    values = nvfp4.e2m1_decode(codes)
    scale = tensors["weight_scale"].float().repeat_interleave(GROUP_SIZE, dim=-1)
    return values * scale * tensors["weight_scale_2"].float()


def _layer_of(name: str) -> str:
    """``model.layers.<i>`` for a layer's tensors, the name itself otherwise."""
    parts = name.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["model", "layers"] else name


def state_dict(family: Family, config: Mapping[str, Any], seed: int = 0) -> dict[str, Any]:
    """All tensors of the export, named as the HF checkpoint of ``family`` names them."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int, std: float) -> Any:
        return torch.randn(*shape, generator=gen, dtype=torch.float32) * std

    h = config["hidden_size"]
    input_scale = torch.tensor(ACTIVATION_AMAX / (E2M1_MAX * E4M3_MAX), dtype=torch.float32)
    tensors: dict[str, Any] = {}
    # Linears are made a layer at a time: fused groups share their amax (ModelOpt unifies
    # the amax of linears that share an input), and equal shapes quantize in one batch.
    linears: dict[str, Any] = {}
    fused: dict[str, str] = {}

    def flush_linears() -> None:
        amax = {name: w.abs().max() for name, w in linears.items()}
        for key in set(fused.values()):
            members = [n for n, k in fused.items() if k == key]
            shared = max(amax[n] for n in members)
            amax.update(dict.fromkeys(members, shared))
        by_shape: dict[tuple[int, ...], list[str]] = {}
        for name, weight in linears.items():
            if family.is_excluded(name, config):
                tensors[f"{name}.weight"] = weight.to(torch.bfloat16)
            else:
                by_shape.setdefault(tuple(weight.shape), []).append(name)
        for names in by_shape.values():
            batch = quantize_nvfp4_batched(
                torch.stack([linears[n] for n in names]), torch.stack([amax[n] for n in names])
            )
            for i, name in enumerate(names):
                for suffix, tensor in batch.items():
                    tensors[f"{name}.{suffix}"] = tensor[i].clone()
                tensors[f"{name}.input_scale"] = input_scale.clone()
        linears.clear()
        fused.clear()

    layer = None
    for spec in family.tensors(config):
        if _layer_of(spec.name) != layer:
            flush_linears()
            layer = _layer_of(spec.name)
        if spec.role is Role.LINEAR:
            linears[spec.name] = randn(*spec.shape, std=spec.shape[1] ** -0.5)
            if spec.fused is not None:
                fused[spec.name] = spec.fused
        elif spec.role is Role.NORM:
            tensors[spec.name] = torch.ones(spec.shape, dtype=torch.bfloat16)
        elif spec.role in (Role.BIAS, Role.NORM_BIAS):
            tensors[spec.name] = torch.zeros(spec.shape, dtype=torch.bfloat16)
        elif spec.role is Role.EMBEDDING:
            tensors[spec.name] = randn(*spec.shape, std=1.0).to(torch.bfloat16)
        elif spec.role is Role.ROUTER:
            # Wide gaps between expert scores: routing must not flip between kernels.
            tensors[spec.name] = randn(*spec.shape, std=4 * h**-0.5).to(torch.bfloat16)
        elif spec.role is Role.ROUTER_BIAS:
            # Distinct, evenly spaced per-expert biases break ties between sigmoid scores.
            (experts,) = spec.shape
            order = torch.randperm(experts, generator=gen).float()
            tensors[spec.name] = (order / experts - 0.5).to(torch.float32)
        elif spec.role is Role.LM_HEAD:
            # Large logits: a wide top-1 margin keeps greedy decoding stable across kernels.
            tensors[spec.name] = randn(*spec.shape, std=8 * h**-0.5).to(torch.bfloat16)
        else:  # pragma: no cover - every Role is handled above
            raise AssertionError(spec.role)
    flush_linears()
    return tensors


def write_tokenizer(out: pathlib.Path, max_length: int) -> None:
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
                "model_max_length": max_length,
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


def write_checkpoint(
    out: pathlib.Path, family: Family, size: Size = Size.SERVE, seed: int = 0
) -> pathlib.Path:
    """Write the checkpoint of ``family`` into ``out`` (created); return ``out``."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    config = model_config(family, size)
    excluded = config["quantization_config"]["ignore"]
    save_file(state_dict(family, config, seed), str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "hf_quant_config.json").write_text(json.dumps(hf_quant_config(excluded), indent=4) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 256, "eos_token_id": 257, "do_sample": False}, indent=2) + "\n"
    )
    write_tokenizer(out, config["max_position_embeddings"])
    return out
