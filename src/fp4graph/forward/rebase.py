"""Applying a series with ``git am``, and ``rebase``: carry a series from version A to version B.

``python -m fp4graph rebase PROJECT A B`` applies A's series to A's source, cherry-picks
each commit onto B's source (a three-way merge against A's tree), and writes B's series
with normalised ``git format-patch`` headers and a refreshed ``Last-Update``.  Patches
that conflict, or that become empty because B already has them, are listed for a human.
"""

from __future__ import annotations

import dataclasses
import datetime
import pathlib
import re

from ..model.config import Settings
from ..model.errors import ConfigError, PatchError
from ..model.files import atomic_directory
from ..model.log import log
from ..model.series import SERIES_FILE, Patch, Series, load_series
from ..model.stacks import load
from .sources import SourceRepo, git, git_env, source_repo

_LAST_UPDATE = re.compile(r"^Last-Update: .*$", re.M)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Applied:
    patch: Patch
    commit: str


def am_series(repo: SourceRepo, series: Series, *, branch_prefix: str | None = None) -> list[Applied]:
    """``git am -3`` each patch of ``series`` onto ``repo``; one commit per patch.

    Author, date and message come from the patch; the committer is fixed so the
    commit ids are reproducible.  With ``branch_prefix``, a branch
    ``<prefix><topic>`` marks each patch's commit (a stack of PR branches).
    A conflict aborts the ``git am`` and raises naming the patch and the files.
    """
    applied = []
    for patch in series.patches:
        result = git(repo.path, "am", "-3", "--keep-cr", str(patch.path.resolve()), check=False)
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
        if branch_prefix is not None:
            git(repo.path, "branch", "-f", branch_prefix + patch.topic.rstrip("-."), sha)
        applied.append(Applied(patch=patch, commit=sha))
    return applied


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if line.startswith(("error:", "Patch failed", "fatal:")):
            return line
    return text.strip().splitlines()[-1] if text.strip() else "(no message)"


def normalise(patch_text: str, today: datetime.date) -> str:
    """Refresh Last-Update in a ``git format-patch`` file's message."""
    head, sep, rest = patch_text.partition("\n---\n")
    head = _LAST_UPDATE.sub(f"Last-Update: {today.isoformat()}", head)
    return head + sep + rest


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Carried:
    name: str
    status: str  # "carried" | "conflict" | "empty"
    detail: str


def rebase(
    settings: Settings,
    project: str,
    from_version: str,
    to_version: str,
    out_dir: pathlib.Path,
    *,
    work_dir: pathlib.Path,
    today: datetime.date | None = None,
) -> list[Carried]:
    """Carry ``from_version``'s series onto ``to_version``; write what carried to ``out_dir``."""
    today = today or datetime.date.today()
    work_dir.mkdir(parents=True, exist_ok=True)
    catalog = load(settings.stacks_file)
    series = load_series(settings.patches_dir, project, from_version)
    if series is None:
        raise ConfigError(f"{settings.patches_dir / project / from_version}: no series to carry")
    old = source_repo(settings, catalog.artifact(project, from_version), work_dir / f"from-{from_version}")
    am_series(old, series)
    new = source_repo(settings, catalog.artifact(project, to_version), work_dir / f"to-{to_version}")
    git(new.path, "fetch", "-q", str(old.path.resolve()), f"HEAD:refs/heads/fp4graph/from-{from_version}")
    commits = git(new.path, "rev-list", "--reverse", f"{old.base}..fp4graph/from-{from_version}").stdout.split()
    results: list[Carried] = []
    written: dict[str, str] = {}  # patch name -> its refreshed text
    env = git_env(date=None)  # keep each patch's author date; committer date irrelevant to output
    for patch, sha in zip(series.patches, commits, strict=True):
        before = git(new.path, "rev-parse", "HEAD").stdout.strip()
        picked = git(new.path, "cherry-pick", "--allow-empty", sha, check=False, env=env)
        if picked.returncode != 0:
            unmerged = git(new.path, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
            git(new.path, "cherry-pick", "--abort", check=False)
            results.append(Carried(
                name=patch.name, status="conflict",
                detail="conflicts in " + (", ".join(unmerged) or _first_error(picked.stderr))
                + f"; resolve with `git -C {new.path} cherry-pick {sha}`",
            ))
            continue
        if git(new.path, "diff", "--quiet", before, "HEAD", check=False).returncode == 0:
            git(new.path, "reset", "-q", "--hard", before)
            results.append(Carried(
                name=patch.name, status="empty",
                detail=f"{to_version} already has this change (empty after cherry-pick); "
                "drop it from the series and set Applied-Upstream",
            ))
            continue
        text = git(
            new.path, "format-patch", "-1", "--stdout", "--zero-commit", "--no-numbered",
            "--signature=fp4graph", "HEAD",
        ).stdout
        written[patch.name] = normalise(text, today)
        results.append(Carried(name=patch.name, status="carried", detail="cherry-picked cleanly"))
    with atomic_directory(out_dir, replace=True) as staging:
        for name, text in written.items():
            (staging / name).write_text(text, encoding="utf-8")
        (staging / SERIES_FILE).write_text("".join(n + "\n" for n in written), encoding="utf-8")
    log(f"rebase: wrote {len(written)} patch(es) to {out_dir}")
    return results
