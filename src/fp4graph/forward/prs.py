"""``python -m fp4graph upstream PROJECT``: pull requests from a series, one pipeline.

The source is a release (``--version``; the tree from the pinned sdist, or ``--repo``'s tag)
or, with ``--repo`` and no ``--version``, the project's pull-request series
(``model.pullrequests``) carried onto the clone's upstream branch.  Either way the series is
carried (``prbranches.carry``) and one branch is built per pull request
(``prbranches.build``: a release series stacked, a pull-request series on its
``Depends-On:``), its commits by the user's git identity; then, per pull request and on its
own branch, upstream's pre-commit hooks over its files and the test files it adds or
changes, twice: on the branch, and on the commit below it with only those files taken over
(a test that passes there too shows no fix).  With ``release_tree``, each pull request of a
series is also applied to that release's sdist tree and its tests run there with and
without it (``releasetree``).  ``prreport`` writes, under ``out``:

    <out>/repo/                         the repository, one branch per pull request
    <out>/prs/<NN>-<topic>/PR.md        the body, on upstream's template
    <out>/prs/<NN>-<topic>/*.patch      ``git format-patch`` of the pull request's commit
    <out>/summary.md, summary.json      the carry, what is not proposed, branches, checks, tests

Nothing is pushed unless asked (``push_to``) and everything passed.
"""

from __future__ import annotations

import dataclasses
import email.parser
import email.policy
import functools
import os
import pathlib
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Mapping, Sequence

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..model import projects, pullrequests
from ..model.config import Settings
from ..model.errors import ConfigError, Fp4graphError
from ..model.files import atomic_directory
from ..model.log import log
from ..model.series import Series, load_series, nearest_series
from ..model.stacks import Artifact, load
from ..wheels.fetch import fetch
from ..wheels.index import core_metadata
from . import checks, prbranches, releasetree
from .prreport import PullRequest, Report, TestFile, bench_results, write_prs, write_summary
from .sources import SourceRepo, checkout_at, clone, files_over, git, source_repo, user_identity

DEFAULT_TIMEOUT = 900
# Loaded into the tests' pytest by name (never imported here): torch's device queries
# answered as an SM120 card, for hosts without a GPU.
SIMULATED_GPU_PLUGIN = "fp4graph.verify.pytest_simulated_gpu"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamOptions:
    """``upstream PROJECT``: the pull requests of a series, checked, optionally pushed."""

    project: str
    version: str | None = None  # a release (default: the newest pinned, unless a PR series is used)
    repo: pathlib.Path | None = None  # a clone of upstream: its pull-request series, or --version's tag
    series: str | None = None  # the pull-request series (default: the project's last one)
    base: str | None = None  # the commit to build on (default: tag v<version>, or the series' ref)
    out: pathlib.Path | None = None  # default wheels/upstream/<project>-<version or series>
    run_checks: bool = True
    tools: str = "auto"
    run_tests: bool = True
    python: str = sys.executable
    test_timeout: int = DEFAULT_TIMEOUT
    tests_must_run: bool = False
    simulated_gpu: bool | None = None  # None: for a pull-request series where torch sees no GPU
    identity: tuple[str, str] | None = None  # the commits' author (default: the user's git identity)
    push_to: str | None = None  # push the branches there (a URL or a remote name of ``repo``)
    release_tree: str | None = None  # also check each pull request on this release's tree (releasetree)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Source:
    """What the pipeline builds on: a series, its tree, and how to name them."""

    series: Series
    repo: SourceRepo
    target: str  # the commit the branches sit on
    stacked: bool
    title: str
    base_note: str
    series_dir: str
    not_proposed: dict[str, str]


# --- what is not proposed ----------------------------------------------------------

_FLASHINFER_CALL = re.compile(r'getattr\(flashinfer, "(\w+)"|\bflashinfer\.(\w+)\(')


# Fixes for a release that upstream's main made moot (a pull request there would change
# nothing): carried downstream, never proposed.  (project, topic) -> the upstream commit.
MOOT_ON_MAIN: dict[tuple[str, str], str] = {
    ("sglang", "deep-gemm-precompile-eager"): (
        "sgl-project/sglang@1df9edcd015d (#23856, 2026-05-11: the NSA indexer's DeepGEMM call "
        "became torch.mm, so no compiled caller reaches the pre-compile on main)"
    ),
}


