"""Pull requests as a reviewer reads them: one body per pull request, on upstream's template,
and one summary, for a release series and a pull-request series alike.

A body states only what ran, each thing under its own name: the tests the change adds (never
upstream's suite: its box stays unticked), upstream's hooks on the change's files (not
``pre-commit run --all-files``), a simulated GPU as simulation, and the numbers of the
benchmark section the patch names (``Bench:``), labelled with release, GPU and architecture.
It names none of our files, branches or project.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..model import projects
from ..model.errors import Fp4graphError
from ..model.series import DEP3_FIELD, Patch
from . import checks, prbranches
from .sources import git


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TestFile:
    path: str
    command: str
    outcome: str  # passed | failed | skipped | not-run
    output: str
    cases: Mapping[str, str] = dataclasses.field(default_factory=dict)  # test id -> outcome


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ReleaseTreeCheck:
    """A pull request on a release's tree (``releasetree``): applied at zero fuzz, as its
    own patch or as the re-cut kept for that release, its test files run with and without it."""

    release: str  # "flashinfer-python 0.7.4"
    recut: bool  # applied as the re-cut for the release (its code differs), not as the patch itself
    status: str  # passed | does-not-apply | no-test | not-run | fails-with | passes-without
    detail: str
    tests: tuple[TestFile, ...] = ()
    without_change: tuple[TestFile, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "passed"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PullRequest:
    branch: prbranches.Branch
    files: tuple[str, ...] = ()
    added_lines: int = 0
    removed_lines: int = 0
    checks: tuple[checks.CheckResult, ...] = ()
    tests: tuple[TestFile, ...] = ()
    without_change: tuple[TestFile, ...] = ()  # the same files on the commit below
    beneath: tuple[tuple[str, str], ...] = ()  # (subject, why) not proposed, below it on its branch
    checks_over: str = ""  # where the hooks ran, when not on this branch alone (once over the stack)
    release_tree: ReleaseTreeCheck | None = None  # asked for (--release-tree): the check there

    @property
    def patch(self) -> Patch:
        return self.branch.patch

    def outcome_without(self, path: str) -> str:
        return next((b.outcome for b in self.without_change if b.path == path), "not run")

    def passing_without_change(self) -> list[str]:
        """Test ids (or files, where a file reports no cases) that pass with and without
        the change."""
        before = {i: o for t in self.without_change for i, o in t.cases.items()}
        cases = [i for t in self.tests for i, o in t.cases.items() if o == "passed" and before.get(i) == "passed"]
        files = [t.path for t in self.tests
                 if not t.cases and t.outcome == "passed" and self.outcome_without(t.path) == "passed"]
        return sorted(cases + files)

    @property
    def inconclusive(self) -> list[str]:
        """The test files that pass without the change too (they show no fix)."""
        return [t.path for t in self.tests if t.outcome == "passed" and self.outcome_without(t.path) == "passed"]

    @property
    def shows_no_fix(self) -> bool:
        """Flagged: it adds tests, yet none of them fails without its change."""
        ran = [t for t in self.tests if t.outcome == "passed"]
        return bool(ran) and len(self.inconclusive) == len(ran)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    project: str
    title: str  # "sglang 0.5.11" or "flashinfer-python main-fb28d72"
    base_note: str  # the base as upstream names it, for the bodies
    target: str  # the commit the branches sit on
    source_note: str  # where the tree came from, for the summary
    series_dir: str
    repo: pathlib.Path
    carried: tuple[prbranches.CarriedPatch, ...]
    prs: tuple[PullRequest, ...]
    not_proposed: tuple[tuple[str, str], ...] = ()  # (patch name, why)
    checks_source: str = "not run"
    template_source: str = ""
    tests_must_run: bool = False
    simulated_gpu: bool = False
    # The import of the project with every pull request applied: (ok, what it found).
    stack_import: tuple[bool, str] | None = None
    # The release tree the pull requests were also checked on (what it is made of), or "".
    release_tree: str = ""
    release_tree_seconds: float | None = None

    @property
    def ok(self) -> bool:
        """Everything carried and built; no hook blocks; no added test fails; with
        ``tests_must_run`` every added test also ran and fails without its change; the
        import with all of them applied loads nothing it must not; on a release tree, when
        asked, every pull request applies and its test fails without it, passes with it."""
        if any(c.status in ("conflict", "pending") for c in self.carried):
            return False
        if self.release_tree and not all(pr.release_tree is not None and pr.release_tree.ok
                                         for pr in self.prs):
            return False
        if self.stack_import is not None and not self.stack_import[0]:
            return False
        bad = ("failed", "not-run", "skipped") if self.tests_must_run else ("failed",)
        return all(
            pr.branch.status in ("built", "merged") and not any(c.blocks for c in pr.checks)
            and all(t.outcome not in bad for t in pr.tests)
            and not (self.tests_must_run and pr.inconclusive)
            for pr in self.prs)


# --- bodies ----------------------------------------------------------------------------

# What a body must never say (issue 30): claims of runs that did not happen, our benchmark
# files, our project's names and files, checklist boxes ticked for what did not run.
UNCLAIMED = (
    "Downstream:", "runs SGLang with piecewise CUDA graphs", "Carried in", "in fp4graph",
    "fp4graph/", "fp4graph benchmark", "+fp4graph", "fp4graph runs",
    "```json", "benchmarks/results", "patches/", ".patch", "stacks.toml",
    "- [x] All tests are passing", "- [x] I have installed the hooks",
    "- [x] I have run the hooks manually", "Closes #2999",
)


def unclaimed(body: str) -> list[str]:
    """The strings of ``UNCLAIMED`` that ``body`` holds."""
    return [s for s in UNCLAIMED if s in body]


def issue_links(patch: Patch, project: str) -> list[str]:
    """Every Bug*: URL in the patch message, then the project's standing issues."""
    urls: list[str] = []
    for line in patch.body.splitlines():
        match = DEP3_FIELD.match(line)
        if match and match["name"].startswith("Bug"):
            urls.extend(match["value"].split())
    for url in projects.get(project).linked_issues:
        if url not in urls:
            urls.append(url)
    return urls


