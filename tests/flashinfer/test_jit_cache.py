"""A module found in flashinfer-jit-cache counts as built: pristine beside patched, on CPU.

flashinfer-jit-cache (FlashInfer's own index) installs compiled modules as
``<name>/<name>.so``: the AOT directory of 0.6.x (``get_jit_cache_dir()``), a provider
of 0.7.x (``get_jit_cache_providers()``).  With one beside flashinfer, on a simulated
SM120 whose PyTorch says CUDA 13.0 (a cu130 jit-cache), per series version:

- ``warmup`` (patched): ``flashinfer.fp4_warmup(modules=[quantization, gemm_cutlass,
  moe_cutlass])`` loads each module from the package's path, builds nothing and runs no
  nvcc (0.7.4: one ``nvcc --version``, see below);
- ``capture`` (patched): the first ``fp4_quantize`` of a fresh process that skipped the
  warm-up, inside a CUDA graph capture: the capture guard lets the prebuilt module load
  (a module that must be built still refuses: test_fp4_ops.py's ``cold``), nothing built;
- ``first-call`` (pristine, which has neither warm-up nor guard): its first
  ``fp4_quantize`` loads the same library, but generates the module's spec first and so
  runs ``nvcc --version`` (for the flags of a build that does not happen).

0.7.4 matches a provider to the device's architecture (sm120a or sm120f), a suffix the
toolkit's version decides: the first lookup asks ``nvcc --version`` once when nvcc is
installed (pristine 0.7.4 asks at import), and builds nothing.

Stand-ins (nothing of FlashInfer's Python is replaced): the jit-cache package
(``harness.kernel_packages.jit_cache_stand_in``, empty ``.so`` files); ``nvcc`` and
``ninja`` on PATH, scripts that record their arguments and fail; the compiled-kernel
loader ``tvm_ffi.load_module`` (it would dlopen the library), which records the path and
returns a module whose kernels do nothing; the SM120 device (``fp4graph.verify.simulate``),
the CUDA device guard of a plain slice (``Tensor.__getitem__``, to ``aten.slice``) and, for ``capture``, ``torch.cuda.is_current_stream_capturing`` (True, as inside
``torch.cuda.graph``, when FlashInfer asks).  One child per version imports torch once and forks a case (harness.child.run_forked).
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import pytest
from packaging.version import Version

from harness import kernel_packages
from harness.child import CaseReport, run_forked
from harness.targets import versions_with_topic

PROJECT = "flashinfer-python"
# The series with fp4_warmup (0.6.11.post1's is the CUDA-version fix alone).
VERSIONS = versions_with_topic(PROJECT, "fp4-warmup")
KINDS = ["quantization", "gemm_cutlass", "moe_cutlass"]
PROVIDERS = Version("0.7")  # 0.7.x: providers, matched to the device's architecture


def sm120_modules(version: str) -> list[str]:
    """The modules fp4_warmup loads for KINDS on SM120 beside a CUDA 13 toolkit's build:
    0.6.7+ have the SM12x family quantization module."""
    quantization = "fp4_quantization_120f" if Version(version) >= Version("0.6.7") else "fp4_quantization_120"
    return [quantization, "fp4_gemm_cutlass_sm120", "fused_moe_120"]


RECORDER = """#!/bin/sh
echo "$@" >> "{log}"
echo "{name} stand-in: records its arguments and fails" >&2
exit 1
"""

CHILD = r"""
import os, pathlib, sys, traceback
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from fp4graph.verify import simulate
simulate.install()
torch.version.cuda = "13.0"  # a cu130 build of PyTorch, beside a cu130 jit-cache
# Slicing a (fake) CUDA tensor takes a CUDA device guard in Tensor.__getitem__, which a
# CPU build of PyTorch does not have (0.6.7+ slice fp4_quantize's scales): a plain slice
# goes to aten.slice instead, which FakeTensorMode answers.
_getitem = torch.Tensor.__getitem__
def _slice(self, key):
    if isinstance(key, slice) and self.device.type == "cuda":
        return torch.ops.aten.slice.Tensor(self, 0, key.start, key.stop, key.step or 1)
    return _getitem(self, key)
torch.Tensor.__getitem__ = _slice
BASE = list(sys.path)

class Module:
    "A loaded module whose kernels do nothing (the wrappers allocate the outputs)."
    def __getattr__(self, name):
        return lambda *args, **kwargs: None

