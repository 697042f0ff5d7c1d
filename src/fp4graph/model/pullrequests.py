"""Series cut for upstream pull requests: the ``[[pull-requests]]`` tables of stacks.toml.

A release series (``patches/<project>/<version>/``) is what our wheels carry; a
pull-request series is the same work re-cut for merge: smallest first, one topic a
pull request, kept as patches on ONE upstream commit in ``patches/<project>/<series>/``,
where ``<series>`` is ``<ref>-<commit[:7]>`` (the directory says what it applies to).
It is made and refreshed with the release series' own round trip
(``rebase PROJECT <version> <series> --repo CLONE``, resolve, ``refresh``), and
``upstream PROJECT --repo CLONE`` builds its branches.

A patch whose release's code differs from the series' commit keeps a re-cut for that
release beside it, under the same file name in ``<series>/release-<version>/``
(``recut_dir``): what ``upstream PROJECT --repo CLONE --release-tree VERSION`` applies
there instead (``forward.releasetree``).

Each patch may name the pull requests it needs, by topic, on a ``Depends-On:`` line of
its header: its branch then holds them below it; without one it sits on the upstream
commit alone.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.utils import canonicalize_name

from .errors import ConfigError
from .series import Patch, Series, split_topics
from .stacks import read

TABLE = "pull-requests"
RECUTS = "release-{version}"
DEPENDS_FIELD = "Depends-On"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamCommit:
    """An upstream branch as we last carried onto it: ``ref`` pointed at ``commit``."""

    repo: str  # owner/name on GitHub
    ref: str  # the branch a pull request targets (main)
    commit: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PullRequestSeries:
    project: str
    series: str  # directory name under patches/<project>/
    source: UpstreamCommit
    cut_from: str  # the release series it is made from (``from`` in stacks.toml)

    @property
    def key(self) -> tuple[str, str]:
        return self.project, self.series


def series_name(source: UpstreamCommit) -> str:
    """The directory a series on ``source`` lives in: ``<ref>-<commit[:7]>``."""
    return f"{source.ref.replace('/', '-')}-{source.commit[:7]}"


def parse(data: Mapping[str, Any], where: str = "patches/stacks.toml") -> list[PullRequestSeries]:
    out: list[PullRequestSeries] = []
    for i, raw in enumerate(data.get(TABLE, [])):
        at = f"{where}: {TABLE} #{i + 1}"
        try:
            project = canonicalize_name(str(raw["project"]))
            series, cut_from, source = str(raw["series"]), str(raw["from"]), raw["source"]
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{at}: needs project, series, from and source ({exc})") from None
        if not isinstance(source, dict) or set(source) != {"repo", "ref", "commit"}:
            raise ConfigError(
                f"{at}: source needs exactly 'repo', 'ref' and 'commit' (e.g. {{ repo = "
                f'"owner/name", ref = "main", commit = "<40 hex>" }}), got {source!r}'
            )
        pin = UpstreamCommit(repo=str(source["repo"]), ref=str(source["ref"]),
                             commit=str(source["commit"]))
        if not _COMMIT.fullmatch(pin.commit) or not _REF.fullmatch(pin.ref):
            raise ConfigError(
                f"{at}: source ref {pin.ref!r} / commit {pin.commit!r}: a branch name and its "
                "40 lowercase hex digits (`git rev-parse REF`)"
            )
        if series != series_name(pin):
            raise ConfigError(
                f"{at}: series {series!r} must be {series_name(pin)!r} (<ref>-<commit[:7]>), "
                "so its directory names the commit its patches apply to"
            )
        entry = PullRequestSeries(project=project, series=series, source=pin, cut_from=cut_from)
        if entry.key in {e.key for e in out}:
            raise ConfigError(f"{at}: {project} {series} is declared twice")
        out.append(entry)
    return out


def load(stacks_file: pathlib.Path) -> list[PullRequestSeries]:
    return parse(read(stacks_file), str(stacks_file))


def find(stacks_file: pathlib.Path, project: str, series: str | None = None) -> PullRequestSeries | None:
    """The pull-request series ``series`` of ``project`` (default: its last one), if any."""
    mine = [e for e in load(stacks_file) if e.project == canonicalize_name(project)]
    if series is not None:
        mine = [e for e in mine if e.series == series]
    return mine[-1] if mine else None


def depends_on(patch: Patch) -> tuple[str, ...]:
    """The topics on the patch's ``Depends-On:`` line(s)."""
    return tuple(t for line in patch.fields.get(DEPENDS_FIELD, "").splitlines()
                 for t in split_topics(line))


def dependency_problems(series: Series) -> list[str]:
    """Each ``Depends-On:`` topic that no EARLIER patch of ``series`` carries."""
    problems = []
    seen: set[str] = set()
    for patch in series.patches:
        for topic in depends_on(patch):
            if topic not in seen:
                problems.append(
                    f"{series.directory / patch.name}: {DEPENDS_FIELD}: {topic!r} is no topic of an "
                    "earlier patch of the series (dependencies come first in the series)"
                )
        seen.update(patch.topics)
    return problems


def closure(patches: Sequence[Patch], index: int) -> list[int]:
    """The indices of the patches ``patches[index]`` needs, transitively, in series order,
    itself last."""
    by_topic = {t: i for i, p in enumerate(patches) for t in p.topics}
    needed: set[int] = set()
    todo = [index]
    while todo:
        i = todo.pop()
        if i in needed:
            continue
        needed.add(i)
        todo.extend(by_topic[t] for t in depends_on(patches[i]) if t in by_topic)
    return sorted(needed)


def recut_dir(series: Series, version: str) -> pathlib.Path:
    """Where the re-cuts of ``series``' patches for release ``version`` live."""
    return series.directory / RECUTS.format(version=version)


def recut_problems(series: Series) -> list[str]:
    """Each re-cut that is no re-cut of a patch of ``series`` (named as one, same topics)."""
    problems = []
    by_name = {p.name: p for p in series.patches}
    for directory in sorted(series.directory.glob(RECUTS.format(version="*"))):
        for path in sorted(directory.iterdir()):
            mine = by_name.get(path.name)
            if mine is None:
                problems.append(f"{path}: names no patch of {series.directory.name} (a re-cut for a "
                                "release keeps its patch's file name)")
                continue
            try:
                recut = Patch.load(path)
            except ConfigError as exc:
                problems.append(str(exc))
                continue
            if recut.topics != mine.topics:
                problems.append(f"{path}: topic {recut.topic!r}, but its patch's is {mine.topic!r}")
            problems.extend(f"{path}: {p}" for p in recut.header_problems())
    return problems
