"""``python -m fp4graph <verb>``: one module per command, in the shape pypa/wheel's commands take.

Each module has ``NAME``, ``HELP``, ``add_arguments(parser)`` (its arguments, beside its
adapter) and ``run(args) -> int``: it builds the library's options from the arguments,
calls one library function, prints what that returns and gives the exit code.  Nothing
below this package sees argparse or prints; :mod:`fp4graph.cli` owns the terminal (the
``-v`` logger, the ``Class: message`` error line).

A new command is a module here and one entry in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
from typing import Protocol

from . import (
    deps,
    drift,
    fetch,
    install,
    integration,
    kernels,
    lint,
    lock,
    pin,
    pins,
    publish,
    rebase,
    refresh,
    stacks,
    suites,
    tree,
    upstream,
    wheels,
)


class Command(Protocol):
    """What a command module provides (a module satisfies it structurally)."""

    NAME: str
    HELP: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


# In the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    wheels, kernels, lint, publish, pins, fetch, tree, upstream, drift, pin, rebase, refresh, suites, integration,
    install, lock, deps, stacks,
)


def parser() -> argparse.ArgumentParser:
    """The whole command line: the top-level options and one subcommand per module of
    :data:`COMMANDS`."""
    top = argparse.ArgumentParser(
        prog="fp4graph", description="``python -m fp4graph``: the command line the nox sessions call."
    )
    top.add_argument("-v", "--verbose", action="store_true", help="print each step")
    sub = top.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.NAME, help=command.HELP, description=command.HELP)
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    return top