def not_proposed(settings: Settings, series: Series) -> dict[str, str]:
    """Patches no pull request should carry: upstream already has them (their
    ``Applied-Upstream:``), upstream's main made them moot (``MOOT_ON_MAIN``: carried
    downstream), or they call a FlashInfer function no pinned FlashInfer release defines
    (the patch waits for that API upstream)."""
    out: dict[str, str] = {}
    newest = None
    for patch in series.patches:
        applied = patch.fields.get("Applied-Upstream", "no").strip()
        if applied.lower() not in ("no", ""):
            out[patch.name] = f"already upstream (Applied-Upstream: {applied})"
            continue
        moot = MOOT_ON_MAIN.get((series.project, patch.topic))
        if moot is not None:
            out[patch.name] = f"carried downstream: a fix for the release only, moot on main since {moot}"
            continue
        if series.project == "flashinfer-python":
            continue
        added = "\n".join(ln for ln in patch.diff.splitlines() if ln.startswith("+"))
        names = sorted({a or b for a, b in _FLASHINFER_CALL.findall(added)})
        if not names:
            continue
        if newest is None:
            newest = target_artifact(settings, "flashinfer-python", None)
            with zipfile.ZipFile(fetch(settings, newest.project, newest.file())) as zf:
                text = "\n".join(zf.read(n).decode(errors="replace")
                                 for n in zf.namelist() if n.endswith(".py"))
        missing = [n for n in names if not re.search(rf"^def {n}\(", text, re.M)]
        if missing:
            out[patch.name] = (
                f"needs flashinfer.{', flashinfer.'.join(missing)}, which no FlashInfer release "
                f"pinned here has (newest: {newest.version}): it waits for FlashInfer's own "
                "pull request of that API"
            )
    return out


def release_requirements(settings: Settings, project: str, version: str | None) -> list[str]:
    """What the tests the series adds need installed: the project's test requirements, each
    at the release's pin where its wheel's Requires-Dist names it, and, where the tests import
    the whole release, every runtime requirement besides (Requires-Dist that apply here
    without extras; torch left to the caller's pin unless named)."""
    entry = projects.get(project)
    if not entry.test_requirements and not entry.tests_import_release:
        return []
    artifact = target_artifact(settings, project, version)
    metadata = core_metadata(fetch(settings, artifact.project, artifact.file())).decode()
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(metadata)
    env = {**{k: str(v) for k, v in default_environment().items()}, "extra": ""}
    released: dict[str, str] = {}
    for raw in message.get_all("Requires-Dist") or []:
        req = Requirement(raw)
        if req.marker and not req.marker.evaluate(env):
            continue
        req.marker = None
        released.setdefault(canonicalize_name(req.name), str(req))
    needs = [released.get(canonicalize_name(name), name) for name in entry.test_requirements]
    if entry.tests_import_release:
        needs += [req for name, req in released.items() if name != "torch"]
    return list(dict.fromkeys(needs))


def target_artifact(settings: Settings, project: str, version: str | None) -> Artifact:
    catalog = load(settings.stacks_file)
    if version is not None:
        return catalog.artifact(project, version)
    # The newest release a stack serves: a release pinned without one (measured pristine,
    # tests/models/test_releases.py) is no target for the series' pull requests.
    served = {key for stack in catalog.stacks for key in stack.artifacts}
    pinned = [a for a in catalog.artifacts.values() if a.project == project and a.key in served]
    if not pinned:
        raise ConfigError(f"{settings.stacks_file}: no {project} artifact pinned")
    return max(pinned, key=lambda a: Version(a.version))


# --- tests the patches add -------------------------------------------------------------


def link_editable_data(root: pathlib.Path, data: projects.EditableData) -> None:
    """Lay out ``data.directory`` as an editable install does (git-ignored in the repo)."""
    directory = root / data.directory
    directory.mkdir(exist_ok=True)
    for name, source in data.links.items():
        link = directory / name
        if (root / source).exists() and not link.exists():
            link.symlink_to(root / source, target_is_directory=True)
    exclude = root / ".git" / "info" / "exclude"
    if not (root / ".git").is_dir():
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    known = exclude.read_text() if exclude.exists() else ""
    if f"/{data.directory}/" not in known.splitlines():
        exclude.write_text(known + f"/{data.directory}/\n")


