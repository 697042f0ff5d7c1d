"""Download pinned upstream files into a cache; check the sha256 on every use."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import html.parser
import json
import os
import pathlib
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request

from packaging.utils import canonicalize_name

from ..model.config import Settings
from ..model.errors import FetchError, HashMismatchError
from ..model.log import log
from ..model.stacks import ArtifactFile

_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, "
    "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
)


def sha256_of(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: pathlib.Path, pinned: ArtifactFile) -> pathlib.Path:
    """Return ``path`` if its sha256 is the pinned one, else raise naming both hashes."""
    actual = sha256_of(path)
    if actual != pinned.sha256:
        raise HashMismatchError(
            f"{path}: sha256 mismatch for {pinned.filename}: expected {pinned.sha256}, "
            f"got {actual}. The file was tampered with or the pin is wrong; delete it "
            "to download again, or fix patches/stacks.toml."
        )
    return path


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def list_files(
    index_url: str, project: str, auth: tuple[str, str] | None = None
) -> dict[str, str]:
    """Filename -> URL of every file of ``project`` on a PEP 503 / PEP 691 simple index.

    A project the index does not know (HTTP 404) has no files.
    """
    page = urllib.parse.urljoin(index_url.rstrip("/") + "/", canonicalize_name(project) + "/")
    headers = {"Accept": _ACCEPT}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(page, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            content_type = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise FetchError(f"{page}: cannot read the index page for {project}: {exc}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"{page}: cannot read the index page for {project}: {exc}") from None
    if "json" in content_type:
        urls = [f["url"] for f in json.loads(body)["files"]]
    else:
        parser = _Anchors()
        parser.feed(body.decode("utf-8", "replace"))
        urls = parser.hrefs
    files = {}
    for url in urls:
        absolute = urllib.parse.urljoin(page, url).split("#", 1)[0]
        name = urllib.parse.unquote(urllib.parse.urlsplit(absolute).path.rsplit("/", 1)[-1])
        files[name] = absolute
    return files


def _file_url(index_url: str, project: str, filename: str) -> str:
    files = list_files(index_url, project)
    if filename not in files:
        raise FetchError(f"{index_url}: the index has no file {filename} for {project}")
    return files[filename]


def _download(url: str, dest: pathlib.Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=300) as response, dest.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"{url}: download failed: {exc}") from None


def fetch(settings: Settings, project: str, pinned: ArtifactFile) -> pathlib.Path:
    """The cached, verified path of a pinned file; download it if need be."""
    cache = settings.cache_dir / "artifacts"
    cached = cache / pinned.filename
    if cached.exists():
        return verify(cached, pinned)
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=cache, prefix=f".{pinned.filename}.", suffix=".part")
    os.close(fd)
    tmp = pathlib.Path(tmp_name)
    try:
        local = next((d / pinned.filename for d in settings.find_links if (d / pinned.filename).exists()), None)
        if local is not None:
            log(f"fetch {pinned.filename} from {local.parent}")
            shutil.copyfile(local, tmp)
        else:
            url = _file_url(settings.index_url, project, pinned.filename)
            log(f"fetch {url}")
            _download(url, tmp)
        verify(tmp, pinned)
        os.replace(tmp, cached)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return cached
