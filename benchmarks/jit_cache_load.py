"""A real load of a flashinfer-jit-cache module into the patched flashinfer, with no nvcc.

    python benchmarks/jit_cache_load.py --flashinfer PATCHED_WHEEL --out DIR [--arch 9.0a]

On a GPU host (issue 23: the H200, SM90, since SM120 code cannot run there):

1. **build** (nvcc needed, once): in a child with ``FLASHINFER_CUDA_ARCH_LIST=<arch>`` and
   an empty JIT cache, ``flashinfer.fp4_warmup(modules=["quantization"])`` builds the fp4
   quantization module of this device with the toolkit on PATH;
2. **package**: that ``<name>/<name>.so`` goes into a flashinfer-jit-cache layout as
   ``nox -s kernels`` writes it (``flashinfer_jit_cache/__init__.py`` with
   ``get_jit_cache_dir()``, ``_build_meta.py`` with ``__version__ = "<release>+cu<XY>"``,
   ``jit_cache/<name>/<name>.so``);
3. **load**: a fresh child with no nvcc (PATH without any directory that holds one, plus a
   stand-in ``nvcc`` first on PATH that records its arguments and fails; CUDA_HOME and
   CUDA_PATH pointing at an empty directory), an empty JIT cache and the package beside
   flashinfer: ``fp4_warmup(modules=["quantization"])``, then ``fp4_quantize`` on a real
   bf16 tensor, and the same first call inside ``torch.cuda.graph`` in a third child that
   skipped the warm-up (the capture guard must let the prebuilt module load).

It passes when every load took the package's library (``tvm_ffi.load_module`` is wrapped
to record the path, then loads for real), nvcc was never run, and nothing was written
under the JIT cache's ``cached_ops``.  Writes ``DIR/jit_cache_load.json``; exit code 1 on
failure.  Below SM100 FlashInfer's fp4 kernels are compiled out (they launch and do
nothing): this checks the loader, not fp4 math.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Any

CHILD = r"""
import json, os, pathlib, sys, time
import torch
import tvm_ffi
REQ = json.loads(os.environ["JIT_CACHE_LOAD"])
loaded = []
real_load = tvm_ffi.load_module
def load_module(path, *args, **kwargs):
    loaded.append(str(path))
    return real_load(path, *args, **kwargs)
tvm_ffi.load_module = load_module
t0 = time.perf_counter()
import flashinfer
out = {"flashinfer": flashinfer.__version__, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
       "device": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
       "import_s": time.perf_counter() - t0}
try:
    import flashinfer_jit_cache
    out["jit_cache"] = [flashinfer_jit_cache.__version__, flashinfer_jit_cache.get_jit_cache_dir()]
except ImportError:
    out["jit_cache"] = None