def _all_skipped(output: str) -> bool:
    """Whether a passing run skipped every test it had (pytest's or unittest's summary)."""
    if re.search(r"\b\d+ skipped\b", output) and " passed" not in output:
        return True
    ran = re.search(r"^Ran (\d+) tests? in ", output, re.M)  # unittest
    skipped = re.search(r"^OK \(skipped=(\d+)\)$", output, re.M)
    return ran is not None and (ran[1] == "0" or (skipped is not None and skipped[1] == ran[1]))


def _cases(report: pathlib.Path) -> dict[str, str]:
    if not report.is_file():
        return {}
    cases = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            cases[name] = "failed"
        elif case.find("skipped") is not None:
            cases[name] = "skipped"
        else:
            cases[name] = "passed"
    return cases


@functools.cache
def _torch_import_error(python: str) -> str | None:
    """Why ``python`` cannot import torch (the end of its error), or None; asked once per
    interpreter, as each answer costs a torch import."""
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    return None if probe.returncode == 0 else probe.stderr.strip()[-300:]


@functools.cache
def _torch_sees_a_gpu(python: str) -> bool:
    probe = subprocess.run([python, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True)
    return probe.stdout.strip() == "True"


def _host_note(python: str, simulated_gpu: bool) -> str:
    found = subprocess.run(
        [python, "-c", "import torch, platform; print(torch.__version__, platform.python_version(), "
         "torch.cuda.is_available())"], capture_output=True, text=True)
    if found.returncode != 0:
        return "this host"
    torch_v, py_v, cuda = found.stdout.split()
    note = f"a host with {'a GPU' if cuda == 'True' else 'no GPU'} (torch {torch_v}, Python {py_v})"
    if simulated_gpu:
        note += (", under a simulated GPU: torch's device queries answered as an SM120 card by a "
                 "test plugin (and in the Python processes the tests start), no kernel runs "
                 "(simulation)")
    return note


def _simulated_children(scratch: pathlib.Path) -> pathlib.Path:
    """A directory whose sitecustomize answers torch's device queries as the plugin does,
    for the Python processes a test starts (``import flashinfer`` in a fresh interpreter)."""
    directory = scratch / "simulated-gpu"
    directory.mkdir(exist_ok=True)
    (directory / "sitecustomize.py").write_text(
        "from fp4graph.verify import simulate\n\nsimulate.install()\n", encoding="utf-8")
    return directory


_TEST_DEF = re.compile(r"^(?P<indent>\s*)def (?P<name>test\w*)\(")


def added_tests(repo: pathlib.Path, commit: str, path: str) -> tuple[str, ...]:
    """The pytest node ids of the test functions ``commit`` adds to ``path``, a file its
    parent already has (upstream's own test file, where the change's tests belong); ()
    for a file the commit adds: all of it is the change's."""
    if git(repo, "cat-file", "-e", f"{commit}^:{path}", check=False).returncode != 0:
        return ()
    lines = git(repo, "show", f"{commit}:{path}").stdout.splitlines()
    diff = git(repo, "diff", "-U0", f"{commit}^", commit, "--", path).stdout
    added = {m["name"] for ln in diff.splitlines() if ln.startswith("+")
             if (m := _TEST_DEF.match(ln[1:]))}
    ids = []
    for number, line in enumerate(lines):
        match = _TEST_DEF.match(line)
        if not match or match["name"] not in added:
            continue
        owner = next((c for c in reversed(lines[:number]) if c.startswith("class ")), None) \
            if match["indent"] else None
        owner_name = re.match(r"class (\w+)", owner) if owner else None
        ids.append("::".join([path, *([owner_name[1]] if owner_name else []), match["name"]]))
    return tuple(ids)


def run_tests(
    root: pathlib.Path, paths: Mapping[str, Sequence[str]], project: str, python: str, timeout: int,
    scratch: pathlib.Path, *, simulated_gpu: bool = False,
) -> list[TestFile]:
    """Each test file (``paths``: file -> the node ids to run, all of the file where none)
    with pytest (per-test outcomes) or as a script, from ``root``."""
    entry = projects.get(project)
    torch_missing = _torch_import_error(python)
    runs = []
    for rel, ids in paths.items():
        if not (root / rel).is_file():
            continue
        report = scratch / (re.sub(r"\W", "_", rel) + ".xml")
        report.unlink(missing_ok=True)
        plugin = ["-p", SIMULATED_GPU_PLUGIN] if simulated_gpu else []
        cmd = [python, rel] if entry.tests_run_as == "script" else [
            python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, f"--junitxml={report}",
            *(ids or [rel])]
        shown = (f"python {rel}" if entry.tests_run_as == "script"
                 else "pytest " + " ".join(ids or [rel]))
        if torch_missing is not None:
            runs.append(TestFile(path=rel, command=shown, outcome="not-run",
                                 output=f"{python} has no torch: {torch_missing}"))
            continue
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [*([str(_simulated_children(scratch))] if simulated_gpu else []),
             str(root / entry.test_pythonpath), os.environ.get("PYTHONPATH", "")]))
        log(f"test {shown} (in {root})")
        try:
            result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            runs.append(TestFile(path=rel, command=shown, outcome="failed", output=f"timed out after {timeout}s"))
            continue
        output = (result.stdout + result.stderr).strip()
        missing = re.search(r"ModuleNotFoundError: No module named '([^']+)'", output)
        cases = _cases(report)
        if result.returncode not in (0, 5) and missing and not cases:
            outcome, output = "not-run", f"needs {missing[1]!r}, which {python} lacks\n" + output[-2000:]
        elif result.returncode == 0:
            ran = [o for o in cases.values() if o != "skipped"]
            outcome = "passed" if ran or not (cases or _all_skipped(output)) else "skipped"
        else:
            outcome = "skipped" if result.returncode == 5 else "failed"
        runs.append(TestFile(path=rel, command=shown, outcome=outcome, output=output[-4000:], cases=cases))
    return runs


