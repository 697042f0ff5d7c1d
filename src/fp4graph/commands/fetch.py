"""``python -m fp4graph fetch``: download a pinned upstream file; print its cached path."""

from __future__ import annotations

import argparse

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
    print(fetch.fetch_pinned(common.settings(args), args.project, args.version, filename=args.file, sdist=args.sdist))
    return 0
