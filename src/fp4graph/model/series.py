"""Patch series: ``patches/<project>/<version>/series`` and its DEP-3 headed patches."""

from __future__ import annotations

import dataclasses
import datetime
import email.parser
import email.policy
import hashlib
import pathlib
import re
from collections.abc import Iterator

from packaging.version import InvalidVersion, Version

from .errors import ConfigError

SERIES_FILE = "series"
# NNNN-topic.patch, as `git format-patch` names them (its names keep case and "_").
PATCH_NAME = re.compile(r"\d{4}-[A-Za-z0-9][A-Za-z0-9._-]*\.patch")
REQUIRED_FIELDS = ("Description", "Origin", "Bug", "Forwarded", "Applied-Upstream", "Last-Update")
DEP3_FIELD = re.compile(r"^(?P<name>[A-Z][A-Za-z-]*): ?(?P<value>.*)$")
# The first line of each file's section of a diff: the old and new upstream-repo paths.
DIFF_HEADER = re.compile(r"^diff --git a/(?P<old>\S+) b/(?P<new>\S+)$", re.M)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Patch:
    """One ``git format-patch`` file with DEP-3 fields in its message body."""

    path: pathlib.Path
    author: str
    subject: str
    body: str
    fields: dict[str, str]
    diff: str

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def topic(self) -> str:
        """``0002-feat-quant-...`` from ``0002-feat-quant-....patch``."""
        return self.name.removesuffix(".patch")

    @property
    def files(self) -> list[str]:
        """Upstream-repo-relative paths this patch touches (new names)."""
        return [m["new"] for m in DIFF_HEADER.finditer(self.diff)]

    @property
    def last_update(self) -> datetime.date | None:
        try:
            return datetime.date.fromisoformat(self.fields.get("Last-Update", ""))
        except ValueError:
            return None

    def header_problems(self) -> list[str]:
        """What a reviewer would reject in the DEP-3 header (empty when fine)."""
        problems = []
        if not self.author:
            problems.append("no author ('From:' line)")
        if not self.subject:
            problems.append("no subject")
        for field in REQUIRED_FIELDS:
            if field == "Bug" and any(k.startswith("Bug") for k in self.fields):
                continue
            if not self.fields.get(field):
                problems.append(f"missing DEP-3 field {field}")
        if "Last-Update" in self.fields and self.last_update is None:
            problems.append(f"Last-Update {self.fields['Last-Update']!r} is not YYYY-MM-DD")
        if not self.files:
            problems.append("no 'diff --git' sections")
        return problems

    @classmethod
    def load(cls, path: pathlib.Path) -> Patch:
        text = path.read_text(encoding="utf-8")
        head, sep, diff = text.partition("\n---\n")
        if not sep or "diff --git " not in diff:
            raise ConfigError(f"{path}: not a 'git format-patch' file (no '---' and diff)")
        message = email.parser.Parser(policy=email.policy.compat32).parsestr(head)
        subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", " ".join(str(message["Subject"] or "").split()))
        body = message.get_payload()
        assert isinstance(body, str)
        fields: dict[str, str] = {}
        for line in body.splitlines():
            match = DEP3_FIELD.match(line)
            if match:
                # A field may repeat (several Bug: lines): keep every value, in order.
                name, value = match["name"], match["value"].strip()
                fields[name] = f"{fields[name]}\n{value}" if name in fields else value
        return cls(
            path=path,
            author=str(message["From"] or ""),
            subject=subject,
            body=body,
            fields=fields,
            diff=diff,
        )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Series:
    """The ordered patches for one upstream release."""

    project: str
    version: str
    directory: pathlib.Path
    patches: tuple[Patch, ...]

    @property
    def digest(self) -> str:
        """sha256 over the series file and every patch, in order."""
        h = hashlib.sha256((self.directory / SERIES_FILE).read_bytes())
        for patch in self.patches:
            h.update(patch.name.encode() + b"\0" + patch.path.read_bytes())
        return h.hexdigest()

    @property
    def last_update(self) -> datetime.date | None:
        dates = [d for p in self.patches if (d := p.last_update) is not None]
        return max(dates, default=None)


def series_dir(patches_dir: pathlib.Path, project: str, version: str) -> pathlib.Path:
    return patches_dir / project / version


def read_series_names(directory: pathlib.Path) -> list[str]:
    names = []
    for raw in (directory / SERIES_FILE).read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def load_series(patches_dir: pathlib.Path, project: str, version: str) -> Series | None:
    """The series for ``project`` ``version``, or None when there is none."""
    directory = series_dir(patches_dir, project, version)
    if not (directory / SERIES_FILE).is_file():
        return None
    patches = []
    for name in read_series_names(directory):
        path = directory / name
        if not path.is_file():
            raise ConfigError(f"{directory / SERIES_FILE}: lists {name}, which does not exist")
        patches.append(Patch.load(path))
    return Series(project=project, version=version, directory=directory, patches=tuple(patches))


def iter_series_dirs(patches_dir: pathlib.Path) -> Iterator[tuple[str, str, pathlib.Path]]:
    for project_dir in sorted(p for p in patches_dir.iterdir() if p.is_dir()):
        for version_dir in sorted(p for p in project_dir.iterdir() if p.is_dir()):
            yield project_dir.name, version_dir.name, version_dir


def series_versions(patches_dir: pathlib.Path, project: str) -> list[str]:
    """Versions of ``project`` with a ``series`` file, oldest first."""
    found = []
    for d in (patches_dir / project).glob("*"):
        if (d / SERIES_FILE).is_file():
            try:
                found.append((Version(d.name), d.name))
            except InvalidVersion:
                continue
    return [name for _, name in sorted(found)]


def nearest_series_version(patches_dir: pathlib.Path, project: str, version: str) -> str | None:
    """The series for ``version``: the highest series version <= it, else the lowest one."""
    versions = series_versions(patches_dir, project)
    if not versions:
        return None
    target = Version(version)
    below = [v for v in versions if Version(v) <= target]
    return below[-1] if below else versions[0]


def nearest_series(patches_dir: pathlib.Path, project: str, version: str) -> Series:
    """The nearest series for ``version`` (see :func:`nearest_series_version`)."""
    chosen = nearest_series_version(patches_dir, project, version)
    series = load_series(patches_dir, project, chosen) if chosen else None
    if series is None:
        raise ConfigError(f"{patches_dir / project}: no series for {project}")
    return series
