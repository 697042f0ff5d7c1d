"""``python -m fp4graph lock``: resolve each stack's dependency closure into patches/locks/."""

from __future__ import annotations

import argparse
import pathlib

from ..install import lock
from ..model import config
from . import common

NAME = "lock"
HELP = ("resolve a stack's whole dependency closure into patches/locks/<stack>.txt; a flashinfer-only "
        "stack's, one per sglang release it serves, sglang-<release>.txt (maintainer)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack", nargs="*",
                        help="stacks to lock, or served releases (sglang-0.5.16); a flashinfer-only stack locks "
                             "each sglang release it serves (default: every stack with sglang and every "
                             "served release)")
    parser.add_argument("--index-url", help="an index serving our wheels (default: wheels/, served here)")
    parser.add_argument("--uv", default=None, help="the uv executable (default: python -m uv)")
    parser.add_argument("--refresh", action="store_true", help="ask the indexes again, not uv's cache")
    parser.add_argument("--out", type=pathlib.Path,
                        help="write DIR/locks/<stack>.txt instead of patches/locks/ (a dry run)")


def run(args: argparse.Namespace) -> int:
    settings = config.Settings.from_env(config.find_checkout())
    options = lock.LockOptions(uv=common.uv_command(args.uv), index_url=args.index_url, refresh=args.refresh,
                               out=args.out)
    for path in lock.lock_stacks(settings, args.stack or common.locked_names(settings), options):
        print(f"{path}: {sum(1 for line in path.read_text().splitlines() if line and line[0] != '#')} pins")
    return 0
