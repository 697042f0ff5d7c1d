"""``python -m fp4graph drift``: which patches still apply to which upstream release.

For every release on the index of each project from its ``first_drift_release`` on
(``model.projects``: flashinfer-python 0.6.0, sglang 0.5.8), each patch of the nearest
series (the highest series version <= the release, else the lowest) is classified, in
series order, and each cell carries the patch's topic: the report's columns are topics, so
a column means the same change in every release whatever the patch's number:

- ``upstream``: ``git apply -R --check`` succeeds (the release already has the patch);
- ``applies``: ``git apply --check`` succeeds (then it is applied, so the next patch
  is checked on top of it, as the series is built);
- ``superseded``: it does not apply, and upstream's own code does what it does: an
  ``UpstreamFix`` of the project names every topic of the patch and all of its evidence
  holds in the release (``model.projects``).  A fix with only part of its evidence (one op
  of several registered, say) is named in the cell's detail, and the patch stays needed;
- ``conflicts``: neither;
- ``unchecked``: every file it touches lies outside the release's wheel (upstream
  tests, docs).

Only the files the patches (and detectors) name are read: from the release's wheel
through HTTP range requests (the zip's central directory, then each member), or
streamed out of the sdist when there is no wheel.  The release list and every
extracted file are cached under ``<cache>/drift/``; a second run reads no artifact.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import os
import pathlib
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterable, Sequence
from typing import Any

from packaging.utils import parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..model import projects as registry
from ..model.config import Settings
from ..model.errors import FetchError, Fp4graphError
from ..model.files import write_atomic
from ..model.log import log
from ..model.projects import Evidence, UpstreamFix
from ..model.series import Patch, Series, load_series, nearest_series_version, series_versions
from ..wheels.apply import FileDiff, split_diff
from ..wheels.fetch import list_files

STATUSES = ("applies", "upstream", "superseded", "conflicts", "unchecked")
SYMBOL = {"applies": "ok", "upstream": "UP", "superseded": "SUP", "conflicts": "XX", "unchecked": "-"}
INDEX_TTL = 3600.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Release:
    project: str
    version: str
    filename: str
    url: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    project: str
    version: str
    series_version: str
    patch: str
    topic: str
    status: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return dataclasses.asdict(self)


# --- the release list ---------------------------------------------------------------


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


def index_files(settings: Settings, project: str, *, refresh: bool, offline: bool) -> dict[str, str]:
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
    files = index_files(settings, project, refresh=refresh, offline=offline)
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


# --- reading members of remote artifacts --------------------------------------------


class _RangeReader(io.RawIOBase):
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
def _open_zip(url: str) -> Any:
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme == "file":
        with zipfile.ZipFile(urllib.request.url2pathname(parsed.path)) as zf:
            yield zf
        return
    size = _remote_size(url)
    if size is not None:
        reader = _RangeReader(url, size)
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
        with _open_zip(self.release.url) as zf:
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


# --- classification ---------------------------------------------------------------


def _git_apply(tree: pathlib.Path, diff: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(tree.parent))
    return subprocess.run(
        ["git", "apply", "-p1", "--whitespace=nowarn", *extra, "-"],
        input=diff, cwd=tree, env=env, capture_output=True, text=True,
    )


def _why(stderr: str) -> str:
    lines = [ln.removeprefix("error: ") for ln in stderr.splitlines() if ln.startswith("error:")]
    return "; ".join(lines[:3]) or stderr.strip()[:300]


def function_source(text: str, name: str) -> str | None:
    """The source of the module-level function ``name`` in ``text``, decorators included."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines(keepends=True)
    nodes: list[ast.stmt] = list(tree.body)
    while nodes:
        node = nodes.pop(0)
        if isinstance(node, ast.If | ast.Try):  # `if HAS_X: def f(...)`, `try: ... except`
            nodes[:0] = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", []),
                         *(s for h in getattr(node, "handlers", []) for s in h.body)]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "".join(lines[first - 1 : node.end_lineno])
    return None


def holds(files: ReleaseFiles, evidence: Evidence) -> bool:
    """Whether ``evidence`` holds in the release: decided by the first member that exists
    (and defines the function, with ``within``); False when none does."""
    for member in evidence.members:
        text = files.text(member)
        if text is not None and evidence.within is not None:
            text = function_source(text, evidence.within)
        if text is not None:
            return bool(evidence.pattern.search(text)) != evidence.absent
    return False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """An upstream fix checked in one release: which of its evidence holds."""

    fix: UpstreamFix
    held: tuple[Evidence, ...]
    missing: tuple[Evidence, ...]

    @property
    def complete(self) -> bool:
        return not self.missing

    def describe(self) -> str:
        if self.complete:
            return self.fix.what
        has = "; ".join(e.says for e in self.held)
        lacks = "; ".join(e.says for e in self.missing)
        return (f"not superseded: upstream has part of it ({self.fix.what}): {has}; "
                f"but not: {lacks}")


