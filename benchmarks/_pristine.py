"""Load a pristine flashinfer tree beside the installed (patched) one, in one process.

The whole package cannot be imported twice (its modules import ``flashinfer.*`` by absolute
name here and there), but the fp4 hot path imports only relatively: ``fp4_quantization`` ->
``.api_logging``, ``.jit`` (``jit.env``, ``jit.core``, ``jit.cpp_ext``), ``.utils``.  We make
an empty package object named ``_fi_pristine`` whose ``__path__`` is the pristine tree's
``flashinfer/`` directory (its ``__init__`` is never run) and import
``_fi_pristine.fp4_quantization`` from it: every module it pulls in is the pristine file,
under the private name, with its own JIT workspace (``FLASHINFER_WORKSPACE_BASE`` is read at
import of ``jit.env``), so the two trees never share a build directory.
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

PRIVATE = "_fi_pristine"


def unpack_wheel(wheel: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """Unzip ``wheel`` into ``dest`` once; return the directory that holds ``flashinfer/``."""
    marker = dest / ".unpacked"
    if not marker.exists():
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest)
        marker.write_text(wheel.name)
    return dest


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


def load(
    tree: pathlib.Path,
    workspace: pathlib.Path,
    module: str = "fp4_quantization",
    name: str = PRIVATE,
) -> types.ModuleType:
    """Import ``<tree>/flashinfer/<module>.py`` as ``<name>.<module>``."""
    pkg_dir = tree / "flashinfer"
    if not (pkg_dir / "fp4_quantization.py").is_file():
        raise FileNotFoundError(f"{pkg_dir} has no fp4_quantization.py: not a flashinfer tree")
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
        pkg = importlib.util.module_from_spec(spec)
        pkg.__path__ = [str(pkg_dir)]
        sys.modules[name] = pkg
    workspace.mkdir(parents=True, exist_ok=True)
    with _env("FLASHINFER_WORKSPACE_BASE", str(workspace)):
        mod = importlib.import_module(f"{name}.{module}")
    return mod


def version(tree: pathlib.Path) -> str:
    ns: dict[str, str] = {}
    meta = tree / "flashinfer" / "_build_meta.py"
    if meta.is_file():
        exec(meta.read_text(), ns)  # noqa: S102 - a two-line version file of the pinned wheel
    return ns.get("__version__", "?")
