"""A failed case's error as its report shows it (child side): the first line, the chain
of causes, their text and the traceback."""

from __future__ import annotations

import traceback
from typing import Any


def error_report(exc: BaseException) -> dict[str, Any]:
    """The error, its full text, and the chain of causes (Dynamo wraps the first
    untraceable call in the error of an enclosing context manager on some releases)."""
    chain: list[str] = []
    cause: BaseException | None = exc
    while cause is not None and len(chain) < 8:
        first = (str(cause).strip().splitlines() or [""])[0]
        chain.append(f"{type(cause).__module__}.{type(cause).__name__}: {first[:500]}")
        cause = cause.__cause__ or cause.__context__
    return {
        "error": chain[0],
        "error_chain": chain,
        "error_text": "\n".join(str(e)[:6000] for e in _exceptions(exc)),
        "traceback": "".join(traceback.format_exception(exc))[-8000:],
    }


def _exceptions(exc: BaseException) -> list[BaseException]:
    out = []
    cause: BaseException | None = exc
    while cause is not None and len(out) < 8:
        out.append(cause)
        cause = cause.__cause__ or cause.__context__
    return out
