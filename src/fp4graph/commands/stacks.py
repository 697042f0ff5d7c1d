"""``python -m fp4graph stacks``: the stacks of patches/stacks.toml, for scripts (.ci/sessions)."""

from __future__ import annotations

import argparse

from packaging.version import Version

from ..model import stacks
from . import common

NAME = "stacks"
HELP = "list the stacks of patches/stacks.toml (with --torch: and their torch pins, oldest first)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sglang", action="store_true", help="only the stacks that pin sglang")
    parser.add_argument("--torch", action="store_true",
                        help="print 'NAME TORCH' for the stacks that pin torch, by torch pin (oldest first)")


def run(args: argparse.Namespace) -> int:
    catalog = stacks.load(common.settings(args).stacks_file)
    chosen = catalog.sglang_stacks() if args.sglang else catalog.stacks
    if args.torch:
        pinned = sorted((s for s in chosen if s.torch is not None), key=lambda s: Version(str(s.torch)))
        print("\n".join(f"{s.name} {s.torch}" for s in pinned))
    else:
        print("\n".join(s.name for s in chosen))
    return 0
