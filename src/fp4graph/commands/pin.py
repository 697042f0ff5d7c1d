"""``python -m fp4graph pin``: pin a release from the index into patches/stacks.toml."""

from __future__ import annotations

import argparse

from ..forward import pin
from ..model import projects
from . import common

NAME = "pin"
HELP = "pin a release from the index (files + sha256, its stack) into stacks.toml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project", choices=projects.NAMES)
    parser.add_argument("version")
    parser.add_argument("--no-stack", action="store_true", help="pin the artifacts only")
    common.add_index_options(parser, find_links=False)


def run(args: argparse.Namespace) -> int:
    result = pin.pin(common.settings(args), args.project, args.version, stack=not args.no_stack)
    for artifact in result.artifacts:
        files = [*artifact.files, *([artifact.sdist] if artifact.sdist else [])]
        print(f"pinned {artifact.key}: " + ", ".join(f.filename for f in files))
    for key in result.existing:
        print(f"{key}: already pinned, identical")
    if result.stack:
        print(f"stack {result.stack}" + (f" (torch {result.torch})" if result.torch else ""))
    print(f"wrote {result.stacks_file}" if result.artifacts or result.stack else "nothing to write")
    return 0
