"""``python -m fp4graph stacks``: the stacks of patches/stacks.toml, for scripts (.ci/sessions)."""

from __future__ import annotations

import argparse

from packaging.version import Version

from ..model import series, stacks
from . import common

NAME = "stacks"
HELP = "list the stacks of patches/stacks.toml (with --torch: and their torch pins, oldest first)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sglang", action="store_true", help="only the stacks that pin sglang")
    parser.add_argument("--torch", action="store_true",
                        help="print 'NAME TORCH' for the stacks that pin torch, by torch pin (oldest first)")
    parser.add_argument("--patched", metavar="PROJECT",
                        help="only the stacks whose PROJECT artifact has a series (is patched)")


def run(args: argparse.Namespace) -> int:
    settings = common.settings(args)
    catalog = stacks.load(settings.stacks_file)
    chosen = list(catalog.sglang_stacks() if args.sglang else catalog.stacks)
    if args.patched:
        chosen = [s for s in chosen if any(
            a.project == args.patched and series.load_series(settings.patches_dir, a.project, a.version)
            for a in catalog.stack_artifacts(s))]
    if args.torch:
        pinned = sorted((s for s in chosen if s.torch is not None), key=lambda s: Version(str(s.torch)))
        print("\n".join(f"{s.name} {s.torch}" for s in pinned))
    else:
        print("\n".join(s.name for s in chosen))
    return 0
