"""The probe module for a DGX Spark (linux aarch64, 12.1a), cross-built here: device code from
nvcc, host code from Debian's aarch64 cross compiler (``g++-aarch64-linux-gnu``) against the
aarch64 CUDA runtime; packed as a manylinux aarch64 wheel; loaded by the patched flashinfer
under an emulated aarch64 interpreter that has no nvcc.

- ``nox -s kernels -- ... --arch 12.1a --platform linux-aarch64``'s library builds it twice
  from scratch to the same bytes; the module is an aarch64 ELF file (checked at build);
- (slow) under qemu-user's aarch64 python3.11 (fp4graph.platforms.emulator) with pip's
  aarch64 install of the wheel, FlashInfer 0.6.3+fp4graph.N takes the module from it
  (``JitSpec.is_aot``; its host function answers) and runs neither ``nvcc`` nor ``ninja``
  (recording stand-ins first on PATH); without the wheel the same call goes to ninja.

Stand-ins: the GB10's device queries (``fp4graph.verify.simulate.SM121``); the aarch64 CPU
(qemu-user); the CUDA runtime torch's CUDA wheels bring (the aarch64 ``libcudart.so.13`` of
the build's cross CUDA root, on LD_LIBRARY_PATH); torch is PyPI's aarch64 2.9.1, a CPU build.
A machine without nvcc or the cross compiler skips this file, except under CI=true (fails).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import time
import zipfile
from typing import Any

import pytest

from fp4graph.model import config, manifest
from fp4graph.model.config import Settings
from fp4graph.platforms import emulator
from fp4graph.wheels import build, kernels
from fp4graph.wheels.kernels import cross, elf, toolchain, worker
from fp4graph.wheels.kernels.targets import Arch, KernelsError
from harness import aarch64
from harness.checkout import FIXTURE_STACKS, STACK, make_checkout
from harness.child import run_python, tail


def _tools() -> None:
    try:
        toolchain.find_cuda_home()
        cross.compiler(cross.LINUX_AARCH64)
    except KernelsError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI builds the aarch64 probe module: {exc}")
        pytest.skip(str(exc))


_tools()
OPTIONS = kernels.KernelOptions(stack=STACK, archs=(Arch(12, 1),), kinds=("probe",), jobs=2,
                                platform=cross.LINUX_AARCH64)


@pytest.fixture(scope="module")
def aarch64_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, manifest.BuiltKernels]:
    settings = make_checkout(tmp_path_factory.mktemp("probe-aarch64") / "repo", config.default_cache_dir(),
                             stacks_toml=FIXTURE_STACKS)
    build.build(settings, [STACK])
    outcome = kernels.build(settings, dataclasses.replace(OPTIONS, use_cache=False))
    (wheel,) = outcome.wheels
    return settings, wheel


def test_the_aarch64_probe_is_aarch64_and_builds_twice_to_the_same_bytes(
    aarch64_wheel: tuple[Settings, manifest.BuiltKernels], checkout: Settings, tmp_path: pathlib.Path
) -> None:
    settings, first = aarch64_wheel
    assert first.arch == "12.1a" and first.modules[0].name == worker.PROBE_NAME
    assert first.filename.startswith("flashinfer_jit_cache-0.6.3+cu130.fp4graph.1.sm121a.probe-py3-none-manylinux_")
    assert first.filename.endswith("_aarch64.whl"), first.filename
    assert first.toolchain["platform"] == "linux-aarch64"
    assert first.toolchain["cxx"].startswith("aarch64-linux-gnu-g++")
    assert first.toolchain["cudart"] == cross.CUDART[("13.0", "aarch64")].filename
    assert f"-{aarch64.CUDART.split('==')[1]}-" in first.toolchain["cudart"]
    with zipfile.ZipFile(settings.wheels_dir / first.filename) as zf:
        library = zf.read(f"flashinfer_jit_cache/jit_cache/{worker.PROBE_NAME}/{worker.PROBE_NAME}.so")
    machine, versions = elf.needed_versions(library)
    assert machine == "aarch64" and "GLIBC_2.17" in versions, (machine, versions)
    # Another checkout, nothing cached: the same module and wheel, byte for byte.
    outcome = kernels.build(checkout, dataclasses.replace(OPTIONS, use_cache=False))
    (again,) = outcome.wheels
    assert outcome.seconds[("12.1a", worker.PROBE_NAME)] is not None  # compiled, not cached
    assert again.sha256 == first.sha256, (again.filename, again.sha256, first.sha256)


_LOADER = """
import importlib.util, json, pathlib, platform, sys, time
start = time.time()
from fp4graph.verify import simulate
simulate.install(simulate.SM121)  # a GB10's device queries (no GPU here)
import flashinfer
from flashinfer.jit import env
found = importlib.util.spec_from_file_location("worker", WORKER)  # the standard library only
worker = importlib.util.module_from_spec(found)
found.loader.exec_module(worker)
spec = worker.probe_spec(pathlib.Path(WORKSPACE))
out = {"machine": platform.machine(), "flashinfer": flashinfer.__version__, "aot_dir": str(env.FLASHINFER_AOT_DIR),
       "is_aot": spec.is_aot, "library": str(spec.get_library_path())}