def _diffstat(repo: pathlib.Path, commit: str) -> tuple[tuple[str, ...], int, int]:
    files, added, removed = [], 0, 0
    for line in git(repo, "show", "--numstat", "--format=", commit).stdout.splitlines():
        a, r, path = line.split("\t", 2)
        files.append(path)
        added += int(a) if a.isdigit() else 0
        removed += int(r) if r.isdigit() else 0
    return tuple(files), added, removed


# --- the pipeline ----------------------------------------------------------------------


def _series_entry(settings: Settings, options: UpstreamOptions) -> pullrequests.PullRequestSeries | None:
    """The pull-request series to use: with ``--repo`` and no ``--version``, when one exists."""
    if options.repo is None or options.version is not None:
        return None
    found = pullrequests.find(settings.stacks_file, options.project, options.series)
    if found is None and options.series is not None:
        raise ConfigError(f"{settings.stacks_file}: no [[{pullrequests.TABLE}]] series "
                          f"{options.series!r} for {options.project}")
    return found


def _release_source(settings: Settings, options: UpstreamOptions, dest: pathlib.Path) -> _Source:
    artifact = target_artifact(settings, options.project, options.version)
    series = nearest_series(settings.patches_dir, options.project, artifact.version)
    series.require_complete(topics=False)  # never a PR from a patch rebase could not carry
    repo = source_repo(settings, artifact, dest, repo=options.repo, base=options.base)
    kind = repo.origin.split(" ", 1)[0]
    base_note = (f"the {repo.project} {repo.version} {kind} (the release as published)"
                 if kind in ("sdist", "wheel") else f"{repo.project} v{repo.version} ({repo.base[:12]})")
    return _Source(series=series, repo=repo, target=repo.base, stacked=True,
                   title=f"{repo.project} {repo.version}", base_note=base_note,
                   series_dir=f"patches/{repo.project}/{series.version}/"
                   + ("" if series.version == repo.version else f" (carried onto {repo.version})"),
                   not_proposed=not_proposed(settings, series))


