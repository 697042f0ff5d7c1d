"""Fixtures of tests/install: the fixture world of :mod:`harness.install_world`."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from harness.install_world import World, make_checkout, pypi_releases
from harness.releases import Index


@pytest.fixture(scope="session")
def fixture_pypi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PEP 691 index standing in for PyPI (:func:`harness.install_world.pypi_releases`)."""
    index = Index(pypi_releases(tmp_path_factory.mktemp("pypi")))
    with index.serve() as url:
        yield url


@pytest.fixture
def world(tmp_path: pathlib.Path, fixture_pypi: str, request: pytest.FixtureRequest) -> World:
    """A checkout with a built fixture stack; ``indirect`` True: its flashinfer fails at
    import as the real one does beside a flashinfer-cubin of another version."""
    mismatch = bool(getattr(request, "param", False))
    return World(repo=make_checkout(tmp_path, cubin_mismatch=mismatch), pypi=fixture_pypi)
