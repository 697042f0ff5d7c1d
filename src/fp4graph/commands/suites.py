"""``python -m fp4graph suites``: upstream's own tests from the pinned tag, patched beside pristine."""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

from ..model.errors import SuiteError
from ..model.files import write_atomic
from ..verify import suites
from . import common

NAME = "suites"
HELP = "upstream's own tests from the pinned tag, patched wheel beside pristine"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.description = (
        "Run upstream's own tests, from the tag pinned in patches/stacks.toml, against the "
        "patched wheel beside the pristine one; fail on a test that passes pristine and fails "
        "patched."
    )
    p.add_argument("stack", nargs="?", help="a stack of patches/stacks.toml (default sglang-0.5.9)")
    p.add_argument("--project", action="append", choices=sorted(suites.SELECTIONS),
                   help="only this project's selection (repeatable; default: every one in the stack)")
    p.add_argument("--repo", action="append", default=[], metavar="[PROJECT=]PATH",
                   help="a local clone of upstream (with its tags) instead of GitHub")
    p.add_argument("--patched", type=pathlib.Path, help="the patched wheel (default: built by the engine)")
    p.add_argument("--bundle", action="append", type=pathlib.Path, default=[],
                   help="run a prepared bundle (directory or .tar.xz) instead of preparing one")
    p.add_argument("--pack", type=pathlib.Path, metavar="DIR",
                   help="prepare the bundles, write them as DIR/<project>-<version>.tar.xz, run nothing")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("wheels/reports/suites"),
                   help="where report.md / report.json go (default wheels/reports/suites)")
    p.add_argument("--work", type=pathlib.Path, help="working directory (default: a temporary one)")
    p.add_argument("--file", action="append", default=[], help="only files matching (fnmatch)")
    p.add_argument("--area", action="append", default=[], help="only files whose area contains this")
    p.add_argument("--budget", type=float, help="seconds per file and install (overrides the table)")
    p.add_argument("--budget-scale", type=float, default=1.0, help="multiply the table's budgets")
    p.add_argument("--deadline", type=float, help="seconds for the whole command")
    p.add_argument("--jit-cache", choices=("auto", "shared", "separate"), default="auto",
                   help="one JIT cache for both installs when they differ in Python files only (auto)")
    p.add_argument("--pytest-arg", action="append", default=[], help="extra pytest argument")
    p.add_argument("--requirements", type=pathlib.Path, metavar="FILE",
                   help="write the test interpreter's requirements to FILE and exit")
    p.add_argument("--torch", help="torch version for --requirements (default: the stack's pin)")


def run(args: argparse.Namespace) -> int:
    settings = common.settings(args)
    started = time.time()
    with contextlib.ExitStack() as cleanup:
        work = args.work or pathlib.Path(
            cleanup.enter_context(tempfile.TemporaryDirectory(prefix="fp4graph-suites-"))
        )
        work.mkdir(parents=True, exist_ok=True)
        if args.bundle:
            bundles = suites.open_bundles(settings, args.bundle, work)
        else:
            stack = args.stack or os.environ.get("FP4GRAPH_STACK") or "sglang-0.5.9"
            runs_here = not (args.pack or args.requirements)
            plan = suites.plan(settings, stack, args.project or (),
                               cuda=suites.cuda_available() if runs_here else None)
            for note in plan.skipped:
                print(f"suites: {stack}: skip {note}")
            if args.requirements:
                reqs = suites.requirements(settings, stack, plan.projects, args.torch)
                write_atomic(args.requirements, "\n".join(reqs) + "\n")
                print(f"{args.requirements}: {len(reqs)} requirements for {', '.join(plan.projects)}")
                return 0
            if not plan.projects:
                print("suites: nothing to run here")
                return 0
            bundles = suites.prepare_stack(settings, plan, work, repos=_repos(args.repo, plan.projects),
                                           patched=args.patched)
            if args.pack:
                for bundle in bundles:
                    packed = suites.pack(bundle, args.pack / f"{bundle.name}.tar.xz")
                    print(f"{packed}  {packed.stat().st_size / 1e6:.1f} MB  "
                          f"{len(bundle.manifest['files'])} files, upstream {bundle.manifest['source']['tag']}")
                return 0
        options = suites.RunOptions(
            budget_s=args.budget, budget_scale=args.budget_scale,
            deadline=started + args.deadline if args.deadline else None,
            files=tuple(args.file), areas=tuple(args.area), jit_cache=args.jit_cache,
            pytest_args=tuple(args.pytest_arg),
        )
        failed, compared = False, 0
        for bundle in bundles:
            report = suites.gate_bundle(bundle, work, options, args.out,
                                        command=subprocess.list2cmdline(sys.argv))
            print(suites.markdown(report))
            failed |= not report["ok"]
            compared += report["files_compared"]
    verdict = "FAILED" if failed else ("ok" if compared else "ok, but nothing was compared")
    print(f"suites: {verdict} ({time.time() - started:.0f} s); reports in {args.out}")
    return 1 if failed else 0


def _repos(values: Sequence[str], projects: Sequence[str]) -> dict[str, pathlib.Path]:
    """``--repo [PROJECT=]PATH`` values; a bare PATH needs exactly one project."""
    repos: dict[str, pathlib.Path] = {}
    for value in values:
        project, sep, path = value.rpartition("=")
        if not sep:
            if len(projects) != 1:
                raise SuiteError(f"--repo {value}: say which project (--repo PROJECT=PATH) or pass one --project")
            project = projects[0]
        repos[project] = pathlib.Path(path).expanduser()
    return repos
