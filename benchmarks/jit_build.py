"""Cross-compile FlashInfer's SM120 fp4 JIT modules, per model kind, and time each build.

    python benchmarks/jit_build.py --flashinfer WHEEL_OR_TREE [...] --out DIR \
        [--workdir .jitbuild] [--deadline-s 540] [--jobs N] [--state PREVIOUS.json]
    python benchmarks/jit_build.py --list [--flashinfer ...]      # what would be built
    python benchmarks/jit_build.py --dry-run --flashinfer ... --out DIR   # specs and ninja files, no nvcc

What it measures.  sglang's piecewise warm-up (patched) builds the FlashInfer fp4
modules a model uses before torch.compile traces it.  For each sglang stack and model
kind (dense, MoE on sglang's default MoE runner ``auto``, MoE on
``--moe-runner-backend flashinfer_cutlass``) :data:`MODEL_KINDS` gives the modules the
warm-up requests, which are the fp4 modules the pristine server with piecewise off
builds for the same model (tests/models/test_fp4_warmup_models.py checks both, on a
simulated SM120, against sglang's own code), and :data:`ALL_KINDS` what the warm-up of
revision 1 built, ``flashinfer.fp4_warmup(device)``: every SM120 kind.

Each module is built the way ``JitSpec.build`` builds it (the spec's own ninja file,
``ninja -v -C <build dir> -f build.ninja``, FlashInfer's ``-j``), cross-compiled for
SM120 (``FLASHINFER_CUDA_ARCH_LIST=12.0a``) from an empty JIT cache, on any x86 host
with nvcc >= 12.8 (no SM120 GPU needed: the spec comes from the patched tree's
``fp4_warmup`` getters for SM 12.0, stopped before they load anything).  One worker
process per flashinfer version (versions cannot share an interpreter).

Deadline and resumption.  A build still running at ``--deadline-s`` (from the start of
the call) is interrupted (SIGINT: ninja deletes the outputs of the steps it stops) and
reported as ``> N s (unfinished)``, with ninja's progress.  The next call continues it:
ninja's build directory lives in ``--workdir`` (default ``.jitbuild/`` in the
repository, git-ignored, so a device machine that is still warm keeps it), and the
call's record (``jit_build.json`` in ``--out``) passed back as ``--state`` carries the
times so far; the times add up over calls (steps interrupted at a deadline are redone,
so the sum slightly overstates).  If the build directory is gone (a fresh machine), the
module restarts from empty and the record says so.  Modules are built in the order
``--order`` (default: what the selective warm-ups need first, the CUTLASS fused MoE last).

Outputs in ``--out``: ``jit_build.json`` (host, toolkit, per-module builds, per model
kind totals) and ``jit_build.md`` (the table for benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent

# flashinfer version -> the sglang stack that pins it (patches/stacks.toml).
STACK_OF = {"0.6.3": "sglang-0.5.9", "0.6.7.post3": "sglang-0.5.10.post1", "0.6.8.post1": "sglang-0.5.11"}
# Per stack and model kind: the fp4_warmup kinds the patched warm-up requests on SM120,
# equal to the fp4 modules the pristine server (piecewise off) builds: fp4graph's table
# (fp4graph.model.warmup, checked against sglang's code by tests/models/test_fp4_warmup_models.py).
sys.path.insert(0, str(REPO / "src"))
from fp4graph.model import warmup  # noqa: E402

MODEL_KINDS: dict[str, dict[str, list[str]]] = {
    stack: {
        "dense": list(warmup.requested(stack.removeprefix("sglang-"))),
        "moe-auto": list(warmup.requested(stack.removeprefix("sglang-"))),
        "moe-flashinfer_cutlass": list(warmup.requested(stack.removeprefix("sglang-"), "flashinfer_cutlass")),
    }
    for stack in STACK_OF.values()
}
# What flashinfer.fp4_warmup(device) builds on SM120 (the warm-up of revision 1).
ALL_KINDS = ["quantization", "gemm_cutlass", "moe_cutlass"]
DEFAULT_ORDER = ["quantization", "gemm_cutlass", "moe_cutlass"]
CUDA_ARCH_LIST = "12.0a"


# --- the worker: one flashinfer tree, in its own interpreter ---------------------------


class _Captured(Exception):
    """Raised by JitSpec.build_and_load in the worker: the spec, instead of a build."""


def _worker_specs(kinds: list[str]) -> dict[str, Any]:
    """kind -> JitSpec for SM 12.0, from the patched tree's fp4_warmup getters."""
    import flashinfer
    from flashinfer.jit import core

    warmup = sys.modules[flashinfer.fp4_warmup.__module__]
    if not hasattr(warmup, "FP4_MODULE_KINDS"):
        raise SystemExit(
            f"flashinfer {flashinfer.__version__} at {flashinfer.__file__} has no fp4_warmup(modules=...): "
            "use a patched tree of revision 2 or later (python -m fp4graph wheels)"
        )

    def capture(self: Any) -> Any:
        raise _Captured(self)

    core.JitSpec.build_and_load = capture  # type: ignore[method-assign]
    specs: dict[str, Any] = {}
    for kind, _label, getter in warmup._fp4_module_getters(12, 0):
        if kind in kinds:
            try:
                getter()
            except _Captured as spec:
                specs[kind] = spec.args[0]
    return specs


