"""pytest --stack (nox -s tracing's selection): whole version parts, never substrings."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from fp4graph.model import stacks
from harness import stack_selection
from harness.stack_selection import REPO, id_names

CATALOG = stacks.load(REPO / "patches" / "stacks.toml")


@pytest.mark.parametrize(
    ("test_id", "versions", "named"),
    [
        pytest.param("0.6.1-sm120", {"0.6.1"}, True, id="bare-version"),
        pytest.param("0.6.12-sm120", {"0.6.1"}, False, id="longer-version"),
        pytest.param("0.6.14-13.0-12.8", {"0.6.1", "13.0"}, True, id="other-part"),
        pytest.param("sglang-0.5.12-patched-glm5", {"0.5.12"}, True, id="stack-name"),
        pytest.param("sglang-0.5.12.post1-patched-glm5", {"0.5.12"}, False, id="post-release"),
        pytest.param("flashinfer-0.6.18-sglang-0.5.20-ours-llama-sm120", {"0.6.18"}, True, id="served"),
        pytest.param("tp2-sglang-0.5.9-deepseek-v3.2-no-cuda-graph", {"3.2", "v3"}, False, id="family"),
    ],
)
def test_a_version_names_a_whole_part_of_the_id(test_id: str, versions: set[str], named: bool) -> None:
    assert id_names(test_id, versions) is named


def test_each_torch_session_selects_the_ids_of_its_own_stacks_only() -> None:
    """Ids as the tests spell them, from every stack of the catalog: each nox -s tracing session
    (the stacks of one torch pin) keeps exactly those naming one of its stacks' versions. The
    catalog has versions that prefix others (0.6.1 / 0.6.12, 0.5.12 / 0.5.12.post1), so the
    substring match `-k` made would fail here."""
    versions = {v for s in CATALOG.stacks for v in CATALOG.versions(s).values()}
    assert any(a != b and b.startswith(a) for a in versions for b in versions), "no prefix pair left"
    # "0.6.14-sm120" as tests/flashinfer spells a version, "sglang-0.5.12-patched-glm5-sm121" as
    # tests/models a stack (the version its name carries).
    ids = {f"{v}-sm120": v for v in versions} | {
        f"{s.name}-patched-glm5-sm121": s.name.rsplit("-", 1)[1] for s in CATALOG.stacks}
    by_torch = CATALOG.stacks_by_torch()
    assert by_torch, "no stack pins a torch: nox -s tracing would have no session"
    for torch, names in by_torch.items():
        own = stack_selection.stack_versions(CATALOG, names)
        kept, unnamed = stack_selection.split(ids, own)
        wanted = set().union(*own.values())
        selected = {i for i, keep in zip(ids, kept, strict=True) if keep}
        assert selected == {i for i, v in ids.items() if v in wanted}, torch
        assert not unnamed, (torch, unnamed)


def test_split_reports_the_stacks_no_id_names() -> None:
    kept, unnamed = stack_selection.split(
        ["sglang-0.5.12.post1-x", None, "0.6.11.post1"],
        {"sglang-0.5.12": {"0.5.12"}, "sglang-0.5.12.post1": {"0.5.12.post1", "0.6.11.post1"}})
    assert kept == [True, False, True] and unnamed == ["sglang-0.5.12"]


class FakeConfig:
    """What :func:`stack_selection.select` asks of pytest's config, recorded."""

    def __init__(self, *names: str) -> None:
        self.names, self.hook = list(names), self
        self.reports: list[pytest.CollectReport] = []
        self.deselected: list[object] = []

    def getoption(self, name: str) -> list[str]:
        assert name == "stack"
        return self.names

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.reports.append(report)

    def pytest_deselected(self, items: list[object]) -> None:
        self.deselected += items


def items(*ids: str | None) -> list[Any]:
    return [SimpleNamespace(callspec=SimpleNamespace(id=i)) if i else SimpleNamespace() for i in ids]


def test_select_keeps_the_stack_s_items() -> None:
    config, collected = FakeConfig("sglang-0.5.12"), items(
        "sglang-0.5.12-llama", "sglang-0.5.12.post1-llama", "0.6.11.post1", None, "0.6.12")
    kept = [collected[0], collected[2]]
    stack_selection.select(config, collected)  # type: ignore[arg-type]
    assert collected == kept and len(config.deselected) == 3 and not config.reports


@pytest.mark.parametrize(
    ("names", "error"),
    [
        pytest.param(["sglang-0.5.1"], "--stack: no stack 'sglang-0.5.1' in patches/stacks.toml", id="unknown"),
        pytest.param(["sglang-0.5.12", "flashinfer-0.6.18"], "--stack: no collected test names stack(s) "
                     "flashinfer-0.6.18 (flashinfer-0.6.18: versions 0.6.18) among the 2 collected",
                     id="no-test"),
    ],
)
def test_select_fails_the_collection_and_keeps_nothing(names: list[str], error: str) -> None:
    config, collected = FakeConfig(*names), items("sglang-0.5.12-llama", None)
    stack_selection.select(config, collected)  # type: ignore[arg-type]
    assert [(r.failed, str(r.longrepr)[:len(error)]) for r in config.reports] == [(True, error)]
    assert collected == [] and len(config.deselected) == 2


TESTS = '''
import pytest

@pytest.mark.parametrize("case", ["sglang-0.5.12-llama", "sglang-0.5.12.post1-llama", "0.6.11.post1",
                                  "0.6.1-sm120", "0.6.12-sm120"])
def test_case(case):
    pass

def test_plain():
    pass

@pytest.mark.parametrize("case", ["0.6.17-sm120"])
def test_skipped(case):
    pytest.skip("no torch for it here")
'''
CONFTEST = '''
from harness import stack_selection

def pytest_addoption(parser):
    stack_selection.add_option(parser)

def pytest_configure(config):
    stack_selection.configure(config)

def pytest_collection_modifyitems(config, items):
    stack_selection.select(config, items)
'''


def test_under_xdist_a_stack_whose_every_test_skipped_fails_the_run(tmp_path: pathlib.Path) -> None:
    """As nox -s tracing runs pytest (-n): the workers select, the controller, which sees
    every report, fails the run for flashinfer-0.6.17, whose only test skipped."""
    (tmp_path / "test_cases.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    path = os.pathsep.join([str(REPO / "tests"), str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "2", str(tmp_path),
         "--stack", "sglang-0.5.12", "--stack", "flashinfer-0.6.17"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stdout + result.stderr
    assert sorted(re.findall(r"PASSED test_cases.py::test_case\[(.*?)\]", result.stdout)) == [
        "0.6.11.post1", "sglang-0.5.12-llama"]
    assert "--stack flashinfer-0.6.17: all 1 of its selected tests skipped" in result.stdout
    assert "2 passed, 1 skipped" in result.stdout
