"""nox -s tracing: each torch pin's session runs pytest on exactly the stacks that pin it
(`--stack NAME`, whole version parts: tests/harness/stack_selection.py), never a `-k` of
version substrings; FP4GRAPH_TRACING_K narrows with `-k` and leaves the installs out."""

from __future__ import annotations

import functools
import importlib.util
from types import ModuleType
from typing import Any

import pytest

from fp4graph.model import stacks
from harness.checkout import REPO

CATALOG = stacks.load(REPO / "patches" / "stacks.toml")


@functools.cache  # once: nox registers each session globally and warns on a second import
def noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fp4graph_noxfile", REPO / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeSession:
    """What a nox session is asked to run, recorded, not run."""

    def __init__(self) -> None:
        self.posargs: list[str] = []
        self.runs: list[tuple[str, ...]] = []

    def install(self, *args: str, **kwargs: Any) -> None:
        pass

    def run(self, *args: str, **kwargs: Any) -> str:
        self.runs.append(args)
        return ""

    def log(self, *args: Any) -> None:
        pass


def traced(torch: str) -> FakeSession:
    session = FakeSession()
    noxfile().tracing(session, torch=torch)
    return session


def pytest_args(session: FakeSession) -> tuple[str, ...]:
    runs = [run for run in session.runs if run[0] == "pytest"]
    assert len(runs) == 1, session.runs
    return runs[0]


@pytest.mark.parametrize("torch", sorted(CATALOG.stacks_by_torch()))
def test_each_session_selects_the_stacks_of_its_torch_pin(torch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FP4GRAPH_TRACING_K", raising=False)
    session = traced(torch)
    args = pytest_args(session)
    assert [a.removeprefix("--stack=") for a in args if a.startswith("--stack=")] == [
        s.name for s in CATALOG.stacks if s.torch == torch]
    assert "-k" not in args
    assert args[-3:] == ("tests/flashinfer", "tests/sglang", "tests/models")
    installs = [run[4] for run in session.runs
                if run[:4] == ("python", "-m", "fp4graph", "install") and "--platform" not in run]
    assert installs == [s.name for s in CATALOG.sglang_stacks() if s.torch == torch]


def test_the_narrowing_keywords_go_beside_the_stacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FP4GRAPH_TRACING_K", "sm121 and test_whole_model")
    torch = min(CATALOG.stacks_by_torch(), key=lambda t: tuple(int(n) for n in t.split(".")))
    session = traced(torch)
    args = pytest_args(session)
    assert args[args.index("-k") + 1] == "sm121 and test_whole_model"
    assert sum(a.startswith("--stack=") for a in args) == len(CATALOG.stacks_by_torch()[torch])
    assert not [run for run in session.runs if run[:3] == ("python", "-m", "fp4graph")]  # no installs

