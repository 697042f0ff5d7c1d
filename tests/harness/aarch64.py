"""Packages for the emulated aarch64 python3.11 (fp4graph.platforms.emulator): installed by
pip for linux aarch64 into a directory to put on its PYTHONPATH, cached by requirements."""

from __future__ import annotations

import hashlib
import pathlib
import subprocess
import sys
from collections.abc import Sequence

from fp4graph.model.files import atomic_directory

# What pip is told the target is: CPython 3.11 on glibc 2.34 aarch64 (the manylinux level
# fp4graph.platforms.targets.LINUX_AARCH64 names; the emulated Debian 12 has 2.36). pip takes
# each accepted platform tag: every manylinux_2_Y_aarch64 up to 2.34 and manylinux2014's.
_PLATFORMS = [f"manylinux_2_{y}_aarch64" for y in range(34, 16, -1)] + ["manylinux2014_aarch64", "linux_aarch64"]
PIP_TARGET = (*(a for p in _PLATFORMS for a in ("--platform", p)), "--python-version", "3.11",
              "--implementation", "cp", "--only-binary=:all:")


def pip_install(dest: pathlib.Path, requirements: Sequence[str], *, deps: bool = True) -> None:
    """``requirements`` (names, pins or wheel files) installed for linux aarch64 into ``dest``."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(dest), *PIP_TARGET,
               *([] if deps else ["--no-deps"]), *requirements]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{subprocess.list2cmdline(command)}:\n{result.stdout[-2000:]}{result.stderr[-3000:]}"


def site(cache_dir: pathlib.Path, requirements: Sequence[str]) -> pathlib.Path:
    """A directory of ``requirements`` for linux aarch64, installed once into the cache."""
    key = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:12]
    dest = cache_dir / "aarch64" / f"site-{key}"
    if (dest / "requirements.txt").exists():
        return dest
    with atomic_directory(dest, replace=True) as staging:
        pip_install(staging, requirements)
        (staging / "requirements.txt").write_text("\n".join(requirements) + "\n")
    return dest
