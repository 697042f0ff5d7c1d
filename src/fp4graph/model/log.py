"""Progress reporting through a hook: quiet in tests, a status line per step in the CLI."""

from __future__ import annotations

import contextvars
from collections.abc import Callable


def _log_default(message: str) -> None:
    pass


LOGGER: contextvars.ContextVar[Callable[[str], None]] = contextvars.ContextVar(
    "LOGGER", default=_log_default
)


def log(message: str) -> None:
    LOGGER.get()(message)
