"""The files of one release that drift reads (the files its patches and detectors name), at
upstream-repo paths: taken from the release's wheel (:mod:`.http_zip`) or streamed out of
its sdist, and cached under ``<cache>/drift/files/<artifact>/`` with a record of which
members exist, so a second run reads nothing."""

from __future__ import annotations

import contextlib
import json
import pathlib
import shutil
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterable

from ...model import projects as registry
from ...model.config import Settings
from ...model.errors import FetchError
from ...model.files import write_atomic
from ...model.log import log
from .http_zip import open_zip
from .releases import Release


def _member_name(release: Release, repo_path: str, roots: set[str] | None) -> str | None:
    """Where ``repo_path`` lives inside ``release``'s file, or None if it cannot be there."""
    layout = registry.get(release.project).layout
    if release.filename.endswith(".whl"):
        inside = layout.wheel_path(repo_path)
        if inside is None or (roots is not None and inside.split("/", 1)[0] not in roots):
            return None
        return inside
    top = release.filename.removesuffix(".tar.gz").removesuffix(".zip")
    inside = layout.wheel_path(repo_path) if layout.source_prefix else repo_path
    return None if inside is None else f"{top}/{inside}"


class ReleaseFiles:
    """The cached files of one release that drift needs, at upstream-repo paths."""

    def __init__(self, settings: Settings, release: Release) -> None:
        self.release = release
        self.root = settings.cache_dir / "drift" / "files" / release.filename
        self.index_path = self.root / ".members.json"
        self.known: dict[str, bool] = {}
        self.roots: set[str] | None = None
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(self.index_path.read_text(encoding="utf-8"))
            self.known = {k: bool(v) for k, v in data["known"].items()}
            self.roots = set(data["roots"]) if data.get("roots") is not None else None

    def ensure(self, repo_paths: Iterable[str]) -> None:
        """Read the members not yet cached (present or known absent)."""
        wanted = sorted(set(repo_paths) - set(self.known))
        if not wanted:
            return
        if self.release.filename.endswith(".whl"):
            self._from_wheel(wanted)
        else:
            self._from_sdist(wanted)
        write_atomic(self.index_path, json.dumps(
            {"known": self.known, "roots": sorted(self.roots) if self.roots is not None else None},
            indent=1, sort_keys=True,
        ))

    def _store(self, repo_path: str, data: bytes | None) -> None:
        self.known[repo_path] = data is not None
        if data is not None:
            target = self.root / repo_path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def _from_wheel(self, wanted: list[str]) -> None:
        with open_zip(self.release.url) as zf:
            names = set(zf.namelist())
            self.roots = {
                n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))
            }
            for repo_path in wanted:
                member = _member_name(self.release, repo_path, self.roots)
                self._store(repo_path, zf.read(member) if member in names else None)

    def _from_sdist(self, wanted: list[str]) -> None:
        members = {_member_name(self.release, p, None): p for p in wanted}
        found: dict[str, bytes] = {}
        log(f"drift: stream {self.release.url}")
        try:
            with urllib.request.urlopen(self.release.url, timeout=600) as response, \
                    tarfile.open(fileobj=response, mode="r|*") as tar:
                for info in tar:
                    if info.name in members and info.isfile():
                        extracted = tar.extractfile(info)
                        if extracted is not None:
                            found[members[info.name]] = extracted.read()
        except (urllib.error.URLError, OSError, tarfile.TarError) as exc:
            raise FetchError(f"{self.release.url}: cannot read the sdist: {exc}") from None
        self.roots = None
        for repo_path in wanted:
            self._store(repo_path, found.get(repo_path))

    def covers(self, repo_path: str) -> bool:
        """Whether this artifact would hold ``repo_path`` (a wheel has no tests/)."""
        if self.release.filename.endswith(".whl"):
            return _member_name(self.release, repo_path, self.roots) is not None
        return True

    def has(self, repo_path: str) -> bool:
        return self.known.get(repo_path, False)

    def text(self, repo_path: str) -> str | None:
        if not self.has(repo_path):
            return None
        return (self.root / repo_path).read_text(encoding="utf-8", errors="replace")

    def copy_to(self, dest: pathlib.Path, repo_paths: Iterable[str]) -> None:
        for repo_path in repo_paths:
            if self.has(repo_path):
                target = dest / repo_path
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.root / repo_path, target)