def case(request):
    for name in ("CUDA_HOME", "CUDA_PATH", "FLASHINFER_NVCC_VERSION", "FLASHINFER_CUDA_ARCH_LIST"):
        os.environ.pop(name, None)
    os.environ["PATH"] = request["bin"] + os.pathsep + os.environ["PATH"]  # its nvcc, its ninja
    sys.path[:] = [*request["path"], *BASE]
    logs = {tool: pathlib.Path(request["logs"][tool]) for tool in ("nvcc", "ninja")}
    import tvm_ffi
    loaded = []
    tvm_ffi.load_module = lambda path: loaded.append(str(path)) or Module()
    import flashinfer
    out = {"version": flashinfer.__version__}
    at_import = {tool: log.read_text().splitlines() if log.exists() else [] for tool, log in logs.items()}
    try:
        if request["case"] == "warmup":
            out["names"] = flashinfer.fp4_warmup(torch.device("cuda", 0), modules=request["kinds"])
        else:
            if request["case"] == "capture":
                # As FlashInfer sees it (PyTorch's own indexing asks too, and a CPU build
                # of PyTorch cannot answer True there).
                torch.cuda.is_current_stream_capturing = (
                    lambda: sys._getframe(1).f_globals.get("__name__", "").startswith("flashinfer"))
            with FakeTensorMode(allow_non_fake_inputs=True):
                x = torch.empty(16, 256, dtype=torch.bfloat16, device="cuda")
                gs = torch.ones(1, device="cuda")
                q, sf = flashinfer.fp4_quantize(x, gs)
            out["shapes"] = [list(q.shape), list(sf.shape)]
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        out["traceback"] = traceback.format_exc()[-3000:]
    out["loaded"] = loaded
    out["at_import"] = at_import
    out["runs"] = {tool: log.read_text().splitlines() if log.exists() else [] for tool, log in logs.items()}
    return out

"""


def _tools(root: pathlib.Path, case: str) -> tuple[pathlib.Path, dict[str, str]]:
    """A bin/ directory with recording nvcc and ninja stand-ins for ``case``, and their logs."""
    bin_dir = root / case / "cuda" / "bin"
    bin_dir.mkdir(parents=True)
    logs = {}
    for tool in ("nvcc", "ninja"):
        logs[tool] = str(root / case / f"{tool}.log")
        script = bin_dir / tool
        script.write_text(RECORDER.format(log=logs[tool], name=tool), encoding="utf-8")
        script.chmod(0o755)
    return bin_dir, logs


@pytest.fixture(scope="module")
def results(wheel_tree: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    done: dict[str, dict[str, CaseReport]] = {}

    def get(version: str) -> dict[str, CaseReport]:
        if version in done:
            return done[version]
        root = tmp_path_factory.mktemp(f"jit-cache-{version}")
        jit_cache = kernel_packages.jit_cache_stand_in(
            root / "jit-cache", f"{version}+cu130", modules=sm120_modules(version)
        )
        trees = {"warmup": True, "capture": True, "first-call": False}
        requests = {}
        for case, patched in trees.items():
            bin_dir, logs = _tools(root, case)
            tree = wheel_tree(PROJECT, version, patched=patched)
            requests[case] = {"case": case, "kinds": KINDS, "logs": logs, "bin": str(bin_dir),
                              "path": [str(tree), str(jit_cache)]}
        cases = run_forked(CHILD, requests, env={"FLASHINFER_WORKSPACE_BASE": str(root / "workspace")})
        done[version] = {case: dataclasses.replace(report, values={**report.values, "jit_cache": str(jit_cache)})
                         for case, report in cases.items()}
        return done[version]

    return get


def _library(data: CaseReport, version: str, name: str) -> str:
    package = pathlib.Path(data["jit_cache"]) / "flashinfer_jit_cache"
    directory = package / ("providers/sm120f" if Version(version) >= PROVIDERS else "jit_cache")
    return str(directory / name / f"{name}.so")


def _nvcc_runs(data: CaseReport, version: str) -> list[str]:
    """What patched may run: nothing; 0.7.4 asks the toolkit's version once (a provider match)."""
    return ["--version"] if Version(version) >= PROVIDERS else []


@pytest.mark.parametrize("version", VERSIONS)
def test_fp4_warmup_takes_the_jit_cache_modules(results: Any, version: str) -> None:
    data = results(version)["warmup"]
    assert data.crash is None and "error" not in data, data.describe()
    modules = sm120_modules(version)
    assert data["names"] == modules, data.describe()
    assert data["loaded"] == [_library(data, version, n) for n in modules], data.describe()
    assert data["runs"] == {"nvcc": _nvcc_runs(data, version), "ninja": []}, data.describe()


@pytest.mark.parametrize("version", VERSIONS)
def test_first_call_in_a_capture_loads_the_jit_cache_module(results: Any, version: str) -> None:
    data = results(version)["capture"]
    assert data.crash is None and "error" not in data, data.describe()
    # What this version's fp4_quantize returns, as pristine's first call.
    assert data["shapes"] == results(version)["first-call"]["shapes"], data.describe()
    assert data["shapes"][0] == [16, 128], data.describe()
    assert data["loaded"] == [_library(data, version, sm120_modules(version)[0])], data.describe()
    assert data["runs"] == {"nvcc": _nvcc_runs(data, version), "ninja": []}, data.describe()


@pytest.mark.parametrize("version", VERSIONS)
def test_pristine_loads_it_too_but_asks_nvcc_first(results: Any, version: str) -> None:
    data = results(version)["first-call"]
    assert data.crash is None and "error" not in data, data.describe()
    assert data["loaded"] == [_library(data, version, sm120_modules(version)[0])], data.describe()
    assert data["runs"]["ninja"] == [], data.describe()
    assert "--version" in data["runs"]["nvcc"], data.describe()