def _pr_series_source(
    settings: Settings, options: UpstreamOptions, entry: pullrequests.PullRequestSeries, dest: pathlib.Path
) -> _Source:
    assert options.repo is not None
    series = load_series(settings.patches_dir, entry.project, entry.series)
    if series is None:
        raise ConfigError(f"{settings.patches_dir / entry.project / entry.series}: no series file")
    series.require_complete(topics=False)
    problems = pullrequests.dependency_problems(series)
    if problems:
        raise ConfigError("; ".join(problems))
    repo = clone(options.repo, dest, project=entry.project, version=entry.series, base=entry.source.commit,
                 origin=f"clone of {options.repo} at {entry.source.ref} {entry.source.commit[:12]}")
    ref = options.base or entry.source.ref
    target = _resolve_target(repo.path, ref)
    return _Source(series=series, repo=repo, target=target, stacked=False,
                   title=f"{entry.project} {entry.series}", base_note=f"{ref} {target[:12]}",
                   series_dir=f"patches/{entry.project}/{entry.series}/, cut on {entry.source.repo} "
                   f"{entry.source.ref} {entry.source.commit[:12]}",
                   not_proposed=not_proposed(settings, series))


def _resolve_target(repo: pathlib.Path, ref: str) -> str:
    for candidate in (ref, f"origin/{ref}", f"refs/remotes/origin/{ref}"):
        found = git(repo, "rev-parse", "-q", "--verify", f"{candidate}^{{commit}}", check=False)
        if found.returncode == 0:
            return found.stdout.strip()
    raise ConfigError(f"{repo}: has no {ref!r} (nor origin/{ref}); pass --base COMMIT")


def _proposed(branches: Sequence[prbranches.Branch], skipped: dict[str, str]) -> list[PullRequest]:
    """The branches of proposed patches; each names the unproposed ones below it since the
    last proposed one, and is stacked on that one's branch (the others' branches go)."""
    out: list[PullRequest] = []
    beneath: list[tuple[str, str]] = []
    for branch in branches:
        if branch.patch.name in skipped:
            beneath.append((branch.patch.subject, skipped[branch.patch.name]))
            continue
        stacked_on = branch.stacked_on
        if stacked_on is not None and beneath:
            stacked_on = out[-1].branch.name if out else None
        out.append(PullRequest(branch=dataclasses.replace(branch, stacked_on=stacked_on),
                               files=tuple(branch.patch.files), beneath=tuple(beneath)))
        beneath = []
    return out


def _hooks(
    settings: Settings, options: UpstreamOptions, source: _Source, commit: str, parent: str,
    files: Sequence[str], hooks: Sequence[checks.Hook],
) -> list[checks.CheckResult]:
    """The hooks over ``files`` at ``commit``; a failure is checked again on ``parent``."""
    repo = source.repo.path
    git(repo, "checkout", "-q", "-f", "--detach", commit)
    results = checks.run_hooks(repo, hooks, files, tools=options.tools, cache_dir=settings.cache_dir)
    if not all(c.ok for c in results):
        with checkout_at(source.repo, parent) as below:
            results = checks.mark_upstream_failures(results, hooks, repo, below, tools=options.tools,
                                                    cache_dir=settings.cache_dir)
    return results


def stack_checks(
    settings: Settings, options: UpstreamOptions, source: _Source, prs: Sequence[PullRequest],
    hooks: Sequence[checks.Hook], top: str | None,
) -> dict[str, tuple[tuple[checks.CheckResult, ...], str]]:
    """The hooks run once over the files of every built pull request, at the commit that
    holds them all (the top branch of a stacked series, the carried series otherwise):
    branch name -> (its files' share of each passing hook, where they ran).  Empty where a
    hook fails there, or no commit holds them all: then each pull request's branch is
    checked on its own, which names the one at fault."""
    built = [pr for pr in prs if pr.branch.commit is not None and pr.branch.parent is not None]
    if not options.run_checks or len(built) < 2:
        return {}
    repo = source.repo.path
    if top is None:
        return {}
    per_pr = {pr.branch.name: _diffstat(repo, pr.branch.commit)[0] for pr in built if pr.branch.commit}
    holds = set(git(repo, "diff", "--name-only", source.target, top).stdout.split())
    if not all(set(files) <= holds for files in per_pr.values()):
        return {}
    union = list(dict.fromkeys(f for files in per_pr.values() for f in files))
    git(repo, "checkout", "-q", "-f", "--detach", top)
    results = checks.run_hooks(repo, hooks, union, tools=options.tools, cache_dir=settings.cache_dir)
    if not all(c.ok for c in results):
        return {}
    where = (f"run once over the files of all {len(built)} pull requests at {top[:12]}, "
             "the commit that holds them all")
    return {name: (tuple(dataclasses.replace(c, files=tuple(f for f in c.files if f in files))
                         for c in results if set(c.files) & set(files)), where)
            for name, files in per_pr.items()}


