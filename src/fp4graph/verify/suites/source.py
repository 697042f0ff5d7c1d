"""Upstream's files at a pinned commit: fetch the tag, check it, read and export files.

The files are always read from the pinned commit's objects (``git archive``, ``cat-file``),
never from a working tree, so a checkout elsewhere or with local edits cannot leak into a run.
"""

from __future__ import annotations

import io
import os
import pathlib
import subprocess
import tarfile
from collections.abc import Sequence

from ...forward.sources import git_env
from ...model import config
from ...model.errors import SuiteError
from ...model.log import log
from ...model.stacks import SourcePin

_REPO_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")


def git(
    repo: pathlib.Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``git -C repo args``, logged; by default without the user's git configuration."""
    cmd = ["git", "-C", str(repo), *args]
    line = subprocess.list2cmdline(cmd)
    log(line if len(line) < 300 else f"{line[:300]} ... ({len(args)} arguments)")
    result = subprocess.run(cmd, capture_output=True, env=env or git_env(None))
    if check and result.returncode != 0:
        raise SuiteError(
            f"`{line[:300]}` failed ({result.returncode}): "
            + result.stderr.decode(errors="replace").strip()
        )
    return result


def rev(repo: pathlib.Path, ref: str) -> str | None:
    result = git(repo, "rev-parse", "--verify", "-q", ref, check=False)
    if result.returncode != 0:
        return None
    return result.stdout.decode().strip() or None


def verify_pin(repo: pathlib.Path, pin: SourcePin, where: str) -> str:
    """Check that ``repo`` holds ``pin``'s commit and that its tag names it; return a note.

    The files are read from the pinned commit's objects, never from a working tree, so a
    checkout elsewhere (or with local edits) cannot leak into the run.
    """
    if git(repo, "rev-parse", "--git-dir", check=False).returncode != 0:
        raise SuiteError(f"{where}: {repo} is not a git repository (pass --repo a clone of {pin.repo})")
    tagged = rev(repo, f"refs/tags/{pin.tag}^{{commit}}")
    if tagged is not None and tagged != pin.commit:
        raise SuiteError(
            f"{where}: in {repo}, tag {pin.tag} is commit {tagged}, but patches/stacks.toml pins "
            f"{pin.commit}: refusing to run upstream's tests from another commit "
            "(re-fetch the tag from upstream, or correct the pin)"
        )
    if tagged is None:
        if rev(repo, f"{pin.commit}^{{commit}}") is None:
            raise SuiteError(
                f"{where}: {repo} has neither tag {pin.tag} nor the pinned commit {pin.commit} "
                f"(git -C {repo} fetch https://github.com/{pin.repo} tag {pin.tag})"
            )
        return f"commit {pin.commit} of {repo} (tag {pin.tag} absent there)"
    return f"tag {pin.tag} = commit {pin.commit} of {repo}"


def fetch_pin(settings: config.Settings, pin: SourcePin, url: str | None = None) -> pathlib.Path:
    """A cached bare repository holding ``pin``'s tag, fetched (depth 1) from GitHub or ``url``."""
    repo = settings.cache_dir / "upstream-git" / f"{pin.repo.replace('/', '+')}.git"
    if not (repo / "HEAD").is_file():
        repo.mkdir(parents=True, exist_ok=True)
        git(repo, "init", "-q", "--bare")
    source = url or pin.url
    # The user's git configuration applies here: proxies, url.*.insteadOf mirrors.
    result = git(
        repo, "fetch", "-q", "--depth", "1", "--no-tags", source,
        f"+refs/tags/{pin.tag}:refs/tags/{pin.tag}", check=False,
        env={**{k: v for k, v in os.environ.items() if k not in _REPO_VARIABLES},
             "GIT_TERMINAL_PROMPT": "0"},
    )
    if result.returncode != 0:
        raise SuiteError(
            f"could not fetch tag {pin.tag} from {source}: "
            + result.stderr.decode(errors="replace").strip()
            + f"\nWithout GitHub access, pass --repo PATH (a clone of {pin.repo} with its tags)."
        )
    return repo


def tree_paths(repo: pathlib.Path, commit: str) -> list[str]:
    out = git(repo, "ls-tree", "-r", "--name-only", "-z", commit).stdout.decode()
    return [p for p in out.split("\0") if p]


def read_texts(repo: pathlib.Path, commit: str, paths: Sequence[str]) -> dict[str, str]:
    """The text of ``paths`` at ``commit`` (one ``git cat-file --batch`` process)."""
    request = "".join(f"{commit}:{p}\n" for p in paths).encode()
    out = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch"], input=request,
        capture_output=True, check=True, env=git_env(None),
    ).stdout
    texts: dict[str, str] = {}
    pos = 0
    for path in paths:
        header_end = out.index(b"\n", pos)
        header = out[pos:header_end].split()
        size = int(header[2])
        texts[path] = out[header_end + 1: header_end + 1 + size].decode(errors="replace")
        pos = header_end + 1 + size + 1
    return texts


def export(repo: pathlib.Path, commit: str, paths: Sequence[str], dest: pathlib.Path) -> None:
    """Write ``paths`` (files) as they are at ``commit`` under ``dest``."""
    if not paths:
        return
    data = git(repo, "archive", "--format=tar", commit, "--", *paths).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")

