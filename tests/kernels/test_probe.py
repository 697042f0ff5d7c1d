"""CI's real kernels build: fp4graph's one-kernel probe module, compiled with nvcc for 12.0a
through FlashInfer's JIT machinery, packed, installed beside the patched flashinfer, loaded.

What it shows, in about a minute of nvcc on 2 cores:

- ``nox -s kernels``'s library compiles a module, twice from scratch to the same bytes
  (the wheel's sha256), and adds its wheel to wheels/;
- FlashInfer 0.6.3+fp4graph.N (the real series) imports beside that wheel and loads the
  module from it in place of a JIT build: ``JitSpec.is_aot``, ``build_and_load()`` returns
  the prebuilt library (its host function answers), with no nvcc on PATH and a ``nvcc`` /
  ``ninja`` there that would record any call; without the wheel the same call goes to
  ninja (the control: the check can fail).

The fp4 modules themselves take minutes each (docs/installing.md, "Zero-JIT first starts"): they are
built by ``nox -s kernels`` where the cores are, and loaded by test_fp4_modules.py.  A
machine without nvcc skips this file, except under CI=true, where it fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from fp4graph.model import config, manifest
from fp4graph.model.config import Settings
from fp4graph.wheels import build, kernels
from fp4graph.wheels.kernels import toolchain
from fp4graph.wheels.kernels.targets import Arch, KernelsError
from harness.checkout import FIXTURE_STACKS, STACK, make_checkout
from harness.child import run_python, tail


def _cuda_home() -> pathlib.Path:
    try:
        return toolchain.find_cuda_home()
    except KernelsError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI builds the probe module: {exc}")
        pytest.skip(f"no nvcc here: {exc}")


CUDA_HOME = _cuda_home()
OPTIONS = kernels.KernelOptions(stack=STACK, archs=(Arch(12, 0),), kinds=("probe",), jobs=2)


@pytest.fixture(scope="module")
def probe_wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, manifest.BuiltKernels]:
    """The probe built from scratch into a fixture checkout's wheels/ (as conftest's
    ``checkout``; this module's fixture_topics is active)."""
    settings = make_checkout(tmp_path_factory.mktemp("probe") / "repo", config.default_cache_dir(),
                             stacks_toml=FIXTURE_STACKS)
    build.build(settings, [STACK])
    outcome = kernels.build(settings, dataclasses.replace(OPTIONS, use_cache=False))
    (wheel,) = outcome.wheels
    return settings, wheel


def test_the_probe_builds_twice_to_the_same_bytes(
    probe_wheel: tuple[Settings, manifest.BuiltKernels], checkout: Settings
) -> None:
    settings, first = probe_wheel
    assert first.modules[0].name == "fp4graph_probe" and first.arch == "12.0a"
    assert (settings.wheels_dir / first.filename).exists()
    assert manifest.read_built(settings.wheels_dir).kernels == (first,)
    # Another checkout, nothing cached: the same module and wheel, byte for byte.
    outcome = kernels.build(checkout, dataclasses.replace(OPTIONS, use_cache=False))
    (again,) = outcome.wheels
    assert outcome.seconds[("12.0a", "fp4graph_probe")] is not None  # compiled, not cached
    assert again.modules == first.modules
    assert again.sha256 == first.sha256, (again.filename, again.sha256, first.sha256)


_LOADER = """
import json, pathlib, sys
from fp4graph.verify import simulate
simulate.install()  # the SM120 device queries (no GPU here)
import flashinfer
from flashinfer.jit import env
from fp4graph.wheels.kernels import worker
spec = worker.probe_spec(pathlib.Path(sys.argv[1]))
out = {"flashinfer": flashinfer.__version__, "aot_dir": str(env.FLASHINFER_AOT_DIR), "is_aot": spec.is_aot,
       "library": str(spec.get_library_path())}
try:
    module = spec.build_and_load()
    out["marker"] = module.marker()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
print("RESULT " + json.dumps(out))
"""


def _load(tree: pathlib.Path, site: pathlib.Path | None, tmp: pathlib.Path) -> tuple[dict[str, Any], str]:
    """Load the probe in a child: ``site`` (the installed wheel) and the patched tree on its
    path, a PATH whose only ``nvcc`` and ``ninja`` record their calls and fail, an empty JIT
    workspace; the calls recorded."""
    fake = tmp / "fakebin"
    fake.mkdir()
    calls = tmp / "calls.log"
    for tool in ("nvcc", "ninja"):
        script = fake / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {calls}\nexit 1\n')
        script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "FLASHINFER_"))}
    env.update(PATH=f"{fake}:/usr/bin:/bin", FLASHINFER_WORKSPACE_BASE=str(tmp / "workspace"),
               LD_LIBRARY_PATH=str(CUDA_HOME / "lib64"))  # libcudart.so.13, as torch's CUDA wheels bring it
    code = _LOADER.replace("sys.argv[1]", repr(str(tmp / "workspace")))
    result = run_python(code, path=[*([site] if site else []), tree], env=env, timeout=600)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result)
    return json.loads(lines[-1][len("RESULT "):]), calls.read_text() if calls.exists() else ""


def test_flashinfer_loads_the_probe_from_the_wheel_without_nvcc(
    probe_wheel: tuple[Settings, manifest.BuiltKernels], wheel_tree: Any, tmp_path: pathlib.Path
) -> None:
    settings, built = probe_wheel
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
                    str(settings.wheels_dir / built.filename)], check=True)
    tree = wheel_tree("flashinfer-python", "0.6.3", patched=True)
    (tmp_path / "with").mkdir()
    loaded, calls = _load(tree, site, tmp_path / "with")
    jit_cache = site / "flashinfer_jit_cache" / "jit_cache"
    assert loaded["aot_dir"] == str(jit_cache), loaded
    assert loaded["is_aot"] and loaded["library"] == str(jit_cache / "fp4graph_probe" / "fp4graph_probe.so")
    assert loaded.get("marker") == 20261202, loaded
    assert calls == "", calls  # neither nvcc nor ninja ran
    assert loaded["flashinfer"].startswith("0.6.3+fp4graph.")

    # The control: without the wheel, the same call is a JIT build (the recording ninja).
    (tmp_path / "without").mkdir()
    control, calls = _load(tree, None, tmp_path / "without")
    assert not control["is_aot"] and "marker" not in control, control
    assert "ninja -v" in calls, (control, calls)
