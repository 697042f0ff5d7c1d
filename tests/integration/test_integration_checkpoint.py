"""The tiny NVFP4 checkpoint: its quantization round-trips, and sglang's own loader takes it.

The sglang check runs sglang's ``get_quant_config`` (both the config.json and the
hf_quant_config.json routes), builds the Llama linears (fused QKV / gate-up, row-parallel o /
down) with ``ModelOptFp4LinearMethod.create_weights``, and feeds every tensor of a layer to the
parameters' own ``weight_loader`` the way ``LlamaForCausalLM.load_weights`` maps names.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import torch
from sglang_cpu import PRELUDE, SGSIM_DIR

from fp4graph.integration import checkpoint
from support.child import run_python, tail

SMALL = checkpoint.TinyLlama(num_layers=1, hidden_size=256, intermediate_size=512, num_heads=2,
                             num_kv_heads=1, head_dim=128)


def test_quantize_round_trip() -> None:
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(0)) * 0.05
    q = checkpoint.quantize_nvfp4(w)
    assert q["weight"].dtype == torch.uint8 and q["weight"].shape == (64, 64)
    assert q["weight_scale"].dtype == torch.float8_e4m3fn and q["weight_scale"].shape == (64, 8)
    assert q["weight_scale_2"].dtype == torch.float32 and q["weight_scale_2"].shape == ()
    assert q["weight_scale_2"].item() == pytest.approx(w.abs().max().item() / (6 * 448))
    err = (checkpoint.dequantize_nvfp4(q) - w).abs()
    block_amax = w.abs().reshape(64, 8, 16).amax(-1).repeat_interleave(16, dim=-1)
    # e2m1 steps up to 2 near the top (4 -> 6): half a step is 1/6 of the block amax, plus up
    # to 1/16 from rounding the block scale to e4m3.
    assert (err / block_amax).max() <= (1 / 6) * (1 + 1 / 16)
    assert err.mean() / w.abs().mean() < 0.15


def test_state_dict_names_shapes_and_shared_scales() -> None:
    sd = checkpoint.state_dict(SMALL)
    p = "model.layers.0"
    assert sd[f"{p}.self_attn.k_proj.weight"].shape == (128, 128)
    assert sd[f"{p}.mlp.down_proj.weight_scale"].shape == (256, 32)
    assert sd["lm_head.weight"].dtype == torch.bfloat16  # excluded from quantization
    for group in checkpoint.FUSED_GROUPS:
        scales = {sd[f"{p}.{name}.weight_scale_2"].item() for name in group}
        assert len(scales) == 1, f"{group}: sglang keeps one weight_scale_2 for the fused linear"
    quantized = [n for n in sd if n.endswith(".weight_scale_2")]
    assert len(quantized) == 7 and all(n.replace("_2", "").replace(".weight_scale", ".input_scale") in sd
                                       for n in quantized)


def test_written_files(tmp_path: pathlib.Path) -> None:
    out = checkpoint.write_checkpoint(tmp_path / "ckpt", SMALL)
    assert json.loads((out / "hf_quant_config.json").read_text())["quantization"] == {
        "quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16, "exclude_modules": ["lm_head"],
    }
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "modelopt"
    assert config["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] == 16
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = tok.encode("Hello, wörld").ids
    assert ids[0] == 256 and max(ids) < SMALL.vocab_size
    assert tok.decode(ids) == "Hello, wörld"


CHILD = PRELUDE + r'''
import json, pathlib, sys, types
import torch
from safetensors.torch import load_file
ckpt = pathlib.Path(CKPT)
from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp4Config, ModelOptFp4LinearMethod
from sglang.srt.model_loader.weight_utils import get_quant_config
from sglang.srt.configs.load_config import LoadConfig
hf = json.loads((ckpt / "config.json").read_text())

def model_config(with_quantization_config):
    extra = {"quantization_config": dict(hf["quantization_config"])} if with_quantization_config else {}
    return types.SimpleNamespace(
        quantization="modelopt_fp4", model_path=str(ckpt), revision=None,
        hf_config=types.SimpleNamespace(architectures=hf["architectures"], **extra))

# The model loader passes getattr(LlamaForCausalLM, "packed_modules_mapping", {}): {} for Llama.
configs = {
    "config.json": get_quant_config(model_config(True), LoadConfig(), {}),
    "hf_quant_config.json": get_quant_config(model_config(False), LoadConfig(), {}),
}
for route, cfg in configs.items():
    assert isinstance(cfg, ModelOptFp4Config), (route, type(cfg))
    assert cfg.is_checkpoint_nvfp4_serialized and cfg.group_size == 16, route
    assert cfg.exclude_modules == ["lm_head"], (route, cfg.exclude_modules)

# tp = 1 without torch.distributed: the linear layers only ask the TP group for rank and size.
from sglang.srt.distributed import parallel_state
parallel_state._TP = types.SimpleNamespace(world_size=1, rank_in_group=0, rank=0, local_rank=0, ranks=[0])
from sglang.srt.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
torch.set_default_dtype(torch.bfloat16)
h, hd, nh, nkv, inter = (hf[k] for k in ("hidden_size", "head_dim", "num_attention_heads",
                                         "num_key_value_heads", "intermediate_size"))
sd = load_file(str(ckpt / "model.safetensors"))
stacked = [(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
           (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)]
for route, cfg in configs.items():
    for layer in range(hf["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        layers = {
            "self_attn.qkv_proj": QKVParallelLinear(h, hd, nh, nkv, bias=False, quant_config=cfg,
                                                    prefix=f"{p}.self_attn.qkv_proj"),
            "self_attn.o_proj": RowParallelLinear(nh * hd, h, bias=False, quant_config=cfg,
                                                  prefix=f"{p}.self_attn.o_proj"),
            "mlp.gate_up_proj": MergedColumnParallelLinear(h, [inter, inter], bias=False, quant_config=cfg,
                                                           prefix=f"{p}.mlp.gate_up_proj"),
            "mlp.down_proj": RowParallelLinear(inter, h, bias=False, quant_config=cfg,
                                               prefix=f"{p}.mlp.down_proj"),
        }
        for name, module in layers.items():
            assert isinstance(module.quant_method, ModelOptFp4LinearMethod), (name, module.quant_method)
        params = {f"{p}.{ln}.{pn}": prm for ln, m in layers.items() for pn, prm in m.named_parameters()}
        seen = set()
        for name, tensor in sd.items():
            if not name.startswith(p + ".") or "layernorm" in name:
                continue
            for fused, shard, shard_id in stacked:
                if shard in name:
                    target = name.replace(shard, fused)
                    params[target].weight_loader(params[target], tensor, shard_id)
                    break
            else:
                target = name
                params[target].weight_loader(params[target], tensor)
            assert params[target].dtype == tensor.dtype, (name, params[target].dtype, tensor.dtype)
            seen.add(target)
        assert seen == set(params), sorted(set(params) - seen)
        # The loaded bytes are the checkpoint's, at the shard offsets sglang computed.
        qkv, gate_up = layers["self_attn.qkv_proj"], layers["mlp.gate_up_proj"]
        q_rows, kv_rows = nh * hd, nkv * hd
        assert torch.equal(qkv.weight.data[q_rows:q_rows + kv_rows], sd[f"{p}.self_attn.k_proj.weight"])
        assert torch.equal(qkv.weight_scale.data[q_rows + kv_rows:].view(torch.uint8),
                           sd[f"{p}.self_attn.v_proj.weight_scale"].view(torch.uint8))
        assert torch.equal(gate_up.weight.data[inter:], sd[f"{p}.mlp.up_proj.weight"])
        assert torch.equal(qkv.weight_scale_2.data, sd[f"{p}.self_attn.q_proj.weight_scale_2"].expand(3))
        assert torch.equal(layers["mlp.down_proj"].input_scale.data.reshape(()), sd[f"{p}.mlp.down_proj.input_scale"])
print("LOADED", len(sd))
'''


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.5.9", "0.5.10.post1", "0.5.11"])
def test_sglang_loads_it(wheel_tree, tmp_path: pathlib.Path, version: str) -> None:
    ckpt = checkpoint.write_checkpoint(tmp_path / "ckpt", checkpoint.TinyLlama(num_layers=2, hidden_size=512,
                                       intermediate_size=1024, num_heads=4, num_kv_heads=2))
    tree = wheel_tree("sglang", version, patched=False)
    result = run_python(f"CKPT = {str(ckpt)!r}\n" + CHILD, path=[SGSIM_DIR, tree])
    assert result.returncode == 0 and "LOADED" in result.stdout, tail(result)
