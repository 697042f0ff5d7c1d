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


def site(cache_dir: pathlib.Path, requirements: Sequence[str], *, without_deps: Sequence[str] = ()) -> pathlib.Path:
    """A directory of ``requirements`` (with their dependencies) and ``without_deps`` (alone)
    for linux aarch64, installed once into the cache."""
    listed = [*sorted(requirements), "--no-deps", *sorted(without_deps)]
    key = hashlib.sha256("\n".join(listed).encode()).hexdigest()[:12]
    dest = cache_dir / "aarch64" / f"site-{key}"
    if (dest / "requirements.txt").exists():
        return dest
    with atomic_directory(dest, replace=True) as staging:
        if requirements:
            pip_install(staging, requirements)
        if without_deps:
            pip_install(staging, without_deps, deps=False)
        (staging / "requirements.txt").write_text("\n".join(listed) + "\n")
    return dest


# flashinfer 0.6.x's own imports (tests/flashinfer/requirements.txt), the tvm-ffi the modules
# are built against, and torch: PyPI's aarch64 2.9.1, a CPU build (2.11.0's is a CUDA build
# that imports only beside NVIDIA's CUDA wheels). torch goes without its dependencies, which
# are listed instead: pip evaluates markers for the running x86_64 interpreter whatever
# --platform says, and would add the CUDA wheels torch requires on x86_64 (4.6 GB).
_FLASHINFER_IMPORTS = pathlib.Path(__file__).parents[1] / "flashinfer" / "requirements.txt"
TORCH = "torch==2.9.1"
TORCH_IMPORTS = ("filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec")
TVM_FFI = "apache-tvm-ffi==0.1.15.post2"  # fp4graph.wheels.kernels.BUILD_REQUIREMENTS'
# The CUDA runtime the modules link (fp4graph.wheels.kernels.cross.CUDART), which torch's
# aarch64 CUDA builds bring: the stand-in for them on LD_LIBRARY_PATH.
CUDART = "nvidia-cuda-runtime==13.0.96"


def flashinfer_site(cache_dir: pathlib.Path) -> pathlib.Path:
    """What the emulated interpreter needs to import the patched flashinfer (its tree and a
    kernels wheel go before it on the path)."""
    lines = _FLASHINFER_IMPORTS.read_text().splitlines()
    imports = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    return site(cache_dir, [*imports, TVM_FFI, *TORCH_IMPORTS], without_deps=[TORCH])


def cudart_dir(cache_dir: pathlib.Path) -> pathlib.Path:
    """The directory of the aarch64 ``libcudart.so.13``."""
    return site(cache_dir, [], without_deps=[CUDART]) / "nvidia" / "cu13" / "lib"
