"""``python -m fp4graph drift``: classify every patch against every upstream release."""

from __future__ import annotations

import argparse
import pathlib

from ..forward import drift
from ..model import projects
from . import common

NAME = "drift"
HELP = "classify every patch against every upstream release"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("--project", action="append", choices=projects.NAMES,
                   help="check only this project (repeatable; default both)")
    p.add_argument("--release", action="append", metavar="VERSION",
                   help="check only this release (repeatable; with one --project)")
    p.add_argument("--out", type=pathlib.Path, help="report directory (default wheels/reports)")
    p.add_argument("--refresh", action="store_true", help="re-read the release list now")
    p.add_argument("--offline", action="store_true", help="use only the cache")
    p.add_argument("--github-issue", metavar="LABEL",
                   help="open or update the open issue with this label when patches drift")
    common.add_index_options(p, find_links=False)


def run(args: argparse.Namespace) -> int:
    options = drift.DriftOptions(
        projects=tuple(args.project or projects.NAMES), releases=tuple(args.release or ()), out=args.out,
        refresh=args.refresh, offline=args.offline, github_issue=args.github_issue,
    )
    result = drift.run_drift(common.settings(args), options)
    print(drift.text_matrix(result.cells) if result.cells else "no series to check")
    for note in result.notes:
        print(note)
    md, js = result.reports
    print(", ".join(f"{n} {s}" for s, n in result.counts().items())
          + f"; {result.seconds:.1f}s; wrote {md}, {js}")
    if result.issue_failure is not None:
        raise result.issue_failure
    if result.issue is not None:
        print(result.issue)
    return 0