# Module -> what importing it with every pull request applied must leave unloaded (issue 20:
# torch._dynamo costs seconds at import, and upstream keeps it out on purpose).
IMPORT_LEAVES_UNLOADED: dict[str, tuple[str, str]] = {"flashinfer-python": ("flashinfer", "torch._dynamo")}


def stack_import(
    source: _Source, top: str | None, python: str, scratch: pathlib.Path, *, simulated_gpu: bool,
) -> tuple[bool, str] | None:
    """``import <module>`` in a fresh interpreter at the commit that holds every built pull
    request: (whether it left the module it must not load unloaded, what was seen)."""
    leaves = IMPORT_LEAVES_UNLOADED.get(source.repo.project)
    if leaves is None:
        return None
    module, unloaded = leaves
    if top is None:
        return False, f"`import {module}` with every pull request applied: not run, not every patch carried"
    shown = f"`import {module}` at {top[:12]}"
    missing = _torch_import_error(python)
    if missing is not None:
        return False, f"{shown}: not run, {python} has no torch: {missing}"
    repo = source.repo.path
    git(repo, "checkout", "-q", "-f", "--detach", top)
    entry = projects.get(source.repo.project)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [*([str(_simulated_children(scratch))] if simulated_gpu else []), str(repo / entry.test_pythonpath)]))
    probe = subprocess.run([python, "-c", f"import sys, {module}; print({unloaded!r} in sys.modules)"],
                           cwd=repo, env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        return False, f"{shown} failed: {(probe.stdout + probe.stderr).strip()[-500:]}"
    if probe.stdout.strip().splitlines()[-1:] != ["False"]:
        return False, f"{shown} loads {unloaded}"
    return True, f"{shown} leaves {unloaded} unloaded" + (" (simulated GPU)" if simulated_gpu else "")


def stack_top(
    source: _Source, carried: Sequence[prbranches.CarriedPatch], prs: Sequence[PullRequest],
) -> str | None:
    """The commit that holds every built pull request: the top branch of a stacked series,
    the carried series otherwise (None where some patch did not carry)."""
    built = [pr for pr in prs if pr.branch.commit is not None]
    if not built or any(c.status in ("conflict", "pending") for c in carried):
        return None
    if source.stacked:
        return built[-1].branch.commit
    branch = "fp4graph/carried" if source.target != source.repo.base else "fp4graph/series"
    return git(source.repo.path, "rev-parse", branch).stdout.strip()


def _check_and_test(
    settings: Settings, options: UpstreamOptions, source: _Source, pr: PullRequest,
    hooks: Sequence[checks.Hook], scratch: pathlib.Path, simulated_gpu: bool,
    checked: tuple[tuple[checks.CheckResult, ...], str] | None = None,
) -> PullRequest:
    """On the pull request's own branch: the hooks over its files (unless ``checked``, the
    stack's run, passed them), its test files with and without its change."""
    branch, repo = pr.branch, source.repo.path
    if branch.commit is None or branch.parent is None:
        return pr
    files, added, removed = _diffstat(repo, branch.commit)
    results: list[checks.CheckResult] = list(checked[0]) if checked else []
    if options.run_checks and checked is None:
        results = _hooks(settings, options, source, branch.commit, branch.parent, files, hooks)
    ran, before = (tests_with_and_without(repo, branch.commit, branch.parent, source.repo.project, options,
                                          scratch, simulated_gpu) if options.run_tests else ([], []))
    return dataclasses.replace(pr, files=files, added_lines=added, removed_lines=removed,
                               checks=tuple(results), tests=tuple(ran), without_change=tuple(before),
                               checks_over=checked[1] if checked else "")


def tests_with_and_without(
    repo: pathlib.Path, commit: str, parent: str, project: str, options: UpstreamOptions,
    scratch: pathlib.Path, simulated_gpu: bool,
) -> tuple[list[TestFile], list[TestFile]]:
    """The test files ``commit`` adds or changes, run on it and on ``parent`` with only
    those files taken over (a test that passes there too shows no fix)."""
    git(repo, "checkout", "-q", "-f", "--detach", commit)
    changed = git(repo, "show", "--name-only", "--format=", commit).stdout.split()
    test_files = {f: added_tests(repo, commit, f) for f in changed if projects.get(project).test_file.match(f)}
    if not test_files:
        return [], []

    def run() -> list[TestFile]:
        return run_tests(repo, test_files, project, options.python, options.test_timeout, scratch,
                         simulated_gpu=simulated_gpu)
    ran = run()
    with files_over(repo, parent, commit, list(test_files)):
        before = run()
    return ran, before


def on_release_tree(
    settings: Settings, options: UpstreamOptions, entry: pullrequests.PullRequestSeries | None,
    series: Series, prs: Sequence[PullRequest], identity: tuple[str, str], scratch: pathlib.Path,
    simulated_gpu: bool,
) -> tuple[list[PullRequest], releasetree.ReleaseTreeRun]:
    """Each pull request checked on ``options.release_tree``'s tree (``releasetree``)."""
    assert options.release_tree is not None and entry is not None and options.repo is not None
    editable = projects.get(entry.project).editable_data

    def prepare_tree(path: pathlib.Path) -> None:
        if editable is not None:
            link_editable_data(path, editable)

    def tests(repo: pathlib.Path, commit: str, parent: str) -> tuple[list[TestFile], list[TestFile]]:
        return tests_with_and_without(repo, commit, parent, entry.project, options, scratch, simulated_gpu)

    run = releasetree.check(settings, series, options.release_tree, options.repo, entry.source.commit,
                            identity, scratch, tests, prepare_tree)
    return [dataclasses.replace(pr, release_tree=run.checks.get(pr.patch.name)) for pr in prs], run


def _template(repo: pathlib.Path, commit: str, project: str) -> tuple[str, str]:
    for name in (".github/pull_request_template.md", ".github/PULL_REQUEST_TEMPLATE.md"):
        shown = git(repo, "show", f"{commit}:{name}", check=False)
        if shown.returncode == 0:
            return shown.stdout, f"{name} at {commit[:12]}"
    known = projects.get(project)
    return known.pr_template, (f"the section headings of {known.github}'s "
                               ".github/pull_request_template.md (the tree has none)")


def prepare(settings: Settings, options: UpstreamOptions, out: pathlib.Path) -> Report:
    """Build ``out`` (replacing it): the repository, branches, format-patch files, bodies, summary."""
    projects.get(options.project)  # an unknown project fails here, naming the known ones
    identity = options.identity or user_identity(where=options.repo)
    entry = _series_entry(settings, options)
    if options.release_tree is not None and entry is None:
        raise ConfigError(f"--release-tree {options.release_tree}: checks a pull-request series; "
                          "pass --repo CLONE and no --version")
    if options.release_tree is not None and not options.run_tests:
        raise ConfigError(f"--release-tree {options.release_tree}: runs the pull requests' tests; drop --no-tests")
    simulated_gpu = (options.simulated_gpu if options.simulated_gpu is not None
                     else entry is not None and options.run_tests and not _torch_sees_a_gpu(options.python))
    with atomic_directory(out, replace=True) as staging:
        scratch = staging / ".scratch"
        scratch.mkdir()
        source = (_release_source(settings, options, staging / "repo") if entry is None
                  else _pr_series_source(settings, options, entry, staging / "repo"))
        carried = prbranches.carry(source.repo, source.series, source.target, scratch)
        branches = prbranches.build(source.repo, carried, source.target, identity, stacked=source.stacked)
        for branch in branches:
            if branch.patch.name in source.not_proposed and branch.commit is not None:
                git(source.repo.path, "branch", "-D", branch.name)
        editable = projects.get(source.repo.project).editable_data
        if editable is not None:
            link_editable_data(source.repo.path, editable)
        config, checks_source = checks.load_config(source.repo.path, source.repo.project)
        hooks = checks.hooks_for(config, source.repo.project)
        proposed = _proposed(branches, source.not_proposed)
        top = stack_top(source, carried, proposed)
        checked = stack_checks(settings, options, source, proposed, hooks, top)
        prs = [_check_and_test(settings, options, source, pr, hooks, scratch, simulated_gpu,
                               checked.get(pr.branch.name))
               for pr in proposed]
        tree: releasetree.ReleaseTreeRun | None = None
        if options.release_tree is not None:
            prs, tree = on_release_tree(settings, options, entry, source.series, prs, identity, scratch,
                                        simulated_gpu)
        built = [pr.branch.name for pr in prs if pr.branch.commit is not None]
        git(source.repo.path, "checkout", "-q", "-f", *([built[-1]] if built else ["--detach", source.target]))
        imported = (stack_import(source, top, options.python, scratch, simulated_gpu=simulated_gpu)
                    if options.run_tests else None)
        template, template_source = _template(source.repo.path, source.target, source.repo.project)
        report = Report(
            project=source.repo.project, title=source.title, base_note=source.base_note, target=source.target,
            source_note=source.repo.origin, series_dir=source.series_dir, repo=out / "repo",
            carried=tuple(carried), prs=tuple(prs), not_proposed=tuple(source.not_proposed.items()),
            checks_source=checks_source if options.run_checks else "not run (--no-checks)",
            template_source=template_source, tests_must_run=options.tests_must_run,
            simulated_gpu=simulated_gpu, stack_import=imported,
            release_tree=tree.tree if tree else "", release_tree_seconds=tree.seconds if tree else None,
        )
        write_prs(staging, report, template, bench_results(settings.repo),
                  _host_note(options.python, simulated_gpu))
        write_summary(staging, report)
        shutil.rmtree(scratch)
    return report


def test_requirements(settings: Settings, options: UpstreamOptions) -> list[str]:
    """What the tests the pull requests add need installed (nothing with ``run_tests`` off)."""
    if not options.run_tests:
        return []
    entry = _series_entry(settings, options)
    if entry is not None:
        assert options.repo is not None
        return commit_requirements(options.repo, entry.source.commit, entry.project)
    return release_requirements(settings, options.project, options.version)


def commit_requirements(repo: pathlib.Path, commit: str, project: str) -> list[str]:
    """The tests' requirements at ``commit``: the project's own test requirements and the
    tree's requirements.txt (torch left to the caller's pin)."""
    entry = projects.get(project)
    needs = list(entry.test_requirements)
    shown = git(repo, "show", f"{commit}:requirements.txt", check=False)
    for raw in shown.stdout.splitlines() if shown.returncode == 0 else []:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != "torch":
            needs.append(str(req))
    return list(dict.fromkeys(needs))


def push(report: Report, remote: str, repo: pathlib.Path | None) -> None:
    """Push every pull request's branch to ``remote`` (a URL, or a remote name of ``repo``)."""
    url = remote
    if repo is not None and not re.search(r"[:/]", remote):
        url = git(repo, "remote", "get-url", remote).stdout.strip()
    for pr in report.prs:
        if pr.branch.commit is not None:
            git(report.repo, "push", url, f"{pr.branch.name}:refs/heads/{pr.branch.name}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamResult:
    report: Report
    out: pathlib.Path
    pushed: bool = False
    push_refused: str | None = None  # why nothing was pushed although asked
    push_failure: Fp4graphError | None = None  # the push failed (``out`` is written)


def run_upstream(settings: Settings, options: UpstreamOptions) -> UpstreamResult:
    """:func:`prepare` into ``out``, then :func:`push` when asked and everything passed."""
    out = options.out
    if out is None:
        entry = _series_entry(settings, options)
        shown = (entry.series if entry is not None
                 else options.version or target_artifact(settings, options.project, None).version)
        out = settings.wheels_dir / "upstream" / f"{options.project}-{shown}"
    report = prepare(settings, options, out)
    done = UpstreamResult(report=report, out=out)
    if options.push_to is None:
        return done
    if not report.ok:
        return dataclasses.replace(done, push_refused="checks or tests failed")
    try:
        push(report, options.push_to, options.repo)
    except Fp4graphError as exc:
        return dataclasses.replace(done, push_failure=exc)
    return dataclasses.replace(done, pushed=True)
