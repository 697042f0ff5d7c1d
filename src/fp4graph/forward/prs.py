"""PR-ready branches from a series (``python -m fp4graph upstream PROJECT``).

Builds a git repository of the upstream source (a clone of ``--repo``, else one made
from the pinned sdist), applies the nearest series with ``git am -3`` (one commit per
patch, author and message from the patch), runs upstream's own checks on the touched
files and the tests the patches add, and writes, per patch (= per pull request):

    <out>/repo/                           the repository; branch fp4graph/<topic> per PR
    <out>/prs/<topic>/<NNNN-subject>.patch   ``git format-patch`` of the PR's commit
    <out>/prs/<topic>/PR.md               the PR body, on upstream's template
    <out>/summary.md, summary.json        checks, tests, branches

PRs are stacked: branch k holds patches 1..k; each PR body names the branch it is
stacked on.  Nothing is pushed unless ``--push --remote R`` is given.
"""

from __future__ import annotations

import dataclasses
import email.parser
import email.policy
import json
import os
import pathlib
import re
import subprocess
import sys
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from ..model import projects
from ..model.config import Settings
from ..model.errors import ConfigError, Fp4graphError
from ..model.files import atomic_directory
from ..model.log import log
from ..model.series import DEP3_FIELD, Patch, Series, nearest_series
from ..model.stacks import Artifact, load
from ..wheels.fetch import fetch
from ..wheels.index import core_metadata
from . import checks
from .prbranches import branch_name
from .rebase import Applied, am_series
from .sources import SourceRepo, checkout_at, files_over, git, source_repo, user_identity


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TestRun:
    path: str
    command: str
    outcome: str  # passed | failed | skipped | not-run
    output: str
    # The outcome on the commit below the patch that adds the file, with only the file
    # taken over (None: not run there); a test that passes there too shows no fix.
    without_change: str | None = None

    @property
    def shows_no_fix(self) -> bool:
        return self.outcome == "passed" and self.without_change == "passed"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PullRequest:
    patch: Patch
    branch: str
    commit: str
    stacked_on: str | None
    patch_file: pathlib.Path
    body_file: pathlib.Path


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    project: str
    version: str
    series_version: str
    origin: str
    repo: pathlib.Path
    checks_source: str
    checks: tuple[checks.CheckResult, ...]
    tests: tuple[TestRun, ...]
    prs: tuple[PullRequest, ...]
    # A test that could not run (a missing module) or skipped all it had fails too.
    tests_must_run: bool = False
    not_proposed: tuple[tuple[str, str], ...] = ()  # (patch name, why)

    @property
    def ok(self) -> bool:
        """Checks pass and no added test fails; with ``tests_must_run`` every added test also
        ran and fails on the commit below its change (else it is inconclusive)."""
        failing = ("failed", "not-run", "skipped") if self.tests_must_run else ("failed",)
        return not any(c.blocks for c in self.checks) and all(
            t.outcome not in failing and not (self.tests_must_run and t.shows_no_fix)
            for t in self.tests
        )


# --- PR bodies -------------------------------------------------------------------


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


def _issue_ref(url: str, project: str) -> str:
    match = re.fullmatch(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)", url)
    if not match:
        return url
    return f"#{match[2]}" if match[1] == projects.get(project).github else f"{match[1]}#{match[2]}"


