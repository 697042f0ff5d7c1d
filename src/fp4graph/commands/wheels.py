"""``python -m fp4graph wheels``: build the patched wheels and the index into wheels/."""

from __future__ import annotations

import argparse

from ..wheels import build
from . import common

NAME = "wheels"
HELP = "build the patched wheels and the index into wheels/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stack", action="append", help="build only this stack (repeatable)")
    common.add_index_options(parser)


def run(args: argparse.Namespace) -> int:
    manifest = build.build(common.settings(args), args.stack or None)
    for stack in manifest.stacks:
        print(f"{stack.name}: " + " ".join(p.requirement for p in stack.pins))
    return 0
