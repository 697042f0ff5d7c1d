"""Progress reporting through hooks: quiet in tests, shown by the command that runs.

- :func:`log`: each step, shown with ``-v`` (``FP4GRAPH_VERBOSE``);
- :func:`progress`: the status lines of a long run (the integration matrix: installs,
  servers, cells), shown always by the command that asks for them (:func:`progress_to`).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator


def _log_default(message: str) -> None:
    pass


LOGGER: contextvars.ContextVar[Callable[[str], None]] = contextvars.ContextVar(
    "LOGGER", default=_log_default
)
PROGRESS: contextvars.ContextVar[Callable[[str], None]] = contextvars.ContextVar(
    "PROGRESS", default=_log_default
)


def log(message: str) -> None:
    LOGGER.get()(message)


def progress(message: str) -> None:
    PROGRESS.get()(message)


@contextlib.contextmanager
def progress_to(sink: Callable[[str], None]) -> Iterator[None]:
    """Send :func:`progress` lines to ``sink`` inside the block."""
    token = PROGRESS.set(sink)
    try:
        yield
    finally:
        PROGRESS.reset(token)