def issue_ref(url: str, project: str) -> str:
    match = re.fullmatch(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", url)
    if not match:
        return url
    return f"#{match[2]}" if match[1] == projects.get(project).github else f"{match[1]}#{match[2]}"


def bench_results(repo_root: pathlib.Path) -> list[dict[str, Any]]:
    """Every results JSON of the benchmarks, newest run (``meta.date``) first."""
    found = []
    for path in sorted(repo_root.glob("benchmarks/results/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            found.append(data)
    return sorted(found, key=lambda d: str(d.get("meta", {}).get("date", "")), reverse=True)


def bench_lines(patch: Patch, benches: Sequence[Mapping[str, Any]]) -> list[str]:
    """The numbers of the benchmark section the patch names (``Bench:``), from the newest
    run that has it, labelled with the FlashInfer release, GPU and architecture."""
    section = patch.fields.get("Bench", "").strip()
    if not section:
        return ["No benchmark: this change makes no performance claim."]
    data = next((b for b in benches if section in b), None)
    if data is None:
        return [f"Not measured yet: the `{section}` benchmark has no results."]
    meta = data.get("meta", {})
    release = str(meta.get("pristine") or str(meta.get("flashinfer", "?")).split("+")[0])
    arch = f"SM{meta.get('capability', '?')}"
    lines = [f"FlashInfer {release} on {meta.get('gpu', '?')} ({arch}), torch {meta.get('torch', '?')}: "
             "the release against the release with this change."]
    if str(meta.get("capability", "")).startswith("9"):
        lines.append(f"These are {arch} host-overhead results: FlashInfer's fp4 kernels are compiled "
                     "out below SM100, so the figures are the wrappers' host cost and CUDA-graph "
                     "replay, not fp4 math. No SM100/SM120 run.")
    if section == "peers":
        lines += _peers_table(data["peers"])
    return lines


def _peers_table(peers: Mapping[str, Any]) -> list[str]:
    trace = peers.get("trace_32_layers", {})
    lines = ["", "| design | eager us/call (M=" + "/".join(str(r["M"]) for r in peers["rows"])
             + ") | / upstream | Dynamo fullgraph trace, 32 layers |", "|---|---|---|---|"]
    for name, desc in peers["designs"].items():
        if name == "pristine_b":
            continue
        us = " / ".join(f"{r['us'][name]:.1f}" for r in peers["rows"])
        ratio = " / ".join("1" if name == "pristine" else f"{r['ratio_to_pristine'][name]['median']:.3f}"
                           for r in peers["rows"])
        t = trace.get(name, {})
        traced = f"{t['seconds']:.2f} s" if "seconds" in t else f"fails ({t.get('error', '?')[:60]})"
        shown = re.sub(r"\s*\(the series\)", " (this change)", desc)
        lines.append(f"| {shown} | {us} | {ratio} | {traced} |")
    return lines


def _counts(t: TestFile) -> str:
    tally: dict[str, int] = {}
    for outcome in t.cases.values():
        tally[outcome] = tally.get(outcome, 0) + 1
    return ", ".join(f"{n} {o}" for o, n in sorted(tally.items())) or t.outcome


def _release_tree_lines(pr: PullRequest, tree: str) -> list[str]:
    """What ran on the release tree, where it ran and passed (a failed check fails the run)."""
    check = pr.release_tree
    if check is None or not check.ok:
        return []
    release = check.release.split(" ", 1)[-1]
    how = f"as re-cut for {release}'s code" if check.recut else "this same commit"
    return ["", f"Also checked on the {release} release tree ({tree}), {how}: "
            + "; ".join(f"`{t.command}` fails without the change ({_counts(b)}) and passes with it ({_counts(t)})"
                        for t, b in zip(check.tests, check.without_change, strict=False)) + "."]


def _test_lines(pr: PullRequest, host: str, report_tree: str = "") -> list[str]:
    if not pr.tests:
        return ["- This pull request adds or changes no test file; no test ran for it."]
    lines = [f"Run on {host}; only the test files this pull request adds or changes, "
             "not upstream's suite:", ""]
    before = {t.path: t for t in pr.without_change}
    for t in pr.tests:
        b = before.get(t.path)
        lines.append(f"- `{t.command}`: {t.outcome} ({_counts(t)}); without the change: "
                     f"{b.outcome + ' (' + _counts(b) + ')' if b else 'not run'}")
    flagged = pr.passing_without_change()
    if flagged:
        lines += ["", "Tests that pass without this change as well (they do not show the fix):",
                  *[f"- `{i}`" for i in flagged]]
    lines += _release_tree_lines(pr, report_tree)
    skipped = sorted(i for t in pr.tests for i, o in t.cases.items() if o == "skipped")
    if skipped:
        lines += ["", f"Skipped here ({len(skipped)}; they need a GPU this host does not have): "
                  + ", ".join(f"`{i.split('::')[-1]}`" for i in skipped[:8])
                  + (" ..." if len(skipped) > 8 else "")]
    return lines


def _tree_for_body(tree: str) -> str:
    """The release tree as a body names it: from "<project> <version>: " on, our words only."""
    return tree.split(": ", 1)[-1]


def _check_lines(pr: PullRequest) -> list[str]:
    if not pr.checks:
        return ["- No pre-commit hook ran on this pull request's files."]
    return [f"- `{c.hook}` on {len(c.files)} file(s): {c.status}" for c in pr.checks]


def _sections(template: str) -> list[tuple[str, list[str]]]:
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line in template.splitlines():
        if line.startswith("## "):
            sections.append((line, []))
        else:
            sections[-1][1].append(line)
    return sections


def _tick(lines: list[str], pattern: str) -> list[str]:
    return [re.sub(r"^- \[ \]", "- [x]", ln) if re.search(pattern, ln, re.I) else ln for ln in lines]


def render_body(
    template: str, report: Report, pr: PullRequest, benches: Sequence[Mapping[str, Any]], host: str,
) -> str:
    """Upstream's template filled for one pull request: only what ran is ticked."""
    patch = pr.patch
    subjects = {t: p.patch.subject for p in report.prs for t in p.patch.topics}
    issues = "\n".join(f"- {issue_ref(u, report.project)}" for u in issue_links(patch, report.project))
    below = [f"\"{subjects.get(t, t)}\"" for t in pr.branch.needs if t in subjects]
    stack = ""
    if pr.branch.stacked_on and below:
        stack = f"\n\nStacked on {below[-1]} (review that pull request first; this one adds one commit)."
    elif below:
        stack = "\n\nNeeds " + ", ".join(below) + " below it."
    if pr.beneath:
        stack += ("\n\nThe branch also holds, below this commit, changes that are not proposed "
                  "here:\n" + "\n".join(f"- {subject}: {why}" for subject, why in pr.beneath))
    pending = patch.fields.get("Pending", "").strip()
    prose = ("**Draft, pending " + pending + "**\n\n" if pending else "") + prbranches.upstream_prose(patch)
    bench = bench_lines(patch, benches)
    notes = "\n".join([
        f"Base: {report.base_note}. Files: {len(pr.files)}, +{pr.added_lines} / -{pr.removed_lines}.",
        "", "Upstream's pre-commit hooks (at their pinned versions) on this pull request's files"
        + (f" ({pr.checks_over})" if pr.checks_over else "") + ":",
        *_check_lines(pr), "", "Tests:", *_test_lines(pr, host, _tree_for_body(report.release_tree))])
    files = "\n".join(f"- `{f}`" for f in pr.files)
    fill = {
        "description": f"{prose}{stack}",
        "motivation": f"{prose}\n\nRelated issues:\n{issues}{stack}",
        "related issues": issues,
        "modifications": f"Files:\n{files}\n\n{notes}",
        "benchmark": "\n".join(bench),
        "reviewer notes": notes + "\n\nBenchmark:\n" + "\n".join(bench),
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
        if pr.tests:
            body = _tick(body, r"tests have been added|add unit tests")
        if checks_passed:
            body = _tick(body, r"format your code")
        out.append("\n".join(([heading] if heading else []) + body))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def write_prs(
    staging: pathlib.Path, report: Report, template: str, benches: Sequence[Mapping[str, Any]], host: str
) -> None:
    """Per built pull request: ``prs/NN-<topic>/``, its ``git format-patch`` and PR.md."""
    for number, pr in enumerate(report.prs, 1):
        if pr.branch.commit is None:
            continue
        pr_dir = staging / "prs" / f"{number:02d}-{pr.patch.topic}"
        pr_dir.mkdir(parents=True)
        git(staging / "repo", "format-patch", "-1", "--no-numbered", "-o", str(pr_dir.resolve()),
            pr.branch.commit)
        body = render_body(template, report, pr, benches, host)
        found = unclaimed(body)
        if found:
            raise Fp4graphError(f"{pr.patch.path}: the pull request body would say {found} "
                                "(a claim of what did not run, or a name of this project's): "
                                "reword the patch message")
        (pr_dir / "PR.md").write_text(f"# {pr.patch.subject}\n\n{body}", encoding="utf-8")


def summary_data(report: Report) -> dict[str, Any]:
    return {
        "project": report.project, "title": report.title, "source": report.source_note,
        "base": report.base_note, "checks_config": report.checks_source,
        "pr_template": report.template_source, "simulated_gpu": report.simulated_gpu, "ok": report.ok,
        "stack_import": None if report.stack_import is None else {
            "ok": report.stack_import[0], "found": report.stack_import[1]},
        "carry": [{"patch": c.patch.name, "status": c.status, "detail": c.detail} for c in report.carried],
        "not_proposed": [{"patch": n, "why": w} for n, w in report.not_proposed],
        "prs": [{
            "patch": pr.patch.name, "topic": pr.patch.topic, "subject": pr.patch.subject,
            "branch": pr.branch.name, "status": pr.branch.status, "detail": pr.branch.detail,
            "pending": pr.patch.fields.get("Pending", "").strip() or None,
            "commit": pr.branch.commit, "stacked_on": pr.branch.stacked_on,
            "needs": list(pr.branch.needs), "beneath": [s for s, _ in pr.beneath],
            "files": list(pr.files), "added": pr.added_lines, "removed": pr.removed_lines,
            "refs": re.findall(r"(?:Closes|Fixes|Refs) (\S*#\d+)", prbranches.upstream_prose(pr.patch)),
            "checks": [{"hook": c.hook, "command": c.command, "status": c.status, "output": c.output}
                       for c in pr.checks],
            "tests": [dataclasses.asdict(t) for t in pr.tests],
            "without_change": [dataclasses.asdict(t) for t in pr.without_change],
            "passing_without_change": pr.passing_without_change(),
            "flagged_no_test_fails_without_change": pr.shows_no_fix,
            "release_tree": None if pr.release_tree is None else {
                "release": pr.release_tree.release, "recut": pr.release_tree.recut,
                "status": pr.release_tree.status, "detail": pr.release_tree.detail,
                "tests": [dataclasses.asdict(t) for t in pr.release_tree.tests],
                "without_change": [dataclasses.asdict(t) for t in pr.release_tree.without_change]},
        } for pr in report.prs],
        "release_tree": report.release_tree or None, "release_tree_seconds": report.release_tree_seconds,
    }


def write_summary(staging: pathlib.Path, report: Report) -> None:
    (staging / "summary.json").write_text(json.dumps(summary_data(report), indent=2) + "\n",
                                          encoding="utf-8")
    lines = [
        f"# {report.title}: upstream pull requests", "",
        f"- series: {report.series_dir}", f"- source: {report.source_note}",
        f"- branches on: {report.base_note}",
        f"- checks: {report.checks_source}; PR template: {report.template_source}", "",
        "| # | pull request | +/- | branch | on | status | tests (with / without the change) |",
        "|---|---|---|---|---|---|---|",
    ]
    for number, pr in enumerate(report.prs, 1):
        on = pr.branch.stacked_on or (" + ".join(pr.branch.needs) if pr.branch.needs else "upstream")
        tests = "; ".join(f"`{t.path}` {t.outcome} / {pr.outcome_without(t.path)}" for t in pr.tests) or "none"
        flag = ""
        if pr.shows_no_fix:
            flag = " **FLAGGED: no test fails without the change**"
        elif pr.inconclusive:
            flag = " (" + ", ".join(pr.inconclusive) + ": passes without the change too)"
        pending = pr.patch.fields.get("Pending", "").strip()
        status = pr.branch.status + (f", **pending {pending}**" if pending else "")
        lines.append(f"| {number} | {pr.patch.subject} | +{pr.added_lines}/-{pr.removed_lines} | "
                     f"`{pr.branch.name}` | {on} | {status} | {tests}{flag} |")
    if not report.prs:
        lines.append("| - | no pull request: every patch is under Not proposed | | | | | |")
    if report.stack_import is not None:
        lines += ["", f"- with every pull request applied: {report.stack_import[1]}"]
    if report.release_tree:
        took = f" ({report.release_tree_seconds:.0f} s)" if report.release_tree_seconds is not None else ""
        lines += ["", f"## Release tree: {report.release_tree}{took}", ""]
        for number, pr in enumerate(report.prs, 1):
            rt = pr.release_tree
            lines.append(f"- #{number} {pr.patch.subject}: " + ("not checked" if rt is None else
                         f"{'PASSED' if rt.ok else 'FAILED ' + rt.status}"
                         f"{' (re-cut for the release)' if rt.recut else ''}: {rt.detail}"))
    lines += ["", "## Not proposed", "", *[f"- {name}: {why}" for name, why in report.not_proposed]]
    lines += [] if report.not_proposed else ["- (none)"]
    lines += ["", "## Carry", "", *[f"- {c.patch.name}: {c.status} ({c.detail})" for c in report.carried]]
    lines += ["", "## Checks", ""]
    for number, pr in enumerate(report.prs, 1):
        for c in pr.checks:
            lines.append(f"- #{number} `{c.command}`: {c.status}")
            if not c.ok:
                lines += ["", "```", c.output[-3000:], "```", ""]
    (staging / "summary.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
