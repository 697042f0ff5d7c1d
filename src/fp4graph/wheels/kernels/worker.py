"""Build FlashInfer fp4 JIT modules for one SM12x arch: the child that runs nvcc.

    python worker.py REQUEST.json      # prints one ``RESULT {...}`` line

Runs in an interpreter where ``import flashinfer`` works (torch, tvm-ffi, ninja; the
patched tree first on PYTHONPATH) and nvcc is installed; it imports nothing of fp4graph
(the GPU machine runs it from the repository with only the standard library besides
flashinfer's own dependencies).  The parent (:mod:`.compile`) sets, before flashinfer is
imported: ``FLASHINFER_CUDA_ARCH_LIST`` (the arch), ``FLASHINFER_WORKSPACE_BASE`` (the
build directories) and ``CUDA_HOME``.

Each module is built as ``JitSpec.build`` builds it: its spec comes from the patched
tree's own ``fp4_warmup`` getters for the device (stopped before they load anything), its
ninja file from ``JitSpec.write_ninja``, then ``ninja -C <build dir>``; a module still
building at the request's deadline is interrupted (SIGINT: ninja removes the outputs of
the steps it stops) and reported unfinished, and a later call resumes it in the same
build directory.  The kind ``probe`` is fp4graph's own one-kernel module
(:data:`PROBE_SOURCE`), built by ``gen_jit_spec`` with the arch list's flags as FlashInfer's
CUTLASS fp4 GEMM is.

Reproducible bytes, whatever the paths and the process ids (checked by building twice):
``-ffile-prefix-map`` maps every root a ``__FILE__`` can name (the flashinfer tree, the
workspace, tvm-ffi's headers, Python's and CUDA's includes; FLASHINFER_EXTRA_CFLAGS, and
``-Xcompiler`` for nvcc's host and device passes) to a fixed name, and the link strips the
symbol table (``-Wl,--strip-all``), which held nvcc's ``tmpxft_<pid>`` file names; the
dynamic symbols tvm-ffi loads stay.  A toolkit without cuBLAS / cuRAND headers (one
installed from NVIDIA's wheels) gets them from the ``nvidia`` packages of this interpreter
(``cuda-toolkit[cublas,curand]``), and one without the driver's link stub gets
``stub_dir`` (a ``libcuda.so`` the parent generated from ``cuda.h``).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from typing import Any

# fp4graph's CI module: one CUDA kernel and one host function, through FlashInfer's JIT
# machinery (gen_jit_spec, its ninja rules and flags, tvm-ffi's export and loader).
PROBE_NAME = "fp4graph_probe"
PROBE_MARKER = 20261202
PROBE_SOURCE = f"""\
// fp4graph's probe module (src/fp4graph/wheels/kernels/worker.py): built and loaded like a
// FlashInfer JIT module, in seconds.
#include <cuda_runtime.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

namespace {{
__global__ void fill_kernel(int32_t* out, int32_t value, int64_t n) {{
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}}
}}  // namespace

// Fill a CUDA int32 tensor with ``value`` (the kernel: needs a GPU of the wheel's arch).
void fill(tvm::ffi::TensorView out, int64_t value) {{
  int64_t n = out.numel();
  int threads = 128;
  int64_t blocks = (n + threads - 1) / threads;
  fill_kernel<<<static_cast<unsigned>(blocks), threads>>>(
      static_cast<int32_t*>(out.data_ptr()), static_cast<int32_t>(value), n);
}}

// A constant of the build (a host function: callable without a GPU).
int64_t marker() {{ return {PROBE_MARKER}; }}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(fill, fill);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(marker, marker);
"""

# The headers FlashInfer's fp4 sources include from the CUDA toolkit's optional parts.
TOOLKIT_HEADERS = ("cublasLt.h", "curand_kernel.h")


class _Captured(Exception):
    """Raised in place of JitSpec.build_and_load: carries the spec."""


def probe_spec(workspace: pathlib.Path) -> Any:
    """The probe's JitSpec (also what a loader test asks FlashInfer to load)."""
    from flashinfer.jit import core

    source = workspace / "fp4graph_probe" / "probe.cu"
    source.parent.mkdir(parents=True, exist_ok=True)
    if not source.exists() or source.read_text() != PROBE_SOURCE:
        source.write_text(PROBE_SOURCE)
    flags = core.current_compilation_context.get_nvcc_flags_list(supported_major_versions=[12])
    return core.gen_jit_spec(PROBE_NAME, [source], extra_cuda_cflags=flags)


