"""``upstream PROJECT --repo CLONE``: pull requests from a pull-request series, on real history.

The series (``model.pullrequests``) is carried onto the clone's upstream branch
(``forward.prbranches``), one branch per pull request; then, per pull request and on its
own branch: upstream's pre-commit hooks from the tree's ``.pre-commit-config.yaml`` over
that pull request's files only, and the test files it adds or changes, run twice: on the
branch, and on the commit below it with only those test files taken over.  A test that
passes without the change does not show the fix and is flagged.  Writes:

    <out>/repo/                         the clone; branch fp4graph/<topic> per pull request
    <out>/prs/<NN>-<topic>/PR.md        the body, on upstream's template of that commit
    <out>/prs/<NN>-<topic>/*.patch      ``git format-patch`` of the pull request's commit
    <out>/summary.md, summary.json      the carry, the branches, checks, tests, flags

Nothing is pushed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..model import projects, pullrequests
from ..model.config import Settings
from ..model.errors import ConfigError
from ..model.files import atomic_directory
from ..model.log import log
from ..model.series import Patch, load_series
from . import checks, prbranches
from .prs import _issue_ref, _sections, bench_lines, issue_links, link_editable_data
from .sources import SourceRepo, checkout_at, clone, files_over, git, user_identity

DEFAULT_TIMEOUT = 900
# Loaded into the tests' pytest by name (never imported here): torch's device queries
# answered as an SM120 card, for hosts without a GPU.
SIMULATED_GPU_PLUGIN = "fp4graph.verify.pytest_simulated_gpu"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TestFile:
    path: str
    command: str
    outcome: str  # passed | failed | skipped | not-run
    output: str
    cases: Mapping[str, str] = dataclasses.field(default_factory=dict)  # test id -> outcome


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PullRequest:
    branch: prbranches.Branch
    files: tuple[str, ...]
    added_lines: int
    removed_lines: int
    checks: tuple[checks.CheckResult, ...] = ()
    tests: tuple[TestFile, ...] = ()
    without_change: tuple[TestFile, ...] = ()  # the same files on the commit below

    @property
    def patch(self) -> Patch:
        return self.branch.patch

    @property
    def test_paths(self) -> tuple[str, ...]:
        return tuple(t.path for t in self.tests)

    def passing_without_change(self) -> list[str]:
        """Test ids that pass both with and without this pull request's change."""
        before = {i: o for t in self.without_change for i, o in t.cases.items()}
        return sorted(i for t in self.tests for i, o in t.cases.items()
                      if o == "passed" and before.get(i) == "passed")

    @property
    def shows_no_fix(self) -> bool:
        """Flagged: it adds tests, yet none of them fails without its change."""
        before = {i: o for t in self.without_change for i, o in t.cases.items()}
        ran = [i for t in self.tests for i, o in t.cases.items() if o == "passed"]
        return bool(ran) and all(before.get(i) == "passed" for i in ran)

    @property
    def ok(self) -> bool:
        return self.branch.built and not any(c.blocks for c in self.checks) and all(
            t.outcome != "failed" for t in self.tests)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SeriesResult:
    project: str
    series: str
    pinned: pullrequests.UpstreamCommit
    target: str  # the commit the branches sit on
    target_ref: str
    repo: pathlib.Path
    carried: tuple[prbranches.CarriedPatch, ...]
    prs: tuple[PullRequest, ...]
    checks_source: str
    template_source: str
    tests_must_run: bool = False
    simulated_gpu: bool = False

    @property
    def ok(self) -> bool:
        if any(c.status in ("conflict", "pending") for c in self.carried):
            return False
        bad = ("failed", "not-run") if self.tests_must_run else ("failed",)
        return all(pr.branch.status in ("built", "merged") for pr in self.prs) and all(
            not any(c.blocks for c in pr.checks) and all(t.outcome not in bad for t in pr.tests)
            for pr in self.prs)


# --- what the tests need ------------------------------------------------------------


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


# --- tests ---------------------------------------------------------------------------


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