x = torch.randn(128, 256, dtype=torch.bfloat16, device="cuda")
gs = torch.ones(1, dtype=torch.float32, device="cuda")
try:
    if REQ["case"] in ("build", "warmup"):
        t = time.perf_counter()
        out["names"] = flashinfer.fp4_warmup(torch.device("cuda", 0), modules=["quantization"])
        out["warmup_s"] = time.perf_counter() - t
        t = time.perf_counter()
        q, sf = flashinfer.fp4_quantize(x, gs)
        torch.cuda.synchronize()
        out["first_call_s"] = time.perf_counter() - t
    else:  # capture: the first fp4 call of the process, inside a CUDA graph capture
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        t = time.perf_counter()
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            q, sf = flashinfer.fp4_quantize(x, gs)
        graph.replay()
        torch.cuda.synchronize()
        out["first_call_s"] = time.perf_counter() - t
    out["shapes"] = [list(q.shape), list(sf.shape)]
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
out["loaded"] = loaded
print("RESULT:" + json.dumps(out))
"""

INIT = '''"""Prebuilt FlashInfer JIT modules (flashinfer-jit-cache layout, benchmarks/jit_cache_load.py)."""

from pathlib import Path

from ._build_meta import __version__

jit_cache_dir = Path(__file__).parent / "jit_cache"


def get_jit_cache_dir() -> str:
    return str(jit_cache_dir)
'''

RECORDER = """#!/bin/sh
echo "$@" >> "{log}"
echo "nvcc stand-in: no toolkit here" >&2
exit 1
"""


def _child(case: str, path: list[pathlib.Path], env: dict[str, str]) -> dict[str, Any]:
    # The tree first, then what the caller's PYTHONPATH holds (torch's and tvm-ffi's site
    # where they are not installed: a GPU machine's carried wheels).
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    child_env = {**env, "JIT_CACHE_LOAD": json.dumps({"case": case}),
                 "PYTHONPATH": os.pathsep.join([*map(str, path), *inherited])}
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                            env=child_env, timeout=1800)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT:")]
    if result.returncode != 0 or not lines:
        return {"crash": f"rc={result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"}
    return json.loads(lines[-1][len("RESULT:"):])


def _without_nvcc(path: str) -> str:
    return os.pathsep.join(d for d in path.split(os.pathsep) if d and not (pathlib.Path(d) / "nvcc").exists())


def _cached_ops(workspace: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(workspace)) for p in workspace.rglob("cached_ops/*/*.so"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flashinfer", type=pathlib.Path, required=True, help="the patched flashinfer wheel")
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--arch", default="9.0a", help="FLASHINFER_CUDA_ARCH_LIST of the build")
    parser.add_argument("--cuda-tag", default=None, help="cu<XY> of the package (default: torch.version.cuda)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="jit-cache-load-"))
    site = work / "site"
    with zipfile.ZipFile(args.flashinfer) as wheel:
        wheel.extractall(site)
    base = {k: v for k, v in os.environ.items() if k not in ("FLASHINFER_NVCC_VERSION", "PYTHONPATH")}
    report: dict[str, Any] = {"wheel": args.flashinfer.name, "arch": args.arch}

    # 1. build, with the toolkit on PATH.
    build_ws = work / "build-workspace"
    t = time.perf_counter()
    built = _child("build", [site], {**base, "FLASHINFER_CUDA_ARCH_LIST": args.arch,
                                     "FLASHINFER_WORKSPACE_BASE": str(build_ws)})
    report["build"] = {**built, "wall_s": time.perf_counter() - t, "cached_ops": _cached_ops(build_ws)}
    # The modules the warm-up named (it may name one as "get_fp4_quantization_module(90)").
    names = " ".join(built.get("names") or [])
    libraries = [build_ws / p for p in report["build"]["cached_ops"] if pathlib.Path(p).parent.name in names]
    if "crash" in built or "error" in built or len(libraries) != 1:
        return _finish(args.out, report, f"the build step failed or built {len(libraries)} modules")

    # 2. package.
    import torch

    release = built["flashinfer"].split("+")[0]
    cuda = args.cuda_tag or "cu" + (torch.version.cuda or "13.0").replace(".", "")
    package = work / "jit-cache" / "flashinfer_jit_cache"
    name = libraries[0].parent.name
    (package / "jit_cache" / name).mkdir(parents=True)
    shutil.copyfile(libraries[0], package / "jit_cache" / name / f"{name}.so")
    (package / "__init__.py").write_text(INIT, encoding="utf-8")
    (package / "_build_meta.py").write_text(f'__version__ = "{release}+{cuda}"\n', encoding="utf-8")
    expected = str(package / "jit_cache" / name / f"{name}.so")
    report["package"] = {"version": f"{release}+{cuda}", "library": expected}

    # 3. load, with no toolkit.
    bin_dir = work / "no-nvcc" / "bin"
    bin_dir.mkdir(parents=True)
    log = work / "no-nvcc" / "nvcc.log"
    (bin_dir / "nvcc").write_text(RECORDER.format(log=log), encoding="utf-8")
    (bin_dir / "nvcc").chmod(0o755)
    empty = work / "no-cuda-home"
    empty.mkdir()
    failures = []
    for case in ("warmup", "capture"):
        ws = work / f"{case}-workspace"
        env = {**base, "PATH": f"{bin_dir}{os.pathsep}{_without_nvcc(base.get('PATH', ''))}",
               "CUDA_HOME": str(empty), "CUDA_PATH": str(empty), "FLASHINFER_WORKSPACE_BASE": str(ws)}
        env.pop("FLASHINFER_CUDA_ARCH_LIST", None)
        rec = _child(case, [site, package.parent], env)
        rec["nvcc_runs"] = log.read_text().splitlines() if log.exists() else []
        rec["cached_ops"] = _cached_ops(ws)
        report[case] = rec
        if "crash" in rec or "error" in rec:
            failures.append(f"{case}: {rec.get('error') or rec.get('crash')}")
        elif rec["loaded"] != [expected] or rec["nvcc_runs"] or rec["cached_ops"]:
            failures.append(f"{case}: loaded {rec['loaded']}, nvcc runs {rec['nvcc_runs']}, built {rec['cached_ops']}")
    return _finish(args.out, report, "; ".join(failures))


def _finish(out: pathlib.Path, report: dict[str, Any], failure: str) -> int:
    report["ok"] = not failure
    report["failure"] = failure or None
    (out / "jit_cache_load.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: report[k] for k in ("ok", "failure")}))
    for case in ("build", "warmup", "capture"):
        rec = report.get(case, {})
        print(case, {k: rec.get(k) for k in ("names", "import_s", "warmup_s", "first_call_s", "loaded", "nvcc_runs")})
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
