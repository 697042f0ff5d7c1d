"""What several commands share: the settings they run with and the index options."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from ..model import config


def settings(args: argparse.Namespace) -> config.Settings:
    """Settings from the environment, with --index-url / --find-links applied."""
    found = config.Settings.from_env(config.find_checkout())
    if getattr(args, "index_url", None):
        found = dataclasses.replace(found, index_url=args.index_url)
    if getattr(args, "find_links", None):
        found = dataclasses.replace(found, find_links=tuple(map(pathlib.Path, args.find_links)))
    return found


def add_index_options(parser: argparse.ArgumentParser, *, find_links: bool = True) -> None:
    """Where upstream files come from (the settings' index_url / find_links)."""
    parser.add_argument("--index-url", help="simple index of the upstream files (default PyPI)")
    parser.add_argument(
        "--find-links", action="append",
        help="directory of upstream files to use first" if find_links else argparse.SUPPRESS,
    )