def run_tests(
    root: pathlib.Path, paths: Sequence[str], project: str, python: str, timeout: int,
    scratch: pathlib.Path, *, simulated_gpu: bool = False,
) -> list[TestFile]:
    """Each test file with pytest (or as a script), from ``root``; per-test outcomes."""
    entry = projects.get(project)
    torch_missing = _torch_import_error(python)
    runs = []
    for rel in paths:
        if not (root / rel).is_file():
            continue
        report = scratch / (re.sub(r"\W", "_", rel) + ".xml")
        report.unlink(missing_ok=True)
        if entry.tests_run_as == "script":
            cmd = [python, rel]
        else:
            plugin = ["-p", SIMULATED_GPU_PLUGIN] if simulated_gpu else []
            cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin,
                   f"--junitxml={report}", rel]
        shown = f"pytest {rel}" if entry.tests_run_as == "pytest" else f"python {rel}"
        if torch_missing is not None:
            runs.append(TestFile(path=rel, command=shown, outcome="not-run",
                                 output=f"{python} has no torch: {torch_missing}"))
            continue
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(root / entry.test_pythonpath), os.environ.get("PYTHONPATH", "")]))
        log(f"test {shown} (in {root})")
        try:
            result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                                    timeout=timeout)
        except subprocess.TimeoutExpired:
            runs.append(TestFile(path=rel, command=shown, outcome="failed",
                                 output=f"timed out after {timeout}s"))
            continue
        output = (result.stdout + result.stderr).strip()
        missing = re.search(r"ModuleNotFoundError: No module named '([^']+)'", output)
        cases = _cases(report)
        if result.returncode not in (0, 5) and missing and not cases:
            outcome = "not-run"
            output = f"needs {missing[1]!r}, which {python} lacks\n" + output[-2000:]
        elif result.returncode == 0:
            ran = [o for o in cases.values() if o != "skipped"]
            outcome = "passed" if ran or not cases else "skipped"
        elif result.returncode == 5:
            outcome = "skipped"
        else:
            outcome = "failed"
        runs.append(TestFile(path=rel, command=shown, outcome=outcome, output=output[-4000:],
                             cases=cases))
    return runs


# --- the command ---------------------------------------------------------------------


def _diffstat(repo: pathlib.Path, commit: str) -> tuple[tuple[str, ...], int, int]:
    files, added, removed = [], 0, 0
    for line in git(repo, "show", "--numstat", "--format=", commit).stdout.splitlines():
        a, r, path = line.split("\t", 2)
        files.append(path)
        added += int(a) if a.isdigit() else 0
        removed += int(r) if r.isdigit() else 0
    return tuple(files), added, removed


def _resolve_target(repo: pathlib.Path, ref: str) -> str:
    for candidate in (ref, f"origin/{ref}", f"refs/remotes/origin/{ref}"):
        found = git(repo, "rev-parse", "-q", "--verify", f"{candidate}^{{commit}}", check=False)
        if found.returncode == 0:
            return found.stdout.strip()
    raise ConfigError(f"{repo}: has no {ref!r} (nor origin/{ref}); pass --base COMMIT")


