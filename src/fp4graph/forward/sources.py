"""Git repositories of upstream source: built from a pinned sdist (or wheel), or cloned.

The repository uses upstream's own layout (``model.projects``): flashinfer's
sdist roots at the repository root, sglang's sdist and wheel hold what upstream
keeps under ``python/``.  The pristine tree is one commit made with a fixed
identity and date, so two builds of the same artifact have the same commit id.
A built repository is cached under ``<cache>/srcrepos/`` and cloned for use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence

from ..model import projects
from ..model.config import Settings
from ..model.errors import Fp4graphError
from ..model.files import atomic_directory
from ..model.log import log
from ..model.stacks import Artifact, ArtifactFile
from ..wheels.fetch import fetch

# The pristine import commit of an sdist (not a change anyone authored) and the
# committer of work repositories; pull-request commits carry the user's identity.
IDENTITY = ("fp4graph", "fp4graph@users.noreply.github.com")
FIXED_DATE = "2000-01-01T00:00:00+0000"


class SourceRepoError(Fp4graphError):
    """An upstream source repository could not be built, cloned or changed."""


def git_env(date: str | None = FIXED_DATE) -> dict[str, str]:
    """An environment for git that ignores the user's config and commits reproducibly."""
    env = dict(os.environ)
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(key, None)
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_COMMITTER_NAME=IDENTITY[0],
        GIT_COMMITTER_EMAIL=IDENTITY[1],
        GIT_AUTHOR_NAME=IDENTITY[0],
        GIT_AUTHOR_EMAIL=IDENTITY[1],
        GIT_TERMINAL_PROMPT="0",
    )
    if date is not None:
        env.update(GIT_COMMITTER_DATE=date, GIT_AUTHOR_DATE=date)
    return env


