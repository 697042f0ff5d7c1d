"""Full-size shapes: each family's published config, one rank of --tp 8 (issue 19).

The rows of tests/harness/models/full_size.py (GLM-5, DeepSeek-V3, Qwen3-235B-A22B,
Llama-3.1-70B, transcribed from their config.json), every dimension as published, the
layer count cut to one layer of each kind.  One process runs rank 0 of an 8-GPU server
(torch's FakeProcessGroup stands in for ranks 1-7: their collectives do nothing).  The
rank's model is built on the host as the small ones are (sglang's weight processing reads
values: about 1.5 GB for GLM-5's or DeepSeek-V3's rank, one case at a time), then traced
on fake CUDA tensors.
This checks, at the sizes users serve: our fakes and sglang's NVFP4 weight padding and
alignment (each rank's shards), sglang's MoE and attention choices, the piecewise compile
(0 graph breaks, the fp4 ops in captured pieces, sglang's all-reduce op, NCCL's path at 8
PCIe GPUs), a padded replay, and the per-rank shapes of the weights.

Runs with ``FP4GRAPH_MODELS=full`` (``nox -s tracing``) or a ``-k`` naming ``fullsize``,
on sglang 0.5.9 and the newest stack.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.models import families, full_size, simulation
from harness.models.expected import (
    ATTENTION,
    FP4_GEMM,
    FP4_QUANTIZE,
    MOE,
    OUTPLACE_ALL_REDUCE,
    REPLAY_TOKENS,
    describe,
)
from harness.targets import full_matrix

# Per-rank parameters reported (the first one whose name ends so).
SHAPES = [
    "embed_tokens.weight", "lm_head.weight", "experts.w13_weight", "experts.w2_weight",
    "experts.w13_blockscale_swizzled", "qkv_proj.weight", "gate_up_proj.weight", "down_proj.weight",
    "o_proj.weight", "q_b_proj.weight", "kv_b_proj.weight", "gate_up_proj.weight_scale_interleaved",
]


@dataclasses.dataclass(frozen=True)
class FullCase:
    stack: simulation.SglangStack
    name: str

    @property
    def id(self) -> str:
        return f"fullsize-{self.stack.name}-{self.name}-tp{full_size.TP}-rank0"

    def request(self) -> dict[str, Any]:
        case = simulation.case(full_size.PUBLISHED[self.name].family, cuda_graph=False,
                               replay_tokens=REPLAY_TOKENS, tp_size=full_size.TP)
        case.update(family=full_size.row(self.name), processes=1, report_shapes=SHAPES)
        return case


def full_cases() -> list[FullCase]:
    return [FullCase(stack, name) for stack in simulation.tp_stacks() for name in full_size.PUBLISHED
            if families.runs_on(full_size.PUBLISHED[name].family, stack.sglang)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "full_case" in metafunc.fixturenames:
        everything = full_matrix() or "fullsize" in (metafunc.config.option.keyword or "")
        cases = full_cases() if everything else []
        metafunc.parametrize("full_case", cases, ids=[c.id for c in cases])


_RESULTS: dict[str, dict[str, dict[str, Any]]] = {}


def full_result(request: pytest.FixtureRequest, wheel_tree: Any, case: FullCase) -> dict[str, Any]:
    if case.stack.name not in _RESULTS:
        selected = [item.callspec.params["full_case"] for item in request.session.items
                    if hasattr(item, "callspec") and isinstance(item.callspec.params.get("full_case"), FullCase)
                    and item.callspec.params["full_case"].stack == case.stack] or [case]
        unique = list(dict.fromkeys(selected))
        reports = simulation.run(wheel_tree, case.stack, patched=True, cases=[c.request() for c in unique],
                                 timeout=7200)
        _RESULTS[case.stack.name] = {c.id: r for c, r in zip(unique, reports, strict=True)}
    return _RESULTS[case.stack.name][case.id]


def expected_shapes(name: str) -> dict[str, Any]:
    """What rank 0 of 8 holds, from the published config and sglang's NVFP4 layouts: packed
    e2m1 weights (two per byte, ``[out, in / 2]``), fp8 block scales swizzled to 128-row,
    4-column tiles; routed experts (+ the fused shared one) whole per rank, each expert's
    intermediate split 8 ways; q heads and the vocabulary split 8 ways, KV heads too down to
    one per rank (replicated below that)."""
    c = full_size.PUBLISHED[name].config
    tp = full_size.TP
    h, vocab = c["hidden_size"], c["vocab_size"]
    out: dict[str, Any] = {
        "embed_tokens.weight": [[vocab // tp, h], "bfloat16"],
        "lm_head.weight": [[vocab // tp, h], "bfloat16"],
    }
    family = full_size.FAMILIES[full_size.PUBLISHED[name].family]
    if family.moe:
        experts = c.get("n_routed_experts", c.get("num_experts")) + (1 if family.shared_experts else 0)
        inter = c["moe_intermediate_size"] // tp
        out["experts.w13_weight"] = [[experts, 2 * inter, h // 2], "uint8"]
        out["experts.w2_weight"] = [[experts, h, inter // 2], "uint8"]
        out["experts.w13_blockscale_swizzled"] = [[experts, -(-2 * inter // 128) * 128,
                                                   -(-(h // 16) // 4) * 4], "float8_e4m3fn"]
    if "kv_lora_rank" not in c:  # GQA
        d = c["head_dim"]
        q, kv = c["num_attention_heads"] // tp, max(1, c["num_key_value_heads"] // tp)
        out["qkv_proj.weight"] = [[(q + 2 * kv) * d, h // 2], "uint8"]
        out["o_proj.weight"] = [[h, q * d // 2], "uint8"]
    if not family.moe or c.get("first_k_dense_replace"):
        inter = c["intermediate_size"] // tp
        out["gate_up_proj.weight"] = [[2 * inter, h // 2], "uint8"]
        out["down_proj.weight"] = [[h, inter // 2], "uint8"]
    return out


def test_full_size_rank0_of_tp8(request: pytest.FixtureRequest, wheel_tree: Any, full_case: FullCase) -> None:
    report = full_result(request, wheel_tree, full_case)
    assert report["ok"], describe(report)
    family = full_size.PUBLISHED[full_case.name].family
    for key, value in full_size.row(full_case.name).get("expect", {}).items():
        assert report.get(key) == value, (key, describe(report))
    assert report["piecewise_runner"] == "PiecewiseCudaGraphRunner", describe(report)
    assert report["graph_breaks_piecewise"] == 0, describe(report)
    moe = families.ROWS[family]["kind"] == "moe"
    for pieces in report["graphs"]:
        captured = [op for p in pieces if not p["split"] for op in p["ops"]]
        split = [op for p in pieces if p["split"] for op in p["ops"]]
        assert FP4_QUANTIZE in captured and FP4_GEMM in captured, pieces
        assert ATTENTION in split and ATTENTION not in captured, pieces
        assert not moe or MOE in captured, pieces
        # 8 GPUs on PCIe: no custom all-reduce; sglang's op takes pynccl in piecewise graphs.
        methods = [m for p in pieces if not p["split"] for m in p["all_reduce_methods"]]
        assert methods and set(methods) == {"pynccl"} and OUTPLACE_ALL_REDUCE in captured, pieces
    shapes = report["param_shapes"]
    for suffix, want in expected_shapes(full_case.name).items():
        assert shapes[suffix] == want, (suffix, shapes[suffix], want)
    replay = report["replay"]
    assert replay["static_tokens"] > replay["tokens"] == REPLAY_TOKENS, replay
    assert replay["logits"][0] == [1, full_size.PUBLISHED[full_case.name].config["vocab_size"]], replay
