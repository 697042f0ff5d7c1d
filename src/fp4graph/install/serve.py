"""A throw-away HTTP server for a directory (the built ``wheels/`` with its static index)."""

from __future__ import annotations

import contextlib
import functools
import http.server
import pathlib
import threading
from collections.abc import Iterator
from typing import Any


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass


@contextlib.contextmanager
def served(directory: pathlib.Path, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``directory`` on ``host`` (a free port) while the block runs; yield its base
    URL (``http://127.0.0.1:PORT/``)."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, name=f"serve {directory}", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