try:
    out["marker"] = spec.build_and_load().marker()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
out["seconds"] = round(time.time() - start, 1)
print("RESULT " + json.dumps(out))
"""


def _load_emulated(path: list[pathlib.Path], cudart: pathlib.Path, tmp: pathlib.Path) -> tuple[dict[str, Any], str]:
    """The probe loaded by the emulated aarch64 python with ``path`` first on its path and a
    PATH whose only ``nvcc`` and ``ninja`` record their calls and fail; the calls recorded."""
    fake, calls = tmp / "fakebin", tmp / "calls.log"
    fake.mkdir(parents=True)
    for tool in ("nvcc", "ninja"):
        (fake / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit 1\n')
        (fake / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "FLASHINFER_"))}
    env.update(PATH=f"{fake}:/usr/bin:/bin", FLASHINFER_WORKSPACE_BASE=str(tmp / "workspace"),
               LD_LIBRARY_PATH=str(cudart))
    code = _LOADER.replace("WORKER", repr(worker.__file__)).replace("WORKSPACE", repr(str(tmp / "workspace")))
    interpreter = emulator.aarch64_python(config.default_cache_dir())
    result = run_python(code, path=path, env=env, timeout=900, interpreter=interpreter)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result)
    return json.loads(lines[-1][len("RESULT "):]), calls.read_text() if calls.exists() else ""


@pytest.mark.slow
def test_flashinfer_loads_the_aarch64_probe_under_emulation_without_nvcc(
    aarch64_wheel: tuple[Settings, manifest.BuiltKernels], wheel_tree: Any, tmp_path: pathlib.Path
) -> None:
    """About 2 minutes here (torch's import under qemu is most of it), plus a one-time
    download of the aarch64 packages (~550 MB installed, cached) and of the emulator."""
    settings, built = aarch64_wheel
    cache = config.default_cache_dir()
    packages, lib = aarch64.flashinfer_site(cache), aarch64.cudart_dir(cache)
    site = tmp_path / "site"
    aarch64.pip_install(site, [str(settings.wheels_dir / built.filename)], deps=False)
    tree = wheel_tree("flashinfer-python", "0.6.3", patched=True)

    start = time.time()
    loaded, calls = _load_emulated([site, tree, packages], lib, tmp_path / "with")
    jit_cache = site / "flashinfer_jit_cache" / "jit_cache"
    assert loaded["machine"] == "aarch64" and loaded["flashinfer"].startswith("0.6.3+fp4graph."), loaded
    assert loaded["aot_dir"] == str(jit_cache) and loaded["is_aot"], loaded
    assert loaded["library"] == str(jit_cache / worker.PROBE_NAME / f"{worker.PROBE_NAME}.so"), loaded
    assert loaded.get("marker") == worker.PROBE_MARKER, loaded
    assert calls == "", calls  # neither nvcc nor ninja ran
    print(f"emulated load: {time.time() - start:.0f} s ({loaded['seconds']} s in the interpreter)")

    # The control: without the wheel, the same call is a JIT build (the recording ninja).
    control, calls = _load_emulated([tree, packages], lib, tmp_path / "without")
    assert not control["is_aot"] and "marker" not in control, control
    assert "ninja -v" in calls, (control, calls)
    shutil.rmtree(site)
