"""Unpacked pristine and patched wheel trees, built once and cached by content.

A release pinned as an sdist only (no wheel on the index) gets the tree of the wheel pip
builds from that sdist (``pip wheel --no-deps --no-build-isolation``: its PEP 517 backend
in this interpreter, no download); it must be pure (``py3-none-any``) and of the pinned
version.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from ..model.config import Settings
from ..model.errors import BuildError, ConfigError
from ..model.files import atomic_directory
from ..model.log import log
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


def wheel_from_sdist(artifact: Artifact, sdist: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """The pure wheel pip builds from ``artifact``'s ``sdist`` into the empty directory ``out``."""
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
           "--no-cache-dir", "--disable-pip-version-check", "--wheel-dir", str(out), str(sdist)]
    log(f"build a wheel of {sdist.name}: {subprocess.list2cmdline(cmd)}")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip()[-2000:]
        raise BuildError(f"{sdist}: pip could not build a wheel of {artifact.key} from its sdist "
                         f"(exit {result.returncode}; its build backend must be importable here):\n{tail}")
    built = sorted(out.glob("*.whl"))
    if len(built) != 1:
        raise BuildError(f"{sdist}: pip built {len(built)} wheels of {artifact.key}, expected one")
    name, version, _, tags = parse_wheel_filename(built[0].name)
    if version != Version(artifact.version) or {str(t) for t in tags} != {"py3-none-any"}:
        raise BuildError(f"{sdist}: built {built[0].name}, not a pure (py3-none-any) wheel of "
                         f"{artifact.key}: a compiled build is not what the harness measures")
    return built[0]


def materialize(
    settings: Settings, project: str, version: str, *, patched: bool, filename: str | None = None
) -> pathlib.Path:
    """A cached directory holding what the pristine or patched wheel installs."""
    artifact = load(settings.stacks_file).artifact(project, version)
    if artifact.sdist_only and filename is None:
        return _sdist_tree(settings, artifact, patched=patched)
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


def _sdist_tree(settings: Settings, artifact: Artifact, *, patched: bool) -> pathlib.Path:
    """The cached tree of the wheel built from ``artifact``'s sdist (pristine only)."""
    assert artifact.sdist is not None
    if patched:
        raise ConfigError(f"{artifact.key} pins only an sdist ({artifact.sdist.filename}): "
                          "there is no patched tree of it")
    dest = settings.cache_dir / "trees" / f"{artifact.sdist.filename}-{artifact.sdist.sha256[:16]}-built-pristine"
    if dest.exists():
        return dest
    sdist = fetch(settings, artifact.project, artifact.sdist)  # sha256-checked
    with tempfile.TemporaryDirectory(prefix="fp4graph-sdist-") as work, \
            atomic_directory(dest, replace=False) as tmp:
        unpack(wheel_from_sdist(artifact, sdist, pathlib.Path(work)), tmp)
    return dest