def detect_fixes(files: ReleaseFiles, project: str) -> list[Finding]:
    """Every upstream fix of ``project`` with at least one piece of evidence in the release."""
    found = []
    for fix in registry.get(project).upstream_fixes:
        held = tuple(e for e in fix.evidence if holds(files, e))
        if any(not e.absent for e in held):  # an absence alone shows nothing
            missing = tuple(e for e in fix.evidence if e not in held)
            found.append(Finding(fix=fix, held=held, missing=missing))
    return found


def superseding(findings: Sequence[Finding], patch: Patch) -> tuple[list[Finding], list[Finding]]:
    """(complete fixes that together cover every topic of ``patch``, else [];
    partial fixes of its topics)."""
    topics = set(patch.topics)
    mine = [f for f in findings if topics & set(f.fix.topics)]
    complete = [f for f in mine if f.complete]
    covered = {t for f in complete for t in f.fix.topics}
    return (complete if topics and topics <= covered else []), [f for f in mine if not f.complete]


def classify_release(
    files: ReleaseFiles, series: Series, work: pathlib.Path
) -> list[Cell]:
    """Classify every patch of ``series`` against ``files`` (see the module docstring)."""
    release = files.release
    tree = work / "tree"
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir(parents=True)
    touched = {d.repo_path for p in series.patches for d in split_diff(p)}
    files.copy_to(tree, touched)
    fixes = detect_fixes(files, release.project)
    cells = []
    blocked: list[str] = []
    for patch in series.patches:
        diffs = split_diff(patch)
        kept: list[FileDiff] = [d for d in diffs if files.covers(d.repo_path)]
        skipped = [d.repo_path for d in diffs if d not in kept]
        note = f" ({', '.join(skipped)}: not in {release.filename}, not checked)" if skipped else ""

        def cell(status: str, detail: str, patch: Patch = patch, note: str = note) -> Cell:
            return Cell(project=release.project, version=release.version,
                        series_version=series.version, patch=patch.name, topic=patch.topic,
                        status=status, detail=detail + note)

        if not kept:
            cells.append(cell("unchecked", "touches no file the release's wheel holds"))
            continue
        diff = "".join(d.text for d in kept)
        if _git_apply(tree, diff, "-R", "--check").returncode == 0:
            cells.append(cell("upstream", "git apply -R --check succeeds: the release has it"))
            continue
        forward = _git_apply(tree, diff, "--check")
        if forward.returncode == 0:
            # Still applies: still wanted, whatever upstream did beside it.
            _git_apply(tree, diff)
            cells.append(cell("applies", "git apply --check succeeds"))
            continue
        covering, partial = superseding(fixes, patch)
        if covering:
            cells.append(cell("superseded", "; ".join(f.describe() for f in covering)))
            continue
        after = f" (after {', '.join(blocked)} did not apply)" if blocked else ""
        partly = "".join(f"; {f.describe()}" for f in partial)
        cells.append(cell("conflicts", _why(forward.stderr) + after + partly))
        blocked.append(patch.name[:4])
    return cells


def drift(
    settings: Settings,
    projects: Sequence[str] = registry.NAMES,
    *,
    refresh: bool = False,
    offline: bool = False,
    first: dict[str, str] | None = None,
    only: dict[str, Sequence[str]] | None = None,
) -> tuple[list[Cell], list[str]]:
    """Classify every series patch against every release; (cells, notes)."""
    cells: list[Cell] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fp4graph-drift-") as tmp:
        for project in projects:
            rels = releases(settings, project, refresh=refresh, offline=offline,
                            first=(first or {}).get(project))
            if only is not None and project in only:
                rels = [r for r in rels if r.version in only[project]]
            loaded: dict[str, Series] = {}
            for release in rels:
                chosen = nearest_series_version(settings.patches_dir, project, release.version)
                if chosen is None:
                    notes.append(f"{project}: no series in patches/{project}/; nothing to check")
                    break
                if chosen not in loaded:
                    series = load_series(settings.patches_dir, project, chosen)
                    assert series is not None
                    loaded[chosen] = series
                series = loaded[chosen]
                files = ReleaseFiles(settings, release)
                wanted = {d.repo_path for p in series.patches for d in split_diff(p)}
                wanted |= {m for f in registry.get(project).upstream_fixes for m in f.members}
                if offline and not wanted <= set(files.known):
                    raise FetchError(f"{release.filename}: not cached; run once without --offline")
                files.ensure(wanted)
                log(f"drift: {project} {release.version} vs series {chosen}")
                cells += classify_release(files, series, pathlib.Path(tmp))
    return cells, notes


# --- reports ------------------------------------------------------------------------


