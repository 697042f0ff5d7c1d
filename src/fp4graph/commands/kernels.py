"""``python -m fp4graph kernels``: prebuilt FlashInfer fp4 modules as flashinfer-jit-cache wheels."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

from ..model import log
from ..model.files import write_atomic
from ..model.stacks import DEFAULT_STACK
from ..wheels import kernels
from ..wheels.kernels import cross, targets
from . import common

NAME = "kernels"
HELP = "build a stack's FlashInfer fp4 modules for SM12x into flashinfer-jit-cache wheels (nvcc)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.description = (
        "Compile the FlashInfer fp4 JIT modules a stack's models use (default: what its sglang "
        "warm-up requests with the default server) for each SM12x arch with nvcc, from the stack's "
        "patched flashinfer, and add one flashinfer-jit-cache wheel per arch to wheels/ (index, "
        "SHA256SUMS, manifest.json). Run `nox -s wheels` first."
    )
    p.add_argument("stack", nargs="?", help=f"a stack of patches/stacks.toml (default FP4GRAPH_STACK or {DEFAULT_STACK})")
    p.add_argument("--arch", action="append", default=[], metavar="12.0a,12.1a",
                   help="SM12x targets as FLASHINFER_CUDA_ARCH_LIST spells them (default 12.0a; repeatable)")
    p.add_argument("--platform", metavar="|".join(cross.PLATFORMS),
                   help="the machine of the modules' host code (default: this machine's); linux-aarch64 "
                        "on x86_64: a DGX Spark's, with Debian's g++-aarch64-linux-gnu")
    p.add_argument("--modules", action="append", default=[], metavar="KIND,...",
                   help=f"module kinds ({', '.join(targets.KINDS)}; default: the stack's warm-up)")
    p.add_argument("--jobs", type=int, help="parallel compile jobs (MAX_JOBS; default: ninja's)")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter that imports flashinfer for the build (torch, tvm-ffi, ninja)")
    p.add_argument("--flashinfer-wheel", type=pathlib.Path,
                   help="build from this patched flashinfer wheel (default: the engine's build of it)")
    p.add_argument("--work-dir", type=pathlib.Path,
                   help="build directories, kept until each module is cached (default: under the cache)")
    p.add_argument("--deadline-s", type=float, help="stop building after this many seconds (the next call resumes)")
    p.add_argument("--no-cache", action="store_true", help="compile even what the cache has")
    p.add_argument("--export", type=pathlib.Path, metavar="DIR",
                   help="write the built modules to DIR (parts of at most 15 MiB) instead of wheels/")
    p.add_argument("--import", dest="import_dirs", action="append", type=pathlib.Path, default=[], metavar="DIR",
                   help="package the modules a --export wrote to DIR instead of building (repeatable)")
    p.add_argument("--requirements", type=pathlib.Path, metavar="FILE",
                   help="write what the build interpreter needs besides torch to FILE and exit")
    common.add_index_options(p)


def _report(outcome: kernels.KernelsOutcome) -> None:
    for b in outcome.builds:
        for m in b.modules:
            took = outcome.seconds.get((str(b.arch), m.name))
            when = "cached" if took is None else f"{took:.1f} s"
            print(f"kernels: {b.arch} {m.name} ({m.kind}): {m.library.stat().st_size / 2**20:.1f} MiB, {when}")
        for u in b.unfinished:
            steps = f", {u.done}/{u.total} steps" if u.total else ""
            print(f"kernels: {b.arch} {u.name} ({u.kind}): {u.status} after {u.seconds:.1f} s{steps}")
    for path in outcome.exported:
        print(f"kernels: wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    for w in outcome.wheels:
        print(f"kernels: {w.filename} sha256 {w.sha256}")
        print(f"  pip install {w.pin.requirement}  # beside {w.flashinfer.requirement}")


def run(args: argparse.Namespace) -> int:
    settings = common.settings(args)
    stack = args.stack or os.environ.get("FP4GRAPH_STACK") or DEFAULT_STACK
    # An empty --modules (a workflow input left empty) is the default, as no --modules.
    modules = [m for m in args.modules if m.strip()]
    kinds = targets.parse_kinds(modules) if modules else None
    if args.requirements:
        needs = kernels.requirements(settings, stack, kinds)
        write_atomic(args.requirements, "\n".join(needs) + "\n")
        print(f"{args.requirements}: {len(needs)} requirements for the kernels build of {stack}")
        return 0
    options = kernels.KernelOptions(
        stack=stack,
        archs=targets.parse_archs([a for a in args.arch if a.strip()] or ["12.0a"]),
        kinds=kinds,
        jobs=args.jobs,
        python=args.python,
        flashinfer_wheel=args.flashinfer_wheel,
        work_dir=args.work_dir,
        deadline_s=args.deadline_s,
        use_cache=not args.no_cache,
        export_dir=args.export,
        import_dirs=tuple(args.import_dirs),
        platform=cross.parse(args.platform) if args.platform else None,
    )
    with log.progress_to(lambda line: print(f"kernels: {line}", file=sys.stderr, flush=True)):
        outcome = kernels.build(settings, options)
    _report(outcome)
    # An export of an unfinished build is written (the next call resumes it): say so by the code.
    return 0 if outcome.complete else 3
