"""The tiny NVFP4 checkpoints: what ModelOpt would write per family, and sglang loads them.

The sglang check (slow) runs each stack's patched sglang on the CPU (sglang_load.py): its
``ModelConfig`` parses the checkpoint's config and quantization config, its model loader
builds the family's model class with ``ModelOptFp4Config`` and feeds the safetensors
through the model's own ``load_weights``; every parameter must be written from the
checkpoint, with the NVFP4 bytes and block scales adding up to the checkpoint's.
"""

from __future__ import annotations

import fnmatch
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import torch
from matrix_cells import CHECKED_STACK_IDS, load_combinations, stack_versions
from safetensors.torch import load_file

from fp4graph.integration import checkpoint
from fp4graph.integration.matrix import Fusion
from fp4graph.model import families
from fp4graph.model.families import FAMILIES, Role, Size
from harness.models.expected import release_expect


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


def test_batched_quantization_is_per_tensor() -> None:
    """One batched call equals quantizing each tensor with its own amax."""
    gen = torch.Generator().manual_seed(1)
    ws = torch.randn(3, 32, 64, generator=gen) * torch.tensor([0.01, 1.0, 30.0]).view(3, 1, 1)
    amax = ws.abs().amax(dim=(1, 2))
    batch = checkpoint.quantize_nvfp4_batched(ws, amax)
    for i in range(3):
        single = checkpoint.quantize_nvfp4(ws[i])
        assert torch.equal(batch["weight"][i], single["weight"])
        assert torch.equal(batch["weight_scale"][i].view(torch.uint8), single["weight_scale"].view(torch.uint8))
        assert batch["weight_scale_2"][i] == single["weight_scale_2"]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_tensors_per_family(test_checkpoints: dict[str, pathlib.Path], name: str) -> None:
    """Names, dtypes and exclusions as ModelOpt exports them; fused linears share scales."""
    family = FAMILIES[name]
    config = json.loads((test_checkpoints[name] / "config.json").read_text())
    assert config == checkpoint.model_config(family, Size.TEST)
    sd = load_file(str(test_checkpoints[name] / checkpoint.WEIGHTS_FILE))
    assert set(sd) == {n for s in family.tensors(config) for n in _names(family, config, s)}
    specs = family.tensors(config)
    excluded = config["quantization_config"]["ignore"]
    assert excluded[0] == "lm_head" and sd["lm_head.weight"].dtype == torch.bfloat16
    linears = [s for s in specs if s.role is Role.LINEAR]
    for spec in linears:
        if any(fnmatch.fnmatchcase(spec.name, p) for p in excluded):
            assert sd[f"{spec.name}.weight"].dtype == torch.bfloat16 and f"{spec.name}.weight_scale" not in sd
            continue
        out_f, in_f = spec.shape
        assert sd[f"{spec.name}.weight"].shape == (out_f, in_f // 2) and sd[f"{spec.name}.weight"].dtype == torch.uint8
        assert sd[f"{spec.name}.weight_scale"].shape == (out_f, in_f // 16)
        assert sd[f"{spec.name}.weight_scale"].dtype == torch.float8_e4m3fn
        assert sd[f"{spec.name}.weight_scale_2"].shape == () and sd[f"{spec.name}.input_scale"].shape == ()
    groups: dict[str, set[float]] = {}
    for spec in linears:
        if spec.fused and f"{spec.name}.weight_scale_2" in sd:
            groups.setdefault(spec.fused, set()).add(sd[f"{spec.name}.weight_scale_2"].item())
    assert groups, f"{name}: no fused NVFP4 linears"
    assert all(len(v) == 1 for v in groups.values()), f"{name}: fused linears with different weight_scale_2"
    if family.moe:
        experts = [n for n in sd if ".mlp.experts." in n and n.endswith(".weight_scale_2")]
        assert experts and all(".gate_proj." in n or ".up_proj." in n or ".down_proj." in n for n in experts)
        assert any(n.endswith("mlp.gate.weight") and sd[n].dtype == torch.bfloat16 for n in sd)
    if family.attention_excluded:
        assert all(sd[n].dtype == torch.bfloat16 for n in sd if ".self_attn." in n and n.endswith("proj.weight"))
    if family.nsa:
        for key in ("index_topk", "index_head_dim", "index_n_heads"):
            assert isinstance(config[key], int), key
        assert any(".self_attn.indexer.wk.weight" in n for n in sd)


def _names(family: families.Family, config: dict[str, Any], spec: families.Tensor) -> list[str]:
    if spec.role is not Role.LINEAR:
        return [spec.name]
    if family.is_excluded(spec.name, config):
        return [f"{spec.name}.weight"]
    return [f"{spec.name}.{s}" for s in ("weight", "weight_scale", "weight_scale_2", "input_scale")]


def test_written_files(tmp_path: pathlib.Path) -> None:
    out = checkpoint.write_checkpoint(tmp_path / "ckpt", families.QWEN3_MOE, Size.TEST)
    quant = json.loads((out / "hf_quant_config.json").read_text())
    assert quant["producer"]["name"] == "modelopt"
    assert quant["quantization"]["quant_algo"] == "NVFP4" and quant["quantization"]["group_size"] == 16
    assert quant["quantization"]["exclude_modules"] == ["lm_head", "model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert config["quantization_config"]["quant_method"] == "modelopt"
    assert config["quantization_config"]["ignore"] == quant["quantization"]["exclude_modules"]
    assert config["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] == 16
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    ids = tok.encode("Hello, wörld").ids
    assert ids[0] == 256 and max(ids) < config["vocab_size"]
    assert tok.decode(ids) == "Hello, wörld"


def test_the_entry_point_the_run_calls(tmp_path: pathlib.Path) -> None:
    """``python -m fp4graph.integration.checkpoint OUT --family F``, as the run starts it in
    the sglang venv: it prints OUT and writes the family's checkpoint there."""
    out = tmp_path / "ckpt"
    src = pathlib.Path(checkpoint.__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "fp4graph.integration.checkpoint", str(out), "--family", "qwen3", "--size", "test"],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == f"{out}\n"
    assert json.loads((out / "config.json").read_text()) == checkpoint.model_config(families.QWEN3, Size.TEST)
    bad = subprocess.run([sys.executable, "-m", "fp4graph.integration.checkpoint", str(out), "--family", "gpt2"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "invalid choice: 'gpt2'" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize("stack", CHECKED_STACK_IDS)
def test_sglang_loads_every_family(sglang_checks: Any, stack: str) -> None:
    """That release's loader takes every family's checkpoint with each MoE backend and
    fusion setting: NVFP4 methods where ModelOpt quantized, every parameter written,
    nothing lost or doubled; and its init_piecewise_cuda_graphs would start the runner."""
    results = sglang_checks(stack)
    for cell in load_combinations(stack_versions(stack)[0]):
        got = results[f"load:{cell.id}"]
        assert "error" not in got, (cell.id, got.get("traceback"))
        load = got["load"]
        assert load["quant_config"] == "ModelOptFp4Config", cell.id
        assert "ModelOptFp4LinearMethod" in load["quant_methods"], cell.id
        if cell.family.moe:
            assert "ModelOptNvFp4FusedMoEMethod" in load["quant_methods"], cell.id
        assert load["unwritten"] == {}, (cell.id, load["unwritten"])
        assert load["model_byte_sums"] == load["checkpoint_byte_sums"], cell.id
        # A release that decides against fusing a family's shared expert says so there.
        release = release_expect(stack_versions(stack)[0], cell.family.name)
        fused = (cell.family.shared_experts and cell.fusion is Fusion.ON
                 and release.get("num_fused_shared_experts", 1) != 0)
        assert load["num_fused_shared_experts"] == (1 if fused else 0), (cell.id, load["num_fused_shared_experts"])
        if got["piecewise"]["enabled"]:
            assert load["piecewise_runner"] is not None, (cell.id, "sglang would not start the piecewise runner")



def test_generated_checkpoints_split_at_the_tp_they_run_at() -> None:
    """Every serve-size checkpoint splits over 1 to 4 GPUs, GLM-5's over 8 (the seed's
    --tp 8 default); the test sizes' DeepSeek-style experts (64) split over none: sglang's
    NVFP4 MoE needs each rank's 2 x moe_intermediate_size / tp rows in multiples of 128."""
    assert {n: f.max_tp() for n, f in FAMILIES.items() if f.max_tp() < 8} == {
        "qwen3-moe": 4, "deepseek-v3": 4, "glm4-moe": 4, "deepseek-v3.2": 4}
    assert FAMILIES["glm5"].shards_at(8) and not FAMILIES["glm5"].shards_at(8, Size.TEST)
    assert not FAMILIES["llama"].shards_at(3)  # 8 heads
