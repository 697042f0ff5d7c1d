"""Fixtures of the wheels tests: a throw-away checkout whose patches/ holds the fixture series
and the fixture catalog (fixtures/patches/stacks.toml: fixed revisions, one stack), so the
engine tests do not change with the repository's stacks."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator

import pytest

from fp4graph.model import config
from harness import checkout as harness_checkout
from harness.checkout import FIXTURE_STACKS, REPO, STACK, fixture_requirements

__all__ = ["REPO", "STACK", "make_checkout", "snapshot"]


def make_checkout(root: pathlib.Path, cache: pathlib.Path) -> config.Settings:
    """A throw-away checkout with the fixture series and the fixture catalog."""
    return harness_checkout.make_checkout(root, cache, stacks_toml=FIXTURE_STACKS)


@pytest.fixture(scope="module", autouse=True)
def fixture_topics() -> Iterator[None]:
    """The fixture series carry the fixture marker, not the fp4 topics projects require."""
    with fixture_requirements():
        yield


@pytest.fixture(scope="session")
def shared_cache() -> pathlib.Path:
    """The user's artifact cache: pinned upstream files are downloaded once."""
    return config.default_cache_dir()


@pytest.fixture
def checkout(tmp_path: pathlib.Path, shared_cache: pathlib.Path) -> config.Settings:
    return make_checkout(tmp_path / "repo", shared_cache)


@pytest.fixture
def own_build_cache(
    checkout: config.Settings, shared_cache: pathlib.Path, tmp_path: pathlib.Path
) -> config.Settings:
    """A checkout with an empty cache of its own whose upstream files come from the
    shared cache: every wheel is really built, and tests may tamper with the cache."""
    return dataclasses.replace(
        checkout, cache_dir=tmp_path / "cache", find_links=(shared_cache / "artifacts",)
    )


@pytest.fixture
def isolated(checkout: config.Settings, tmp_path: pathlib.Path) -> config.Settings:
    """A checkout with its own empty cache (for fetch and tamper tests)."""
    return dataclasses.replace(checkout, cache_dir=tmp_path / "cache")


def snapshot(directory: pathlib.Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }
