"""Speculative decoding with MTP (GLM-5, DeepSeek-V3): the target model under piecewise.

With ``--speculative-algorithm NEXTN`` (sglang turns it into EAGLE; the draft model is the
checkpoint's own MTP layer) the target model's runner is the one that may capture
piecewise CUDA graphs; what each release decides is checked from its own ServerArgs,
ModelRunner and PiecewiseCudaGraphRunner code in tests/integration
(``test_speculative_decoding_and_piecewise``; README "Speculative decoding").  Here, where
a release runs the target piecewise, its whole model is traced the same way as without
speculation (the seed's start order, ``--disable-cuda-graph``), and the target's
speculative prefill (the EAGLE worker asks for every hidden state, ``CaptureHiddenMode
.FULL``) is handed to the piecewise runner: 0.5.8 / 0.5.9 replay it (a padded replay whose
hidden states the draft model reads), 0.5.11 refuses it (``can_run``: the graphs were
captured without hidden states) and runs that prefill eagerly.  The draft worker stays
eager on every release.

Selection: ``FP4GRAPH_MODELS=full`` (``nox -s tracing``) or a ``-k`` naming
``speculative`` runs every case; CI runs none (the decisions are in tests/integration).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness import tables
from harness.models import families, simulation
from harness.models.expected import ATTENTION, FP4_GEMM, FP4_QUANTIZE, MOE, REPLAY_TOKENS, describe
from harness.targets import full_matrix

FAMILIES = ("glm5", "deepseek-v3")
SPECULATIVE = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 1, "speculative_eagle_topk": 1,
               "speculative_num_draft_tokens": 2}
# Per release prefix: whether its piecewise runner takes a batch asking for every hidden
# state (0.5.11 added the check: "PCG replay would return wrong/missing hidden_states").
REPLAYS_FULL_HIDDEN = {"0.5.8": True, "0.5.9": True, "0.5.10": True, "0.5.11": False, "0.5.12": False}
REPLAYS_TABLE = tables.Table("tests/models/test_speculative.py: REPLAYS_FULL_HIDDEN", REPLAYS_FULL_HIDDEN,
                             by_prefix=True)


@dataclasses.dataclass(frozen=True)
class SpecCase:
    stack: simulation.SglangStack
    family: str

    @property
    def id(self) -> str:
        return f"speculative-{self.stack.name}-{self.family}"

    def request(self) -> dict[str, Any]:
        case = simulation.case(self.family, cuda_graph=False, replay_tokens=REPLAY_TOKENS, **SPECULATIVE)
        case["speculative_prefill"] = True
        # 0.5.10+ turn piecewise off with speculative decoding; the NSA rows enforce it.
        return case


def spec_cases() -> list[SpecCase]:
    return [SpecCase(s, f) for s in simulation.sglang_stacks() for f in FAMILIES if families.runs_on(f, s.sglang)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spec_case" in metafunc.fixturenames:
        everything = full_matrix() or "speculative" in (metafunc.config.option.keyword or "")
        cases = spec_cases() if everything else []
        metafunc.parametrize("spec_case", cases, ids=[c.id for c in cases])


_RESULTS: dict[str, dict[str, dict[str, Any]]] = {}


def spec_result(request: pytest.FixtureRequest, wheel_tree: Any, case: SpecCase) -> dict[str, Any]:
    if case.stack.name not in _RESULTS:
        selected = [item.callspec.params["spec_case"] for item in request.session.items
                    if hasattr(item, "callspec") and isinstance(item.callspec.params.get("spec_case"), SpecCase)
                    and item.callspec.params["spec_case"].stack == case.stack] or [case]
        unique = list(dict.fromkeys(selected))
        reports = simulation.run(wheel_tree, case.stack, patched=True, cases=[c.request() for c in unique])
        _RESULTS[case.stack.name] = {c.id: r for c, r in zip(unique, reports, strict=True)}
    return _RESULTS[case.stack.name][case.id]


def test_speculative_target_under_piecewise(request: pytest.FixtureRequest, wheel_tree: Any,
                                            spec_case: SpecCase) -> None:
    report = spec_result(request, wheel_tree, spec_case)
    assert report["ok"], describe(report)
    assert report["speculative_algorithm"] == "EAGLE", describe(report)
    if report["piecewise_runner"] is None:
        # 0.5.10.x: ServerArgs turned piecewise off for speculative decoding.
        assert spec_case.stack.sglang.startswith("0.5.10") and spec_case.family not in families.NSA_FAMILIES
        return
    assert report["piecewise_runner"] == "PiecewiseCudaGraphRunner", describe(report)
    assert report["graph_breaks_piecewise"] == 0, describe(report)
    for pieces in report["graphs"]:
        captured = [op for p in pieces if not p["split"] for op in p["ops"]]
        split = [op for p in pieces if p["split"] for op in p["ops"]]
        assert FP4_QUANTIZE in captured and FP4_GEMM in captured and MOE in captured, pieces
        assert ATTENTION in split, pieces
    prefill = report["speculative_prefill"]
    replays = REPLAYS_TABLE.row(spec_case.stack.sglang)
    assert prefill["can_run"] is replays, prefill
    if replays:
        hidden = families.ROWS[spec_case.family]["config"]["hidden_size"]
        assert prefill["hidden_states"] == [REPLAY_TOKENS, hidden], prefill
        assert prefill["logits"] == [1, families.ROWS[spec_case.family]["config"]["vocab_size"]], prefill
