"""What several commands share: the settings they run with, the index options, uv and the default stacks."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import sys

from ..model import config, stacks


def uv_command(value: str | None) -> tuple[str, ...]:
    """``--uv``, or the uv of this interpreter."""
    return (value,) if value else (sys.executable, "-m", "uv")


def sglang_stacks(settings: config.Settings) -> list[str]:
    """The stacks with sglang (the ones locked and checked for drift by default)."""
    return [s.name for s in stacks.load(settings.stacks_file).sglang_stacks()]


def locked_names(settings: config.Settings) -> list[str]:
    """The stacks with sglang, then the sglang releases the flashinfer-only stacks serve
    (sglang-X): every lock of patches/locks/."""
    catalog = stacks.load(settings.stacks_file)
    return [*sglang_stacks(settings), *(stacks.served_name(v) for s in catalog.stacks for v in s.serves)]


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
