"""Writing files and directories so that a reader never sees half of one."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(dest: pathlib.Path, *, replace: bool, mode: int = 0o755) -> Iterator[pathlib.Path]:
    """A new empty directory beside ``dest`` that becomes ``dest`` when the block succeeds.

    What the block writes there appears at ``dest`` all at once, or not at all: when the
    block raises, the staging directory (``.<name>.tmp-*``) is removed and ``dest`` is as it
    was.  When ``dest`` exists at the end: with ``replace`` it is swapped out (see
    :func:`recover`); without, it wins (a concurrent writer of the same content was first)
    and the staging copy is dropped; callers check ``dest`` afterwards.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp-"))
    try:
        os.chmod(staging, mode)
        yield staging
        if replace:
            _swap(staging, dest)
        else:
            with contextlib.suppress(OSError):
                staging.rename(dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _backup(dest: pathlib.Path) -> pathlib.Path:
    return dest.with_name(f".{dest.name}.old")


def _swap(staging: pathlib.Path, dest: pathlib.Path) -> None:
    """Rename ``dest`` aside, ``staging`` into place, and drop the old copy."""
    recover(dest)
    backup = _backup(dest)
    if dest.exists():
        dest.rename(backup)
    staging.rename(dest)
    if backup.exists():
        shutil.rmtree(backup)


def recover(dest: pathlib.Path) -> None:
    """Finish a swap into ``dest`` that was cut between its two renames."""
    backup = _backup(dest)
    if backup.exists():
        if dest.exists():
            shutil.rmtree(backup)
        else:
            backup.rename(dest)
