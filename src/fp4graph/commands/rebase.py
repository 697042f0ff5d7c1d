"""``python -m fp4graph rebase``: carry a series from one upstream version to another."""

from __future__ import annotations

import argparse
import pathlib
import tempfile

from ..forward import rebase
from ..model import projects
from ..model.errors import ConfigError
from . import common

NAME = "rebase"
HELP = "carry a series from one upstream version to another"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("project", choices=projects.NAMES)
    p.add_argument("from_version", help="the version whose series to carry (A)")
    p.add_argument("to_version", help="the pinned version to carry it to (B)")
    p.add_argument("--out", type=pathlib.Path,
                   help="where to write B's series (default patches/<project>/<B>/; refused if it exists)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out and the work repositories of an earlier run")
    p.add_argument("--work-dir", type=pathlib.Path, help="keep the git repositories here")
    common.add_index_options(p)


def run(args: argparse.Namespace) -> int:
    settings = common.settings(args)
    out = args.out or settings.patches_dir / args.project / args.to_version
    if out.exists() and not args.force:
        raise ConfigError(f"{out}: exists; pass --force to replace it or --out elsewhere")
    work = args.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="fp4graph-rebase-"))
    work.mkdir(parents=True, exist_ok=True)
    results = rebase.rebase(settings, args.project, args.from_version, args.to_version, out,
                            work_dir=work, replace_work=args.force)
    human = [r for r in results if r.status != "carried"]
    for r in results:
        print(f"{r.name}: {r.status}: {r.detail}")
    unresolved = sum(r.status in ("conflict", "pending") for r in results)
    print(f"rebase: {len(results) - len(human)} carried, {len(human)} need a human "
          f"({unresolved} written as unresolved: lint and the build refuse them); "
          f"series in {out}; repositories in {work}")
    if not unresolved:
        print(f"next: `python -m fp4graph refresh {args.project} {args.to_version} --work-dir {work}` "
              "after any fix-up commit, then the simulation tests of the new version")
    return 1 if human else 0
