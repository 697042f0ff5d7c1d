"""``python -m fp4graph tree``: the path of an unpacked pristine or patched wheel."""

from __future__ import annotations

import argparse

from ..wheels import trees
from . import common

NAME = "tree"
HELP = "print the path of an unpacked pristine or patched wheel"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project")
    parser.add_argument("version")
    parser.add_argument("--pristine", action="store_true")
    parser.add_argument("--file", help="which pinned wheel (for per-Python wheels)")
    common.add_index_options(parser)


def run(args: argparse.Namespace) -> int:
    path = trees.materialize(
        common.settings(args), args.project, args.version, patched=not args.pristine, filename=args.file
    )
    print(path)
    return 0
