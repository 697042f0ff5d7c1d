"""Applying a series with ``git am``, and ``rebase``: carry a series from version A to version B.

The round trip is git-buildpackage's patch queue (``gbp pq import`` / ``rebase`` / ``export``):

1. ``python -m fp4graph rebase PROJECT A B --work-dir W`` applies A's series to A's source
   (``W/from-A``, one commit per patch) and ``git rebase``-s those commits onto B's source
   in ``W/to-B`` (branch ``fp4graph/patches``; ``refs/fp4graph/base`` marks B's pristine
   commit).  It writes B's series at once: the patches that carried, with normalised
   headers (a patch whose message and diff did not change keeps its bytes,
   ``same_patch``); when a patch conflicts, git stops there, and that patch and every later one
   are written as A's files on ``NAME unresolved`` lines, which lint, the build and PRs
   refuse, naming each (never a series that silently lacks a patch).
2. The maintainer resolves in ``W/to-B`` as with any git rebase: edit, ``git add``,
   ``git rebase --continue`` (or ``--skip`` a patch B already has).
3. ``python -m fp4graph refresh PROJECT B --work-dir W`` (``forward.refresh``) writes the
   commits ``refs/fp4graph/base..HEAD`` back as the series, matched to its patches by
   ``Topic:``.

Either side may be a pull-request series (``model.pullrequests``: the work re-cut for
merge, on one upstream commit): ``rebase flashinfer-python 0.7.4 main-fb28d72 --repo CLONE``
carries the release series onto that commit of the clone.  ``--topic T`` (repeatable)
carries only A's patches of those topics into B's existing series, each in the place of
B's patch of that topic, the rest of B kept: how a fix reworked in a release series is
taken into the pull requests again (a re-run, then the usual resolve and refresh).

Carried is not working: a patch can apply cleanly and break on B (flashinfer 0.6.1 has a
different ``get_cutlass_fp4_gemm_module`` signature than the series' 0.6.3).  The README's
procedure runs B's simulation tests before any wheel is built.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import re
import shlex
import shutil
import tempfile
from collections.abc import Sequence

from ..model import pullrequests
from ..model.config import Settings
from ..model.errors import ConfigError, PatchError
from ..model.files import atomic_directory
from ..model.log import log
from ..model.series import SERIES_FILE, UNRESOLVED, Patch, Series, load_series
from ..model.stacks import load
from .sources import SourceRepo, clone, git, git_env, identity_env, source_repo, with_author

_LAST_UPDATE = re.compile(r"^Last-Update: .*$", re.M)
BASE_REF = "refs/fp4graph/base"  # B's pristine commit, in the work repository
BRANCH = "fp4graph/patches"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Applied:
    patch: Patch
    commit: str


def am_series(
    repo: SourceRepo, series: Series, *, identity: tuple[str, str] | None = None
) -> list[Applied]:
    """``git am -3`` each patch of ``series`` onto ``repo``; one commit per patch.

    Author, date and message come from the patch; the committer is fixed so the
    commit ids are reproducible.  With ``identity``, it is the author and committer
    of every commit instead (pull-request commits carry their user's identity).
    A conflict aborts the ``git am`` and raises naming the patch and the files.
    """
    applied = []
    for patch in series.patches:
        if identity is None:
            result = git(repo.path, "am", "-3", "--keep-cr", str(patch.path.resolve()), check=False)
        else:
            result = git(repo.path, "am", "-3", "--keep-cr", check=False, env=identity_env(identity),
                         input=with_author(patch.path.read_text(encoding="utf-8"), identity))
        if result.returncode != 0:
            unmerged = git(repo.path, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
            git(repo.path, "am", "--abort", check=False)
            where = (
                f"conflicts in {', '.join(unmerged)}" if unmerged
                else _first_error(result.stderr + result.stdout).removeprefix("error: ")
            )
            raise PatchError(
                f"{patch.path}: does not apply to {repo.project} {repo.version} ({repo.origin}) "
                f"with `git am -3`: {where}. Carry the series with "
                f"`python -m fp4graph rebase {repo.project} {series.version} {repo.version}` "
                "or fix the patch by hand."
            )
        sha = git(repo.path, "rev-parse", "HEAD").stdout.strip()
        applied.append(Applied(patch=patch, commit=sha))
    return applied


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if line.startswith(("error:", "Patch failed", "fatal:", "CONFLICT")):
            return line
    return text.strip().splitlines()[-1] if text.strip() else "(no message)"


def normalise(patch_text: str, today: datetime.date) -> str:
    """Refresh Last-Update in a ``git format-patch`` file's message."""
    head, sep, rest = patch_text.partition("\n---\n")
    head = _LAST_UPDATE.sub(f"Last-Update: {today.isoformat()}", head)
    return head + sep + rest


_SUBJECT_PREFIX = re.compile(r"^Subject: \[PATCH[^\]]*\] ", re.M)
_INDEX_LINE = re.compile(r"^index [0-9a-f]+\.\.[0-9a-f]+(?: [0-7]{6})?\n", re.M)


def _content(patch_text: str) -> str:
    """A patch file without its envelope: what ``git format-patch`` writes differently for
    the same commit (``[PATCH n/m]`` and the Subject's folding, the diffstat, abbreviated
    ``index`` lines, the signature) and ``Last-Update``; the message and diff are kept."""
    head, _, rest = patch_text.partition("\n---\n")
    header, _, body = head.partition("\n\n")
    header = _SUBJECT_PREFIX.sub("Subject: ", re.sub(r"\n[ \t]+", " ", header))
    body = _LAST_UPDATE.sub("Last-Update:", body)
    diff = rest[rest.find("diff --git "):] if "diff --git " in rest else rest
    diff, sep, signature = diff.rpartition("\n-- \n")
    if not sep or signature.strip().count("\n"):
        diff += sep + signature  # no one-line signature at the end: keep it all
    return "\n".join((header, body, _INDEX_LINE.sub("", diff)))


def same_patch(a: str, b: str) -> bool:
    """Whether two patch files carry the same message and diff (their envelopes aside)."""
    return _content(a) == _content(b)


def format_patch(repo: pathlib.Path, commit: str) -> str:
    """``commit`` as a patch file with the series' normalised envelope."""
    return git(
        repo, "format-patch", "-1", "--stdout", "--zero-commit", "--no-numbered",
        "--signature=fp4graph", commit,
    ).stdout


def is_empty(repo: pathlib.Path, commit: str) -> bool:
    """Whether ``commit`` changes nothing (its patch is already in the tree below it)."""
    return git(repo, "diff", "--quiet", f"{commit}^", commit, check=False).returncode == 0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Carried:
    name: str
    status: str  # "carried" | "empty" | "conflict" | "pending"
    detail: str


def target_repo(
    settings: Settings, project: str, name: str, dest: pathlib.Path, *, repo: pathlib.Path | None
) -> SourceRepo:
    """A fresh repository of ``name``: a pinned release of ``project`` (from its sdist), or a
    pull-request series (``[[pull-requests]]`` in stacks.toml), cloned from ``repo`` at the
    upstream commit the series is keyed to."""
    entry = pullrequests.find(settings.stacks_file, project, name)
    if entry is None:
        return source_repo(settings, load(settings.stacks_file).artifact(project, name), dest)
    if repo is None:
        raise ConfigError(
            f"{project} {name} is a pull-request series on {entry.source.repo} "
            f"{entry.source.ref} {entry.source.commit[:12]}: pass --repo, a clone of "
            f"https://github.com/{entry.source.repo} that has that commit"
        )
    return clone(
        repo, dest, project=project, version=name, base=entry.source.commit,
        origin=f"clone of {repo} at {entry.source.ref} {entry.source.commit[:12]}",
    )


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Pick:
    patch: Patch  # the patch this pick carries (A's, or B's own in a --topic carry)
    commit: str
    own: bool  # B's own patch, carried unchanged where it applies unchanged


def _todo(old: list[Applied], own: list[Applied], topics: Sequence[str]) -> list[_Pick]:
    """What B's series becomes: A's patches (all, or those of ``topics`` in B's series'
    order, each in the place of B's patch of that topic)."""
    picks = [_Pick(patch=a.patch, commit=a.commit, own=False) for a in old]
    if not topics:
        return picks
    wanted = [p for p in picks if set(p.patch.topics) & set(topics)]
    missing = set(topics) - {t for p in wanted for t in p.patch.topics}
    if missing:
        raise ConfigError(f"no patch of the series to carry has topic(s) {', '.join(sorted(missing))}")
    todo: list[_Pick] = []
    for b in own:
        replaced = [p for p in wanted if set(p.patch.topics) & set(b.patch.topics)]
        if not replaced:
            todo.append(_Pick(patch=b.patch, commit=b.commit, own=True))
        for pick in replaced:
            if pick not in todo:
                todo.append(pick)
    todo.extend(p for p in wanted if p not in todo)
    return todo


def run_todo(
    repo: pathlib.Path, base: str, commits: Sequence[str], plan: pathlib.Path
) -> tuple[int, list[str], list[str], str]:
    """``git rebase -i`` of the checked-out branch onto ``base`` with ``commits`` as its
    todo (each picked in order; one that becomes empty is kept).  Returns how many
    carried before git stopped, the unmerged files there, the carried commits and git's
    first error line; a stopped rebase is left in progress for a human to resolve."""
    plan.write_text("".join(f"pick {c}\n" for c in commits), encoding="utf-8")
    env = git_env(date=None)  # keep each patch's author date; the committer date is not exported
    env["GIT_SEQUENCE_EDITOR"] = f"cp {shlex.quote(str(plan.resolve()))}"
    done = git(repo, "rebase", "-i", "--empty=keep", "--onto", base, base, check=False, env=env)
    stopped_at = len(commits)
    unmerged: list[str] = []
    failure = ""
    if done.returncode != 0:
        failure = _first_error(done.stderr + done.stdout)
        head = git(repo, "rev-parse", "-q", "--verify", "REBASE_HEAD", check=False).stdout.strip()
        if head not in commits:
            raise PatchError(f"{repo}: `git rebase` failed: {failure}")
        stopped_at = list(commits).index(head)
        unmerged = git(repo, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
    carried = git(repo, "rev-list", "--reverse", f"{base}..HEAD").stdout.split()
    if len(carried) != stopped_at:
        raise PatchError(f"{repo}: git rebase carried {len(carried)} commit(s) before stopping "
                         f"at patch {stopped_at + 1}; inspect the repository")
    return stopped_at, unmerged, carried, failure


def rebase(
    settings: Settings,
    project: str,
    from_version: str,
    to_version: str,
    out_dir: pathlib.Path,
    *,
    work_dir: pathlib.Path,
    today: datetime.date | None = None,
    replace_work: bool = False,
    repo: pathlib.Path | None = None,
    topics: Sequence[str] = (),
) -> list[Carried]:
    """Carry ``from_version``'s series onto ``to_version``; write B's series to ``out_dir``
    (what carried, plus every patch that did not as an ``unresolved`` line).  Either side
    may be a pull-request series (``repo``: the upstream clone it is cut on).  With
    ``topics``, only A's patches of those topics are carried, each into B's existing series
    in the place of B's patch of that topic, B's other patches kept.  Work repositories
    already in ``work_dir`` (a resolution in progress) are refused unless ``replace_work``."""
    today = today or datetime.date.today()
    work_dir.mkdir(parents=True, exist_ok=True)
    series = load_series(settings.patches_dir, project, from_version)
    if series is None:
        raise ConfigError(f"{settings.patches_dir / project / from_version}: no series to carry")
    series.require_complete(topics=False)
    existing = load_series(settings.patches_dir, project, to_version) if topics else None
    if topics and existing is None:
        raise ConfigError(
            f"{settings.patches_dir / project / to_version}: no series to carry topic(s) "
            f"{', '.join(topics)} into; carry the whole series (without --topic) first"
        )
    for name in (f"from-{from_version}", f"to-{to_version}"):
        if (work_dir / name).exists():
            if name.startswith("to-") and not replace_work:
                raise ConfigError(
                    f"{work_dir / name}: exists (a rebase being resolved?); finish it with "
                    f"`python -m fp4graph refresh {project} {to_version} --work-dir {work_dir}`, "
                    "or pass --force to start over"
                )
            shutil.rmtree(work_dir / name)
    old = target_repo(settings, project, from_version, work_dir / f"from-{from_version}", repo=repo)
    old_applied = am_series(old, series)
    new = target_repo(settings, project, to_version, work_dir / f"to-{to_version}", repo=repo)
    own: list[Applied] = []
    if existing is not None:
        existing.require_complete(topics=False)
        own = am_series(new, existing)
        git(new.path, "checkout", "-q", "--detach", new.base)
    source_branch = f"fp4graph/from-{from_version}"
    git(new.path, "fetch", "-q", str(old.path.resolve()), f"HEAD:refs/heads/{source_branch}")
    git(new.path, "update-ref", BASE_REF, new.base)
    todo = _todo(old_applied, own, topics)
    commits = [p.commit for p in todo]
    git(new.path, "checkout", "-q", "-B", BRANCH, new.base)
    stopped_at, unmerged, carried, failure = run_todo(
        new.path, new.base, commits, work_dir / f"todo-{to_version}"
    )

    results: list[Carried] = []
    texts: dict[str, str] = {}
    lines: list[str] = []
    for pick, commit in zip(todo[:stopped_at], carried, strict=True):
        patch = pick.patch
        if is_empty(new.path, commit):
            results.append(Carried(
                name=patch.name, status="empty",
                detail=f"{to_version} already has this change (empty after the rebase): dropped; "
                f"if topic {patch.topic!r} is required, say from which version in model/projects.py",
            ))
            lines.append(f"# {patch.name}: dropped, {to_version} already has it")
            continue
        text = normalise(format_patch(new.path, commit), today)
        before = patch.path.read_text(encoding="utf-8")
        texts[patch.name] = before if same_patch(before, text) else text  # no churn
        lines.append(patch.name)
        results.append(Carried(name=patch.name, status="carried",
                               detail="kept" if pick.own else "applied cleanly"))
    resolve = (f"resolve in {new.path}: edit, `git add`, `git rebase --continue` (or `--skip` "
               f"a patch {to_version} has), then `python -m fp4graph refresh {project} {to_version} "
               f"--work-dir {work_dir}`")
    for i, pick in enumerate(todo[stopped_at:]):
        patch = pick.patch
        if i == 0:
            why = "conflicts in " + (", ".join(unmerged) or failure)
            status = "conflict"
        else:
            why = f"not carried yet: git stopped at {todo[stopped_at].patch.name}"
            status = "pending"
        texts[patch.name] = patch.path.read_text(encoding="utf-8")  # its file as it was, nothing lost
        lines.append(f"{patch.name} {UNRESOLVED}  # {why}")
        results.append(Carried(name=patch.name, status=status, detail=f"{why}; {resolve}"))
    with atomic_directory(out_dir, replace=True) as staging:
        for name, text in texts.items():
            (staging / name).write_text(text, encoding="utf-8")
        (staging / SERIES_FILE).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    log(f"rebase: wrote {len(texts)} patch(es) to {out_dir}, {len(todo) - stopped_at} unresolved")
    return results


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RebaseOptions:
    """``rebase PROJECT A B``: carry A's series to B."""

    project: str
    from_version: str
    to_version: str
    out: pathlib.Path | None = None  # default patches/<project>/<B>/; refused if it exists
    work_dir: pathlib.Path | None = None  # default: a new temporary directory
    force: bool = False  # replace an existing ``out`` and the work repositories of an earlier run
    repo: pathlib.Path | None = None  # the upstream clone a pull-request series is cut on
    topics: tuple[str, ...] = ()  # carry only these topics into B's existing series


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RebaseResult:
    carried: tuple[Carried, ...]
    out: pathlib.Path  # B's series
    work_dir: pathlib.Path  # the git repositories (W/from-A, W/to-B)

    @property
    def need_a_human(self) -> tuple[Carried, ...]:
        return tuple(r for r in self.carried if r.status != "carried")

    @property
    def unresolved(self) -> int:
        """Patches written as ``unresolved`` lines (lint and the build refuse them)."""
        return sum(r.status in ("conflict", "pending") for r in self.carried)


def run_rebase(settings: Settings, options: RebaseOptions) -> RebaseResult:
    """:func:`rebase` with the command's defaults: B's series into patches/, repositories
    into a new temporary directory; an existing series is replaced only with ``force``."""
    out = options.out or settings.patches_dir / options.project / options.to_version
    if out.exists() and not options.force and not options.topics:
        raise ConfigError(f"{out}: exists; pass --force to replace it or --out elsewhere")
    work = options.work_dir or pathlib.Path(tempfile.mkdtemp(prefix="fp4graph-rebase-"))
    carried = rebase(settings, options.project, options.from_version, options.to_version, out,
                     work_dir=work, replace_work=options.force, repo=options.repo,
                     topics=options.topics)
    return RebaseResult(carried=tuple(carried), out=out, work_dir=work)
