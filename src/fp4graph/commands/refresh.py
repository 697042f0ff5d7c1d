"""``python -m fp4graph refresh``: write a rebase work repository's commits back as the series."""

from __future__ import annotations

import argparse
import pathlib

from ..forward import rebase, refresh
from ..model import projects
from . import common

NAME = "refresh"
HELP = "write a rebase work repository's commits back as the series (after resolving)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("version", help="the version whose series to write")
    p.add_argument("--work-dir", type=pathlib.Path, help="rebase's --work-dir (uses its to-<version>/)")
    p.add_argument("--repo", type=pathlib.Path, help="any repository whose commits are the series")
    p.add_argument("--base", help=f"the pristine commit (default {rebase.BASE_REF})")
    p.add_argument("--out", type=pathlib.Path, help="where to write (default patches/<project>/<version>/)")
    p.add_argument("--drop", action="append", default=[], metavar="TOPIC",
                   help="drop this topic of the old series on purpose (repeatable)")


def run(args: argparse.Namespace) -> int:
    options = refresh.RefreshOptions(project=args.project, version=args.version, work_dir=args.work_dir,
                                     repo=args.repo, base=args.base, out=args.out, drop=tuple(args.drop))
    result = refresh.run_refresh(common.settings(args).patches_dir, options)
    for r in result.patches:
        print(f"{r.name}: {r.status}: {r.topic}: {r.detail}")
    print(f"refresh: {len(result.patches)} patch(es), {result.changed} changed; series in {result.out}")
    if result.changed:
        print("bump `revision` in patches/stacks.toml if this version was ever published")
    return 0