def prepare_series(
    settings: Settings,
    project: str,
    out: pathlib.Path,
    *,
    repo: pathlib.Path,
    series: str | None = None,
    base: str | None = None,
    run_checks: bool = True,
    tools: str = "auto",
    run_tests_: bool = True,
    python: str = sys.executable,
    test_timeout: int = DEFAULT_TIMEOUT,
    tests_must_run: bool = False,
    benches: Sequence[Mapping[str, Any]] = (),
    simulated_gpu: bool | None = None,
    identity: tuple[str, str] | None = None,
) -> SeriesResult:
    """Build ``out`` (replacing it) from ``project``'s pull-request series on ``repo``;
    ``simulated_gpu`` None: simulated where ``python``'s torch sees no GPU; the commits by
    ``identity`` (default: the user's git identity)."""
    identity = identity or user_identity(where=repo)
    if simulated_gpu is None:
        simulated_gpu = not _torch_sees_a_gpu(python)
    entry = pullrequests.find(settings.stacks_file, project, series)
    if entry is None:
        raise ConfigError(
            f"{settings.stacks_file}: no [[{pullrequests.TABLE}]] series for {project}"
            + (f" named {series!r}" if series else "")
        )
    loaded = load_series(settings.patches_dir, entry.project, entry.series)
    if loaded is None:
        raise ConfigError(f"{settings.patches_dir / entry.project / entry.series}: no series file")
    loaded.require_complete(topics=False)
    problems = pullrequests.dependency_problems(loaded)
    if problems:
        raise ConfigError("; ".join(problems))
    with atomic_directory(out, replace=True) as staging:
        scratch = staging / ".scratch"
        scratch.mkdir()
        source = clone(repo, staging / "repo", project=entry.project, version=entry.series,
                       base=entry.source.commit,
                       origin=f"clone of {repo} at {entry.source.ref} {entry.source.commit[:12]}")
        target = base and _resolve_target(source.path, base) or _resolve_target(source.path, entry.source.ref)
        carried = prbranches.carry(source, loaded, target, scratch)
        branches = prbranches.build(source, carried, target, identity)
        project_entry = projects.get(project)
        if project_entry.editable_data is not None:
            link_editable_data(source.path, project_entry.editable_data)
        config, checks_source = checks.load_config(source.path, project)
        hooks = checks.hooks_for(config, project)
        prs = []
        for branch in branches:
            if not branch.built:
                prs.append(PullRequest(branch=branch, files=tuple(branch.patch.files),
                                       added_lines=0, removed_lines=0))
                continue
            assert branch.commit is not None and branch.parent is not None
            files, added, removed = _diffstat(source.path, branch.commit)
            git(source.path, "checkout", "-q", "-f", "--detach", branch.commit)
            results: list[checks.CheckResult] = []
            if run_checks:
                results = checks.run_hooks(source.path, hooks, files, tools=tools,
                                           cache_dir=settings.cache_dir)
                if not all(c.ok for c in results):
                    with checkout_at(source, branch.parent) as below:
                        results = checks.mark_upstream_failures(
                            results, hooks, source.path, below, tools=tools,
                            cache_dir=settings.cache_dir)
            tests = [f for f in files if project_entry.test_file.match(f)]
            ran: list[TestFile] = []
            before: list[TestFile] = []
            if run_tests_ and tests:
                ran = run_tests(source.path, tests, project, python, test_timeout, scratch,
                                simulated_gpu=simulated_gpu)
                with files_over(source.path, branch.parent, branch.commit, tests):
                    before = run_tests(source.path, tests, project, python, test_timeout, scratch,
                                       simulated_gpu=simulated_gpu)
            prs.append(PullRequest(branch=branch, files=files, added_lines=added,
                                   removed_lines=removed, checks=tuple(results),
                                   tests=tuple(ran), without_change=tuple(before)))
        git(source.path, "checkout", "-q", "-f", "--detach", target)
        template, template_source = _template(source.path, target, project)
        result = SeriesResult(
            project=entry.project, series=entry.series, pinned=entry.source, target=target,
            target_ref=base or entry.source.ref, repo=out / "repo", carried=tuple(carried),
            prs=tuple(prs), checks_source=checks_source, template_source=template_source,
            tests_must_run=tests_must_run, simulated_gpu=simulated_gpu,
        )
        _write_prs(staging, source, result, template, benches, python)
        _write_summary(staging, result)
        (scratch / "todo").unlink(missing_ok=True)
        for leftover in scratch.iterdir():
            leftover.unlink()
        scratch.rmdir()
    return result


def _template(repo: pathlib.Path, commit: str, project: str) -> tuple[str, str]:
    for name in (".github/pull_request_template.md", ".github/PULL_REQUEST_TEMPLATE.md"):
        shown = git(repo, "show", f"{commit}:{name}", check=False)
        if shown.returncode == 0:
            return shown.stdout, f"{name} at {commit[:12]}"
    return projects.get(project).pr_template, "fp4graph's copy of the template's headings"


# --- bodies --------------------------------------------------------------------------


def _check_lines(pr: PullRequest) -> list[str]:
    if not pr.checks:
        return ["- No pre-commit hook of this commit's config selects this pull request's files."]
    return [f"- `{c.command}`: {c.status}" for c in pr.checks]


def _test_lines(pr: PullRequest, python_note: str) -> list[str]:
    if not pr.tests:
        return ["- This pull request adds or changes no test file."]
    lines = [f"Run on {python_note}; only the test files this pull request adds or changes, "
             "not upstream's suite:", ""]
    before = {t.path: t for t in pr.without_change}
    for t in pr.tests:
        counts = _counts(t)
        b = before.get(t.path)
        lines.append(f"- `{t.command}`: {t.outcome} ({counts}); on the commit below this change: "
                     f"{b.outcome + ' (' + _counts(b) + ')' if b else 'not run'}")
    flagged = pr.passing_without_change()
    if flagged:
        lines += ["", "Tests that pass without this change as well (they do not show the fix):",
                  *[f"- `{i}`" for i in flagged]]
    skipped = sorted(i for t in pr.tests for i, o in t.cases.items() if o == "skipped")
    if skipped:
        lines += ["", f"Skipped here ({len(skipped)}; they need a GPU this host does not have): "
                  + ", ".join(f"`{i.split('::')[-1]}`" for i in skipped[:8])
                  + (" ..." if len(skipped) > 8 else "")]
    return lines


