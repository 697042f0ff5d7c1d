"""A pull-request series checked on a release's tree (``upstream PROJECT --repo CLONE
--release-tree VERSION``).

Users run releases, not main: each pull request must also apply to the newest release and
fix something there.  The tree is the release's pinned sdist (sha256-checked, as every
pinned file is) with the test files and pre-commit configuration of the series' upstream
commit laid beside it (``OVERLAID``: an sdist ships neither upstream's ``tests/<area>/``
nor its hook configuration).  Each pull request is applied to it at zero fuzz (``git am``,
exact context) on the pull requests it declares (``Depends-On:``), as its own patch or,
where the release's code differs, as the re-cut kept for that release beside the series
(``<series>/release-<version>/<the same file name>``), and its test files run with and
without it: they must pass with it and fail without.  A pull request that does not apply,
has no test, or whose test passes without it fails the check by name.
"""

from __future__ import annotations

import dataclasses
import io
import pathlib
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence

from ..model.config import Settings
from ..model.errors import ConfigError
from ..model.pullrequests import recut_dir
from ..model.series import Patch, Series
from ..model.stacks import load
from . import prbranches
from .prreport import ReleaseTreeCheck, TestFile
from .sources import SourceRepo, clone, git, pristine_repo

# What the series' upstream commit lends the release's tree: its tests and hook configuration.
OVERLAID = ("tests", ".pre-commit-config.yaml")

# (repository, the pull request's commit, the commit below it) -> its test files' runs
# with the change, and without it (the same files on the commit below).
TestsWithAndWithout = Callable[[pathlib.Path, str, str], tuple[list[TestFile], list[TestFile]]]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseTreeRun:
    release: str  # "flashinfer-python 0.7.4"
    tree: str  # what the tree is made of, for the summary
    checks: dict[str, ReleaseTreeCheck]  # patch file name -> its check
    seconds: float

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks.values())


def release_tree(
    settings: Settings, project: str, version: str, upstream: pathlib.Path, commit: str, dest: pathlib.Path,
) -> tuple[SourceRepo, str]:
    """The release's sdist as a repository at ``dest``, ``OVERLAID`` taken from ``upstream``
    at ``commit`` in one commit on top; and what the tree is, for reports."""
    artifact = load(settings.stacks_file).artifact(project, version)
    pristine, origin = pristine_repo(settings, artifact)
    repo = clone(pristine, dest, project=project, version=version, base=None, origin=origin)
    lent = [p for p in OVERLAID
            if git(upstream, "cat-file", "-e", f"{commit}:{p}", check=False).returncode == 0]
    archive = subprocess.run(["git", "-C", str(upstream), "archive", "--format=tar", commit, "--", *lent],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise ConfigError(f"{upstream}: cannot take {', '.join(OVERLAID)} at {commit[:12]}: "
                          + archive.stderr.decode(errors="replace").strip())
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(dest, filter="data")
    git(dest, "add", "-A", "-f", "--", *lent)
    git(dest, "commit", "-q", "--no-verify", "--allow-empty", "-m", f"{', '.join(lent)} of {commit[:12]}")
    head = git(dest, "rev-parse", "HEAD").stdout.strip()
    tree = (f"{project} {version}: the {origin} with {' and '.join(lent) or 'nothing'} of {commit[:12]} "
            "beside it, which the sdist lacks")
    return dataclasses.replace(repo, base=head), tree


def _carried(series: Series, version: str) -> list[prbranches.CarriedPatch]:
    recuts = recut_dir(series, version)
    out = []
    for patch in series.patches:
        recut = recuts / patch.name
        used = Patch.load(recut) if recut.is_file() else patch
        out.append(prbranches.CarriedPatch(
            patch=used, status="carried", text=used.path.read_text(encoding="utf-8"),
            detail=f"re-cut for {version}" if recut.is_file() else "the pull request's own patch"))
    return out


def judge(tests: Sequence[TestFile], without: Sequence[TestFile]) -> tuple[str, str]:
    """(status, detail) of a pull request's test files on the tree: they must pass with the
    change and fail without it."""
    if not tests:
        return "no-test", "it adds or changes no test file"
    unrun = [t for t in (*tests, *without) if t.outcome in ("not-run", "skipped")]
    if unrun:
        return "not-run", f"`{unrun[0].command}`: {unrun[0].outcome}: {unrun[0].output[-300:]}"
    failing = [t for t in tests if t.outcome != "passed"]
    if failing:
        return "fails-with", f"`{failing[0].command}` fails with the change: {failing[0].output[-300:]}"
    passing = [t for t in without if t.outcome != "failed"]
    if passing or len(without) < len(tests):
        shown = passing[0].command if passing else tests[0].command
        return "passes-without", f"`{shown}` does not fail without the change (it shows no fix there)"
    return "passed", "; ".join(f"`{t.command}` fails without the change, passes with it" for t in tests)


def check(
    settings: Settings, series: Series, version: str, upstream: pathlib.Path, commit: str,
    identity: tuple[str, str], work: pathlib.Path, tests: TestsWithAndWithout,
    prepare_tree: Callable[[pathlib.Path], None] = lambda path: None,
) -> ReleaseTreeRun:
    """Every pull request of ``series`` on release ``version``'s tree (module doc)."""
    started = time.monotonic()
    repo, tree = release_tree(settings, series.project, version, upstream, commit, work / "release-tree")
    prepare_tree(repo.path)
    carried = _carried(series, version)
    branches = prbranches.build(repo, carried, repo.base, identity)
    release = f"{series.project} {version}"
    checks: dict[str, ReleaseTreeCheck] = {}
    for c, branch in zip(carried, branches, strict=True):
        recut = c.detail.startswith("re-cut")
        if branch.commit is None or branch.parent is None:
            checks[c.patch.name] = ReleaseTreeCheck(release=release, recut=recut, status="does-not-apply",
                                                    detail=branch.detail)
            continue
        ran, before = tests(repo.path, branch.commit, branch.parent)
        status, detail = judge(ran, before)
        checks[c.patch.name] = ReleaseTreeCheck(release=release, recut=recut, status=status, detail=detail,
                                                tests=tuple(ran), without_change=tuple(before))
    return ReleaseTreeRun(release=release, tree=tree, checks=checks, seconds=time.monotonic() - started)
