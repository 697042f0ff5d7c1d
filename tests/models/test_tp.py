"""Tensor parallel 2: every family's whole NVFP4 model, one process per rank (issue 19).

Each case runs two rank processes (:func:`modelsim.run_ranks`) joined by a gloo world on
the host; sglang's own ``init_distributed_environment`` / ``initialize_model_parallel``
build the group coordinators, and the collective kernels a CPU lacks (libnccl under
pynccl, sglang's custom all-reduce, NVML's PCIe topology) are the stand-ins of
tests/harness/models/collectives.py.  Each rank traces and captures the piecewise CUDA graphs
(``--disable-cuda-graph``, the seed's start order), replays a padded extend batch, then
runs the eager forwards (piecewise off) the replay is compared with:

* compared for real, across the two processes: every collective (custom all-reduce,
  NCCL, ``torch.distributed``) runs through gloo on placeholders of its element count,
  after the ranks checked they run the same one; the replay runs exactly the collectives
  (path, kind, count, dtype, order) an eager forward of the padded size runs, on both
  ranks (the replay's are those its CUDA graphs captured);
* compared as metadata (device tensors are fakes, without data): the replay's logits have
  the shape, dtype and device (``cuda:<rank>``) of the eager forward's of the real batch.

Every trace has zero graph breaks, the fp4 ops in captured pieces, and the all-reduce as
sglang's ``sglang::outplace_all_reduce`` op inside captured pieces with the custom
all-reduce path (``"ca"``: on a PCIe box sglang keeps it on for 2 GPUs).  What TP 2
changes against TP 1 is asserted by :func:`test_tp2_differs_from_tp1_only_by_the_all_reduces`.

Selection: ``pytest tests/models -k tp2`` runs every family on sglang 0.5.9 and on the
newest stack (a ``-k`` expression naming ``tp2`` selects the whole TP matrix), as does
``FP4GRAPH_MODELS=full`` (``nox -s tracing``).  CI runs none of it (over its budget:
a stack's TP cases cost about 6 minutes on 2 cores); tests/harness/models/test_stand_ins.py checks
the collective stand-ins themselves in CI.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.models import families, simulation
from harness.models.expected import (
    ATTENTION,
    FP4_GEMM,
    FP4_QUANTIZE,
    INPLACE_ALL_REDUCE,
    MOE,
    OUTPLACE_ALL_REDUCE,
    REPLAY_TOKENS,
    assert_nsa,
)
from harness.targets import full_matrix

TP = 2


@dataclasses.dataclass(frozen=True)
class TpCase:
    stack: simulation.SglangStack
    family: str

    @property
    def id(self) -> str:
        return f"tp2-{self.stack.name}-{self.family}-no-cuda-graph"

    def request(self) -> dict[str, Any]:
        return simulation.case(self.family, cuda_graph=False, replay_tokens=REPLAY_TOKENS, tp_size=TP)

    @property
    def twin_id(self) -> str:
        return f"tp1-twin-{self.stack.name}-{self.family}"

    def twin_request(self) -> dict[str, Any]:
        """The same model (the TP-sized row) on one GPU: what TP 2 is compared with."""
        case = simulation.case(self.family, cuda_graph=False, replay_tokens=REPLAY_TOKENS)
        case["family"] = families.row(self.family, tp=TP)
        return case


@dataclasses.dataclass(frozen=True)
class PathsCase:
    """Only the parallel state of a ``tp``-GPU PCIe box, probed for its all-reduce paths."""

    stack: simulation.SglangStack
    tp: int

    @property
    def id(self) -> str:
        return f"tp{self.tp}-paths-{self.stack.name}"

    def request(self) -> dict[str, Any]:
        return {**simulation.case("llama", tp_size=self.tp), "probe": "all_reduce_paths"}


def tp_cases(everything: bool) -> list[TpCase]:
    """Every family on each TP stack; none in CI (over its budget: the full tier runs them)."""
    if not everything:
        return []
    return [TpCase(stack, family) for stack in simulation.tp_stacks() for family in families.names()
            if families.runs_on(family, stack.sglang)]


def _everything(config: pytest.Config) -> bool:
    return full_matrix() or "tp2" in (config.option.keyword or "")


def paths_cases(everything: bool) -> list[PathsCase]:
    """2, 4 and 8 GPUs on each TP stack; none in CI (one child: about a minute)."""
    if not everything:
        return []
    return [PathsCase(stack, tp) for stack in simulation.tp_stacks() for tp in (2, 4, 8)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "tp_case" in metafunc.fixturenames:
        cases = tp_cases(_everything(metafunc.config))
        metafunc.parametrize("tp_case", cases, ids=[c.id for c in cases])
    if "paths_case" in metafunc.fixturenames:
        probes = paths_cases(_everything(metafunc.config))
        metafunc.parametrize("paths_case", probes, ids=[c.id for c in probes])


_RESULTS: dict[str, dict[str, dict[str, Any]]] = {}


def tp_result(request: pytest.FixtureRequest, wheel_tree: Any, case: TpCase | PathsCase) -> dict[str, Any]:
    """The report of ``case``; the first call for a stack runs all its selected cases in one
    child (a fork per case, a process per rank in each)."""
    key = case.stack.name
    if key not in _RESULTS:
        selected = [
            param
            for item in request.session.items if hasattr(item, "callspec")
            for param in item.callspec.params.values()
            if isinstance(param, (TpCase, PathsCase)) and param.stack == case.stack
        ] or [case]
        unique = list(dict.fromkeys(selected))
        ids = [c.id for c in unique] + [c.twin_id for c in unique if isinstance(c, TpCase)]
        requests = [c.request() for c in unique] + [c.twin_request() for c in unique if isinstance(c, TpCase)]
        reports = simulation.run(wheel_tree, case.stack, patched=True, cases=requests, timeout=7200)
        _RESULTS[key] = dict(zip(ids, reports, strict=True))
    return _RESULTS[key][case.id]


def describe(report: dict[str, Any]) -> str:
    def brief(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k not in ("graphs", "traceback", "error_text", "ranks")}

    lines = [str(brief(report))]
    for rank, r in enumerate(report.get("ranks", [])):
        lines.append(f"rank {rank}: {brief(r)}\n{r.get('traceback', '')[-3000:]}")
    return "\n".join(lines)


def test_tp2_whole_model(request: pytest.FixtureRequest, wheel_tree: Any, tp_case: TpCase) -> None:
    report = tp_result(request, wheel_tree, tp_case)
    assert report["ok"], describe(report)
    ranks = report["ranks"]
    assert len(ranks) == TP, describe(report)
    moe = families.ROWS[tp_case.family]["kind"] == "moe"
    nsa = tp_case.family in families.NSA_FAMILIES
    for rank, r in enumerate(ranks):
        # sglang's choices on a PCIe box of 2 GPUs: custom all-reduce on, pynccl available.
        assert r["parallel"] == {"tp_size": TP, "custom_all_reduce": True,
                                 "custom_all_reduce_class": "CustomAllreduce", "pynccl": True}, describe(report)
        assert r["piecewise_runner"] == "PiecewiseCudaGraphRunner", describe(report)
        assert r["graph_breaks"] == 0, describe(report)
        assert r["graphs"] and r["captures"] > 0, describe(report)
        for pieces in r["graphs"]:
            captured = [op for p in pieces if not p["split"] for op in p["ops"]]
            split = [op for p in pieces if p["split"] for op in p["ops"]]
            assert FP4_QUANTIZE in captured and FP4_GEMM in captured, pieces
            assert ATTENTION in split and ATTENTION not in captured, pieces
            if moe:
                assert MOE in captured, pieces
            # The all-reduces: sglang's out-of-place op in captured pieces, custom all-reduce.
            methods = [m for p in pieces if not p["split"] for m in p["all_reduce_methods"]]
            assert methods and set(methods) == {"ca"}, pieces
            assert OUTPLACE_ALL_REDUCE not in split and INPLACE_ALL_REDUCE not in captured + split, pieces
        if nsa:
            assert_nsa(tp_case.stack, r)
        replay, eager = r["replay"], r["eager"]
        assert replay["static_tokens"] > replay["tokens"] == REPLAY_TOKENS, replay
        # The replay runs what an eager forward of the padded batch runs, collective by collective.
        assert replay["collectives"] and replay["collectives"] == eager["padded"]["collectives"], (replay, eager)
        hidden = families.ROWS[tp_case.family]["config"]["hidden_size"]
        assert ["custom_ar", "all_reduce", replay["static_tokens"] * hidden, "bfloat16"] in replay["collectives"]
        # ... and its logits look like the eager forward's of the real batch, on this rank's GPU.
        assert replay["logits"] == eager["real"]["logits"], (replay, eager)
        assert replay["logits"][2] == f"cuda:{rank}", replay
        vocab = families.ROWS[tp_case.family]["config"]["vocab_size"]
        assert replay["logits"][0] == [1, vocab], replay  # the vocab-parallel lm_head, gathered
    assert ranks[0]["replay"]["collectives"] == ranks[1]["replay"]["collectives"], describe(report)


# What sglang's GroupCoordinator.all_reduce runs on a PCIe box (NVML: no NVLink): the custom
# all-reduce for 2 GPUs up to its max_size, NCCL beyond it and for more GPUs (pynccl in
# piecewise graphs, torch.distributed's NCCL group eagerly).
PATHS = {
    2: {"small/eager": ["custom_ar"], "small/piecewise": ["custom_ar"],
        "large/eager": ["torch.distributed"], "large/piecewise": ["nccl"]},
    4: {"small/eager": ["torch.distributed"], "small/piecewise": ["nccl"],
        "large/eager": ["torch.distributed"], "large/piecewise": ["nccl"]},
}
PATHS[8] = PATHS[4]


def test_tp_all_reduce_paths_on_a_pcie_box(request: pytest.FixtureRequest, wheel_tree: Any,
                                            paths_case: PathsCase) -> None:
    report = tp_result(request, wheel_tree, paths_case)
    assert report["ok"], describe(report)
    for r in report["ranks"]:
        assert r["parallel"]["custom_all_reduce"] is (paths_case.tp == 2), r
        assert r["parallel"]["pynccl"] is True, r
        assert {k: v for k, v in r.items() if "/" in k} == PATHS[paths_case.tp], r


def without_all_reduces(pieces: list[dict[str, Any]]) -> list[tuple[bool, list[str]]]:
    return [(p["split"], [op for op in p["ops"] if op != OUTPLACE_ALL_REDUCE]) for p in pieces]


def test_tp2_differs_from_tp1_only_by_the_all_reduces(request: pytest.FixtureRequest, wheel_tree: Any,
                                                       tp_case: TpCase) -> None:
    """Each rank's piecewise graphs are the one-GPU model's, piece for piece, with sglang's
    all-reduce ops added in captured pieces (after the vocab-parallel embedding, each
    attention's o_proj, each MLP / MoE): no other op, split or piece differs (DP attention
    is off at TP 2; sglang's LayerCommunicator keeps the TP 1 layout), and the replays run
    the same split ops."""
    report = tp_result(request, wheel_tree, tp_case)
    twin = _RESULTS[tp_case.stack.name][tp_case.twin_id]
    assert report["ok"] and twin["ok"], (describe(report), describe(twin))
    layers = families.ROWS[tp_case.family]["config"]["num_hidden_layers"]
    for rank in report["ranks"]:
        assert len(rank["graphs"]) == len(twin["graphs"]), (rank["graphs"], twin["graphs"])
        for tp2, tp1 in zip(rank["graphs"], twin["graphs"], strict=True):
            assert without_all_reduces(tp2) == without_all_reduces(tp1), (tp2, tp1)
            assert not any(OUTPLACE_ALL_REDUCE in p["ops"] for p in tp1), tp1
            added = sum(p["ops"].count(OUTPLACE_ALL_REDUCE) for p in tp2)
            assert added == 1 + 2 * layers, tp2  # embedding, then attention and MLP per layer
        assert rank["replay"]["split_op_calls"] == twin["replay"]["split_op_calls"], (rank["replay"], twin["replay"])
