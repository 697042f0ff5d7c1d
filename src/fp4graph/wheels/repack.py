"""Unpack an upstream wheel, stamp the local version, and pack it reproducibly."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from wheel.wheelfile import WheelFile

from ..model import projects
from ..model.errors import BuildError
from ..model.log import log
from ..model.stacks import Artifact


def unpack(wheel: pathlib.Path, dest: pathlib.Path) -> None:
    """Extract ``wheel`` into ``dest``, checking every file against RECORD."""
    with WheelFile(wheel) as wf:
        for info in wf.infolist():
            target = pathlib.Path(wf.extract(info, dest))
            mode = (info.external_attr >> 16) & 0o777
            if mode and target.is_file():
                target.chmod(mode)


def dist_info(tree: pathlib.Path) -> pathlib.Path:
    found = sorted(tree.glob("*.dist-info"))
    if len(found) != 1:
        raise BuildError(f"{tree}: expected one .dist-info directory, found {len(found)}")
    return found[0]


def _replace_version_line(path: pathlib.Path, pattern: re.Pattern[str], new: str) -> None:
    text = path.read_text(encoding="utf-8")
    updated, count = pattern.subn(new, text)
    if count == 0:
        raise BuildError(f"{path}: found no version to stamp (pattern {pattern.pattern!r})")
    path.write_text(updated, encoding="utf-8")


def set_local_version(tree: pathlib.Path, artifact: Artifact) -> None:
    """Make METADATA, the dist-info name and the runtime ``__version__`` say ``X+fp4graph.N``."""
    old, new = artifact.version, artifact.patched_version
    info = dist_info(tree)
    _replace_version_line(
        info / "METADATA", re.compile(rf"^Version: {re.escape(old)}$", re.M), f"Version: {new}"
    )
    renamed = info.with_name(info.name.replace(f"-{old}.dist-info", f"-{new}.dist-info"))
    if renamed == info:
        raise BuildError(f"{info}: name does not carry version {old}")
    info.rename(renamed)

    relative = projects.get(artifact.project).version_file
    if relative is None:
        return
    version_file = tree / relative
    if not version_file.exists():
        raise BuildError(f"{artifact.key}: the wheel has no {relative} to stamp the version in")
    quoted = re.compile(rf"(?P<q>['\"]){re.escape(old)}(?P=q)")
    _replace_version_line(version_file, quoted, f'"{new}"')
    # setuptools-scm also writes a version tuple; give it the local label too.
    tuple_pattern = re.compile(r"^(?P<lhs>(?:__version_tuple__|version_tuple)(?: = \w+)*) = \((?P<items>[^)]*)\)$", re.M)
    label = artifact.local_label
    text = version_file.read_text(encoding="utf-8")
    text = tuple_pattern.sub(lambda m: f"{m['lhs']} = ({m['items']}, {label!r})", text)
    version_file.write_text(text, encoding="utf-8")


def pack(tree: pathlib.Path, dest_dir: pathlib.Path, source_date_epoch: int) -> pathlib.Path:
    """Pack ``tree`` with ``wheel pack`` (regenerates RECORD); zip times from the epoch."""
    before = set(dest_dir.iterdir())
    cmd = [sys.executable, "-m", "wheel", "pack", "--dest-dir", str(dest_dir), str(tree)]
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(source_date_epoch))
    log(f"pack {subprocess.list2cmdline(cmd)}")
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"{tree}: wheel pack failed:\n{result.stdout}{result.stderr}")
    created = sorted(set(dest_dir.iterdir()) - before)
    if len(created) != 1:
        raise BuildError(f"{tree}: wheel pack wrote {len(created)} files, expected one")
    return created[0]
