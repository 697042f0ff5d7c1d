"""``python -m fp4graph``: the command line the nox sessions call.

The commands live in :mod:`fp4graph.commands`, one module each.  This module owns the
terminal around them: the ``-v`` logger and the exit codes (an :class:`Fp4graphError` is one
``Class: message`` line on stderr and exit 2).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from . import commands
from .model import log
from .model.errors import Fp4graphError


def main(argv: Sequence[str] | None = None) -> int:
    args = commands.parser().parse_args(argv)
    if args.verbose or os.environ.get("FP4GRAPH_VERBOSE"):
        log.LOGGER.set(lambda message: print(f"* {message}", file=sys.stderr))
    try:
        return int(args.func(args))
    except Fp4graphError as exc:
        print(f"{exc.__class__.__name__}: {exc}", file=sys.stderr)
        return 2