def fp4_specs(major: int, minor: int, kinds: list[str]) -> dict[str, Any]:
    """kind -> JitSpec of the device SM ``major.minor``, from the tree's fp4_warmup getters."""
    import flashinfer
    from flashinfer.jit import core

    warmup = sys.modules[flashinfer.fp4_warmup.__module__]
    known = getattr(warmup, "FP4_MODULE_KINDS", None)
    if known is None:
        raise SystemExit(f"flashinfer {flashinfer.__version__} at {flashinfer.__file__} has no "
                         "fp4_warmup(modules=...): build kernels from a patched tree (revision 2 or later)")
    getters = {kind: getter for kind, _label, getter in warmup._fp4_module_getters(major, minor)}
    missing = [k for k in kinds if k not in getters]
    if missing:
        raise SystemExit(f"flashinfer {flashinfer.__version__} has no {missing} module on SM{major}{minor}; "
                         f"there: {sorted(getters)}")

    def capture(self: Any) -> Any:
        raise _Captured(self)

    original = core.JitSpec.build_and_load
    core.JitSpec.build_and_load = capture
    specs: dict[str, Any] = {}
    try:
        for kind in kinds:
            try:
                getters[kind]()
            except _Captured as captured:
                specs[kind] = captured.args[0]
            else:
                raise SystemExit(f"the {kind} getter of SM{major}{minor} loaded no JIT module")
    finally:
        core.JitSpec.build_and_load = original
    return specs


def _toolkit_include_dirs(cuda_home: pathlib.Path) -> list[pathlib.Path]:
    """Where the optional toolkit headers are when the toolkit lacks them: the ``nvidia``
    wheels of this interpreter (nvidia/cuXX/include)."""
    if all((cuda_home / "include" / h).exists() for h in TOOLKIT_HEADERS):
        return []
    found: list[pathlib.Path] = []
    try:
        import nvidia  # the namespace package of NVIDIA's wheels
    except ImportError:
        return []
    for root in map(pathlib.Path, getattr(nvidia, "__path__", [])):
        for include in sorted(root.glob("*/include")):
            if any((include / h).exists() for h in TOOLKIT_HEADERS) and include not in found:
                found.append(include.resolve())
    return found


def _prefix_maps(roots: dict[str, pathlib.Path]) -> list[str]:
    """``OLD=NEW`` for each root (and its resolved path): what ``__FILE__`` may name."""
    maps: dict[str, str] = {}
    for new, old in roots.items():
        for path in {str(old), str(old.resolve())}:
            maps.setdefault(path, f"/{new}")
    # The longest prefix first: GCC uses the last matching option, so it comes last.
    return [f"{old}={new}" for old, new in sorted(maps.items(), key=lambda kv: len(kv[0]))]


def set_build_flags(workspace: pathlib.Path, cuda_home: pathlib.Path, stub_dir: str | None,
                    target_directory: str | None = None) -> dict[str, Any]:
    """FLASHINFER_EXTRA_{C,CUDA,LD}FLAGS for reproducible bytes (read when ninja files are
    written), and a cross build's ``--target-directory`` (sbsa-linux: the host code's CUDA
    target, with CC / CXX the cross compilers); returns what was set, for the record."""
    import flashinfer
    import tvm_ffi

    includes = _toolkit_include_dirs(cuda_home)
    roots = {
        "flashinfer-tree": pathlib.Path(flashinfer.__file__).resolve().parents[1],
        "flashinfer-workspace": workspace,
        "tvm-ffi": pathlib.Path(tvm_ffi.__file__).resolve().parent,
        "python-include": pathlib.Path(sysconfig.get_path("include")),
        "cuda": cuda_home,
    }
    roots.update({f"cuda-include-{i}": p for i, p in enumerate(includes)})
    maps = _prefix_maps(roots)
    cflags = [f"-ffile-prefix-map={m}" for m in maps] + [f"-isystem{p}" for p in includes]
    cuda_flags = [f"-Xcompiler=-ffile-prefix-map={m}" for m in maps] + [f"-isystem={p}" for p in includes]
    cuda_flags += ["--target-directory", target_directory] if target_directory else []
    ldflags = ["-Wl,--strip-all"] + ([f"-L{stub_dir}"] if stub_dir else [])
    for var, flags in (("FLASHINFER_EXTRA_CFLAGS", cflags), ("FLASHINFER_EXTRA_CUDAFLAGS", cuda_flags),
                       ("FLASHINFER_EXTRA_LDFLAGS", ldflags)):
        os.environ[var] = " ".join(shlex.quote(f) for f in flags)
    return {"toolkit_include_dirs": [str(p) for p in includes], "prefix_maps": sorted(roots),
            "link_stub": stub_dir is not None, "target_directory": target_directory}