def prose(patch: Patch) -> str:
    """The message body without DEP-3 lines (why and what, as the author wrote it)."""
    lines = [line for line in patch.body.splitlines() if not DEP3_FIELD.match(line)]
    return "\n".join(lines).strip()


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
    run that has it, labelled with the FlashInfer release, GPU and architecture they come from."""
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


def _test_plan(patch: Patch, result_tests: Sequence[TestRun], project: str) -> str:
    added = [t for t in result_tests if t.path in patch.files]
    lines = [f"- `{t.command}`: {t.outcome}{without_change_note(t)}" for t in added]
    if not added:
        lines.append("- This change adds no test file, and no test ran for it.")
    elif any(t.outcome != "not-run" for t in added):
        lines.append("- Only the test files this change adds ran, not upstream's suite.")
    return "\n".join(lines)


def without_change_note(t: TestRun) -> str:
    if t.without_change is None:
        return ""
    if t.shows_no_fix:
        return "; it passes without the change too (it does not show the fix)"
    return f"; without the change: {t.without_change}"


def _check_text(results: Sequence[checks.CheckResult], patch: Patch) -> tuple[bool, str]:
    """Whether upstream's hooks ran on this patch's files and passed, and what ran."""
    mine = [c for c in results if set(c.files) & set(patch.files)]
    if not mine:
        return False, "No pre-commit hook we run covers the files of this patch (or none ran)."
    lines = [f"- `{c.command}`: {c.status}" for c in mine]
    return not any(c.blocks for c in mine), "\n".join(lines)


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
    *,
    template: str,
    project: str,
    patch: Patch,
    stacked_on: str | None,
    check_results: Sequence[checks.CheckResult],
    tests: Sequence[TestRun],
    benches: Sequence[Mapping[str, Any]],
    base_note: str,
    beneath: Sequence[tuple[str, str]] = (),
) -> str:
    """Fill upstream's PR template from the patch's message: only what ran is ticked.
    ``beneath``: (subject, why) of the changes below this one on its branch that are not
    proposed."""
    checks_ok, check_text = _check_text(check_results, patch)
    adds_tests = any(projects.get(project).test_file.match(f) for f in patch.files)
    issues = "\n".join(f"- {_issue_ref(u, project)} ({u})" for u in issue_links(patch, project))
    files = "\n".join(f"- `{f}`" for f in patch.files)
    stack = (
        f"\n\nStacked on `{stacked_on}` (review that PR first; this one adds only its own commit)."
        if stacked_on else ""
    )
    if beneath:
        stack += ("\n\nThe branch also holds, below this commit, changes that are not proposed "
                  "here:\n" + "\n".join(f"- {subject}: {why}" for subject, why in beneath))
    bench = "\n".join(bench_lines(patch, benches))
    fill = {
        "description": f"**{patch.subject}**\n\n{prose(patch)}{stack}",
        "related issues": issues,
        "motivation": f"{prose(patch)}\n\nRelated issues:\n{issues}{stack}",
        "modifications": f"{patch.subject}\n\nFiles:\n{files}\n\n"
        f"Test plan:\n{_test_plan(patch, tests, project)}",
        "benchmark": bench,
        "reviewer notes": f"Base: {base_note}.\n\nChecks run on the touched files (not "
        f"`pre-commit run --all-files`):\n{check_text}\n\nBenchmark: {bench}",
    }
    out = []
    for heading, lines in _sections(template):
        key = heading.lower()
        body = [ln for ln in lines]
        for name, text in fill.items():
            if name in key:
                body = [ln for ln in lines if not ln.strip().startswith("<!--")]
                body = ["", text, *[ln for ln in body if ln.strip()], ""]
                break
        if "checklist" in key or "tests" in key:
            if checks_ok:
                body = _tick(body, r"format your code")
            if adds_tests:
                body = _tick(body, r"tests have been added|add unit tests")
        if "tests" in key and "test plan" not in "\n".join(body).lower():
            body = [*body, "", "Test plan:", _test_plan(patch, tests, project), ""]
        out.append("\n".join(([heading] if heading else []) + body))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def read_template(tree: pathlib.Path, project: str) -> tuple[str, str]:
    for name in (".github/pull_request_template.md", ".github/PULL_REQUEST_TEMPLATE.md"):
        path = tree / name
        if path.is_file():
            return path.read_text(encoding="utf-8"), f"{name} in the tree"
    known = projects.get(project)
    return known.pr_template, (
        f"the section headings of {known.github}'s .github/pull_request_template.md "
        "(the tree has none)"
    )


# --- tests the patches add -------------------------------------------------------


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


def run_added_tests(
    repo: SourceRepo, series: Series, python: str, timeout: int,
    applied: Sequence[Applied] = (),
) -> list[TestRun]:
    """Run each test file the series adds or changes, with ``python``, on this machine; where
    it passes and ``applied`` names the commit of the patch that adds it, again on the commit
    below that one with only the file taken over (``TestRun.without_change``)."""
    project = projects.get(repo.project)
    if project.editable_data is not None:
        link_editable_data(repo.path, project.editable_data)
    paths = sorted({f for p in series.patches for f in p.files if project.test_file.match(f)})
    runs = []
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    for rel in paths:
        if not (repo.path / rel).is_file():
            continue
        cmd = [python, rel] if project.tests_run_as == "script" else [
            python, "-m", "pytest", "-q", "-p", "no:cacheprovider", rel]
        shown = subprocess.list2cmdline(["python", *cmd[1:]])
        if probe.returncode != 0:
            runs.append(TestRun(path=rel, command=shown, outcome="not-run",
                                output=f"{python} has no torch: {probe.stderr.strip()[-300:]}"))
            continue
        log(f"test {shown}")
        outcome, output = _run_test(repo, cmd, project.test_pythonpath, python, timeout)
        without = None
        adding = [a.commit for a in applied if rel in a.patch.files]
        if outcome == "passed" and adding:
            log(f"test {shown} on the commit below its change")
            with files_over(repo.path, f"{adding[-1]}^", adding[-1], [rel]):
                without, _ = _run_test(repo, cmd, project.test_pythonpath, python, timeout)
        runs.append(TestRun(path=rel, command=shown, outcome=outcome, output=output[-4000:],
                            without_change=without))
    return runs


def _run_test(
    repo: SourceRepo, cmd: list[str], pythonpath: str, python: str, timeout: int
) -> tuple[str, str]:
    """(outcome, output) of one test command in the tree as it is checked out."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo.path / pythonpath), env.get("PYTHONPATH", "")])
    try:
        result = subprocess.run(cmd, cwd=repo.path, env=env, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return "failed", f"timed out after {timeout}s"
    output = (result.stdout + result.stderr).strip()
    missing = re.search(r"ModuleNotFoundError: No module named '([^']+)'", output)
    if result.returncode != 0 and missing:
        return "not-run", f"needs {missing[1]!r}, which {python} lacks\n" + output[-2000:]
    if result.returncode == 0:
        return ("skipped" if _all_skipped(output) else "passed"), output
    if result.returncode == 5:
        return "skipped", output
    return "failed", output


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


# --- the command ------------------------------------------------------------------


def test_requirements(settings: Settings, project: str, version: str | None) -> list[str]:
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
    pinned = [a for a in catalog.artifacts.values() if a.project == project]
    if not pinned:
        raise ConfigError(f"{settings.stacks_file}: no {project} artifact pinned")
    return max(pinned, key=lambda a: Version(a.version))


def prepare(
    settings: Settings,
    project: str,
    out: pathlib.Path,
    *,
    version: str | None = None,
    repo: pathlib.Path | None = None,
    base: str | None = None,
    run_checks: bool = True,
    tools: str = "auto",
    run_tests: bool = True,
    python: str = sys.executable,
    test_timeout: int = 900,
    tests_must_run: bool = False,
    identity: tuple[str, str] | None = None,
) -> Result:
    """Build ``out`` (replacing it): the repository, branches, patches, PR bodies, summary.
    The pull-request commits are by ``identity`` (default: the user's git identity)."""
    projects.get(project)  # an unknown project fails here, naming the known ones
    identity = identity or user_identity(where=repo)
    artifact = target_artifact(settings, project, version)
    series = nearest_series(settings.patches_dir, project, artifact.version)
    series.require_complete(topics=False)  # never a PR from a patch rebase could not carry
    with atomic_directory(out, replace=True) as staging:
        source = source_repo(settings, artifact, staging / "repo", repo=repo, base=base)
        applied = am_series(source, series, identity=identity)
        touched = sorted({f for p in series.patches for f in p.files})
        if run_checks:
            checks_source, check_results = run_upstream_checks(
                source, touched, tools=tools, cache_dir=settings.cache_dir
            )
        else:
            checks_source, check_results = "not run (--no-checks)", []
        tests = run_added_tests(source, series, python, test_timeout, applied) if run_tests else []
        template, template_source = read_template(source.path, project)
        skipped = not_proposed(settings, series)
        prs = _write_prs(staging, source, applied, skipped, template, check_results, tests,
                         bench_results(settings.repo))
        result = Result(
            project=project, version=artifact.version, series_version=series.version,
            origin=source.origin, repo=out / "repo", checks_source=checks_source,
            checks=tuple(check_results), tests=tuple(tests),
            prs=tuple(dataclasses.replace(
                pr, patch_file=out / pr.patch_file.relative_to(staging),
                body_file=out / pr.body_file.relative_to(staging),
            ) for pr in prs),
            tests_must_run=tests_must_run, not_proposed=tuple(skipped.items()),
        )
        _write_summary(staging, result, template_source)
    return result


def run_upstream_checks(
    source: SourceRepo, touched: Sequence[str], *, tools: str, cache_dir: pathlib.Path
) -> tuple[str, list[checks.CheckResult]]:
    """Upstream's hooks on the ``touched`` files; where one fails, whether it fails on
    upstream's own files too.  Returns where the hooks came from, and the results."""
    config, checks_source = checks.load_config(source.path, source.project)
    hooks = checks.hooks_for(config, source.project)
    results = checks.run_hooks(source.path, hooks, touched, tools=tools, cache_dir=cache_dir)
    if not all(c.ok for c in results):
        with checkout_at(source, source.base) as base_tree:
            results = checks.mark_upstream_failures(
                results, hooks, source.path, base_tree, tools=tools, cache_dir=cache_dir
            )
    return checks_source, results


def _write_prs(
    staging: pathlib.Path,
    source: SourceRepo,
    applied: Sequence[Applied],
    skipped: Mapping[str, str],
    template: str,
    check_results: Sequence[checks.CheckResult],
    tests: Sequence[TestRun],
    benches: Sequence[Mapping[str, Any]],
) -> list[PullRequest]:
    """A stacked branch per proposed patch (branch k holds the series up to patch k)."""
    prs = []
    previous: str | None = None
    beneath: list[tuple[str, str]] = []
    for item in applied:
        if item.patch.name in skipped:
            beneath.append((item.patch.subject, skipped[item.patch.name]))
            continue
        name = item.patch.topic
        branch = branch_name(item.patch)
        git(source.path, "branch", "-f", branch, item.commit)
        pr_dir = staging / "prs" / name
        pr_dir.mkdir(parents=True)
        made = git(source.path, "format-patch", "-1", "--no-numbered", "-o", str(pr_dir), item.commit)
        patch_file = pathlib.Path(made.stdout.strip().splitlines()[-1])
        if not patch_file.is_absolute():
            patch_file = source.path / patch_file
        body = render_body(
            template=template, project=source.project, patch=item.patch, stacked_on=previous,
            check_results=check_results, tests=tests, benches=benches,
            base_note=_base_note(source),
            beneath=beneath,
        )
        body_file = pr_dir / "PR.md"
        body_file.write_text(f"# {item.patch.subject}\n\n{body}", encoding="utf-8")
        prs.append(PullRequest(
            patch=item.patch, branch=branch, commit=item.commit, stacked_on=previous,
            patch_file=patch_file, body_file=body_file,
        ))
        previous = branch
        beneath = []
    return prs


def _base_note(source: SourceRepo) -> str:
    """The base as upstream knows it: the release's sdist or wheel, or its tag."""
    kind = source.origin.split(" ", 1)[0]
    if kind in ("sdist", "wheel"):
        return f"the {source.project} {source.version} {kind} (the release as published)"
    return f"{source.project} v{source.version} ({source.base[:12]})"


def _write_summary(staging: pathlib.Path, result: Result, template_source: str) -> None:
    data = {
        "project": result.project,
        "version": result.version,
        "series_version": result.series_version,
        "source": result.origin,
        "checks_config": result.checks_source,
        "pr_template": template_source,
        "ok": result.ok,
        "checks": [
            {"hook": c.hook, "command": c.command, "files": list(c.files), "ok": c.ok,
             "fails_upstream": c.fails_upstream, "output": c.output}
            for c in result.checks
        ],
        "tests": [dataclasses.asdict(t) for t in result.tests],
        "not_proposed": [{"patch": n, "why": w} for n, w in result.not_proposed],
        "prs": [
            {"patch": pr.patch.name, "subject": pr.patch.subject, "branch": pr.branch,
             "commit": pr.commit, "stacked_on": pr.stacked_on,
             "format_patch": str(pr.patch_file.relative_to(result.repo.parent)),
             "body": str(pr.body_file.relative_to(result.repo.parent))}
            for pr in result.prs
        ],
    }
    (staging / "summary.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    lines = [
        f"# {result.project} {result.version}: upstream pull requests",
        "",
        f"- source: {result.origin}",
        f"- series: patches/{result.project}/{result.series_version}/"
        + ("" if result.series_version == result.version else f" (carried onto {result.version})"),
        f"- checks config: {result.checks_source}",
        f"- PR template: {template_source}",
        "",
        "| PR | branch | stacked on |",
        "|---|---|---|",
        *[f"| {pr.patch.subject} | `{pr.branch}` | {f'`{pr.stacked_on}`' if pr.stacked_on else 'base'} |"
          for pr in result.prs],
        "",
        "## Not proposed",
        "",
        *[f"- {name}: {why}" for name, why in result.not_proposed],
        *(["- (none)"] if not result.not_proposed else []),
        "",
        "## Checks",
        "",
        *[f"- `{c.command}`: {c.status}" for c in result.checks],
        *(["- (none ran)"] if not result.checks else []),
        "",
        "## Tests the patches add",
        "",
        *[f"- `{t.command}`: {t.outcome}{without_change_note(t)}" for t in result.tests],
        *(["- (none)"] if not result.tests else []),
        "",
    ]
    for c in result.checks:
        if not c.ok:
            lines += [f"### {c.hook} output", "", "```", c.output, "```", ""]
    (staging / "summary.md").write_text("\n".join(lines), encoding="utf-8")


def push(result: Result, remote: str, repo: pathlib.Path | None) -> None:
    """Push every PR branch to ``remote`` (a URL, or a remote name of ``repo``)."""
    url = remote
    if repo is not None and not re.search(r"[:/]", remote):
        url = git(repo, "remote", "get-url", remote).stdout.strip()
    for pr in result.prs:
        git(result.repo, "push", url, f"{pr.branch}:refs/heads/{pr.branch}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamOptions:
    """``upstream PROJECT``: the PR branches of a series, checked, optionally pushed."""

    project: str
    version: str | None = None  # default: the newest pinned version
    repo: pathlib.Path | None = None  # a local clone of upstream (default: the pinned sdist)
    base: str | None = None  # the commit to apply the series on (default: tag v<version>)
    out: pathlib.Path | None = None  # default wheels/upstream/<project>-<version>
    run_checks: bool = True
    tools: str = "auto"
    run_tests: bool = True
    python: str = sys.executable
    tests_must_run: bool = False
    push_to: str | None = None  # push the branches there (a URL or a remote name of ``repo``)
    identity: tuple[str, str] | None = None  # the commits' author (default: the user's git identity)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamResult:
    prepared: Result
    out: pathlib.Path
    pushed: bool = False
    push_refused: str | None = None  # why nothing was pushed although asked
    push_failure: Fp4graphError | None = None  # the push failed (``out`` is written)


def run_upstream(settings: Settings, options: UpstreamOptions) -> UpstreamResult:
    """:func:`prepare` into ``out``, then :func:`push` when asked and everything passed."""
    out = options.out
    if out is None:
        shown = options.version or target_artifact(settings, options.project, None).version
        out = settings.wheels_dir / "upstream" / f"{options.project}-{shown}"
    prepared = prepare(
        settings, options.project, out, version=options.version, repo=options.repo, base=options.base,
        run_checks=options.run_checks, tools=options.tools, run_tests=options.run_tests,
        python=options.python, tests_must_run=options.tests_must_run, identity=options.identity,
    )
    done = UpstreamResult(prepared=prepared, out=out)
    if options.push_to is None:
        return done
    if not prepared.ok:
        return dataclasses.replace(done, push_refused="checks or tests failed")
    try:
        push(prepared, options.push_to, options.repo)
    except Fp4graphError as exc:
        return dataclasses.replace(done, push_failure=exc)
    return dataclasses.replace(done, pushed=True)
