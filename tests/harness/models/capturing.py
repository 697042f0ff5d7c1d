"""Whether a stand-in CUDA graph is capturing (child side).

The flag sits below both of its users: ``stand_ins.graph`` sets it around a capture, and
``collectives`` reads it to tag each collective ``captured`` or ``eager``.
"""

from __future__ import annotations

_depth: list[bool] = [False]


def is_capturing() -> bool:
    """Whether a (stand-in) CUDA graph is capturing on the current stream."""
    return _depth[-1]


def begin() -> None:
    """A capture starts (``with torch.cuda.graph(g):`` entered)."""
    _depth.append(True)


def end() -> None:
    """The innermost capture ends."""
    _depth.pop()
