"""``python -m fp4graph drift``: classify every patch against every upstream release."""

from __future__ import annotations

import argparse
import pathlib
import time

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
    settings = common.settings(args)
    started = time.monotonic()
    names = args.project or projects.NAMES
    only = {p: args.release for p in names} if args.release else None
    cells, notes = drift.drift(settings, names, refresh=args.refresh, offline=args.offline, only=only)
    out = args.out or settings.wheels_dir / "reports"
    drift.write_reports(out, cells, notes)
    print(drift.text_matrix(cells) if cells else "no series to check")
    for note in notes:
        print(note)
    counts = {s: sum(c.status == s for c in cells) for s in drift.STATUSES}
    print(", ".join(f"{n} {s}" for s, n in counts.items())
          + f"; {time.monotonic() - started:.1f}s; wrote {out / 'drift.md'}, {out / 'drift.json'}")
    if args.github_issue:
        print(drift.report_to_github(settings, args.github_issue, cells))
    return 0
