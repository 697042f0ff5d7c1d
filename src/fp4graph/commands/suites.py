"""``python -m fp4graph suites``: upstream's own tests from the pinned tag, patched beside pristine."""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys

from ..model.stacks import DEFAULT_STACK
from ..verify import suites
from . import common

NAME = "suites"
HELP = "upstream's own tests from the pinned tag, patched wheel beside pristine"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.description = (
        "Run upstream's own tests, from the tag pinned in patches/stacks.toml, against the "
        "patched wheel beside the pristine one; fail on a test that passes pristine and fails "
        "patched, and on a run that proves nothing (a file that crashes in both installs, one "
        "pristine passes none of, nothing compared): exit 1."
    )
    p.add_argument("stack", nargs="?", help=f"a stack of patches/stacks.toml (default {DEFAULT_STACK})")
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
    options = suites.SuitesOptions(
        stack=args.stack or os.environ.get("FP4GRAPH_STACK") or DEFAULT_STACK,
        projects=tuple(args.project or ()), repos=tuple(args.repo), patched=args.patched,
        bundles=tuple(args.bundle), pack=args.pack, requirements=args.requirements, torch=args.torch,
        out=args.out, work=args.work, deadline_s=args.deadline,
        run=suites.RunOptions(
            budget_s=args.budget, budget_scale=args.budget_scale, files=tuple(args.file),
            areas=tuple(args.area), jit_cache=args.jit_cache, pytest_args=tuple(args.pytest_arg),
        ),
        command=subprocess.list2cmdline(sys.argv),
    )
    result = suites.run_suites(common.settings(args), options)
    print("\n".join(result.lines()))
    return result.exit_code
