"""Unpacked pristine and patched wheel trees, built once and cached by content."""

from __future__ import annotations

import pathlib

from ..model.config import Settings
from ..model.errors import ConfigError
from ..model.files import atomic_directory
from ..model.series import Series, load_series
from ..model.stacks import Artifact, load
from .apply import apply_series
from .fetch import fetch
from .repack import set_local_version, unpack


def build_tree(artifact: Artifact, wheel: pathlib.Path, series: Series | None, dest: pathlib.Path) -> None:
    """Unpack ``wheel`` into ``dest``; with a series, apply it and stamp the local version."""
    unpack(wheel, dest)
    if series is not None:
        apply_series(series, dest)
        set_local_version(dest, artifact)


def materialize(
    settings: Settings, project: str, version: str, *, patched: bool, filename: str | None = None
) -> pathlib.Path:
    """A cached directory holding what the pristine or patched wheel installs."""
    artifact = load(settings.stacks_file).artifact(project, version)
    pinned = artifact.file(filename)
    series = load_series(settings.patches_dir, artifact.project, artifact.version) if patched else None
    if patched and series is None:
        raise ConfigError(f"{artifact.key} has no series in patches/{artifact.project}/{version}/")
    # The revision too: the tree's _build_meta carries the +fp4graph.<revision> label, and a
    # revision bump alone must not find the tree of the revision before.
    flavour = f"patched-{series.digest[:16]}-r{artifact.revision}" if series else "pristine"
    root = settings.cache_dir / "trees"
    dest = root / f"{pinned.filename}-{pinned.sha256[:16]}-{flavour}"
    if dest.exists():
        return dest
    wheel = fetch(settings, artifact.project, pinned)
    with atomic_directory(dest, replace=False) as tmp:
        build_tree(artifact, wheel, series, tmp)
    if not dest.exists():
        raise ConfigError(f"{dest}: could not be created")
    return dest