def git(
    repo: pathlib.Path,
    *args: str,
    input: str | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``git -C repo args``; log it; on failure (with ``check``) raise naming the command."""
    cmd = ["git", "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", "-C", str(repo), *args]
    log(subprocess.list2cmdline(cmd[7:]) + f"  (in {repo})")
    result = subprocess.run(
        cmd, input=input, capture_output=True, text=True, env=env or git_env()
    )
    if check and result.returncode != 0:
        raise SourceRepoError(
            f"{repo}: `{subprocess.list2cmdline(cmd[7:])}` failed ({result.returncode}):\n"
            + (result.stderr.strip() or result.stdout.strip())
        )
    return result


_IDENT = re.compile(r"^\s*(?P<name>[^<>]*?)\s*<(?P<email>[^<>\s]+)>")


def user_identity(given: str | None = None, where: pathlib.Path | None = None) -> tuple[str, str]:
    """The identity pull-request commits carry: ``given`` ("Name <email>"), else the user's
    own git identity (``git var GIT_AUTHOR_IDENT``: GIT_AUTHOR_* or user.name/user.email)."""
    if given is not None:
        match = _IDENT.fullmatch(given.strip())
        if not match or not match["name"]:
            raise Fp4graphError(f"--author {given!r}: expected 'Name <email>'")
        return match["name"], match["email"]
    found = subprocess.run(["git", "var", "GIT_AUTHOR_IDENT"], capture_output=True, text=True,
                           cwd=where if where is not None and where.is_dir() else None)
    match = _IDENT.match(found.stdout) if found.returncode == 0 else None
    if not match or not match["name"]:
        raise Fp4graphError(
            "no git identity for the pull-request commits: set `git config user.name` and "
            "`git config user.email`, or pass --author 'Name <email>'"
        )
    return match["name"], match["email"]


def identity_env(identity: tuple[str, str], date: str | None = FIXED_DATE) -> dict[str, str]:
    """:func:`git_env` with ``identity`` as author and committer."""
    env = git_env(date)
    env.update(GIT_AUTHOR_NAME=identity[0], GIT_AUTHOR_EMAIL=identity[1],
               GIT_COMMITTER_NAME=identity[0], GIT_COMMITTER_EMAIL=identity[1])
    return env


_FROM = re.compile(r"^From: .*\n(?:[ \t].*\n)*", re.M)


def with_author(patch_text: str, identity: tuple[str, str]) -> str:
    """A ``git format-patch`` file with its ``From:`` header set to ``identity``."""
    head, sep, rest = patch_text.partition("\n\n")
    head = _FROM.sub(lambda _: f"From: {identity[0]} <{identity[1]}>\n", head + "\n", count=1)
    return head.rstrip("\n") + sep + rest


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SourceRepo:
    """A working repository of one upstream release, ready for ``git am``."""

    path: pathlib.Path
    project: str
    version: str
    base: str  # the commit the series goes on
    origin: str  # where the source came from, for reports


def source_file(artifact: Artifact) -> tuple[ArtifactFile, str]:
    """The pinned file to build the source from, and a note on what it is.

    The sdist when it is pinned; otherwise (sglang 0.5.11 publishes no sdist)
    the first pinned wheel, whose pure-Python files are the same source.
    """
    if artifact.sdist is not None:
        return artifact.sdist, f"sdist {artifact.sdist.filename}"
    wheel = artifact.file()
    return wheel, (
        f"wheel {wheel.filename} ({artifact.key} publishes no sdist: the wheel's package "
        "files are used, upstream tests and configuration are absent)"
    )


def _extract_sdist(archive: pathlib.Path, dest: pathlib.Path) -> None:
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) < 2 or not parts[1]:
                continue
            member.name = parts[1]
            members.append(member)
        tar.extractall(dest, members=members, filter="data")


def _extract_wheel(archive: pathlib.Path, dest: pathlib.Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            top = info.filename.split("/", 1)[0]
            if top.endswith((".dist-info", ".data")) or info.is_dir():
                continue
            target = dest / info.filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(info))
            if (info.external_attr >> 16) & 0o111:
                target.chmod(0o755)


def extract_source(archive: pathlib.Path, dest: pathlib.Path, project: str) -> None:
    """Unpack an sdist or wheel of ``project`` into ``dest`` at upstream-repo paths."""
    root = dest / projects.get(project).layout.source_prefix
    root.mkdir(parents=True, exist_ok=True)
    if archive.name.endswith(".whl"):
        _extract_wheel(archive, root)
    else:
        _extract_sdist(archive, root)


def init_repo(tree: pathlib.Path, message: str) -> str:
    """Make ``tree`` a git repository with everything in one commit; return its id."""
    git(tree, "init", "-q", "-b", "upstream")
    git(tree, "add", "-A", "-f", ".")
    git(tree, "commit", "-q", "--no-verify", "-m", message)
    return git(tree, "rev-parse", "HEAD").stdout.strip()


def pristine_repo(settings: Settings, artifact: Artifact) -> tuple[pathlib.Path, str]:
    """The cached repository of ``artifact``'s source (built once), and its origin note."""
    pinned, origin = source_file(artifact)
    root = settings.cache_dir / "srcrepos"
    dest = root / f"{pinned.filename}-{pinned.sha256[:16]}"
    if (dest / ".git").is_dir():
        return dest, origin
    archive = fetch(settings, artifact.project, pinned)
    with atomic_directory(dest, replace=False) as tmp:
        log(f"source repo {artifact.key} from {origin}")
        extract_source(archive, tmp, artifact.project)
        init_repo(tmp, f"{artifact.project} {artifact.version} ({pinned.filename})")
        git(tmp, "tag", f"v{artifact.version}")
    if not (dest / ".git").is_dir():
        raise SourceRepoError(f"{dest}: could not be created")
    return dest, origin


def _resolve(repo: pathlib.Path, candidates: list[str]) -> str | None:
    for ref in candidates:
        result = git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", check=False)
        if result.returncode == 0:
            return result.stdout.strip()
    return None


def clone(
    source: pathlib.Path,
    dest: pathlib.Path,
    *,
    project: str,
    version: str,
    base: str | None,
    origin: str,
) -> SourceRepo:
    """Clone ``source`` into ``dest`` and check out ``base`` (default: tag v<version>)."""
    if not (source / ".git").exists() and not (source / "HEAD").is_file():
        raise SourceRepoError(f"{source}: not a git repository; pass --repo a clone of {project}")
    git(dest.parent, "clone", "-q", "--no-checkout", str(source.resolve()), str(dest))
    refs = [base] if base else [f"v{version}", version, f"refs/tags/v{version}"]
    sha = _resolve(dest, [c for r in refs for c in (r, f"origin/{r}")])
    if sha is None:
        wanted = base or f"v{version}"
        raise SourceRepoError(
            f"{source}: no commit {wanted!r} for {project} {version}; "
            "fetch upstream's tags or pass --base REF"
        )
    git(dest, "checkout", "-q", "-B", "fp4graph/base", sha)
    return SourceRepo(path=dest, project=project, version=version, base=sha, origin=origin)


def source_repo(
    settings: Settings,
    artifact: Artifact,
    dest: pathlib.Path,
    *,
    repo: pathlib.Path | None = None,
    base: str | None = None,
) -> SourceRepo:
    """A fresh working repository of ``artifact`` at ``dest``: a clone of ``repo``, else
    of the repository built from the pinned sdist (or wheel)."""
    if repo is not None:
        return clone(
            repo, dest, project=artifact.project, version=artifact.version, base=base,
            origin=f"clone of {repo} at {base or 'v' + artifact.version}",
        )
    pristine, origin = pristine_repo(settings, artifact)
    return clone(
        pristine, dest, project=artifact.project, version=artifact.version, base=base, origin=origin
    )


@contextlib.contextmanager
def checkout_at(source: SourceRepo, commit: str) -> Iterator[pathlib.Path]:
    """A temporary detached worktree of ``source`` at ``commit``."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="fp4graph-worktree-"))
    git(source.path, "worktree", "add", "--detach", str(tmp / "tree"), commit)
    try:
        yield tmp / "tree"
    finally:
        git(source.path, "worktree", "remove", "--force", str(tmp / "tree"), check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def files_over(path: pathlib.Path, below: str, commit: str, files: Sequence[str]) -> Iterator[None]:
    """The work tree of ``path`` at ``below`` with those of ``files`` that ``commit`` has
    taken over from it (a change's tests on the commit below the change); back at the
    commit checked out before, afterwards."""
    tip = git(path, "rev-parse", "HEAD").stdout.strip()
    git(path, "checkout", "-q", "-f", "--detach", below)
    present = [f for f in files if git(path, "cat-file", "-e", f"{commit}:{f}", check=False).returncode == 0]
    if present:
        git(path, "checkout", commit, "--", *present)
    try:
        yield
    finally:
        git(path, "checkout", "-q", "-f", "--detach", tip)
