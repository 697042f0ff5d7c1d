"""``python -m fp4graph rebase``: carry a series from one upstream version to another."""

from __future__ import annotations

import argparse
import pathlib

from ..forward import rebase
from ..model import projects
from . import common

NAME = "rebase"
HELP = "carry a series from one upstream version to another"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("from_version", help="the version (or pull-request series) whose series to carry (A)")
    p.add_argument("to_version", help="the pinned version (or pull-request series) to carry it to (B)")
    p.add_argument("--out", type=pathlib.Path,
                   help="where to write B's series (default patches/<project>/<B>/; refused if it exists)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out and the work repositories of an earlier run")
    p.add_argument("--work-dir", type=pathlib.Path, help="keep the git repositories here")
    p.add_argument("--repo", type=pathlib.Path,
                   help="the upstream clone a pull-request series (either side) is cut on")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                   help="carry only this topic of A into B's existing series (repeatable)")
    common.add_index_options(p)


def run(args: argparse.Namespace) -> int:
    options = rebase.RebaseOptions(project=args.project, from_version=args.from_version,
                                   to_version=args.to_version, out=args.out, work_dir=args.work_dir,
                                   force=args.force, repo=args.repo, topics=tuple(args.topic))
    result = rebase.run_rebase(common.settings(args), options)
    for r in result.carried:
        print(f"{r.name}: {r.status}: {r.detail}")
    human = len(result.need_a_human)
    print(f"rebase: {len(result.carried) - human} carried, {human} need a human "
          f"({result.unresolved} written as unresolved: lint and the build refuse them); "
          f"series in {result.out}; repositories in {result.work_dir}")
    if not result.unresolved:
        print(f"next: `python -m fp4graph refresh {args.project} {args.to_version} --work-dir {result.work_dir}` "
              "after any fix-up commit, then the simulation tests of the new version")
    return 1 if human else 0