def _ninja_command(spec: Any) -> list[str]:
    from flashinfer.jit import cpp_ext

    command = ["ninja", "-v", "-C", str(spec.build_dir.resolve()), "-f", str(spec.ninja_path.resolve())]
    workers = cpp_ext._get_num_workers() if hasattr(cpp_ext, "_get_num_workers") else None
    if workers is not None:
        command += ["-j", str(workers)]
    return command


def _run_ninja(command: list[str], cwd: pathlib.Path, deadline: float, log: pathlib.Path) -> dict[str, Any]:
    """Run ninja until it finishes or ``deadline`` (time.time()); SIGINT at the deadline."""
    progress = {"done": 0, "total": None}
    step = re.compile(r"^\[(\d+)/(\d+)\]")
    start = time.time()
    with log.open("a") as out:
        out.write(f"\n# {datetime.datetime.now().isoformat()} {subprocess.list2cmdline(command)}\n")
        proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if m := step.match(line):
                    progress["done"], progress["total"] = int(m[1]), int(m[2])

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            rc = proc.wait(timeout=max(deadline - time.time(), 0))
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


def worker(args: argparse.Namespace) -> int:
    """Build (or, with --dry-run, describe) the modules of ``--kinds`` of one tree."""
    specs = _worker_specs(args.kinds.split(","))
    out = {}
    for kind in args.kinds.split(","):
        spec = specs.get(kind)
        if spec is None:
            out[kind] = {"status": "no module for SM120"}
            continue
        rec: dict[str, Any] = {"module": spec.name, "sources": len(spec.sources),
                               "build_dir": str(spec.build_dir)}
        rec["resumed"] = spec.build_dir.exists() and any(spec.build_dir.glob("**/*.o"))
        spec.write_ninja()
        command = _ninja_command(spec)
        rec["command"] = subprocess.list2cmdline(command)
        if spec.jit_library_path.exists() and not args.dry_run:
            rec.update(status="finished", seconds=0.0, note="already built in this workdir")
        elif args.dry_run:
            rec["status"] = "dry-run"
        else:
            rec.update(_run_ninja(command, spec.build_dir, args.deadline, pathlib.Path(args.log)))
        out[kind] = rec
        print("JITBUILD " + json.dumps({kind: rec}), flush=True)
        if rec.get("status") == "unfinished":
            break
    print("JITBUILD-DONE " + json.dumps(out), flush=True)
    return 0


# --- the driver ---------------------------------------------------------------------------


