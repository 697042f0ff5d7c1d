"""Fixtures of the forward tests: a throw-away checkout with the engine's fixture series
(as tests/wheels uses) and the small fixture patches under fixtures/: one upstream already
has, one that conflicts, one upstream's formatter rejects, and an sglang fp4 patch that
sglang 0.5.12 supersedes.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Iterator

import pytest

from fp4graph.forward import prreport
from fp4graph.model import config
from fp4graph.model.config import Settings
from harness.checkout import fixture_requirements, make_checkout

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
FI = "flashinfer-python"
MARKER = "0001-add-fixture-marker.patch"


@pytest.fixture(scope="module", autouse=True)
def fixture_topics() -> Iterator[None]:
    """The fixture series carry fixture topics, not the fp4 topics projects require."""
    with fixture_requirements():
        yield


@pytest.fixture
def checkout(tmp_path: pathlib.Path) -> Settings:
    """A throw-away checkout with the engine fixture series; the user's artifact cache."""
    return make_checkout(tmp_path / "repo", config.default_cache_dir())


def add_series(settings: Settings, project: str, version: str, names: list[str]) -> pathlib.Path:
    """Replace ``project`` ``version``'s series with the named fixture patches."""
    directory = settings.patches_dir / project / version
    directory.mkdir(parents=True, exist_ok=True)
    kept = []
    for name in names:
        source = FIXTURES / name
        if source.is_file():
            shutil.copy(source, directory / name)
        kept.append(name)
    (directory / "series").write_text("".join(n + "\n" for n in kept))
    return directory


def has_tools(*names: str) -> bool:
    return all(shutil.which(n) for n in names)


def assert_claims_only_what_ran(body: str) -> None:
    """A pull-request body holds none of the strings issue 30 found (the pipeline refuses
    to write one that does: prreport.UNCLAIMED)."""
    found = [s for s in prreport.UNCLAIMED if s in body]
    assert not found, f"{found} in:\n{body}"
