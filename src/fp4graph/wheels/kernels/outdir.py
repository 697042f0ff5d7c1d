"""Put kernels wheels into ``wheels/`` beside the stacks' wheels, all or nothing.

``wheels/`` is rebuilt in a staging directory (the wheels hard-linked, every file that
changes written anew) and swapped into place, as ``nox -s wheels`` does: a failed or
interrupted call leaves it as it was.  What changes: the new wheels (a wheel of the same
name is replaced: ``wheels/`` is not the published index, which never overwrites), their
PEP 658 ``.metadata`` files, ``simple/``, ``SHA256SUMS`` and ``manifest.json``'s
``kernels``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
from collections.abc import Sequence

from ...model import manifest
from ...model.files import atomic_directory, recover
from ...model.manifest import BuiltKernels, Manifest
from ..index import write_index, write_metadata_files

SUMS = "SHA256SUMS"
_REWRITTEN = {SUMS, manifest.FILENAME, "simple"}


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _sums(current: pathlib.Path, replaced: set[str], added: Sequence[tuple[str, str]]) -> str:
    """``current``'s lines (``sha256  name``, the wheels and locks of ``nox -s wheels``) but
    those of ``replaced``, plus ``added`` (name, sha256), sorted by name as it writes them."""
    lines = {}
    for line in current.read_text().splitlines() if current.exists() else []:
        sha, _, name = line.partition("  ")
        if name and name not in replaced:
            lines[name] = sha
    lines.update(dict(added))
    return "".join(f"{sha}  {name}\n" for name, sha in sorted(lines.items()))


def add_kernels(wheels_dir: pathlib.Path, built: Sequence[tuple[pathlib.Path, BuiltKernels]]) -> Manifest:
    """Add the wheels ``built`` (a file and its record) to ``wheels_dir``; the manifest written."""
    recover(wheels_dir)
    current = manifest.read_built(wheels_dir)
    names = {record.filename for _, record in built}
    with atomic_directory(wheels_dir, replace=True) as staging:
        for entry in sorted(wheels_dir.iterdir()):
            if entry.name in _REWRITTEN or entry.name in names or entry.name.removesuffix(".metadata") in names:
                continue
            if entry.is_dir():
                shutil.copytree(entry, staging / entry.name, symlinks=True, copy_function=_link_or_copy)
            elif entry.suffix == ".whl":
                _link_or_copy(str(entry), str(staging / entry.name))
            else:
                shutil.copy2(entry, staging / entry.name)
        for path, record in built:
            shutil.copyfile(path, staging / record.filename)
        write_metadata_files(staging)  # rewrites the copies, never a linked wheel
        write_index(staging)
        sums = _sums(wheels_dir / SUMS, names, [(r.filename, r.sha256) for _, r in built])
        (staging / SUMS).write_text(sums)
        kept = [k for k in current.kernels if k.filename not in names]
        kernels = tuple(sorted([*kept, *(r for _, r in built)], key=lambda k: k.filename))
        written = dataclasses.replace(current, kernels=kernels, path=None)
        manifest.write(staging / manifest.FILENAME, written)
    return written
