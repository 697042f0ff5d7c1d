"""The real fp4 kernels wheels in wheels/ (``nox -s kernels``): ``flashinfer.fp4_warmup``
takes every module from the wheel, with no nvcc and no ninja to run.

Each wheel of the repository's wheels/manifest.json is installed beside the patched
flashinfer it was built from, on a simulated device of its arch (CUDA of its toolkit);
``fp4_warmup(modules=<its kinds>)`` must load each module from the wheel's jit_cache (a
real ``tvm_ffi.load_module`` of the compiled library) and call neither the recording
``nvcc`` nor ``ninja`` on PATH.  Nothing here builds: without such a wheel (CI builds only
the probe, test_probe.py) the test skips, saying how to build one.  Stand-ins: see
conftest.py (the device queries, libcudart from the toolkit).  A DGX Spark's wheel (linux
aarch64, ``--platform linux-aarch64``) is loaded on x86_64 by the emulated aarch64 python
(fp4graph.platforms.emulator; its torch and libcudart: tests/harness/aarch64.py).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from fp4graph.model import config, manifest
from fp4graph.platforms import emulator
from fp4graph.wheels.kernels import cross, toolchain
from fp4graph.wheels.kernels.targets import FP4_KINDS, KernelsError
from harness import aarch64
from harness.child import run_python, tail

REPO = pathlib.Path(__file__).resolve().parents[2]


def _wheels() -> list[manifest.BuiltKernels]:
    try:
        built = manifest.read_built(REPO / "wheels")
    except manifest.ManifestError:
        return []
    return [k for k in built.kernels if any(m.kind in FP4_KINDS for m in k.modules)]


WHEELS = _wheels()


def _installable_here(filename: str) -> bool:
    """Whether pip installs the wheel here: a module built against a newer glibc than this
    machine's carries a manylinux tag this machine does not support."""
    return bool(set(parse_wheel_filename(filename)[3]) & set(sys_tags()))


def _emulated(filename: str) -> bool:
    """A DGX Spark's wheel on an x86_64 machine: loaded by the emulated aarch64 python."""
    aarch64_tag = any(t.platform.endswith("_aarch64") for t in parse_wheel_filename(filename)[3])
    return aarch64_tag and cross.host() == cross.LINUX_X86_64

_WARMUP = """
import dataclasses, json, sys
from fp4graph.verify import simulate
gpu = dataclasses.replace(simulate.SM120, capability={capability!r}, cuda_version={cuda!r})
simulate.install(gpu)
import flashinfer, flashinfer_jit_cache
from flashinfer.jit import core
loaded = []
original = core.JitSpec.load
def load(self, so_path):
    loaded.append([self.name, str(so_path), self.is_aot])
    return original(self, so_path)
core.JitSpec.load = load
names = flashinfer.fp4_warmup(0, modules={kinds!r})
print("RESULT " + json.dumps({{"names": names, "loaded": loaded, "jit_cache": flashinfer_jit_cache.get_jit_cache_dir()}}))
"""


@pytest.mark.skipif(not WHEELS, reason="wheels/ holds no fp4 kernels wheel: `nox -s wheels kernels` builds one")
@pytest.mark.parametrize("wheel", WHEELS, ids=[w.filename for w in WHEELS])
def test_fp4_warmup_loads_every_module_from_the_wheel(
    wheel: manifest.BuiltKernels, wheel_tree: Any, tmp_path: pathlib.Path
) -> None:
    emulated = _emulated(wheel.filename)
    if not emulated and not _installable_here(wheel.filename):
        pytest.skip(f"{wheel.filename}: its platform tag is not this machine's (its modules need a newer glibc)")
    site = tmp_path / "site"
    tree = wheel_tree("flashinfer-python", wheel.flashinfer.upstream_version, patched=True)
    if emulated:
        cache = config.default_cache_dir()
        aarch64.pip_install(site, [str(REPO / "wheels" / wheel.filename)], deps=False)
        path, libcudart = [site, tree, aarch64.flashinfer_site(cache)], aarch64.cudart_dir(cache)
        interpreter = emulator.aarch64_python(cache)
    else:
        try:
            libcudart = toolchain.find_cuda_home() / "lib64"
        except KernelsError as exc:
            pytest.skip(f"the modules load libcudart (here from a CUDA toolkit): {exc}")
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                        str(site), str(REPO / "wheels" / wheel.filename)], check=True)
        path, interpreter = [site, tree], [sys.executable]
    fake, calls = tmp_path / "fakebin", tmp_path / "calls.log"
    fake.mkdir()
    for tool in ("nvcc", "ninja"):
        (fake / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit 1\n')
        (fake / tool).chmod(0o755)
    major, minor = int(wheel.arch.split(".")[0]), int(wheel.arch.split(".")[1][0])
    kinds = [m.kind for m in wheel.modules if m.kind in FP4_KINDS]
    code = _WARMUP.format(capability=(major, minor), cuda=wheel.cuda, kinds=kinds)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "FLASHINFER_"))}
    env.update(PATH=f"{fake}:/usr/bin:/bin", FLASHINFER_WORKSPACE_BASE=str(tmp_path / "workspace"),
               LD_LIBRARY_PATH=str(libcudart))
    result = run_python(code, path=path, env=env, timeout=900, interpreter=interpreter)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result)
    out = json.loads(lines[-1][len("RESULT "):])
    jit_cache = pathlib.Path(out["jit_cache"])
    assert out["names"] == [m.name for m in wheel.modules if m.kind in FP4_KINDS], out
    assert out["loaded"] == [[n, str(jit_cache / n / f"{n}.so"), True] for n in out["names"]], out
    assert not calls.exists(), calls.read_text()
