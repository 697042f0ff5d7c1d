"""The compilers a kernels build runs, found and named before anything is built.

What decides the bytes of a module besides its sources is recorded (the wheel's
``fp4graph.json``, the manifest, the build cache key): nvcc's release and build, the host
C++ compiler, the tvm-ffi headers of the build interpreter and, where the toolkit lacks
them, the versions of NVIDIA's header wheels.  A machine without nvcc, or with one older
than SM12x needs, is refused here with the fix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping

from packaging.version import Version

from ...model.files import atomic_directory
from ...model.log import log
from ...model.stacks import ArtifactFile
from . import cross
from .targets import KernelsError

# SM12x targets (sm_120a / sm_121a) need nvcc 12.8 or newer.
MIN_NVCC = Version("12.8")
DEFAULT_CUDA_HOME = pathlib.Path("/usr/local/cuda")

# What the build interpreter reports about itself (run there, the standard library only).
_INTERPRETER_PROBE = r"""
import importlib.metadata as m, json, platform, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"python": platform.python_version(), "tvm_ffi": version("apache-tvm-ffi"),
                  "torch": version("torch"),
                  "nvidia-cublas": version("nvidia-cublas"), "nvidia-curand": version("nvidia-curand")}))
"""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Toolchain:
    cuda_home: pathlib.Path  # a cross build's: the cross CUDA root (cross.cross_root)
    nvcc_release: str  # 13.0
    identity: Mapping[str, str]  # what decides the bytes, for the record and the cache key
    target: cross.Platform = cross.LINUX_X86_64  # the machine of the modules' host code
    environ: Mapping[str, str] = dataclasses.field(default_factory=dict)  # CC / CXX of a cross build
    target_directory: str | None = None  # nvcc --target-directory of a cross build (sbsa-linux)

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(dict(self.identity), sort_keys=True).encode()).hexdigest()


def find_cuda_home(environ: Mapping[str, str] = os.environ) -> pathlib.Path:
    """CUDA_HOME / CUDA_PATH, else /usr/local/cuda, else the toolkit of the nvcc on PATH."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            home = pathlib.Path(environ[var])
            if not (home / "bin" / "nvcc").exists():
                raise KernelsError(f"{var}={home}: no bin/nvcc there; point it at a CUDA toolkit >= {MIN_NVCC}")
            return home
    if (DEFAULT_CUDA_HOME / "bin" / "nvcc").exists():
        return DEFAULT_CUDA_HOME
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    if nvcc is None:
        raise KernelsError(
            f"no nvcc: not on PATH, no CUDA_HOME, no /usr/local/cuda; kernels are compiled with "
            f"nvcc >= {MIN_NVCC} (any x86_64 host, no GPU needed): install the CUDA toolkit or "
            "set CUDA_HOME"
        )
    return pathlib.Path(nvcc).resolve().parents[1]


def _first_line(command: list[str]) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KernelsError(f"{subprocess.list2cmdline(command)} failed: {exc}") from None
    return out.strip().splitlines()[0] if out.strip() else ""


def nvcc_version(cuda_home: pathlib.Path) -> tuple[str, str]:
    """(release, build line) of ``cuda_home``'s nvcc, e.g. ("13.0", "Build cuda_13.0.r13.0/compiler...")."""
    command = [str(cuda_home / "bin" / "nvcc"), "--version"]
    try:
        text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KernelsError(f"{subprocess.list2cmdline(command)} failed: {exc}; is {cuda_home} a CUDA toolkit?") from None
    release = re.search(r"release (\d+\.\d+)", text)
    if release is None:
        raise KernelsError(f"{command[0]} --version says no release: {text.strip()[-200:]!r}")
    if Version(release[1]) < MIN_NVCC:
        raise KernelsError(f"{command[0]} is CUDA {release[1]}; SM12x kernels need nvcc >= {MIN_NVCC}")
    build = [ln for ln in text.splitlines() if ln.startswith("Build ") or ln.startswith("Cuda compilation")]
    return release[1], " ".join(build)


