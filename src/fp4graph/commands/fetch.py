"""``python -m fp4graph fetch``: download a pinned upstream file; print its cached path."""

from __future__ import annotations

import argparse

from ..model import stacks
from ..model.errors import Fp4graphError
from ..wheels import fetch
from . import common

NAME = "fetch"
HELP = "download a pinned upstream file; print its cached path"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project")
    parser.add_argument("version")
    parser.add_argument("--file", help="which pinned wheel (for per-Python wheels)")
    parser.add_argument("--sdist", action="store_true", help="the sdist instead of a wheel")
    common.add_index_options(parser)


def run(args: argparse.Namespace) -> int:
    settings = common.settings(args)
    artifact = stacks.load(settings.stacks_file).artifact(args.project, args.version)
    pinned = artifact.sdist if args.sdist else artifact.file(args.file)
    if pinned is None:
        raise Fp4graphError(f"{artifact.key} pins no sdist in patches/stacks.toml")
    print(fetch.fetch(settings, artifact.project, pinned))
    return 0
