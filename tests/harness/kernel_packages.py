"""FlashInfer's kernel packages (flashinfer-cubin, flashinfer-jit-cache) as trees a child
interpreter puts on its path beside a flashinfer tree.

- :func:`cubin_tree`: a real flashinfer-cubin wheel, a ``companions`` pin of
  patches/stacks.toml, fetched and sha256-checked by the engine (``fp4graph.wheels.fetch``,
  cached with the other artifacts) and unpacked once under the cache's ``trees/``.  Its
  ``.cubin`` blobs (99 % of the wheel's bytes) are left out: its Python
  (``flashinfer_cubin/__init__.py``, ``_build_meta.py``), headers, checksum and lock files
  and its dist-info are the wheel's own, each checked against the wheel's RECORD.
- :func:`cubin_stand_in`: a flashinfer-cubin of a release PyPI does not have (it stops at
  0.6.13): the Python of a real flashinfer-cubin tree with its ``_build_meta`` and
  dist-info saying ``version``.
- :func:`jit_cache_stand_in`: a flashinfer-jit-cache (FlashInfer's own index, not PyPI;
  gigabytes of compiled modules): a ``flashinfer_jit_cache`` package with ``__version__``,
  ``get_jit_cache_dir()`` (as the real package's ``__init__.py``) and, for 0.7.x's loader
  (``jit/env.py`` ``_get_aot_providers``), ``get_jit_cache_providers()`` returning one
  provider record with the attributes that loader reads; plus its dist-info, and
  optionally empty ``<name>/<name>.so`` files for the modules it holds.
"""

from __future__ import annotations

import pathlib
import shutil
from collections.abc import Sequence

from wheel.wheelfile import WheelFile

from fp4graph.model.config import Settings
from fp4graph.model.files import atomic_directory
from fp4graph.model.stacks import ArtifactFile
from fp4graph.wheels.fetch import fetch

CUBIN = "flashinfer-cubin"
SKIPPED_SUFFIX = ".cubin"  # the kernel blobs, read only on a GPU


def unpack_without_blobs(wheel: pathlib.Path, dest: pathlib.Path) -> int:
    """Extract every member of ``wheel`` but the ``.cubin`` blobs into ``dest`` (each
    checked against RECORD); return how many were left out."""
    skipped = 0
    with WheelFile(wheel) as wf:
        for info in wf.infolist():
            if info.filename.endswith(SKIPPED_SUFFIX):
                skipped += 1
                continue
            wf.extract(info, dest)
    return skipped


def cubin_tree(settings: Settings, pinned: ArtifactFile) -> pathlib.Path:
    """The unpacked real flashinfer-cubin wheel ``pinned``, without its blobs (cached)."""
    if pinned.project != CUBIN:
        raise ValueError(f"{pinned.filename} is not a {CUBIN} wheel")
    dest = settings.cache_dir / "trees" / f"{pinned.filename}-{pinned.sha256[:16]}-no-cubins"
    if dest.exists():
        return dest
    wheel = fetch(settings, pinned.project, pinned)
    with atomic_directory(dest, replace=False) as tmp:
        unpack_without_blobs(wheel, tmp)
    return dest


def _dist_info(root: pathlib.Path, name: str, version: str) -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    (info / "top_level.txt").write_text(name.replace("-", "_") + "\n", encoding="utf-8")


def cubin_stand_in(dest: pathlib.Path, version: str, *, like: pathlib.Path) -> pathlib.Path:
    """A flashinfer-cubin ``version`` in ``dest``: the real tree ``like``'s
    ``flashinfer_cubin/__init__.py``, with ``_build_meta`` and dist-info of ``version``."""
    package = dest / "flashinfer_cubin"
    (package / "cubins").mkdir(parents=True)
    shutil.copy(like / "flashinfer_cubin" / "__init__.py", package / "__init__.py")
    (package / "_build_meta.py").write_text(
        '"""Build metadata for flashinfer-cubin package."""\n'
        f'__version__ = "{version}"\n__git_version__ = "unknown"\n',
        encoding="utf-8",
    )
    _dist_info(dest, CUBIN, version)
    return dest


_JIT_CACHE_INIT = '''"""Stand-in for flashinfer-jit-cache {version} (fp4graph's tests/harness/kernel_packages.py)."""

import types
from pathlib import Path

jit_cache_dir = Path(__file__).parent / "jit_cache"
__version__ = "{version}"
__git_version__ = "unknown"


def get_jit_cache_dir() -> str:
    return str(jit_cache_dir)


def get_jit_cache_providers():
    """The provider packages this shim installs (0.7.x's loader reads these attributes)."""
    return [
        types.SimpleNamespace(
            provider_id="sm120f",
            distribution="flashinfer-jit-cache-sm120f",
            version=__version__,
            jit_cache_dir=str(Path(__file__).parent / "providers" / "sm120f"),
            cuda_architectures=("sm120f",),
            modules={modules!r},
        )
    ]
'''


def jit_cache_stand_in(
    dest: pathlib.Path, version: str, modules: Sequence[str] = ()
) -> pathlib.Path:
    """A flashinfer-jit-cache ``version`` (e.g. ``0.6.3+cu130``) in ``dest``.

    ``modules``: the compiled modules it holds, each ``<name>/<name>.so`` (empty files:
    a compiled module cannot load on a CPU, so a test stands in for the load) in its
    directory (0.6.x's ``get_jit_cache_dir()``) and its SM120 provider (0.7.x); without
    them the provider lists ``fp4_quantization_120f`` and holds no file."""
    package = dest / "flashinfer_jit_cache"
    (package / "jit_cache").mkdir(parents=True)
    (package / "providers" / "sm120f").mkdir(parents=True)
    for directory in (package / "jit_cache", package / "providers" / "sm120f"):
        for name in modules:
            (directory / name).mkdir()
            (directory / name / f"{name}.so").write_bytes(b"")
    listed = tuple(modules) or ("fp4_quantization_120f",)
    (package / "__init__.py").write_text(
        _JIT_CACHE_INIT.format(version=version, modules=listed), encoding="utf-8"
    )
    _dist_info(dest, "flashinfer-jit-cache", version)
    return dest
