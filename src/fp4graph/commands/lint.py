"""``python -m fp4graph lint``: check stacks.toml, series files and DEP-3 headers."""

from __future__ import annotations

import argparse

from ..wheels import lint
from . import common

NAME = "lint"
HELP = "check stacks.toml, series files and DEP-3 headers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    problems = lint.lint(common.settings(args).patches_dir)
    for problem in problems:
        print(problem)
    print(f"lint: {len(problems)} problem(s)")
    return 1 if problems else 0
