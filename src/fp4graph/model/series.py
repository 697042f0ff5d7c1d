"""Patch series: ``patches/<project>/<version>/series`` and its DEP-3 headed patches.

The series file lists one patch a line, in apply order (``#`` starts a comment).  A line
``NAME unresolved  # why`` keeps a patch that ``rebase`` could not carry: the file is the
old version's, and no build, lint or PR accepts the series until ``refresh`` writes the
resolved one (see :func:`refusals`).  Each patch names its stable ``Topic:`` (DEP-3 style,
like git-buildpackage's ``Gbp-Pq: Topic``): lint, drift and the PR branches talk about
topics, not numbers, and a series lacking a topic its project requires
(``model.projects``) does not build.
"""

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

from . import projects
from .errors import ConfigError, PatchError

SERIES_FILE = "series"
UNRESOLVED = "unresolved"
# NNNN-topic.patch, as `git format-patch` names them (its names keep case and "_").
PATCH_NAME = re.compile(r"\d{4}-[A-Za-z0-9][A-Za-z0-9._-]*\.patch")
REQUIRED_FIELDS = (
    "Description", "Topic", "Origin", "Bug", "Forwarded", "Applied-Upstream", "Last-Update",
)
# A topic: lower-case words joined by "-"; a patch may name several, ", "-separated.
TOPIC_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
DEP3_FIELD = re.compile(r"^(?P<name>[A-Z][A-Za-z-]*): ?(?P<value>.*)$")
# The first line of each file's section of a diff: the old and new upstream-repo paths.
DIFF_HEADER = re.compile(r"^diff --git a/(?P<old>\S+) b/(?P<new>\S+)$", re.M)


def dep3_fields(message: str) -> dict[str, str]:
    """The DEP-3 ``Name: value`` lines of a commit message; a repeated field (several
    ``Bug:`` lines) keeps every value, in order, one a line."""
    fields: dict[str, str] = {}
    for line in message.splitlines():
        match = DEP3_FIELD.match(line)
        if match:
            name, value = match["name"], match["value"].strip()
            fields[name] = f"{fields[name]}\n{value}" if name in fields else value
    return fields


def split_topics(value: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in value.split(",") if t.strip())


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
    def topics(self) -> tuple[str, ...]:
        """The ``Topic:`` field's topics, in order (empty when it has none)."""
        return split_topics(self.fields.get("Topic", ""))

    @property
    def topic(self) -> str:
        """The patch's stable name: its topics joined by ``+``; without a ``Topic:`` field,
        the file name without ``.patch``."""
        return "+".join(self.topics) or self.name.removesuffix(".patch")

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
        bad = [t for t in self.topics if not TOPIC_NAME.fullmatch(t)]
        if bad:
            problems.append(f"Topic {', '.join(bad)!r}: topics are lower-case words joined by '-'")
        if "Last-Update" in self.fields and self.last_update is None:
            problems.append(f"Last-Update {self.fields['Last-Update']!r} is not YYYY-MM-DD")
        if not self.files:
            problems.append("no 'diff --git' sections")
        return problems

    @classmethod
    def load(cls, path: pathlib.Path) -> Patch:
        return cls.parse(path.read_text(encoding="utf-8"), path)

    @classmethod
    def parse(cls, text: str, path: pathlib.Path) -> Patch:
        """A patch from ``git format-patch`` text; ``path`` is where it lives (or will)."""
        head, sep, diff = text.partition("\n---\n")
        if not sep or "diff --git " not in diff:
            raise ConfigError(f"{path}: not a 'git format-patch' file (no '---' and diff)")
        message = email.parser.Parser(policy=email.policy.compat32).parsestr(head)
        subject = re.sub(r"^\[PATCH[^\]]*\]\s*", "", " ".join(str(message["Subject"] or "").split()))
        body = message.get_payload()
        assert isinstance(body, str)
        fields = dep3_fields(body)
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
    unresolved: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> why

    @property
    def topics(self) -> list[str]:
        return [t for p in self.patches for t in p.topics]

    def missing_topics(self) -> list[projects.RequiredTopic]:
        """The topics the project requires of this version that no patch carries."""
        carried = set(self.topics)
        return [t for t in projects.get(self.project).topics_required_for(self.version)
                if t.name not in carried]

    def refusals(self, *, topics: bool = True) -> list[str]:
        """Why this series must not be built (empty when it may); with ``topics=False``
        only its unresolved patches (a pull request may carry part of a series)."""
        where = self.directory / SERIES_FILE
        out = [
            f"{where}: {name} is unresolved ({why}); resolve it in the rebase work repository "
            f"and run `python -m fp4graph refresh {self.project} {self.version}`"
            for name, why in self.unresolved.items()
        ]
        out += [
            f"{where}: no patch carries topic {t.name!r}, which every {self.project} "
            f"{str(t.versions) + ' ' if t.versions else ''}series needs ({t.why}); carry it over with `python -m fp4graph "
            f"rebase`, or change the requirement in fp4graph/model/projects.py"
            for t in (self.missing_topics() if topics else [])
        ]
        return out

    def require_complete(self, *, topics: bool = True) -> None:
        """Raise :class:`PatchError` with every refusal (see :meth:`refusals`), if any."""
        problems = self.refusals(topics=topics)
        if problems:
            raise PatchError("; ".join(problems))

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


def read_series(directory: pathlib.Path) -> list[tuple[str, str | None]]:
    """The series file's entries: (patch name, why it is unresolved, or None)."""
    path = directory / SERIES_FILE
    entries: list[tuple[str, str | None]] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line, _, comment = raw.partition("#")
        words = line.split()
        if not words:
            continue
        if words[1:] == [UNRESOLVED]:
            entries.append((words[0], comment.strip() or "carried by rebase with a conflict"))
        elif len(words) == 1:
            entries.append((words[0], None))
        else:
            raise ConfigError(
                f"{path}:{number}: {raw.strip()!r}: expected a patch name, optionally followed "
                f"by {UNRESOLVED!r} and a '#' comment"
            )
    return entries


def load_series(patches_dir: pathlib.Path, project: str, version: str) -> Series | None:
    """The series for ``project`` ``version``, or None when there is none."""
    directory = series_dir(patches_dir, project, version)
    if not (directory / SERIES_FILE).is_file():
        return None
    patches = []
    unresolved = {}
    for name, why in read_series(directory):
        path = directory / name
        if not path.is_file():
            raise ConfigError(f"{directory / SERIES_FILE}: lists {name}, which does not exist")
        patches.append(Patch.load(path))
        if why is not None:
            unresolved[name] = why
    return Series(project=project, version=version, directory=directory, patches=tuple(patches),
                  unresolved=unresolved)


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
