"""A zip file on a web server (a wheel on the index), read member by member: through HTTP
range requests (its central directory, then each member) where the server honours them,
else downloaded once into a temporary file; ``file://`` URLs are opened in place."""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from typing import Any

from ...model.errors import FetchError
from ...model.log import log


class RangeReader(io.RawIOBase):
    """A seekable read-only file over HTTP range requests."""

    def __init__(self, url: str, size: int) -> None:
        super().__init__()
        self.url, self.size, self.pos, self.requests = url, size, 0, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        want = min(len(buffer), self.size - self.pos)
        if want <= 0:
            return 0
        request = urllib.request.Request(
            self.url, headers={"Range": f"bytes={self.pos}-{self.pos + want - 1}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                if response.status != 206:
                    raise FetchError(f"{self.url}: the server ignored a range request")
                data = response.read()
        except (urllib.error.URLError, OSError) as exc:
            raise FetchError(f"{self.url}: range request failed: {exc}") from None
        self.requests += 1
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def _remote_size(url: str) -> int | None:
    """The size of ``url`` when its server honours range requests, else None."""
    request = urllib.request.Request(url, headers={"Range": "bytes=0-0"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            if response.status != 206:
                return None
            total = response.headers.get("Content-Range", "").rpartition("/")[2]
            return int(total) if total.isdigit() else None
    except (urllib.error.URLError, OSError, ValueError):
        return None


@contextlib.contextmanager
def open_zip(url: str) -> Iterator[zipfile.ZipFile]:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "file":
        with zipfile.ZipFile(urllib.request.url2pathname(parsed.path)) as zf:
            yield zf
        return
    size = _remote_size(url)
    if size is not None:
        reader = RangeReader(url, size)
        with zipfile.ZipFile(io.BufferedReader(reader, 1 << 16)) as zf:
            yield zf
        log(f"drift: {reader.requests} range request(s) to {url.rsplit('/', 1)[-1]}")
        return
    with tempfile.TemporaryFile() as tmp:  # no range support: download once, read, drop
        log(f"drift: download {url}")
        try:
            with urllib.request.urlopen(url, timeout=600) as response:
                shutil.copyfileobj(response, tmp, 1 << 20)
        except (urllib.error.URLError, OSError) as exc:
            raise FetchError(f"{url}: download failed: {exc}") from None
        tmp.seek(0)
        with zipfile.ZipFile(tmp) as zf:
            yield zf