def tree_of(path: pathlib.Path, workdir: pathlib.Path) -> pathlib.Path:
    """A flashinfer tree (a directory holding flashinfer/) from a wheel or a tree."""
    if path.is_dir():
        if not (path / "flashinfer" / "__init__.py").is_file():
            raise SystemExit(f"{path}: no flashinfer/ package in this directory")
        return path
    if path.suffix != ".whl":
        raise SystemExit(f"{path}: neither a wheel nor a directory")
    dest = workdir / "trees" / path.stem
    if not (dest / "flashinfer" / "__init__.py").is_file():
        tmp = pathlib.Path(tempfile.mkdtemp(dir=workdir, prefix=".tree-"))
        with zipfile.ZipFile(path) as whl:
            whl.extractall(tmp)
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)
    return dest


def version_of(tree: pathlib.Path) -> str:
    """The version a flashinfer tree installs (its dist-info, else _build_meta.py)."""
    for info in sorted(tree.glob("flashinfer_python-*.dist-info/METADATA")):
        m = re.search(r"^Version: (.+)$", info.read_text(), re.M)
        if m:
            return m[1].strip()
    meta = tree / "flashinfer" / "_build_meta.py"
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", meta.read_text()) if meta.exists() else None
    if m:
        return m[1]
    raise SystemExit(f"{tree}: cannot tell the flashinfer version (no dist-info, no flashinfer/_build_meta.py)")


def upstream_version(version: str) -> str:
    return version.split("+")[0]


def run_worker(tree: pathlib.Path, version: str, kinds: list[str], args: argparse.Namespace,
               deadline: float) -> dict[str, Any]:
    base = pathlib.Path(args.workdir).resolve() / upstream_version(version)
    env = dict(os.environ)
    env.update(FLASHINFER_CUDA_ARCH_LIST=CUDA_ARCH_LIST, FLASHINFER_WORKSPACE_BASE=str(base))
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
    if args.dry_run and not shutil.which("nvcc") and "FLASHINFER_NVCC_VERSION" not in env:
        env["FLASHINFER_NVCC_VERSION"] = "12.9"
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(pathlib.Path(__file__).resolve()), "_worker", "--kinds", ",".join(kinds),
               "--deadline", str(deadline), "--log", str(out_dir / f"ninja-{upstream_version(version)}.log")]
    if args.dry_run:
        command.append("--dry-run")
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    done = [ln for ln in proc.stdout.splitlines() if ln.startswith("JITBUILD-DONE ")]
    if proc.returncode != 0 or not done:
        partial: dict[str, Any] = {}
        for ln in proc.stdout.splitlines():
            if ln.startswith("JITBUILD "):
                partial.update(json.loads(ln[len("JITBUILD "):]))
        tail = (proc.stdout + proc.stderr)[-3000:]
        for kind in kinds:
            partial.setdefault(kind, {"status": "error", "error": tail})
        return partial
    result: dict[str, Any] = json.loads(done[-1][len("JITBUILD-DONE "):])
    return result


def merge(previous: dict[str, Any] | None, version: str, kind: str, rec: dict[str, Any]) -> dict[str, Any]:
    """This call's record of a module, with the earlier calls' time added."""
    before = ((previous or {}).get("modules", {}).get(version, {}) or {}).get(kind)
    calls = [*(before or {}).get("calls", []), {k: rec.get(k) for k in ("status", "seconds", "done", "total", "resumed")}]
    merged = dict(rec, calls=calls)
    if before and before.get("status") == "finished" and rec.get("note") == "already built in this workdir":
        return before
    if before and before.get("status") == "unfinished" and rec.get("status") in ("finished", "unfinished"):
        merged["seconds"] = round(before.get("seconds", 0) + rec.get("seconds", 0), 1)
        if not rec.get("resumed"):
            # Nothing of the earlier build was left to reuse (a fresh machine, or no step
            # had finished): this call started from empty again.
            merged["restarted"] = True
            merged["seconds"] = rec.get("seconds", 0)
            merged["earlier_unfinished_seconds"] = before.get("seconds", 0)
    return merged


def steps(rec: dict[str, Any]) -> tuple[int, int] | None:
    """(done, total) ninja steps of a module over all its calls: a resumed call's ninja
    counts only the steps left, so the module's total is the first call's."""
    calls = [c for c in rec.get("calls") or [rec] if c.get("total")]
    if not calls:
        return None
    last = calls[-1]
    if len(calls) == 1 or not last.get("resumed"):  # one call, or started from empty again
        return last.get("done") or 0, last["total"]
    total = calls[0]["total"]
    return total - (last["total"] - (last.get("done") or 0)), total