def interpreter_facts(python: str) -> dict[str, str | None]:
    """What the build interpreter has (it must import flashinfer: torch, tvm-ffi, ninja)."""
    try:
        out = subprocess.run([python, "-c", _INTERPRETER_PROBE], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise KernelsError(f"build interpreter {python}: {exc}") from None
    facts: dict[str, str | None] = json.loads(out.stdout)
    missing = [name for name in ("tvm_ffi", "torch") if not facts.get(name)]
    missing += [] if shutil.which("ninja") else ["ninja (on PATH)"]
    if missing:
        raise KernelsError(
            f"build interpreter {python} lacks {', '.join(missing)}: FlashInfer's JIT needs torch, "
            "apache-tvm-ffi and ninja (`nox -s kernels` installs them; `python -m fp4graph kernels "
            "--requirements FILE` lists them)"
        )
    return facts


def identify(python: str, environ: Mapping[str, str] = os.environ, *, target: cross.Platform | None = None,
             cache_dir: pathlib.Path | None = None,
             fetch: Callable[[ArtifactFile], pathlib.Path] | None = None) -> Toolchain:
    """The toolchain of a build on this machine for ``target`` (default: this machine's
    platform); another platform's needs ``cache_dir`` and ``fetch`` (its CUDA runtime wheel)."""
    cuda_home = find_cuda_home(environ)
    release, build = nvcc_version(cuda_home)
    if target is not None and target != cross.host():
        if cache_dir is None or fetch is None:
            raise KernelsError(f"a {target.name} build needs the cache and a fetch of its CUDA runtime wheel")
        return _identify_cross(python, cuda_home, release, build, target, cache_dir, fetch)
    identity = _identity(python, release, build, environ.get("CXX", "c++"), cuda_home)
    return Toolchain(cuda_home=cuda_home, nvcc_release=release, identity=identity, target=cross.host())


def _identity(python: str, release: str, build: str, cxx: str, cuda_home: pathlib.Path) -> dict[str, str]:
    facts = interpreter_facts(python)
    identity = {
        "nvcc": f"{release} ({build})",
        "cxx": _first_line([cxx, "--version"]),
        "tvm-ffi": str(facts["tvm_ffi"]),
        "ninja": _first_line(["ninja", "--version"]),
        "python": str(facts["python"]),
    }
    if not toolkit_has_headers(cuda_home):
        identity["toolkit-headers"] = ", ".join(
            f"{name} {facts.get(name)}" for name in ("nvidia-cublas", "nvidia-curand"))
    return identity


def _identify_cross(python: str, cuda_home: pathlib.Path, release: str, build: str, target: cross.Platform,
                    cache_dir: pathlib.Path, fetch: Callable[[ArtifactFile], pathlib.Path]) -> Toolchain:
    """nvcc of this machine, ``target``'s cross compiler and CUDA runtime (:mod:`.cross`)."""
    if cross.host() != cross.LINUX_X86_64:
        raise KernelsError(f"cross builds run on x86_64; on this {cross.host().machine} machine build "
                           f"for {cross.host().name} only")
    cxx, cc = cross.compiler(target, "g++"), cross.compiler(target, "gcc")
    pinned = cross.cudart_wheel(release, target)
    wheel = fetch(pinned)
    stub = link_stub(cuda_home, cache_dir, cc=cc)
    key = hashlib.sha256("\0".join([str(cuda_home.resolve()), build, pinned.sha256, stub.name]).encode())
    root = cross.cross_root(cuda_home, target, wheel, key.hexdigest()[:16], cache_dir, stub)
    identity = {**_identity(python, release, build, cxx, root), "platform": target.name, "cudart": pinned.filename}
    return Toolchain(cuda_home=root, nvcc_release=release, identity=identity, target=target,
                     environ={"CC": cxx, "CXX": cxx}, target_directory=cross.cuda_target(target))


def toolkit_has_headers(cuda_home: pathlib.Path) -> bool:
    from .worker import TOOLKIT_HEADERS

    return all((cuda_home / "include" / h).exists() for h in TOOLKIT_HEADERS)


def needs_link_stub(cuda_home: pathlib.Path) -> bool:
    """FlashInfer links every module with ``-lcuda`` from ``lib64/stubs``: a toolkit installed
    from NVIDIA's wheels has no such stub (nor a driver on a build host without a GPU)."""
    return not any((cuda_home / d / "libcuda.so").exists() for d in ("lib64/stubs", "lib64", "lib/stubs"))


_DECLARATION = re.compile(r"^\s*(?:extern\s+)?CUresult\s+(?:CUDAAPI\s+)?(\w+)\s*\(", re.M)


def link_stub(cuda_home: pathlib.Path, cache_dir: pathlib.Path, cc: str | None = None) -> pathlib.Path:
    """A directory holding ``libcuda.so`` (soname ``libcuda.so.1``) that defines every driver
    entry point ``cuda.h`` declares, as the toolkit's own stub does: the link records the
    same NEEDED entry and leaves the symbols for the real driver (a stand-in for a file
    the toolkit lacks, never shipped). ``cc`` (default $CC, cc): a cross build's compiler."""
    header = cuda_home / "include" / "cuda.h"
    machine = f"{cc}\n" if cc else ""  # another machine's stub: another cache entry
    cc = cc or os.environ.get("CC", "cc")
    expanded = subprocess.run([cc, "-E", "-P", "-x", "c", str(header)], capture_output=True, text=True)
    if expanded.returncode != 0:
        raise KernelsError(f"{cc} -E {header} failed: {expanded.stderr[-500:]}")
    names = sorted(set(_DECLARATION.findall(expanded.stdout)))
    if len(names) < 100:
        raise KernelsError(f"{header}: found only {len(names)} driver entry points; not a CUDA toolkit's cuda.h?")
    source = "".join(f"int {name}(void) {{ return 34; }}\n" for name in names)  # CUDA_ERROR_STUB_LIBRARY
    key = hashlib.sha256((machine + source).encode()).hexdigest()[:16]
    dest = cache_dir / "kernels" / f"libcuda-stub-{key}"
    if (dest / "libcuda.so").exists():
        return dest
    with atomic_directory(dest, replace=False) as tmp:
        (tmp / "stub.c").write_text(source)
        command = [cc, "-shared", "-fPIC", "-o", str(tmp / "libcuda.so"), "-Wl,-soname,libcuda.so.1", str(tmp / "stub.c")]
        log(f"link stub {subprocess.list2cmdline(command)}")
        built = subprocess.run(command, capture_output=True, text=True)
        if built.returncode != 0:
            raise KernelsError(f"building the libcuda link stub failed: {built.stderr[-500:]}")
    return dest
