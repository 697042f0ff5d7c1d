"""``python -m fp4graph refresh PROJECT VERSION``: a work repository's commits back into the series.

The export step of the patch-queue round trip (``forward.rebase``; git-buildpackage's
``gbp pq export``): every commit of ``refs/fp4graph/base..HEAD`` becomes one patch, in
order, with the series' normalised envelope (zero commit id, no ``[PATCH n/m]``, the
``fp4graph`` signature).  A commit is matched to the series' patch by its ``Topic:``, so
the file keeps its name (renumbered if the order changed) and, when its message and diff
did not change, its bytes and ``Last-Update``, whatever envelope it was written with
(``rebase.same_patch``: ``[PATCH n/m]``, the signature, ``index`` lines); a changed patch
gets today's ``Last-Update``.
Refresh refuses to lose anything: a topic of the old series that no commit carries stops
it, unless the commit became empty (the release has it) or ``--drop TOPIC`` says so.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
from collections.abc import Sequence

from ..model.errors import ConfigError
from ..model.files import atomic_directory
from ..model.log import log
from ..model.series import SERIES_FILE, Patch, dep3_fields, read_series, split_topics
from .rebase import BASE_REF, format_patch, is_empty, normalise, same_patch
from .sources import SourceRepoError, git

# git format-patch names a file NNNN-<subject as %f, cut to 52 characters>.patch
_NAME_STEM = 52


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Refreshed:
    name: str
    topic: str
    status: str  # "unchanged" | "refreshed" | "new" | "dropped"
    detail: str


def require_settled(repo: pathlib.Path) -> None:
    """Refuse a repository in the middle of a rebase, cherry-pick or merge, or with edits."""
    for marker, what in (("rebase-merge", "a rebase"), ("rebase-apply", "a rebase or git am"),
                         ("CHERRY_PICK_HEAD", "a cherry-pick"), ("MERGE_HEAD", "a merge")):
        path = pathlib.Path(git(repo, "rev-parse", "--git-path", marker).stdout.strip())
        if (path if path.is_absolute() else repo / path).exists():
            raise SourceRepoError(
                f"{repo}: {what} is in progress; finish it first (resolve, `git add`, "
                "`git rebase --continue`) or abort it, then refresh"
            )
    dirty = [line[3:] for line in git(repo, "status", "--porcelain", "--untracked-files=no")
             .stdout.splitlines() if line.strip()]
    if dirty:
        raise SourceRepoError(
            f"{repo}: uncommitted changes ({', '.join(dirty[:5])}); "
            "commit them into the patch they belong to (`git commit --amend`, `git rebase -i`) "
            "or stash them, then refresh"
        )


def _old_series(out_dir: pathlib.Path) -> dict[str, Patch]:
    """The series being replaced: topic -> patch (its unresolved lines included)."""
    if not (out_dir / SERIES_FILE).is_file():
        return {}
    found = {}
    for name, _ in read_series(out_dir):
        if (out_dir / name).is_file():
            patch = Patch.load(out_dir / name)
            found[patch.topic] = patch
    return found


def refresh(
    project: str,
    version: str,
    repo: pathlib.Path,
    out_dir: pathlib.Path,
    *,
    base: str | None = None,
    drop: Sequence[str] = (),
    today: datetime.date | None = None,
) -> list[Refreshed]:
    """Write the commits ``base..HEAD`` of ``repo`` as ``project`` ``version``'s series."""
    today = today or datetime.date.today()
    require_settled(repo)
    base_ref = base or BASE_REF
    found = git(repo, "rev-parse", "-q", "--verify", f"{base_ref}^{{commit}}", check=False)
    if found.returncode != 0:
        raise SourceRepoError(
            f"{repo}: no {base_ref}; pass --base, the pristine commit of {project} {version}"
        )
    commits = git(repo, "rev-list", "--reverse", f"{found.stdout.strip()}..HEAD").stdout.split()
    old = _old_series(out_dir)
    results: list[Refreshed] = []
    texts: dict[str, str] = {}
    comments: list[str] = []
    carried: set[str] = set()
    for commit in commits:
        text = format_patch(repo, commit)
        subject = git(repo, "log", "-1", "--format=%s", commit).stdout.strip()
        message = git(repo, "log", "-1", "--format=%B", commit).stdout
        topics = split_topics(dep3_fields(message).get("Topic", ""))
        if not topics:
            raise ConfigError(
                f"{repo}: commit {commit[:12]} ({subject!r}) has no 'Topic:' line; add one to "
                f"its message (`git rebase -i {base_ref}`, reword) so it can be named"
            )
        topic = "+".join(topics)
        if topic in carried:
            raise ConfigError(f"{repo}: two commits carry topic {topic!r}; squash or re-topic one")
        carried.add(topic)
        previous = old.get(topic)
        if is_empty(repo, commit):
            name = previous.name if previous else f"{topic} ({subject})"
            comments.append(f"# {name}: dropped, {version} already has it")
            results.append(Refreshed(name=name, topic=topic, status="dropped",
                                     detail=f"empty: {version} already has it"))
            continue
        stem = previous.name[5:].removesuffix(".patch") if previous else (
            git(repo, "log", "-1", "--format=%f", commit).stdout.strip()[:_NAME_STEM]
        )
        name = f"{len(texts) + 1:04d}-{stem}.patch"
        before = previous.path.read_text(encoding="utf-8") if previous else None
        if before is not None and same_patch(before, text):
            texts[name], status, detail = before, "unchanged", "same patch"
        else:
            texts[name] = normalise(text, today)
            status = "refreshed" if previous else "new"
            detail = f"from commit {commit[:12]}" + (f" (was {previous.name})" if previous else "")
        results.append(Refreshed(name=name, topic=topic, status=status, detail=detail))
    lost = [p for topic, p in old.items() if topic not in carried]
    unwanted = [p for p in lost if p.topic not in drop]
    if unwanted:
        raise ConfigError(
            f"{repo}: refresh would drop {', '.join(f'{p.name} (topic {p.topic})' for p in unwanted)}: "
            "no commit carries it; carry it into the repository (`git cherry-pick`, "
            "`git am -3`) or pass --drop TOPIC to drop it on purpose"
        )
    for patch in lost:
        comments.append(f"# {patch.name}: dropped (--drop {patch.topic})")
        results.append(Refreshed(name=patch.name, topic=patch.topic, status="dropped", detail="--drop"))
    with atomic_directory(out_dir, replace=True) as staging:
        for name, text in texts.items():
            (staging / name).write_text(text, encoding="utf-8")
        (staging / SERIES_FILE).write_text("".join(f"{line}\n" for line in [*texts, *comments]),
                                           encoding="utf-8")
    log(f"refresh: wrote {len(texts)} patch(es) to {out_dir}")
    return results


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RefreshOptions:
    """``refresh PROJECT VERSION``: from rebase's ``work_dir`` (its ``to-<version>/``) or any ``repo``."""

    project: str
    version: str
    work_dir: pathlib.Path | None = None
    repo: pathlib.Path | None = None
    base: str | None = None  # the pristine commit (default BASE_REF)
    out: pathlib.Path | None = None  # default patches/<project>/<version>/
    drop: tuple[str, ...] = ()  # topics of the old series to drop on purpose


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RefreshResult:
    patches: tuple[Refreshed, ...]
    out: pathlib.Path

    @property
    def changed(self) -> int:
        return sum(r.status != "unchanged" for r in self.patches)


def run_refresh(patches_dir: pathlib.Path, options: RefreshOptions) -> RefreshResult:
    """:func:`refresh` with the command's defaults (the series into ``patches_dir``)."""
    if options.repo is not None and options.work_dir is None:
        repo = options.repo
    elif options.work_dir is not None and options.repo is None:
        repo = options.work_dir / f"to-{options.version}"
    else:
        raise ConfigError("refresh needs one of --work-dir (rebase's) or --repo")
    out = options.out or patches_dir / options.project / options.version
    patches = refresh(options.project, options.version, repo, out, base=options.base, drop=options.drop)
    return RefreshResult(patches=tuple(patches), out=out)