def fmt_time(rec: dict[str, Any] | None) -> str:
    if not rec or "seconds" not in rec:
        return "not measured" if not rec or rec.get("status") in (None, "dry-run") else str(rec.get("status"))
    if rec.get("status") == "finished":
        return f"{rec['seconds']:.1f} s"
    if rec.get("status") == "unfinished":
        progress = steps(rec)
        done = f", {progress[0]}/{progress[1]} steps" if progress else ""
        over = f" over {len(rec['calls'])} calls" if len(rec.get("calls") or []) > 1 else ""
        return f"> {rec['seconds']:.0f} s{over} (unfinished{done})"
    return str(rec.get("status"))


def total(recs: list[dict[str, Any] | None]) -> str:
    """The build time of a set of modules: exact when every one finished."""
    if not recs:
        return "0 s (nothing to build)"
    measured = [r for r in recs if r and r.get("status") in ("finished", "unfinished")]
    seconds = sum(r["seconds"] for r in measured)
    if len(measured) == len(recs) and all(r.get("status") == "finished" for r in measured):
        return f"{seconds:.1f} s"
    text = f"> {seconds:.0f} s"
    if len(measured) < len(recs):
        text += f" ({len(recs) - len(measured)} of {len(recs)} not measured)"
    return text


def table(record: dict[str, Any]) -> str:
    """benchmarks/README.md's start-up table (markdown)."""
    rows = ["| stack (flashinfer) | model kind | fp4 modules the warm-up requests (= pristine, piecewise off) "
            "| SM120 build time | revision 1 warm-up: fp4_warmup(), every SM120 module |",
            "|---|---|---|---|---|"]
    for version, modules in record["modules"].items():
        stack = STACK_OF.get(upstream_version(version))
        kinds_of_stack = MODEL_KINDS.get(stack or "", {})
        everything = [modules.get(k) for k in ALL_KINDS]
        for model_kind, kinds in kinds_of_stack.items():
            recs = [modules.get(k) for k in kinds]
            names = ", ".join(f"`{(r or {}).get('module', k)}` ({fmt_time(r)})" for k, r in zip(kinds, recs, strict=True))
            rows.append(f"| {stack} ({version}) | {model_kind} | {names} | **{total(recs)}** | {total(everything)} |")
    return "\n".join(rows) + "\n"


def host_info() -> dict[str, Any]:
    nvcc = shutil.which("nvcc")
    nvcc_version = None
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"release ([\d.]+)", out)
        nvcc_version = m[1] if m else out.strip()[-80:]
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "nvcc": nvcc_version, "ninja": shutil.which("ninja"),
            "max_jobs": os.environ.get("MAX_JOBS"), "cuda_arch_list": CUDA_ARCH_LIST}


def inputs(paths: list[pathlib.Path], trees: list[tuple[pathlib.Path, str]]) -> list[dict[str, Any]]:
    """What was built: each --flashinfer argument, its version and (for a wheel) its sha256."""
    out = []
    for path, (_, version) in zip(paths, trees, strict=True):
        entry: dict[str, Any] = {"path": path.name, "version": version}
        if path.is_file():
            entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        out.append(entry)
    return out


