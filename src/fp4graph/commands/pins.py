"""``python -m fp4graph pins``: the exact requirements of a built stack."""

from __future__ import annotations

import argparse

from ..model import stacks
from ..wheels import build
from . import common

NAME = "pins"
HELP = "print the pins of a built stack (wheels/manifest.json)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack")
    parser.add_argument("--project", help="only this project's pin")
    parser.add_argument("--torch", action="store_true", help="add the stack's torch pin")


def run(args: argparse.Namespace) -> int:
    settings = common.settings(args)
    pins = build.built_pins(settings.wheels_dir, args.stack)
    if args.project:
        pins = [p for p in pins if p.split("==")[0] == args.project]
    if args.torch:
        torch = stacks.load(settings.stacks_file).stack(args.stack).torch
        if torch:
            pins.append(f"torch=={torch}")
    print("\n".join(pins))
    return 0
