"""Fixtures of the kernels tests: a throw-away checkout with the engine's fixture catalog
(tests/wheels/fixtures: flashinfer 0.6.3 and sglang 0.5.9 with one marker patch each,
revision 1), its wheels/ built by the engine, and a stand-in module library.

Stand-ins (what cannot exist on a CPU-only build host):

- ``stand_in_library``: a shared library standing for a compiled JIT module where only
  the packaging is tested: the running interpreter's ``_ctypes`` extension (a real ELF
  shared object of this machine, with its own glibc symbol versions);
- ``aarch64_stand_in``: the same file with its ELF header's machine set to AArch64 (what
  the packaging reads of another machine's module: the header and the version sections);
- in the probe's loader test (test_probe.py): the SM120 device queries
  (``fp4graph.verify.simulate``), the CUDA runtime torch's CUDA wheels load
  (``libcudart.so.13`` from the toolkit, on LD_LIBRARY_PATH), and, at build time, the
  driver's link stub a toolkit from NVIDIA's wheels lacks (``toolchain.link_stub``).
"""

from __future__ import annotations

import _ctypes
import pathlib
from collections.abc import Iterator

import pytest

from fp4graph.model import config
from fp4graph.wheels import build
from harness.checkout import FIXTURE_STACKS, STACK, fixture_requirements, make_checkout


@pytest.fixture(scope="module", autouse=True)
def fixture_topics() -> Iterator[None]:
    """The fixture series carry the fixture marker, not the fp4 topics projects require."""
    with fixture_requirements():
        yield


@pytest.fixture
def checkout(tmp_path: pathlib.Path) -> config.Settings:
    """A fixture checkout whose wheels/ holds the fixture stack, built by the engine (its
    build cache makes this cheap after the first time)."""
    settings = make_checkout(tmp_path / "repo", config.default_cache_dir(), stacks_toml=FIXTURE_STACKS)
    build.build(settings, [STACK])
    return settings


@pytest.fixture
def stand_in_library() -> pathlib.Path:
    return pathlib.Path(_ctypes.__file__)


@pytest.fixture
def aarch64_stand_in(stand_in_library: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    data = bytearray(stand_in_library.read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # e_machine: EM_AARCH64
    library = tmp_path / "aarch64-stand-in.so"
    library.write_bytes(bytes(data))
    return library