def git_commit() -> str:
    """This checkout's commit (FP4GRAPH_COMMIT where the device copy has no .git)."""
    if os.environ.get("FP4GRAPH_COMMIT"):
        return os.environ["FP4GRAPH_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    return out.stdout.strip() or "unknown"


def listing(trees: list[tuple[pathlib.Path, str]]) -> str:
    lines = []
    versions = [v for _, v in trees] or list(STACK_OF)
    for version in versions:
        stack = STACK_OF.get(upstream_version(version))
        lines.append(f"flashinfer {version} ({stack or 'no sglang stack'}): fp4_warmup() on SM120 builds {ALL_KINDS}")
        for model_kind, kinds in MODEL_KINDS.get(stack or "", {}).items():
            lines.append(f"  {model_kind}: warm-up requests {kinds} (pristine, piecewise off, builds the same)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_worker"]:
        p = argparse.ArgumentParser(prog="jit_build.py _worker")
        p.add_argument("--kinds", required=True)
        p.add_argument("--deadline", type=float, required=True)
        p.add_argument("--log", required=True)
        p.add_argument("--dry-run", action="store_true")
        return worker(p.parse_args(argv[1:]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flashinfer", action="append", default=[], type=pathlib.Path,
                   help="a patched flashinfer wheel or unpacked tree (repeat for several versions)")
    p.add_argument("--out", type=pathlib.Path, help="where jit_build.json / jit_build.md go")
    p.add_argument("--workdir", type=pathlib.Path, default=REPO / ".jitbuild",
                   help="JIT workspace and unpacked trees; kept between calls (default: .jitbuild/)")
    p.add_argument("--deadline-s", type=float, default=540.0, help="stop building this long after the start")
    p.add_argument("--state", type=pathlib.Path, help="jit_build.json of an earlier call, to continue")
    p.add_argument("--order", default=",".join(DEFAULT_ORDER),
                   help="build order: KIND (every --flashinfer) or VERSION:KIND, comma-separated")
    p.add_argument("--jobs", type=int, help="MAX_JOBS for ninja (default: FlashInfer's own choice)")
    p.add_argument("--list", action="store_true", help="print what each model kind requests and exit")
    p.add_argument("--dry-run", action="store_true", help="specs and ninja files only, no nvcc")
    args = p.parse_args(argv)
    start = time.time()
    args.workdir.mkdir(parents=True, exist_ok=True)
    trees = [(t, version_of(t)) for t in (tree_of(f, args.workdir) for f in args.flashinfer)]
    if args.list:
        print(listing(trees))
        return 0
    if not trees or args.out is None:
        p.error("--flashinfer and --out are required (or --list)")
    if args.jobs:
        os.environ["MAX_JOBS"] = str(args.jobs)
    previous = json.loads(args.state.read_text()) if args.state else None
    record: dict[str, Any] = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
                              "host": host_info(), "inputs": inputs(args.flashinfer, trees),
                              "fp4graph_commit": git_commit(), "dry_run": args.dry_run, "modules": {}}
    deadline = start + args.deadline_s
    for version in [v for _, v in trees]:
        # Earlier calls' records stay (this call replaces those it builds again).
        record["modules"][version] = dict(((previous or {}).get("modules", {}).get(version)) or {})
    # --order: KIND (every version) or VERSION:KIND items, built in that order; by
    # default what the selective warm-ups need, for every stack, before the slow
    # fused-MoE module.
    for item in args.order.split(","):
        only, _, kind = item.rpartition(":")
        if kind not in ALL_KINDS:
            p.error(f"--order: unknown kind {kind!r} in {item!r} (kinds: {', '.join(ALL_KINDS)})")
        for tree, version in trees:
            if only and upstream_version(version) != only:
                continue
            before = ((previous or {}).get("modules", {}).get(version) or {}).get(kind)
            if before and before.get("status") == "finished" and not args.dry_run:
                record["modules"][version][kind] = before
                continue
            if time.time() >= deadline and not args.dry_run:
                record["modules"][version][kind] = before or {"status": "not started (deadline)"}
                continue
            rec = run_worker(tree, version, [kind], args, deadline)[kind]
            record["modules"][version][kind] = merge(previous, version, kind, rec)
            print(f"{version} {kind}: {fmt_time(record['modules'][version][kind])}", flush=True)
    record["wall_s"] = round(time.time() - start, 1)
    record["model_kinds"] = {
        version: {mk: {"kinds": ks, "modules": [record["modules"][version].get(k, {}).get("module") for k in ks],
                       "build_time": total([record["modules"][version].get(k) for k in ks])}
                  for mk, ks in MODEL_KINDS.get(STACK_OF.get(upstream_version(version), ""), {}).items()}
        for version in record["modules"]
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "jit_build.json").write_text(json.dumps(record, indent=1))
    (args.out / "jit_build.md").write_text(table(record))
    print(table(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
