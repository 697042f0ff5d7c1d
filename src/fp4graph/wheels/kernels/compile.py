"""Compile a flashinfer tree's fp4 modules for one arch, in a child interpreter, cached by content.

A module's build is cached under ``<cache>/kernels/modules/<key>/`` (its ``.so`` and
``module.json``), the key being everything its bytes depend on: the patched flashinfer
wheel's sha256, the arch, the kind, the toolchain (:mod:`.toolchain`) and the worker's
code.  The build directories live in ``work_dir`` and are kept until the module is
cached, so an interrupted build (a deadline, a lost machine) resumes where ninja stopped.

The build runs at a fixed path (``work_dir``: the tree and the workspace, the caller's
:data:`BUILD_ROOT` by default): nvcc names a ``.cu`` file's anonymous namespaces after a
hash of its path (``_GLOBAL__N__<hash>_8_probe_cu_...``, in the device code and its
symbols), so a build elsewhere gives other bytes; the headers' roots are mapped instead
(``-ffile-prefix-map``, :mod:`.worker`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from ...model.files import atomic_directory, sha256_of
from ...model.log import log, progress
from . import worker
from .targets import Arch, KernelsError
from .toolchain import Toolchain, link_stub, needs_link_stub


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Module:
    """One built module: its kind, JIT name, library file and how it was built."""

    kind: str
    name: str
    library: pathlib.Path  # <dir>/<name>.so
    sha256: str
    seconds: float | None  # None: taken from the cache or an export
    steps: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Unfinished:
    kind: str
    name: str
    status: str  # "unfinished" (the deadline) or "failed (...)"
    seconds: float
    done: int | None
    total: int | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ArchBuild:
    arch: Arch
    modules: tuple[Module, ...]
    unfinished: tuple[Unfinished, ...]
    log: pathlib.Path | None


def _key(flashinfer_sha256: str, arch: Arch, kind: str, toolchain: Toolchain) -> str:
    code = pathlib.Path(worker.__file__).read_bytes()
    parts = [flashinfer_sha256, str(arch), kind, toolchain.digest, hashlib.sha256(code).hexdigest()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _cached(entry: pathlib.Path, kind: str) -> Module | None:
    record = entry / "module.json"
    if not record.exists():
        return None
    data = json.loads(record.read_text(encoding="utf-8"))
    library = entry / data["name"] / f"{data['name']}.so"
    if not library.exists() or sha256_of(library) != data["sha256"]:
        log(f"rebuild {kind}: the cached {library} does not match its record")
        return None
    return Module(kind=kind, name=data["name"], library=library, sha256=data["sha256"], seconds=None)


def run_worker(
    *,
    python: str,
    tree: pathlib.Path,
    arch: Arch,
    kinds: Sequence[str],
    toolchain: Toolchain,
    workspace: pathlib.Path,
    work_dir: pathlib.Path,
    out: pathlib.Path,
    cache_dir: pathlib.Path,
    jobs: int | None,
    deadline: float | None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run :mod:`.worker` for ``kinds`` of ``arch`` (FlashInfer's workspace ``workspace``;
    the request, ninja's log and the built modules in ``work_dir``); its RESULT record."""
    work_dir.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    stub = str(link_stub(toolchain.cuda_home, cache_dir)) if needs_link_stub(toolchain.cuda_home) else None
    request = {"arch": str(arch), "kinds": list(kinds), "out": str(out), "log": str(work_dir / "ninja.log"),
               "jobs": jobs, "deadline": deadline, "stub_dir": stub, "dry_run": dry_run,
               "target_directory": toolchain.target_directory}
    request_file = work_dir / "request.json"
    request_file.write_text(json.dumps(request, indent=1), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    env.update(
        FLASHINFER_CUDA_ARCH_LIST=str(arch),
        FLASHINFER_WORKSPACE_BASE=str(workspace),
        CUDA_HOME=str(toolchain.cuda_home),
        PYTHONPATH=os.pathsep.join([str(tree), *filter(None, [os.environ.get("PYTHONPATH")])]),
        PATH=os.pathsep.join([str(toolchain.cuda_home / "bin"), os.environ.get("PATH", "")]),
        **toolchain.environ,  # a cross build's compilers: CC (nvcc -ccbin) and CXX (FlashInfer's $cxx)
    )
    if jobs:
        env["MAX_JOBS"] = str(jobs)
    command = [python, str(pathlib.Path(worker.__file__).resolve()), str(request_file)]
    log(f"build {arch} {','.join(kinds)}: {subprocess.list2cmdline(command)}")
    with subprocess.Popen(command, env=env, cwd=work_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("MODULE "):
                rec = json.loads(line[len("MODULE "):])
                progress(f"{arch} {rec['name']}: {rec['status']}"
                         + (f" in {rec['seconds']} s" if "seconds" in rec else ""))
    results = [ln for ln in lines if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not results:
        tail = "".join(lines)[-3000:]
        raise KernelsError(f"the kernels build of {arch} ({', '.join(kinds)}) in {tree} failed "
                           f"(exit {proc.returncode}):\n{tail}\nninja's log: {work_dir / 'ninja.log'}")
    record: dict[str, Any] = json.loads(results[-1][len("RESULT "):])
    failed = [m for m in record["modules"] if str(m["status"]).startswith("failed")]
    if failed:
        ninja = (work_dir / "ninja.log").read_text(encoding="utf-8", errors="replace")
        hint = ""
        if any(f"{h}: No such file" in ninja for h in worker.TOOLKIT_HEADERS):
            hint = (f"\n{toolchain.cuda_home} lacks cuBLAS/cuRAND headers: install "
                    f"cuda-toolkit[cublas,curand]=={toolchain.nvcc_release}.* into {python} "
                    "(`nox -s kernels` does) or use a full CUDA toolkit")
        raise KernelsError(f"the kernels build of {arch} failed: {failed[0]['name']} {failed[0]['status']}; "
                           f"the end of ninja's log ({work_dir / 'ninja.log'}):\n{ninja[-3000:]}{hint}")
    return record


def compile_arch(
    *,
    python: str,
    tree: pathlib.Path,
    flashinfer_sha256: str,
    arch: Arch,
    kinds: Sequence[str],
    toolchain: Toolchain,
    cache_dir: pathlib.Path,
    work_dir: pathlib.Path,
    jobs: int | None = None,
    deadline: float | None = None,
    use_cache: bool = True,
) -> ArchBuild:
    """The modules of ``kinds`` for ``arch``: cached ones as they are, the others built."""
    entries = {k: cache_dir / "kernels" / "modules" / _key(flashinfer_sha256, arch, k, toolchain) for k in kinds}
    found = {k: m for k in kinds if use_cache and (m := _cached(entries[k], k)) is not None}
    missing = [k for k in kinds if k not in found]
    built: dict[str, Module] = {}
    unfinished: list[Unfinished] = []
    log_file = None
    if found:
        progress(f"{arch}: cached {', '.join(m.name for m in found.values())}")
    if missing:
        progress(f"{arch}: building {', '.join(missing)} (ninja's log: {work_dir / str(arch) / 'ninja.log'})")
        arch_dir = work_dir / str(arch)
        out = arch_dir / "out"
        shutil.rmtree(out, ignore_errors=True)
        record = run_worker(python=python, tree=tree, arch=arch, kinds=missing, toolchain=toolchain,
                            workspace=work_dir / "workspace", work_dir=arch_dir, out=out, cache_dir=cache_dir,
                            jobs=jobs, deadline=deadline)
        log_file = arch_dir / "ninja.log"
        for rec in record["modules"]:
            if rec["status"] != "finished":
                unfinished.append(Unfinished(kind=rec["kind"], name=rec["name"], status=rec["status"],
                                             seconds=rec.get("seconds", 0.0), done=rec.get("done"),
                                             total=rec.get("total")))
                continue
            kind, name = rec["kind"], rec["name"]
            with atomic_directory(entries[kind], replace=True) as staging:
                (staging / name).mkdir()
                shutil.copyfile(out / name / f"{name}.so", staging / name / f"{name}.so")
                meta = {"kind": kind, "name": name, "sha256": rec["sha256"], "arch": str(arch),
                        "flashinfer_sha256": flashinfer_sha256, "toolchain": dict(toolchain.identity),
                        "seconds": rec["seconds"], "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                (staging / "module.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
            built[kind] = Module(kind=kind, name=name, library=entries[kind] / name / f"{name}.so",
                                 sha256=rec["sha256"], seconds=rec["seconds"], steps=rec.get("total"))
        if not unfinished:
            # Every module is safe in the cache: the request, log and copies are not needed again.
            shutil.rmtree(arch_dir, ignore_errors=True)
            log_file = None
    modules_in_order = tuple(m for k in kinds if (m := found.get(k) or built.get(k)) is not None)
    return ArchBuild(arch=arch, modules=modules_in_order, unfinished=tuple(unfinished), log=log_file)
