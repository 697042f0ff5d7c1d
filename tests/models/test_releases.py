"""sglang releases measured pristine: the whole-model simulation on a release we ship no
stack for, with its torch.compile piecewise runner selected the way a user selects it there.

A release pinned in patches/stacks.toml without a stack (``python -m fp4graph pin sglang X
--no-stack``) runs with its own wheel and the flashinfer it pins, both pristine
(tests/harness/models/simulation.py; the stand-ins: modelsim.py's docstring), and each
family must do what :data:`harness.models.expected.PRISTINE_RELEASES` recorded for it
(docs/coverage.md is the same table): work (0 graph breaks in the piecewise compile, the
fp4 ops inside captured pieces, attention a split op), or fail with the recorded first
error at the recorded place.  A family the release turns piecewise off for on its own
(``piecewise_off``: NSA models on 0.5.12.post1) must be refused by the release's own
``ServerArgs`` and is traced as if it were on (``--enforce-piecewise-cuda-graph``).

A pinned release without a row, or a row for a release not pinned, fails collection
(:func:`harness.models.expected.pristine_release`): a release is never skipped silently.

Which part runs: ``FP4GRAPH_MODELS=full`` (``nox -s tracing``) every family the release
has, both MoE runner backends, both start orders, SM120 and SM121; CI the newest measured
release that this venv's torch measures (:func:`ci_release`) with its :data:`CI_FAMILIES` on
SM120 in the default start order (one child).  A release pinning a newer torch (0.5.22+:
2.14.1) runs under ``$FP4GRAPH_TORCH_PYTHON`` (:func:`harness.models.simulation.python_for`)
and fails, naming it, where that is not set.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import pytest

from fp4graph.model.families import by_architecture
from fp4graph.model.stacks import exact_pins
from harness.models import expected, families, simulation
from harness.models.reports import GroupedReports
from harness.targets import full_matrix, sm12x_gpus

FULL = full_matrix()
RELEASES = simulation.pristine_releases()
# CI: the seed user's (NSA) model, one child.  A pristine release's Llama is held to its row in
# CI by test_flashinfer_only.py (sglang 0.5.21 beside our FlashInfer), which pays for its pair so.
CI_FAMILIES = ("glm5",)


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    moe_runner_backend: str = "auto"
    cuda_graph: bool = True
    gpu: str = "sm120"

    @property
    def id(self) -> str:
        order = "cuda-graph" if self.cuda_graph else "no-cuda-graph"
        return f"{self.family}-{self.moe_runner_backend}-{order}-{self.gpu}"

    def request(self) -> dict[str, Any]:
        nsa = self.family in families.NSA_FAMILIES
        return simulation.case(self.family, moe_runner_backend=self.moe_runner_backend,
                               cuda_graph=self.cuda_graph, replay_tokens=expected.REPLAY_TOKENS if nsa else None)


def release_families(sglang: str) -> list[str]:
    """The rows of families.py whose model class the release has."""
    out = []
    for name in families.names():
        family = by_architecture(families.ROWS[name]["architecture"])
        if family is None or family.in_sglang(sglang):
            out.append(name)
    return out


def ci_release() -> simulation.SglangStack:
    """The newest measured release this venv's torch measures (CI's torch: 2.13.0) whose
    :data:`CI_FAMILIES` work there (a family the harness does not yet measure on a release,
    ``harness_gap``, would leave CI checking a harness error)."""
    def measured(target: simulation.SglangStack) -> bool:
        row = expected.pristine_release(target.sglang)
        return all(row.families[name].works for name in CI_FAMILIES if name in row.families)

    return [t for t in RELEASES if measured(t) and simulation.python_for(expected.pristine_release(t.sglang).torch)
            == sys.executable][-1]


def matrix(target: simulation.SglangStack) -> list[Case]:
    if not FULL:
        if target != CI:
            return []
        return [Case(name) for name in CI_FAMILIES if name in release_families(target.sglang)]
    out = []
    for gpu in sm12x_gpus():
        for name in release_families(target.sglang):
            moe = families.ROWS[name]["kind"] == "moe"
            for backend in ("auto", "flashinfer_cutlass") if moe else ("auto",):
                out += [Case(name, backend, order, gpu) for order in (True, False)]
    return out


CI = None if FULL else ci_release()
PARAMS = [pytest.param(t, c, id=f"{t.name}-pristine-{c.id}") for t in RELEASES for c in matrix(t)]
_REPORTS = GroupedReports()


def report_of(request: pytest.FixtureRequest, wheel_tree: Any, target: simulation.SglangStack,
              case: Case) -> dict[str, Any]:
    """The report of ``case``; the first call for a (release, GPU) runs every selected case
    of that pair in one child."""
    def run(cases: list[Case]) -> list[dict[str, Any]]:
        torch_pin = expected.pristine_release(target.sglang).torch
        python = simulation.python_for(torch_pin)
        if python is None:
            pytest.fail(f"sglang {target.sglang} pins torch {torch_pin}, newer than this venv's: point "
                        f"${simulation.TORCH_PYTHON} at a venv's python with torch {torch_pin}, its torchvision "
                        "and this checkout's test requirements")
        return simulation.run(wheel_tree, target, patched=False, cases=[c.request() for c in cases],
                              gpu=case.gpu, python=python)

    return _REPORTS.report(request, case, run, target=target)


def test_every_measured_release_has_a_row_and_every_row_is_pinned() -> None:
    """The table and stacks.toml agree both ways (collection already raised for a pinned
    release without a row)."""
    assert sorted(expected.PRISTINE_RELEASES) == sorted(t.sglang for t in RELEASES)


@pytest.mark.parametrize("target", simulation.tier_pristine_releases(), ids=lambda t: t.name)
def test_row_pins_are_the_wheels(wheel_tree: Any, target: simulation.SglangStack) -> None:
    """flashinfer-python, torch and transformers of the row are the ones the release's
    wheel METADATA pins exactly, and the row names every family the release has."""
    tree = wheel_tree("sglang", target.sglang, patched=False)
    metadata = next(tree.glob("sglang-*.dist-info/METADATA"))
    row = expected.pristine_release(target.sglang)
    pins = exact_pins(metadata.read_text(), str(metadata))
    assert (pins["flashinfer-python"], pins["torch"], pins["transformers"]) == (
        row.flashinfer, row.torch, row.transformers), pins
    assert sorted(row.families) == sorted(release_families(target.sglang))


@pytest.mark.parametrize(("target", "case"), PARAMS)
def test_pristine_release(request: pytest.FixtureRequest, wheel_tree: Any, target: simulation.SglangStack,
                          case: Case) -> None:
    report = report_of(request, wheel_tree, target, case)
    assert report["torch_cuda"] == simulation.simulated_cuda(target, case.gpu), expected.describe(report)  # its torch's
    expected.assert_release_outcome(target.sglang, case.family, case.gpu, case.cuda_graph, report)
