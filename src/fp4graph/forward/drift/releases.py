"""Which releases drift checks: the final releases of a project on the index, from its
``first_drift_release`` on (``model.projects``), each with the one file to read (a pure
wheel first, the sdist last); the index's file list is cached for an hour."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from typing import Any

from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ...model import projects as registry
from ...model.config import Settings
from ...model.errors import FetchError
from ...model.files import write_atomic
from ...wheels.fetch import list_files

INDEX_TTL = 3600.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Release:
    project: str
    version: str
    filename: str
    url: str


def _file_version(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        if filename.endswith((".tar.gz", ".zip")):
            return parse_sdist_filename(filename)[1]
    except (ValueError, InvalidVersion):
        return None
    return None


def _preference(filename: str) -> tuple[int, str]:
    """Lower is better: a pure wheel, a CPython 3.11 x86_64 wheel, any wheel, the sdist."""
    if filename.endswith("-py3-none-any.whl"):
        return 0, filename
    if filename.endswith(".whl") and "-cp311-" in filename and "x86_64" in filename:
        return 1, filename
    if filename.endswith(".whl"):
        return 2, filename
    return 3, filename


def cached_file_urls(settings: Settings, project: str, *, refresh: bool, offline: bool) -> dict[str, str]:
    """Filename -> URL of ``project`` on the index, cached for an hour."""
    path = settings.cache_dir / "drift" / f"index-{project}.json"
    cached: dict[str, Any] | None = None
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(path.read_text(encoding="utf-8"))
    fresh = (
        cached is not None
        and cached.get("index_url") == settings.index_url
        and time.time() - float(cached.get("fetched", 0)) < INDEX_TTL
    )
    if cached is not None and (offline or (fresh and not refresh)):
        return dict(cached["files"])
    if offline:
        raise FetchError(f"{path}: no cached release list for {project}; run once without --offline")
    files = list_files(settings.index_url, project)
    write_atomic(path, json.dumps(
        {"index_url": settings.index_url, "fetched": time.time(), "files": files}, indent=1
    ))
    return files


def releases(
    settings: Settings, project: str, *, refresh: bool = False, offline: bool = False,
    first: str | None = None,
) -> list[Release]:
    """Final releases of ``project`` from ``first`` on, oldest first, with the file to read."""
    lowest = Version(first or registry.get(project).first_drift_release)
    by_version: dict[Version, list[str]] = {}
    files = cached_file_urls(settings, project, refresh=refresh, offline=offline)
    for filename in files:
        version = _file_version(filename)
        if version is None or version.is_prerelease or version.is_devrelease or version < lowest:
            continue
        by_version.setdefault(version, []).append(filename)
    result = []
    for version in sorted(by_version):
        best = min(by_version[version], key=_preference)
        result.append(Release(project=project, version=str(version), filename=best, url=files[best]))
    return result
