"""``python -m fp4graph publish``: upload wheels/ with twine (never overwrites)."""

from __future__ import annotations

import argparse

from ..wheels import publish
from . import common

NAME = "publish"
HELP = "upload wheels/ with twine (never overwrites)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repository_url", help="upload URL, e.g. http://127.0.0.1:8080/")
    parser.add_argument("--simple-url", help="the index's simple URL (default <repository-url>/simple/)")
    parser.add_argument("--project", action="append", default=[],
                        help="upload only this project's wheels (repeatable), e.g. flashinfer-jit-cache")


def run(args: argparse.Namespace) -> int:
    uploaded = publish.publish(common.settings(args).wheels_dir, args.repository_url, args.simple_url,
                               args.project)
    for name in uploaded:
        print(f"Uploaded {name}")
    return 0
