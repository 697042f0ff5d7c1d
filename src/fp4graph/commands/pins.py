"""``python -m fp4graph pins``: the exact requirements of a built stack."""

from __future__ import annotations

import argparse
import json

from ..wheels import build
from . import common

NAME = "pins"
HELP = "print the pins of a built stack (wheels/manifest.json)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("stack")
    parser.add_argument("--project", help="only this project's pin")
    parser.add_argument("--torch", action="store_true", help="add the stack's torch pin")
    parser.add_argument("--kernels", metavar="ARCH",
                        help="add the flashinfer-jit-cache wheel built for ARCH (12.0a, 12.1a; nox -s kernels)")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object: each pin's project, version, upstream version and revision")


def run(args: argparse.Namespace) -> int:
    pins = build.pins(common.settings(args), args.stack, project=args.project, torch=args.torch,
                      kernels=args.kernels)
    if args.json:
        print(json.dumps({"stack": args.stack, "pins": [p.as_dict() for p in pins]}, indent=1))
    else:
        print("\n".join(p.requirement for p in pins))
    return 0
