"""The platform a kernels build targets, and the cross toolchain for another machine's host code.

A module's device code comes from nvcc whatever the build machine; its host code (the
tvm-ffi functions, the kernel launches) from the host C++ compiler nvcc and FlashInfer's
ninja file call (``-ccbin $CC``, ``$cxx``), linked against the target's ``libcudart``.
``linux-aarch64`` (a DGX Spark's Grace CPU) on an x86_64 machine takes Debian's cross
compiler (``apt-get install g++-aarch64-linux-gnu``) and a cross CUDA root built in the
cache (:func:`cross_root`): the toolkit with a real ``bin/`` (nvcc finds its root from
``bin/nvcc.profile``: ``TOP = $(_HERE_)/..``), everything else linked, and
``targets/sbsa-linux`` (what ``nvcc --target-directory sbsa-linux`` reads) holding the
x86_64 target's headers (the same files) and the aarch64 ``libcudart`` of PyPI's
``nvidia-cuda-runtime`` wheel of the toolkit's release, pinned here by sha256, with a
``libcuda`` link stub built by the cross compiler (:func:`.toolchain.link_stub`).  The
root's ``lib64`` is that aarch64 library directory: FlashInfer links ``-L$cuda_home/lib64``.

FlashInfer 0.6.x modules link only ``libcudart`` and ``libcuda`` (and, for some kinds,
cuBLAS or NVRTC): torch and tvm-ffi are not linked (tvm-ffi's symbols are resolved at load
from the interpreter's ``libtvm_ffi``), so no aarch64 library of theirs is needed to build.
"""

from __future__ import annotations

import os
import pathlib
import platform
import shutil
import zipfile

from ...model.errors import ConfigError
from ...model.files import atomic_directory
from ...model.log import log
from ...model.stacks import ArtifactFile
from ...platforms.targets import LINUX_AARCH64, LINUX_X86_64, PLATFORMS, Platform, platform_named
from .targets import KernelsError

__all__ = ["CUDART", "LINUX_AARCH64", "LINUX_X86_64", "PLATFORMS", "Platform", "cross_root", "host", "parse"]


# The toolkit's target directory of each machine (targets/<dir>, nvcc --target-directory).
CUDA_TARGETS = {"x86_64": "x86_64-linux", "aarch64": "sbsa-linux"}


def cuda_target(target: Platform) -> str:
    return CUDA_TARGETS[target.machine]


def triplet(target: Platform) -> str:
    """``aarch64-linux-gnu``: the prefix of Debian's cross compilers for ``target``."""
    return f"{target.machine}-linux-gnu"


# The aarch64 CUDA runtime, per nvcc release: what a cross build links (-lcudart). Its
# headers are the x86_64 toolkit's, byte for byte.
CUDART = {
    ("13.0", "aarch64"): ArtifactFile(
        filename="nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
        sha256="ef9bcbe90493a2b9d810e43d249adb3d02e98dd30200d86607d8d02687c43f55",
    ),
}
CUDART_PROJECT = "nvidia-cuda-runtime"


def parse(text: str) -> Platform:
    try:
        return platform_named(text.strip())
    except ConfigError as exc:
        raise KernelsError(f"{exc} (linux-aarch64: DGX Spark)") from None


def host() -> Platform:
    """The platform of this machine; another machine than x86_64 or aarch64 is refused."""
    machine = platform.machine()
    found = next((p for p in PLATFORMS.values() if p.machine == machine), None)
    if found is None:
        raise KernelsError(f"this machine is {machine}: kernels are built on x86_64 or aarch64 Linux")
    return found


def compiler(target: Platform, tool: str = "g++") -> str:
    """The cross compiler for ``target`` on PATH (``aarch64-linux-gnu-g++``), else the fix."""
    name = f"{triplet(target)}-{tool}"
    if shutil.which(name) is None:
        raise KernelsError(
            f"no {name} on PATH: a {target.name} build on this {host().machine} machine compiles the modules' "
            f"host code with Debian's cross compiler (apt-get install g++-{triplet(target)})"
        )
    return name


def cudart_wheel(release: str, target: Platform) -> ArtifactFile:
    pinned = CUDART.get((release, target.machine))
    if pinned is None:
        known = ", ".join(f"CUDA {r} {m}" for r, m in sorted(CUDART))
        raise KernelsError(f"no pinned {CUDART_PROJECT} wheel for CUDA {release} on {target.machine} "
                           f"(pinned: {known}): add its wheel and sha256 to CUDART in {__file__}")
    return pinned


def _link_tree(src: pathlib.Path, dest: pathlib.Path) -> None:
    """``dest`` as ``src``'s files, hard-linked where the file system allows (else copied)."""
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_dir() and not path.is_symlink():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
            continue
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def _unpack_cudart(wheel: pathlib.Path, lib: pathlib.Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if "/lib/" in n and not n.endswith("/")]
        for name in members:
            dest = lib / pathlib.PurePosixPath(name).name
            dest.write_bytes(zf.read(name))
            dest.chmod(0o755 if ".so" in dest.name else 0o644)
    sonames = sorted(lib.glob("libcudart.so.*"))
    if not sonames:
        raise KernelsError(f"{wheel}: no lib/libcudart.so.* in it: not the CUDA runtime wheel")
    (lib / "libcudart.so").symlink_to(sonames[0].name)


def cross_root(cuda_home: pathlib.Path, target: Platform, cudart: pathlib.Path, key: str,
               cache_dir: pathlib.Path, stub: pathlib.Path) -> pathlib.Path:
    """The cross CUDA root for ``target`` in the cache (built once per ``key``): see the
    module's docstring. ``stub`` is the directory of the target's ``libcuda.so`` stub."""
    dest = cache_dir / "kernels" / f"cuda-{target.name}-{key}"
    if (dest / "bin" / "nvcc").exists():
        return dest
    source, directory = cuda_home.resolve(), cuda_target(target)
    log(f"cross CUDA root {dest} ({directory}) from {source} and {cudart.name}")
    with atomic_directory(dest, replace=False) as root:
        _link_tree(source / "bin", root / "bin")
        for entry in sorted(source.iterdir()):
            if entry.name not in ("bin", "targets", "lib", "lib64"):
                (root / entry.name).symlink_to(entry)
        lib = root / "targets" / directory / "lib"
        (lib / "stubs").mkdir(parents=True)
        (root / "targets" / directory / "include").symlink_to((source / "include").resolve())
        for entry in sorted((source / "targets").iterdir()):
            if entry.name != directory:
                (root / "targets" / entry.name).symlink_to(entry)
        _unpack_cudart(cudart, lib)
        shutil.copyfile(stub / "libcuda.so", lib / "stubs" / "libcuda.so")
        for name in ("lib", "lib64"):
            (root / name).symlink_to(pathlib.Path("targets") / directory / "lib")
    return dest