def _counts(t: TestFile) -> str:
    tally: dict[str, int] = {}
    for outcome in t.cases.values():
        tally[outcome] = tally.get(outcome, 0) + 1
    return ", ".join(f"{n} {o}" for o, n in sorted(tally.items())) or t.outcome


def render_body(
    template: str, project: str, pr: PullRequest, benches: Sequence[Mapping[str, Any]],
    python_note: str, base_note: str, subjects: Mapping[str, str],
) -> str:
    """Upstream's template filled for one pull request: only what ran is ticked.
    ``subjects``: topic -> subject of the other pull requests (named by their titles)."""
    patch = pr.patch
    issues = "\n".join(f"- {_issue_ref(u, project)}" for u in issue_links(patch, project))
    stack = ""
    below = [f"\"{subjects.get(t, t)}\"" for t in pr.branch.needs]
    if pr.branch.stacked_on and below:
        stack = (f"\n\nStacked on {below[-1]} (review that pull request first; this one adds "
                 "one commit).")
    elif below:
        stack = "\n\nNeeds " + ", ".join(below) + " below it."
    pending = patch.fields.get("Pending", "").strip()
    pending_note = f"**Draft, pending {pending}**\n\n" if pending else ""
    fill = {
        "description": f"{pending_note}{prbranches.upstream_prose(patch)}{stack}",
        "related issues": issues,
        "reviewer notes": "\n".join([
            f"Base: {base_note}. Files: {len(pr.files)}, +{pr.added_lines} / -{pr.removed_lines}.",
            "", "Checks on this pull request's files (upstream's hooks at their pinned versions):",
            *_check_lines(pr), "", "Tests:", *_test_lines(pr, python_note), "",
            "Benchmark:", *bench_lines(patch, benches),
        ]),
    }
    checks_passed = bool(pr.checks) and not any(c.blocks for c in pr.checks)
    out = []
    for heading, lines in _sections(template):
        key = heading.lower()
        body = [ln for ln in lines if not ln.strip().startswith("<!--")]
        for name, text in fill.items():
            if name in key:
                body = ["", text, *[ln for ln in body if ln.strip()], ""]
                break
        if "tests" in key:
            if pr.tests:
                body = _tick(body, r"tests have been added")
        if "pre-commit" in key and checks_passed:
            body = [*body, "", "Not `pre-commit run --all-files`: the hooks ran on this pull "
                    "request's files only (Reviewer Notes)."]
        out.append("\n".join(([heading] if heading else []) + body))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def _tick(lines: list[str], pattern: str) -> list[str]:
    return [re.sub(r"^- \[ \]", "- [x]", ln) if re.search(pattern, ln, re.I) else ln for ln in lines]


def _python_note(python: str) -> str:
    found = subprocess.run(
        [python, "-c", "import torch, platform; print(torch.__version__, platform.python_version(), "
         "torch.cuda.is_available())"], capture_output=True, text=True)
    if found.returncode != 0:
        return "this host"
    torch_v, py_v, cuda = found.stdout.split()
    gpu = "a GPU" if cuda == "True" else "no GPU"
    return f"a host with {gpu} (torch {torch_v}, Python {py_v})"


def _write_prs(
    staging: pathlib.Path, source: SourceRepo, result: SeriesResult, template: str,
    benches: Sequence[Mapping[str, Any]], python: str,
) -> None:
    python_note = _python_note(python)
    subjects = {t: pr.patch.subject for pr in result.prs for t in pr.patch.topics}
    if result.simulated_gpu:
        python_note += (", under a simulated GPU: torch's device queries answered as an SM120 "
                        "card by a test plugin, no kernel runs (simulation)")
    for number, pr in enumerate(result.prs, 1):
        if not pr.branch.built:
            continue
        assert pr.branch.commit is not None
        pr_dir = staging / "prs" / f"{number:02d}-{pr.patch.topic}"
        pr_dir.mkdir(parents=True)
        git(source.path, "format-patch", "-1", "--no-numbered", "-o", str(pr_dir.resolve()),
            pr.branch.commit)
        base_note = f"{result.target_ref} {result.target[:12]}" + (
            f" + {len(pr.branch.needs)} pull request(s) below it" if pr.branch.needs else "")
        body = render_body(template, result.project, pr, benches, python_note, base_note, subjects)
        (pr_dir / "PR.md").write_text(f"# {pr.patch.subject}\n\n{body}", encoding="utf-8")


