"""Load flashinfer trees as private copies, side by side in one process.

The eager A/B of ``bench_fp4.py`` compares the patched and the pristine public functions.
To make it symmetric, BOTH trees are loaded the same way, each twice (two copies of one tree
are the method's own control), under private package names:

    _fi_patched_a, _fi_patched_b    <- the patched tree (the installed package's files)
    _fi_pristine_a, _fi_pristine_b  <- the pristine wheel of the same version

The whole package cannot be imported twice (its ``__init__`` and some modules import
``flashinfer.*`` by absolute name), but the fp4 hot path imports only relatively:
``fp4_quantization`` -> ``.api_logging``, ``.jit`` (``jit.env``, ``jit.core``,
``jit.cpp_ext``), ``.utils``; ``activation`` -> ``.fp4_quantization``.  ``load`` makes an
empty package object named ``<name>`` whose ``__path__`` is the tree's ``flashinfer/``
directory (its ``__init__`` is never run) and imports ``<name>.<module>`` from it: every
module it pulls in is that tree's file, under the private name.  ``FLASHINFER_WORKSPACE_BASE``
is read at import of ``jit.env``, so each tree gets its own JIT workspace (copies of one tree
share it: identical sources and flags, one build).

The patched tree registers real torch custom ops at import (``flashinfer::fp4_quantize``,
...).  A second copy would register the same names again, which torch refuses, so while a
copy is imported ``torch.library.custom_op("flashinfer::X", ...)`` registers ``<name>::X``
instead.  The same shim is active for every copy (the pristine tree never calls it).  It
changes nothing on the eager path: the public functions reach ``torch.ops.flashinfer.*``
only while compiling.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import pathlib
import sys
import types
import zipfile
from collections.abc import Iterator
from typing import Any


def unpack_wheel(wheel: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """Unzip ``wheel`` into ``dest`` once; return the directory that holds ``flashinfer/``."""
    marker = dest / ".unpacked"
    if not marker.exists():
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest)
        marker.write_text(wheel.name)
    return dest


def as_tree(path: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """A wheel is unpacked under ``dest``; a directory is used as it is."""
    return unpack_wheel(path, dest) if path.suffix == ".whl" else path


def installed_tree() -> pathlib.Path:
    """The directory that holds the installed ``flashinfer/`` package (not imported)."""
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("no flashinfer package is installed: pass --patched")
    return pathlib.Path(list(spec.submodule_search_locations)[0]).parent


@contextlib.contextmanager
def _env(name: str, value: str) -> Iterator[None]:
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextlib.contextmanager
def _private_op_namespace(name: str) -> Iterator[None]:
    """While importing copy ``name``: custom ops ``flashinfer::X`` register as ``name::X``."""
    import torch

    real = torch.library.custom_op

    def custom_op(qualname: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(qualname, str) and qualname.startswith("flashinfer::"):
            qualname = name + "::" + qualname.split("::", 1)[1]
        return real(qualname, *args, **kwargs)

    torch.library.custom_op = custom_op  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.library.custom_op = real  # type: ignore[assignment]


def load(
    tree: pathlib.Path,
    workspace: pathlib.Path,
    module: str,
    name: str,
) -> types.ModuleType:
    """Import ``<tree>/flashinfer/<module>.py`` as ``<name>.<module>``."""
    pkg_dir = tree / "flashinfer"
    if not (pkg_dir / "fp4_quantization.py").is_file():
        raise FileNotFoundError(f"{pkg_dir} has no fp4_quantization.py: not a flashinfer tree")
    if name in sys.modules:
        have = list(getattr(sys.modules[name], "__path__", []))
        if have != [str(pkg_dir)]:
            raise RuntimeError(f"{name} is already loaded from {have}, not {pkg_dir}")
    else:
        spec = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
        pkg = importlib.util.module_from_spec(spec)
        pkg.__path__ = [str(pkg_dir)]
        sys.modules[name] = pkg
    workspace.mkdir(parents=True, exist_ok=True)
    with _env("FLASHINFER_WORKSPACE_BASE", str(workspace)), _private_op_namespace(name):
        mod = importlib.import_module(f"{name}.{module}")
    return mod


def version(tree: pathlib.Path) -> str:
    ns: dict[str, str] = {}
    meta = tree / "flashinfer" / "_build_meta.py"
    if meta.is_file():
        exec(meta.read_text(), ns)  # noqa: S102 - a two-line version file of the pinned wheel
    return ns.get("__version__", "?")
