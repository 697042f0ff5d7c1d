"""Download pinned upstream files into a cache; check the sha256 on every use."""

from __future__ import annotations

import base64
import dataclasses
import html.parser
import json
import pathlib
import shutil
import urllib.error
import urllib.parse
import urllib.request

from packaging.utils import canonicalize_name

from ..model.config import Settings
from ..model.errors import FetchError, Fp4graphError, HashMismatchError
from ..model.files import atomic_file, sha256_of
from ..model.log import log
from ..model.stacks import ArtifactFile, load

_ACCEPT = (
    "application/vnd.pypi.simple.v1+json, "
    "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
)


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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IndexFile:
    """One file of a project's simple-index page (PEP 503 HTML or PEP 691 JSON)."""

    filename: str
    url: str
    sha256: str | None  # the index's hash, when it gives one
    yanked: str | None = None  # the reason ("" when none was given), None when not yanked
    metadata_sha256: str | None = None  # PEP 658/714 ``<url>.metadata``: its hash ("" unknown)


class _Anchors(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a" and dict(attrs).get("href"):
            self.anchors.append(dict(attrs))


def _hash(value: object) -> str | None:
    """A PEP 691 ``hashes`` mapping, or an HTML ``sha256=...`` value -> its sha256."""
    if isinstance(value, dict):
        return str(value["sha256"]).lower() if "sha256" in value else ""
    if isinstance(value, str) and value.startswith("sha256="):
        return value.removeprefix("sha256=").lower()
    return "" if value not in (None, False, "false") else None


def index_files(
    index_url: str, project: str, auth: tuple[str, str] | None = None
) -> list[IndexFile]:
    """Every file of ``project`` on a PEP 503 / PEP 691 simple index, JSON preferred.

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
            return []
        raise FetchError(f"{page}: cannot read the index page for {project}: {exc}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise FetchError(f"{page}: cannot read the index page for {project}: {exc}") from None
    out = []
    if "json" in content_type:
        try:
            entries = json.loads(body)["files"]
        except (ValueError, KeyError) as exc:
            raise FetchError(f"{page}: not a PEP 691 project page ({exc!r})") from None
        for entry in entries:
            url = urllib.parse.urljoin(page, entry["url"])
            yanked = entry.get("yanked", False)
            meta = entry.get("core-metadata", entry.get("dist-info-metadata"))
            out.append(IndexFile(
                filename=entry["filename"], url=url, sha256=_hash(entry.get("hashes", {})) or None,
                yanked=None if yanked is False else ("" if yanked is True else str(yanked)),
                metadata_sha256=_hash(meta),
            ))
        return out
    parser = _Anchors()
    parser.feed(body.decode("utf-8", "replace"))
    for anchor in parser.anchors:
        href = str(anchor["href"])
        absolute, _, fragment = urllib.parse.urljoin(page, href).partition("#")
        name = urllib.parse.unquote(urllib.parse.urlsplit(absolute).path.rsplit("/", 1)[-1])
        meta = anchor.get("data-core-metadata", anchor.get("data-dist-info-metadata"))
        out.append(IndexFile(
            filename=name, url=absolute, sha256=_hash(fragment) or None,
            yanked=anchor.get("data-yanked") if "data-yanked" in anchor else None,
            metadata_sha256=_hash(meta if meta is not None else None) if "data-core-metadata" in anchor
            or "data-dist-info-metadata" in anchor else None,
        ))
    return out


def list_files(
    index_url: str, project: str, auth: tuple[str, str] | None = None
) -> dict[str, str]:
    """Filename -> URL of every file of ``project`` on a PEP 503 / PEP 691 simple index."""
    return {f.filename: f.url for f in index_files(index_url, project, auth)}


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
    with atomic_file(cached) as tmp:  # a killed download leaves nothing the next one keeps
        local = next((d / pinned.filename for d in settings.find_links if (d / pinned.filename).exists()), None)
        if local is not None:
            log(f"fetch {pinned.filename} from {local.parent}")
            shutil.copyfile(local, tmp)
        else:
            url = _file_url(settings.index_url, project, pinned.filename)
            log(f"fetch {url}")
            _download(url, tmp)
        verify(tmp, pinned)
    return cached


def fetch_pinned(
    settings: Settings, project: str, version: str, *, filename: str | None = None, sdist: bool = False
) -> pathlib.Path:
    """The cached, verified path of a file patches/stacks.toml pins for ``project`` ``version``:
    the wheel ``filename`` (default the first), or the sdist."""
    artifact = load(settings.stacks_file).artifact(project, version)
    pinned = artifact.sdist if sdist else artifact.file(filename)
    if pinned is None:
        raise Fp4graphError(f"{artifact.key} pins no sdist in patches/stacks.toml")
    return fetch(settings, artifact.project, pinned)