def summary_data(result: SeriesResult) -> dict[str, Any]:
    return {
        "project": result.project,
        "series": result.series,
        "pinned": dataclasses.asdict(result.pinned),
        "target": {"ref": result.target_ref, "commit": result.target},
        "checks_config": result.checks_source,
        "pr_template": result.template_source,
        "ok": result.ok,
        "carry": [{"patch": c.patch.name, "status": c.status, "detail": c.detail}
                  for c in result.carried],
        "prs": [{
            "patch": pr.patch.name, "topic": pr.patch.topic, "subject": pr.patch.subject,
            "branch": pr.branch.name, "status": pr.branch.status, "detail": pr.branch.detail,
            "pending": pr.patch.fields.get("Pending", "").strip() or None,
            "commit": pr.branch.commit, "stacked_on": pr.branch.stacked_on,
            "needs": list(pr.branch.needs), "files": list(pr.files),
            "added": pr.added_lines, "removed": pr.removed_lines,
            "closes": re.findall(r"(?:Closes|Fixes) (\S*#\d+)", prbranches.upstream_prose(pr.patch)),
            "checks": [{"hook": c.hook, "command": c.command, "status": c.status, "output": c.output}
                       for c in pr.checks],
            "tests": [dataclasses.asdict(t) for t in pr.tests],
            "without_change": [dataclasses.asdict(t) for t in pr.without_change],
            "passing_without_change": pr.passing_without_change(),
            "flagged_no_test_fails_without_change": pr.shows_no_fix,
        } for pr in result.prs],
    }


def _write_summary(staging: pathlib.Path, result: SeriesResult) -> None:
    (staging / "summary.json").write_text(json.dumps(summary_data(result), indent=2) + "\n",
                                          encoding="utf-8")
    lines = [
        f"# {result.project}: pull requests from {result.series}",
        "",
        f"- series: patches/{result.project}/{result.series}/, cut on {result.pinned.repo} "
        f"{result.pinned.ref} {result.pinned.commit}",
        f"- branches on: {result.target_ref} {result.target}"
        + ("" if result.target == result.pinned.commit else " (carried from the pinned commit)"),
        f"- checks: {result.checks_source}; PR template: {result.template_source}",
        "",
        "| # | pull request | +/- | branch | on | status | tests (with / without the change) |",
        "|---|---|---|---|---|---|---|",
    ]
    for number, pr in enumerate(result.prs, 1):
        on = pr.branch.stacked_on or (" + ".join(pr.branch.needs) if pr.branch.needs else "upstream")
        tests = "; ".join(
            f"`{t.path}` {t.outcome} / "
            f"{next((b.outcome for b in pr.without_change if b.path == t.path), 'not run')}"
            for t in pr.tests) or "none"
        flag = ""
        if pr.shows_no_fix:
            flag = " **FLAGGED: no test fails without the change**"
        elif pr.passing_without_change():
            flag = (f" ({len(pr.passing_without_change())} case(s) pass without the change too: "
                    "regression guards)")
        pending = pr.patch.fields.get("Pending", "").strip()
        status = pr.branch.status + (f", **pending {pending}**" if pending else "")
        lines.append(f"| {number} | {pr.patch.subject} | +{pr.added_lines}/-{pr.removed_lines} | "
                     f"`{pr.branch.name}` | {on} | {status} | {tests}{flag} |")
    lines += ["", "## Carry", ""]
    lines += [f"- {c.patch.name}: {c.status} ({c.detail})" for c in result.carried]
    lines += ["", "## Checks", ""]
    for number, pr in enumerate(result.prs, 1):
        for c in pr.checks:
            lines.append(f"- #{number} `{c.command}`: {c.status}")
            if not c.ok:
                lines += ["", "```", c.output[-3000:], "```", ""]
    (staging / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
