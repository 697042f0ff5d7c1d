"""``python -m fp4graph refresh``: write a rebase work repository's commits back as the series."""

from __future__ import annotations

import argparse
import pathlib

from ..forward import rebase, refresh
from ..model import projects
from ..model.errors import ConfigError
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
    settings = common.settings(args)
    if (args.repo is None) == (args.work_dir is None):
        raise ConfigError("refresh needs one of --work-dir (rebase's) or --repo")
    repo = args.repo or args.work_dir / f"to-{args.version}"
    out = args.out or settings.patches_dir / args.project / args.version
    results = refresh.refresh(args.project, args.version, repo, out, base=args.base, drop=args.drop)
    for r in results:
        print(f"{r.name}: {r.status}: {r.topic}: {r.detail}")
    changed = sum(r.status != "unchanged" for r in results)
    print(f"refresh: {len(results)} patch(es), {changed} changed; series in {out}")
    if changed:
        print("bump `revision` in patches/stacks.toml if this version was ever published")
    return 0
