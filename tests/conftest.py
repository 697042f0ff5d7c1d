"""Shared fixtures: pristine and patched upstream trees for the simulation tests."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable

import pytest

from fp4graph.model import config, series
from fp4graph.wheels import trees
from harness import stack_selection

REPO = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def wheel_tree() -> Callable[..., pathlib.Path]:
    """``wheel_tree(project, version, *, patched, filename=None)`` -> unpacked wheel.

    The directory holds exactly what the (pristine or patched) wheel installs,
    ready to go first on a child interpreter's PYTHONPATH.  Trees are cached
    across runs under the fp4graph cache, keyed by artifact hash and series hash.
    """
    settings = config.Settings.from_env(REPO)

    def get(
        project: str, version: str, *, patched: bool, filename: str | None = None
    ) -> pathlib.Path:
        return trees.materialize(settings, project, version, patched=patched, filename=filename)

    return get


def series_versions(project: str) -> list[str]:
    """The releases of ``project`` with a patch series in patches/, oldest first (a pull
    request series such as ``main-fb28d72`` is not a release and is tested in tests/forward)."""
    return series.series_versions(REPO / "patches", project)


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO


def pytest_report_header(config: pytest.Config) -> str:
    return f"fp4graph cache: {os.environ.get('FP4GRAPH_CACHE', '(default)')}"


def pytest_addoption(parser: pytest.Parser) -> None:
    stack_selection.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    stack_selection.configure(config)


@pytest.hookimpl(tryfirst=True)  # before -k / -m narrow it: a stack's tests are counted whole
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    stack_selection.select(config, items)