def matrix_rows(cells: Sequence[Cell]) -> dict[tuple[str, str], list[Cell]]:
    rows: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        rows.setdefault((c.project, c.version), []).append(c)
    return rows


def text_matrix(cells: Sequence[Cell]) -> str:
    out = []
    for project in dict.fromkeys(c.project for c in cells):
        rows = {k: v for k, v in matrix_rows(cells).items() if k[0] == project}
        width = max(len(k[1]) for k in rows)
        out.append(f"{project}")
        for (_, version), row in rows.items():
            marks = " ".join(f"{c.topic}:{SYMBOL[c.status]}" for c in row)
            out.append(f"  {version:<{width}}  series {row[0].series_version:<12} {marks}")
    out.append("columns are patch topics; legend: ok applies, UP already upstream (reverse-applies), SUP superseded "
               "(same fix upstream), XX conflicts, - not in the wheel")
    return "\n".join(out)


def markdown(cells: Sequence[Cell], notes: Sequence[str]) -> str:
    lines = ["# Drift: fp4graph patches against upstream releases", ""]
    lines.append(
        "`applies`: `git apply --check` succeeds; `upstream`: `git apply -R --check` succeeds; "
        "`superseded`: upstream fixed it its own way (detected in its code); `conflicts`: "
        "neither; `unchecked`: the patch only touches files outside the wheel."
    )
    lines.append("")
    for note in notes:
        lines.append(f"- {note}")
    for project in dict.fromkeys(c.project for c in cells):
        rows = {k: v for k, v in matrix_rows(cells).items() if k[0] == project}
        topics = list(dict.fromkeys(c.topic for row in rows.values() for c in row))
        lines += ["", f"## {project}", ""]
        header = ["release", "series", *topics]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for (_, version), row in rows.items():
            status = {c.topic: c.status for c in row}
            lines.append("| " + " | ".join(
                [version, row[0].series_version, *[status.get(t, "") for t in topics]]
            ) + " |")
        lines += ["", "Topics (the patch of each series):", ""]
        for topic in topics:
            names = dict.fromkeys(f"{c.series_version}: `{c.patch}`"
                                  for row in rows.values() for c in row if c.topic == topic)
            lines.append(f"- `{topic}`: " + ", ".join(names))
        problems = [c for row in rows.values() for c in row if c.status not in ("applies",)]
        if problems:
            lines += ["", "Details:", ""]
            lines += [f"- {c.version} `{c.patch}`: {c.status}: {c.detail}" for c in problems]
    return "\n".join(lines) + "\n"


def write_reports(out_dir: pathlib.Path, cells: Sequence[Cell], notes: Sequence[str]) -> None:
    write_atomic(out_dir / "drift.json", json.dumps([c.as_dict() for c in cells], indent=1) + "\n")
    write_atomic(out_dir / "drift.md", markdown(cells, notes))


def needs_attention(settings: Settings, cells: Sequence[Cell]) -> list[Cell]:
    """Patches that no longer apply (or are upstream) in releases newer than every series."""
    newest = {
        p: max((Version(v) for v in series_versions(settings.patches_dir, p)), default=None)
        for p in {c.project for c in cells}
    }
    return [
        c for c in cells
        if c.status in ("conflicts", "upstream", "superseded")
        and (top := newest[c.project]) is not None and Version(c.version) > top
    ]


def report_to_github(settings: Settings, label: str, cells: Sequence[Cell]) -> str:
    """Open or update the ``label`` issue with the cells that need attention; what was done."""
    attention = needs_attention(settings, cells)
    report = markdown(attention, [f"{len(attention)} pair(s) in releases newer than every series."]
                      ) if attention else "No patch drifts in releases newer than the series.\n"
    return github_issue(label, attention, report)


def github_issue(label: str, cells: Sequence[Cell], report: str) -> str:
    """Open the issue labelled ``label`` (or update the open one) with ``report``."""
    if shutil.which("gh") is None:
        raise Fp4graphError("--github-issue needs the GitHub CLI `gh` on PATH")
    title = f"fp4graph drift: {len(cells)} patch/release pair(s) need attention"

    def gh(*args: str) -> str:
        result = subprocess.run(["gh", *args], capture_output=True, text=True)
        if result.returncode != 0:
            raise Fp4graphError(f"`gh {' '.join(args[:3])} ...` failed: {result.stderr.strip()}")
        return result.stdout

    listed = json.loads(gh("issue", "list", "--label", label, "--state", "open",
                           "--json", "number", "--limit", "1") or "[]")
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as f:
        f.write(report)
    try:
        if listed:
            number = str(listed[0]["number"])
            gh("issue", "edit", number, "--title", title, "--body-file", f.name)
            return f"updated issue #{number}"
        if not cells:
            return "nothing needs attention; no issue opened"
        gh("issue", "create", "--title", title, "--label", label, "--body-file", f.name)
        return "opened an issue"
    finally:
        os.unlink(f.name)