def _ninja_command(spec: Any, jobs: int | None) -> list[str]:
    command = ["ninja", "-v", "-C", str(spec.build_dir.resolve()), "-f", str(spec.ninja_path.resolve())]
    return command + (["-j", str(jobs)] if jobs else [])


def run_ninja(command: list[str], deadline: float | None, log: pathlib.Path) -> dict[str, Any]:
    """Run ninja to the end or to ``deadline`` (time.time()), its output appended to ``log``."""
    progress: dict[str, Any] = {"done": 0, "total": None}
    step = re.compile(r"^\[(\d+)/(\d+)\]")
    start = time.time()
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n# {subprocess.list2cmdline(command)}\n")
        out.flush()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                out.flush()
                if m := step.match(line):
                    progress["done"], progress["total"] = int(m[1]), int(m[2])

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=None if deadline is None else max(deadline - time.time(), 0))
            status = "finished" if rc == 0 else f"failed (ninja exit {rc})"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            status = "unfinished"
        reader.join(timeout=10)
    return {"status": status, "seconds": round(time.time() - start, 1), **progress}


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(request: dict[str, Any]) -> dict[str, Any]:
    import flashinfer
    from flashinfer.jit import cpp_ext

    arch = request["arch"]
    major, minor = int(arch.split(".")[0]), int(arch.split(".")[1][0])
    workspace = pathlib.Path(os.environ["FLASHINFER_WORKSPACE_BASE"])
    cuda_home = pathlib.Path(os.environ["CUDA_HOME"])
    out = pathlib.Path(request["out"])
    log = pathlib.Path(request["log"])
    # The series' cuda-version patch reads torch.version.cuda for runtime checks and nvcc for
    # flags; upstream's get_cuda_version asks nvcc first (a tree without the patch).
    runtime = cpp_ext.get_cuda_version()
    nvcc = cpp_ext.get_nvcc_version() if hasattr(cpp_ext, "get_nvcc_version") else runtime
    if (runtime.major, runtime.minor) != (nvcc.major, nvcc.minor):
        # 0.6.7+ names modules after the runtime check (fp4_quantization_120f from CUDA 12.9).
        raise SystemExit(f"this interpreter's torch is built for CUDA {runtime}, nvcc is {nvcc}: module names "
                         "follow torch's CUDA, so build with a CPU torch or one of nvcc's CUDA release")
    flags = set_build_flags(workspace, cuda_home, request.get("stub_dir"), request.get("target_directory"))
    fp4 = [k for k in request["kinds"] if k != "probe"]
    specs = fp4_specs(major, minor, fp4) if fp4 else {}
    if "probe" in request["kinds"]:
        specs["probe"] = probe_spec(workspace)
    result: dict[str, Any] = {
        "flashinfer": flashinfer.__version__,
        "arch": arch,
        "device": f"{major}{minor}",
        "cuda_runtime_check": str(runtime),
        "nvcc": str(nvcc),
        "flags": flags,
        "modules": [],
    }
    for kind in request["kinds"]:
        spec = specs[kind]
        rec: dict[str, Any] = {"kind": kind, "name": spec.name, "sources": len(spec.sources),
                               "resumed": spec.build_dir.exists() and any(spec.build_dir.glob("*.o"))}
        if request.get("dry_run"):
            spec.write_ninja()
            rec.update(status="dry-run", ninja=str(spec.ninja_path))
        else:
            spec.write_ninja()
            rec.update(run_ninja(_ninja_command(spec, request.get("jobs")), request.get("deadline"), log))
            if rec["status"] == "finished":
                dest = out / spec.name / f"{spec.name}.so"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(spec.jit_library_path, dest)
                rec.update(sha256=_sha256(dest), size=dest.stat().st_size)
                shutil.rmtree(spec.build_dir)  # its objects: the module is built
        result["modules"].append(rec)
        print("MODULE " + json.dumps(rec), flush=True)
        if rec["status"] not in ("finished", "dry-run"):
            break
    return result


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: worker.py REQUEST.json")
    outcome = main(json.loads(pathlib.Path(sys.argv[1]).read_text(encoding="utf-8")))
    print("RESULT " + json.dumps(outcome), flush=True)
