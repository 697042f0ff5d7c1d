"""Fixtures of tests/install: the fixture world of :mod:`harness.install_world`."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from harness.install_world import KERNEL, World, make_checkout, plain_wheel
from harness.releases import Index


@pytest.fixture(scope="session")
def fixture_pypi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PEP 691 index standing in for PyPI: the kernel dependency at 9.0.0 (locked) and
    9.1.0 (the newest, whose import fails)."""
    root = tmp_path_factory.mktemp("pypi")
    index = Index([plain_wheel(root, KERNEL, "9.0.0", {"sgl_kernel/__init__.py": ""}),
                   plain_wheel(root, KERNEL, "9.1.0", {"sgl_kernel/__init__.py": "raise ImportError('9.1')\n"})])
    with index.serve() as url:
        yield url


@pytest.fixture
def world(tmp_path: pathlib.Path, fixture_pypi: str, request: pytest.FixtureRequest) -> World:
    """A checkout with a built fixture stack; ``indirect`` True: its flashinfer fails at
    import as the real one does beside a flashinfer-cubin of another version."""
    mismatch = bool(getattr(request, "param", False))
    return World(repo=make_checkout(tmp_path, cubin_mismatch=mismatch), pypi=fixture_pypi)
