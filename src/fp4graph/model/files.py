"""Writing files and directories so that a reader never sees half of one.

Every writer stages beside its destination, in ``.<name>.tmp-*``, and renames into place.
The staging file or directory is ``flock``-ed while its writer lives, so a writer that
was killed (``kill -9``, a lost machine) leaves a staging entry nobody holds: the next
writer of the same destination removes it (:func:`remove_stale`), and git ignores the
pattern (``.gitignore``).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import os
import pathlib
import shutil
import tempfile
from collections.abc import Iterator


def staging_prefix(dest: pathlib.Path) -> str:
    """The name every staging entry of ``dest`` starts with."""
    return f".{dest.name}.tmp-"


def _hold(path: pathlib.Path) -> int | None:
    """An fd holding an exclusive flock on ``path``, or None when another process holds it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _still_there(fd: int, path: pathlib.Path) -> bool:
    """Whether the locked ``fd`` is still the entry at ``path``.

    A staging entry is created, then locked: in between, another writer's
    :func:`remove_stale` can take it for a killed writer's and remove it.  Once locked and
    still in place, it is safe from every remover.
    """
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def remove_stale(dest: pathlib.Path) -> list[pathlib.Path]:
    """Remove the staging entries of ``dest`` whose writer is gone; return them."""
    removed = []
    pattern = glob.escape(str(dest.parent / staging_prefix(dest))) + "*"
    for entry in map(pathlib.Path, glob.glob(pattern)):
        fd = _hold(entry)
        if fd is None:
            continue  # a live writer holds it
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
            removed.append(entry)
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def atomic_file(dest: pathlib.Path) -> Iterator[pathlib.Path]:
    """A locked staging file beside ``dest`` that replaces ``dest`` when the block succeeds."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(dest)
    while True:
        fd, name = tempfile.mkstemp(dir=dest.parent, prefix=staging_prefix(dest))
        tmp = pathlib.Path(name)
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _still_there(fd, tmp):
            break
        os.close(fd)  # a concurrent remove_stale took it before we locked it
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
        os.close(fd)


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` through a staging file renamed into place."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_directory(dest: pathlib.Path, *, replace: bool, mode: int = 0o755) -> Iterator[pathlib.Path]:
    """A new empty directory beside ``dest`` that becomes ``dest`` when the block succeeds.

    What the block writes there appears at ``dest`` all at once, or not at all: when the
    block raises, the staging directory (``.<name>.tmp-*``) is removed and ``dest`` is as it
    was; staging directories left by killed writers are removed first.  When ``dest``
    exists at the end: with ``replace`` it is swapped out (see :func:`recover`); without,
    it wins (a concurrent writer of the same content was first) and the staging copy is
    dropped; callers check ``dest`` afterwards.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(dest)
    while True:
        staging = pathlib.Path(tempfile.mkdtemp(dir=dest.parent, prefix=staging_prefix(dest)))
        try:
            fd = os.open(staging, os.O_RDONLY)
        except FileNotFoundError:
            continue  # a concurrent remove_stale took it before we opened it
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _still_there(fd, staging):
            break
        os.close(fd)  # ... or before we locked it
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
        os.close(fd)


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


def sha256_of(path: pathlib.Path) -> str:
    """The sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
