"""Pack built modules as a flashinfer-jit-cache wheel that FlashInfer's own loader reads.

The layout is upstream's package (flashinfer-jit-cache/ in the flashinfer repository),
written here: ``flashinfer_jit_cache/__init__.py`` with ``get_jit_cache_dir()`` (the
0.6.x loader, ``jit/env.py`` ``_get_aot_dir``, reads it, and ``JitSpec.aot_path`` is
``<dir>/<name>/<name>.so``), ``_build_meta.py`` with ``__version__`` and
``__git_version__`` (the flashinfer release's commit), and the modules under
``jit_cache/``; plus ``fp4graph.json``, what the wheel was built from (the patched
flashinfer wheel's sha256, the arch, the toolchain, each module's kind and sha256).

Reproducible: the tree is written from the records only, every file's mode is fixed,
``wheel pack`` sorts the entries and stamps them with SOURCE_DATE_EPOCH (the series'
Last-Update, as the patched wheels), and the tag comes from the modules themselves
(:mod:`.elf`).  The version is ``<flashinfer release>+cu<XY>.fp4graph.<N>.sm<arch>``
(:func:`.targets.wheel_version`): FlashInfer compares only the release with its own
(``kernel-package-version``), so it loads beside ``flashinfer-python==X+fp4graph.N``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.version import Version

from ..repack import pack
from . import elf
from .targets import PROJECT, Arch

PACKAGE = "flashinfer_jit_cache"
RECORD = "fp4graph.json"

_INIT = '''"""Prebuilt FlashInfer JIT modules (flashinfer-jit-cache), built by fp4graph.

FlashInfer loads ``<get_jit_cache_dir()>/<name>/<name>.so`` in place of compiling the
module ``name``; fp4graph.json says what these were built from.
"""

from pathlib import Path

from ._build_meta import __git_version__, __version__

jit_cache_dir = Path(__file__).parent / "jit_cache"


def get_jit_cache_dir() -> str:
    """The directory holding the prebuilt modules."""
    return str(jit_cache_dir)


__all__ = ["__git_version__", "__version__", "get_jit_cache_dir", "jit_cache_dir"]
'''


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Contents:
    """Everything a kernels wheel holds, as data: its bytes follow from this alone."""

    version: Version
    arch: Arch
    cuda: str  # the nvcc release, 13.0
    flashinfer: str  # the requirement it was built from: flashinfer-python==0.6.3+fp4graph.4
    flashinfer_sha256: str
    flashinfer_commit: str  # the release's git commit (stacks.toml source), or "unknown"
    modules: Sequence[tuple[str, str, pathlib.Path, str]]  # (kind, name, library, sha256)
    toolchain: Mapping[str, str]

    def record(self) -> dict[str, Any]:
        return {
            "project": PROJECT,
            "version": str(self.version),
            "arch": str(self.arch),
            "cuda": self.cuda,
            "flashinfer": self.flashinfer,
            "flashinfer_sha256": self.flashinfer_sha256,
            "modules": [{"kind": k, "name": n, "sha256": s} for k, n, _, s in self.modules],
            "toolchain": dict(sorted(self.toolchain.items())),
        }


def _metadata(contents: Contents) -> str:
    modules = ", ".join(name for _, name, _, _ in contents.modules)
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {PROJECT}\n"
        f"Version: {contents.version}\n"
        f"Summary: Prebuilt FlashInfer fp4 JIT modules for SM{contents.arch.major}{contents.arch.minor} "
        f"({contents.arch}), CUDA {contents.cuda}, built by fp4graph from {contents.flashinfer}\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Description-Content-Type: text/plain\n"
        "\n"
        f"FlashInfer JIT modules ({modules}) compiled ahead of time for {contents.arch}, "
        f"from {contents.flashinfer} (sha256 {contents.flashinfer_sha256}); install beside it "
        "to skip their JIT build at first start. See flashinfer_jit_cache/fp4graph.json.\n"
    )


def write_tree(contents: Contents, tree: pathlib.Path) -> pathlib.Path:
    """The unpacked wheel in ``tree``; returns its dist-info directory."""
    package = tree / PACKAGE
    (package / "jit_cache").mkdir(parents=True)
    (package / "__init__.py").write_text(_INIT, encoding="utf-8")
    (package / "_build_meta.py").write_text(
        '"""Build metadata for flashinfer-jit-cache package."""\n'
        f'__version__ = "{contents.version}"\n__git_version__ = "{contents.flashinfer_commit}"\n',
        encoding="utf-8",
    )
    (package / RECORD).write_text(json.dumps(contents.record(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    libraries = []
    for _kind, name, library, _sha in contents.modules:
        dest = package / "jit_cache" / name / f"{name}.so"
        dest.parent.mkdir()
        shutil.copyfile(library, dest)
        libraries.append(dest)
    info = tree / f"{PACKAGE}-{contents.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(_metadata(contents), encoding="utf-8")
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: fp4graph\nRoot-Is-Purelib: false\n"
        f"Tag: py3-none-{elf.platform_tag(libraries)}\n",
        encoding="utf-8",
    )
    (info / "top_level.txt").write_text(f"{PACKAGE}\n", encoding="utf-8")
    for path in tree.rglob("*"):
        path.chmod(0o755 if path.is_dir() or path.suffix == ".so" else 0o644)
    return info


def build_wheel(contents: Contents, dest_dir: pathlib.Path, source_date_epoch: int) -> pathlib.Path:
    """``flashinfer_jit_cache-<version>-py3-none-<platform>.whl`` in ``dest_dir``."""
    with tempfile.TemporaryDirectory(prefix="kernels-wheel-") as tmp:
        tree = pathlib.Path(tmp) / "tree"
        write_tree(contents, tree)
        return pack(tree, dest_dir, source_date_epoch)
