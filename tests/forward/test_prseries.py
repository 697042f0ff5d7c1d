"""forward.prs / prbranches: pull requests from a pull-request series, on real history.

A fixture upstream repository (three commits on main, the last one newer than the
series' pinned commit) and a three-patch series cut on the pinned commit: a fix with a
test that fails without it, a follow-up that declares it on ``Depends-On:``, and an
independent change whose test passes without it (flagged).  Plain git and pytest, no
network.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

import pytest

from fp4graph import cli
from fp4graph.forward import prreport, prs, releasetree
from fp4graph.forward.sources import git
from fp4graph.model import pullrequests
from fp4graph.model.config import Settings
from fp4graph.model.errors import ConfigError, Fp4graphError
from fp4graph.model.series import load_series
from fp4graph.wheels.lint import lint
from harness.checkout import upstream_history

from .conftest import assert_claims_only_what_ran

FI = "flashinfer-python"
CALC = "flashinfer/calc.py"
CALC_V1 = "def scale(x):\n    return x * 3  # wrong: should double\n\n\ndef offset(x):\n    return x\n"
NOTES = "flashinfer/notes.py"
TEMPLATE = (
    "## 📌 Description\n\n<!-- What does this PR do? -->\n\n## 🔍 Related Issues\n\n"
    "## 🚀 Pull Request Checklist\n\n### ✅ Pre-commit Checks\n\n"
    "- [ ] I have installed the hooks with `pre-commit install`.\n"
    "- [ ] I have run the hooks manually with `pre-commit run --all-files` and fixed any "
    "reported issues.\n\n## 🧪 Tests\n\n- [ ] Tests have been added or updated as needed.\n"
    "- [ ] All tests are passing (`unittest`, etc.).\n\n## Reviewer Notes\n"
)
FIX_TEST = "from flashinfer.calc import scale\n\n\ndef test_scale_doubles():\n    assert scale(2) == 4\n"
FOLLOW_TEST = ("from flashinfer.calc import offset, scale\n\n\n"
               "def test_offset_after_scale():\n    assert offset(scale(1)) == 3\n")
GUARD_TEST = "from flashinfer.notes import NOTE\n\n\ndef test_note_is_text():\n    assert isinstance(NOTE, str)\n"


def _patch(work: pathlib.Path, files: dict[str, str], subject: str, fields: dict[str, str]) -> str:
    """One ``git format-patch`` file: ``files`` written in ``work`` and committed."""
    for path, text in files.items():
        (work / path).parent.mkdir(parents=True, exist_ok=True)
        (work / path).write_text(text)
    git(work, "add", "-A")
    body = "Why and what.\n\nRepro:\n\n    python -c 'from flashinfer.calc import scale'\n\n"
    header = "".join(f"{k}: {v}\n" for k, v in {
        "Description": subject, **fields, "Origin": "fp4graph",
        "Bug": "https://github.com/flashinfer-ai/flashinfer/issues/2999",
        "Forwarded": "not-yet", "Applied-Upstream": "no", "Last-Update": "2026-12-01",
    }.items())
    git(work, "commit", "-q", "-m", f"{subject}\n\n{body}{header}")
    return git(work, "format-patch", "-1", "--stdout", "--zero-commit", "--no-numbered",
               "--signature=fp4graph", "HEAD").stdout


@pytest.fixture
def world(checkout: Settings, tmp_path: pathlib.Path) -> dict[str, object]:
    upstream = tmp_path / "flashinfer"
    shas = upstream_history(upstream, [
        {"flashinfer/__init__.py": "", CALC: CALC_V1, NOTES: 'NOTE = "v1"\n', "tests/__init__.py": "",
         ".github/pull_request_template.md": TEMPLATE},
        {"README.md": "main moved on\n"},
        {NOTES: 'NOTE = "v3: rewritten upstream"\n'},
    ])
    pinned = shas[1]
    git(upstream, "branch", "-q", "pinned", pinned)
    work = tmp_path / "cut"
    git(tmp_path, "clone", "-q", str(upstream), str(work))
    git(work, "checkout", "-q", pinned)
    fixed = CALC_V1.replace("x * 3  # wrong: should double", "x * 2")
    texts = [
        _patch(work, {CALC: fixed, "tests/utils/test_scale.py": FIX_TEST},
               "fix(calc): scale doubles", {"Topic": "scale-fix"}),
        _patch(work, {CALC: fixed.replace("return x * 2\n", "return x * 2  # offset() relies on it\n")
                      .replace("return x\n", "return x + 1\n"),
                      "tests/utils/test_offset.py": FOLLOW_TEST},
               "feat(calc): offset adds one", {"Topic": "offset", "Depends-On": "scale-fix"}),
        _patch(work, {NOTES: 'NOTE = "v2"\n', "tests/utils/test_notes.py": GUARD_TEST},
               "docs(notes): a new note", {"Topic": "notes", "Bench": "peers"}),
    ]
    series = pullrequests.series_name(pullrequests.UpstreamCommit(repo="x/y", ref="main", commit=pinned))
    directory = checkout.patches_dir / FI / series
    directory.mkdir(parents=True)
    names = [f"000{i}-{t}.patch" for i, t in enumerate(("scale-fix", "offset", "notes"), 1)]
    for name, text in zip(names, texts, strict=True):
        (directory / name).write_text(text)
    (directory / "series").write_text("".join(n + "\n" for n in names))
    with checkout.stacks_file.open("a") as f:
        f.write(f'\n[[pull-requests]]\nproject = "{FI}"\nseries = "{series}"\nfrom = "0.7.4"\n'
                f'source = {{ repo = "flashinfer-ai/flashinfer", ref = "main", commit = "{pinned}" }}\n')
    return {"upstream": upstream, "shas": shas, "series": series, "directory": directory,
            "names": names}


def _prepare(checkout: Settings, world: dict[str, object], out: pathlib.Path, **kw: object) -> prreport.Report:
    options = prs.UpstreamOptions(
        project=FI, repo=world["upstream"], series=str(world["series"]),  # type: ignore[arg-type]
        # No simulated GPU: the fixture's tests import no torch, so neither do their runs.
        run_checks=False, python=sys.executable, simulated_gpu=False,
        identity=("A User", "a.user@example.org"), **kw,  # type: ignore[arg-type]
    )
    return prs.prepare(checkout, options, out)


def test_lint_accepts_the_series_and_its_dependencies(checkout: Settings, world: dict[str, object]) -> None:
    assert [p for p in lint(checkout.patches_dir) if str(world["series"]) in p] == []
    directory = world["directory"]
    assert isinstance(directory, pathlib.Path)
    first = directory / str(world["names"][0])  # type: ignore[index]
    first.write_text(first.read_text().replace("Topic: scale-fix", "Topic: scale-fix\nDepends-On: notes"))
    problems = [p for p in lint(checkout.patches_dir) if str(world["series"]) in p]
    assert problems and "Depends-On: 'notes' is no topic of an earlier patch" in problems[0]


def test_branches_sit_on_upstream_and_stack_only_where_declared(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path
) -> None:
    shas = world["shas"]
    assert isinstance(shas, list)
    result = _prepare(checkout, world, tmp_path / "out", base=shas[1])
    repo = tmp_path / "out" / "repo"
    by_topic = {pr.patch.topic: pr for pr in result.prs}
    assert [pr.branch.status for pr in result.prs] == ["built"] * 3
    fix, follow, notes = by_topic["scale-fix"], by_topic["offset"], by_topic["notes"]
    # real upstream history: every branch descends from upstream's commit
    for pr in result.prs:
        assert git(repo, "merge-base", "--is-ancestor", shas[1], pr.branch.name, check=False).returncode == 0
    assert fix.branch.parent == shas[1] and fix.branch.stacked_on is None
    assert follow.branch.stacked_on == "fix/scale-fix" and follow.branch.parent == fix.branch.commit
    assert notes.branch.parent == shas[1] and notes.branch.needs == ()  # un-stacked
    # the user's identity, never a fixed one, on every commit of the branches
    authors = git(repo, "log", "--format=%an <%ae>|%cn", f"{shas[1]}..{follow.branch.name}").stdout
    assert authors.splitlines() == ["A User <a.user@example.org>|A User"] * 2
    # our DEP-3 lines stay out of the upstream commits
    message = git(repo, "log", "-1", "--format=%B", follow.branch.name).stdout
    assert "Topic:" not in message and "Depends-On:" not in message and "Repro:" in message
    # tests: with the change, and on the commit below it with only the test files
    assert [(t.path, t.outcome) for t in fix.tests] == [("tests/utils/test_scale.py", "passed")]
    assert [t.outcome for t in fix.without_change] == ["failed"]
    assert fix.passing_without_change() == []
    assert [t.outcome for t in follow.without_change] == ["failed"]  # below it: the fix alone
    assert notes.passing_without_change() == ["tests.utils.test_notes::test_note_is_text"]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [p["stacked_on"] for p in summary["prs"]] == [None, "fix/scale-fix", None]
    assert notes.shows_no_fix and not fix.shows_no_fix and not follow.shows_no_fix
    assert "FLAGGED: no test fails without the change" in (tmp_path / "out" / "summary.md").read_text()


def test_bodies_name_no_file_of_ours_and_tick_only_what_ran(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path
) -> None:
    shas = world["shas"]
    assert isinstance(shas, list)
    # also on a release's tree, the notes patch as its re-cut for the release (whose test
    # passes there without the change: no line in its body, the run fails naming it)
    settings = _pin_release(checkout, tmp_path)
    _recut_notes(world, tmp_path, GUARD_TEST)
    assert [p for p in lint(settings.patches_dir) if str(world["series"]) in p] == []
    report = _prepare(settings, world, tmp_path / "out", base=shas[1], release_tree=RELEASE)
    assert [(pr.release_tree.status, pr.release_tree.recut) for pr in report.prs if pr.release_tree] == [
        ("passed", False), ("passed", False), ("passes-without", True)]
    assert not report.ok
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "#3 docs(notes): a new note: FAILED passes-without (re-cut for the release): " in summary
    bodies = {p.parent.name: p.read_text() for p in (tmp_path / "out" / "prs").glob("*/PR.md")}
    assert sorted(bodies) == ["01-scale-fix", "02-offset", "03-notes"]
    assert ("Also checked on the 9.9.9 release tree (the sdist flashinfer_python-9.9.9.tar.gz with tests of "
            f"{shas[1][:12]} beside it, which the sdist lacks), this same commit: `pytest "
            "tests/utils/test_scale.py` fails without the change (1 failed) and passes with it (1 passed).") \
        in bodies["01-scale-fix"]
    assert "release tree" not in bodies["03-notes"]
    for body in bodies.values():
        assert not re.search(r"patches/|\.patch\b|fp4graph|stacks\.toml|series", body), body
        assert_claims_only_what_ran(body)
        assert "- [ ] I have run the hooks manually with `pre-commit run --all-files`" in body
        assert "- [x] Tests have been added or updated as needed." in body
        assert "Why and what." in body and "Repro:" in body
    assert "Stacked on" not in bodies["01-scale-fix"]
    assert 'Stacked on "fix(calc): scale doubles"' in bodies["02-offset"]
    # only the added test files ran, on no GPU: the whole suite's box stays open
    assert "- [ ] All tests are passing" in bodies["01-scale-fix"]
    assert "not upstream's suite" in bodies["01-scale-fix"]
    assert "test_note_is_text" in bodies["03-notes"] and "pass without this change" in bodies["03-notes"]
    # each body lists its own test files only
    assert "test_scale.py" in bodies["01-scale-fix"] and "test_notes.py" not in bodies["01-scale-fix"]
    assert "No benchmark: this change makes no performance claim." in bodies["01-scale-fix"]
    assert "Not measured yet" in bodies["03-notes"] or "SM90 host-overhead results" in bodies["03-notes"]


def test_a_newer_main_conflicts_per_patch_and_nothing_is_dropped(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path
) -> None:
    # the clone's main, one commit newer (no test runs: the carry is what this checks)
    result = _prepare(checkout, world, tmp_path / "out", run_tests=False)
    shas = world["shas"]
    assert isinstance(shas, list)
    assert result.target == shas[2]
    assert [(c.patch.topic, c.status) for c in result.carried] == [
        ("scale-fix", "carried"), ("offset", "carried"), ("notes", "conflict")]
    assert "flashinfer/notes.py" in result.carried[2].detail
    assert [pr.branch.status for pr in result.prs] == ["built", "built", "conflict"]
    assert not result.ok
    fix = result.prs[0]
    assert fix.branch.parent == shas[2]


def test_an_undeclared_dependency_is_reported(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path
) -> None:
    directory = world["directory"]
    assert isinstance(directory, pathlib.Path)
    second = directory / str(world["names"][1])  # type: ignore[index]
    second.write_text(second.read_text().replace("Depends-On: scale-fix\n", ""))
    shas = world["shas"]
    assert isinstance(shas, list)
    result = _prepare(checkout, world, tmp_path / "out", base=shas[1], run_tests=False)
    follow = result.prs[1]
    assert follow.branch.status == "conflict"
    assert "needs an earlier patch it does not declare" in follow.branch.detail
    assert result.prs[2].branch.status == "built" and not result.ok


def test_the_command_needs_the_clone_for_a_series(
    checkout: Settings, world: dict[str, object], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path,
) -> None:
    monkeypatch.chdir(checkout.repo)
    code = cli.main(["upstream", FI, "--repo", str(world["upstream"]), "--series", str(world["series"]),
                     "--no-checks", "--base", "pinned", "--out", str(tmp_path / "cli")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "feat/offset  built" in out and "on fix/scale-fix" in out
    assert "FLAG tests.utils.test_notes::test_note_is_text: passes without the change" in out
    assert "FLAGGED: no test of this pull request fails without its change" in out
    with pytest.raises(ConfigError, match="no \\[\\[pull-requests\\]\\] series 'nope' for sglang"):
        prs.prepare(checkout, prs.UpstreamOptions(project="sglang", repo=tmp_path, series="nope"), tmp_path / "x")


def test_rebase_carries_a_series_to_a_newer_main_and_one_topic_again(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """The round trip on pull-request series: carry S1 (pinned commit) onto S2 (main one
    commit newer; its notes.py rewritten): the notes patch conflicts and is written
    unresolved; after the resolution, a reworked fix in S1 is taken into S2 again with
    --topic (a re-run), the other patches kept byte for byte."""
    monkeypatch.chdir(checkout.repo)
    shas = world["shas"]
    assert isinstance(shas, list)
    s1 = str(world["series"])
    s2 = pullrequests.series_name(pullrequests.UpstreamCommit(repo="x/y", ref="main", commit=shas[2]))
    with checkout.stacks_file.open("a") as f:
        f.write(f'\n[[pull-requests]]\nproject = "{FI}"\nseries = "{s2}"\nfrom = "0.7.4"\n'
                f'source = {{ repo = "flashinfer-ai/flashinfer", ref = "main", commit = "{shas[2]}" }}\n')
    work = tmp_path / "work"
    code = cli.main(["rebase", FI, s1, s2, "--repo", str(world["upstream"]), "--work-dir", str(work)])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "0003-notes.patch: conflict: conflicts in flashinfer/notes.py" in out
    target = checkout.patches_dir / FI / s2
    assert (target / "series").read_text().splitlines() == [
        "0001-scale-fix.patch", "0002-offset.patch",
        "0003-notes.patch unresolved  # conflicts in flashinfer/notes.py"]
    # resolve: upstream's rewrite makes the note patch moot; skip it and refresh
    repo = work / f"to-{s2}"
    git(repo, "rebase", "--skip", check=False)
    assert cli.main(["refresh", FI, s2, "--work-dir", str(work), "--drop", "notes"]) == 0
    capsys.readouterr()
    kept = (target / "0002-offset.patch").read_bytes()
    # the fix is reworked in S1 (its test asserts more); take that topic into S2 again
    directory = world["directory"]
    assert isinstance(directory, pathlib.Path)
    first = directory / "0001-scale-fix.patch"
    first.write_text(first.read_text().replace(
        "+    assert scale(2) == 4\n", "+    assert scale(2) == 4\n+    assert scale(0) == 0\n"
    ).replace("@@ -0,0 +1,5 @@\n+from flashinfer.calc import scale", "@@ -0,0 +1,6 @@\n+from flashinfer.calc import scale"))
    code = cli.main(["rebase", FI, s1, s2, "--repo", str(world["upstream"]), "--topic", "scale-fix",
                     "--work-dir", str(tmp_path / "work2")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0001-scale-fix.patch: carried: applied cleanly" in out
    assert "0002-offset.patch: carried: kept" in out
    assert (target / "series").read_text().splitlines() == ["0001-scale-fix.patch", "0002-offset.patch"]
    assert "+    assert scale(0) == 0" in (target / "0001-scale-fix.patch").read_text()
    assert (target / "0002-offset.patch").read_bytes() == kept


def test_a_pr_body_shows_its_own_benchmark_section_labelled_by_machine() -> None:
    from fp4graph.model.series import Patch
    from harness.checkout import REPO

    text = ("From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nSubject: [PATCH] x\n\nWhy.\n\n"
            "Bench: peers\nTopic: t\n---\ndiff --git a/f b/f\n")
    lines = prreport.bench_lines(Patch.parse(text, pathlib.Path("x.patch")), prreport.bench_results(REPO))
    joined = "\n".join(lines)
    assert "FlashInfer 0.6.3 on NVIDIA H200 (SM90)" in joined and "SM90 host-overhead results" in joined
    assert "fp4graph" not in joined and "(this change)" in joined
    assert "No SM100/SM120 run." in joined
    assert re.search(r"\| substitute_in_graph twin .* \| 0\.\d\d s \|", joined), joined
    assert "| upstream public function |" in joined and "fails (" in joined


def test_a_change_to_upstreams_own_test_file_runs_only_the_tests_it_adds(tmp_path: pathlib.Path) -> None:
    """Tests folded into upstream's test files run alone (the file's other tests may need a
    GPU); a test file the change adds runs whole."""
    old = "class TestLogging:\n    def test_old(self):\n        pass\n"
    new = old + "\n    def test_new(self):\n        pass\n\n\ndef test_module_level():\n    pass\n"
    shas = upstream_history(tmp_path / "r", [
        {"tests/utils/test_a.py": old},
        {"tests/utils/test_a.py": new, "tests/utils/test_b.py": "def test_b():\n    pass\n"},
    ])
    repo = tmp_path / "r"
    assert prs.added_tests(repo, shas[1], "tests/utils/test_a.py") == (
        "tests/utils/test_a.py::TestLogging::test_new", "tests/utils/test_a.py::test_module_level")
    assert prs.added_tests(repo, shas[1], "tests/utils/test_b.py") == ()


def test_the_stack_is_imported_in_a_fresh_interpreter(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    pinned = str(world["shas"][1])  # type: ignore[index]
    report = _prepare(checkout, world, tmp_path / "out", base=pinned)
    assert report.stack_import is not None and report.stack_import[0], report.stack_import
    assert "`import flashinfer` at " in report.stack_import[1]
    assert "leaves torch._dynamo unloaded" in (tmp_path / "out" / "summary.md").read_text()
    # importing a submodule loads its package: the same probe, made to fail
    monkeypatch.setitem(prs.IMPORT_LEAVES_UNLOADED, FI, ("flashinfer.calc", "flashinfer"))
    report = _prepare(checkout, world, tmp_path / "again", base=pinned)
    assert report.stack_import is not None and not report.stack_import[0]
    assert report.stack_import[1].endswith("loads flashinfer") and not report.ok


def test_a_body_that_would_claim_what_did_not_run_is_refused(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path,
) -> None:
    directory = world["directory"]
    assert isinstance(directory, pathlib.Path)
    first = directory / str(world["names"][0])  # type: ignore[index]
    first.write_text(first.read_text().replace("Why and what.", "Why and what. Carried in fp4graph."))
    with pytest.raises(Fp4graphError, match=re.escape(first.name) + r".*Carried in"):
        # the message is refused whatever ran: no test runs here (they pay for the release tree's)
        _prepare(checkout, world, tmp_path / "out", run_tests=False)
    assert not (tmp_path / "out").exists()


# --- --release-tree: every pull request on a release's tree ---------------------------

RELEASE = "9.9.9"


def _pin_release(checkout: Settings, tmp_path: pathlib.Path) -> Settings:
    """A flashinfer-python release pinned with its sdist (sha256) in a cache of its own:
    the pinned commit's code, but its notes.py rewritten; no tests, no hook config."""
    import hashlib
    import io
    import tarfile

    name = f"flashinfer_python-{RELEASE}.tar.gz"
    files = {"PKG-INFO": "Name: flashinfer-python\n", "flashinfer/__init__.py": "", CALC: CALC_V1,
             NOTES: 'NOTE = "release: rewritten"\n'}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, text in files.items():
            info = tarfile.TarInfo(f"flashinfer_python-{RELEASE}/{path}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    cache = tmp_path / "cache"
    (cache / "artifacts").mkdir(parents=True)
    (cache / "artifacts" / name).write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    with checkout.stacks_file.open("a") as f:
        f.write(f'\n[[artifact]]\nproject = "{FI}"\nversion = "{RELEASE}"\nrevision = 1\n'
                f'files = [{{ filename = "flashinfer_python-{RELEASE}-py3-none-any.whl", sha256 = "{"0" * 64}" }}]\n'
                f'sdist = {{ filename = "{name}", sha256 = "{digest}" }}\n')
    return Settings(repo=checkout.repo, cache_dir=cache)


def _recut_notes(world: dict[str, object], tmp_path: pathlib.Path, test: str) -> pathlib.Path:
    """The notes patch re-cut on the release's notes.py, with ``test`` as its test."""
    work = tmp_path / "recut"
    git(tmp_path, "clone", "-q", str(world["upstream"]), str(work))
    git(work, "checkout", "-q", str(world["shas"][1]))  # type: ignore[index]
    (work / NOTES).write_text('NOTE = "release: rewritten"\n')
    git(work, "commit", "-q", "-am", "the release's notes.py")
    text = _patch(work, {NOTES: 'NOTE = "v2"\n', "tests/utils/test_notes.py": test},
                  "docs(notes): a new note", {"Topic": "notes", "Bench": "peers"})
    directory = world["directory"]
    assert isinstance(directory, pathlib.Path)
    recut = directory / pullrequests.RECUTS.format(version=RELEASE) / str(world["names"][2])  # type: ignore[index]
    recut.parent.mkdir()
    recut.write_text(text)
    return recut


def test_each_pull_request_applies_to_the_release_tree_or_fails_by_name(
    checkout: Settings, world: dict[str, object], tmp_path: pathlib.Path,
) -> None:
    """On the release's tree (its sdist + the series commit's tests): the fix and its
    follow-up apply as they are and their tests fail without / pass with them; the notes
    patch does not apply there (the release rewrote notes.py) and fails the check by name
    (its re-cut: test_bodies_name_no_file_of_ours_and_tick_only_what_ran)."""
    settings = _pin_release(checkout, tmp_path)
    pinned = str(world["shas"][1])  # type: ignore[index]
    options = prs.UpstreamOptions(project=FI, python=sys.executable)
    series = load_series(settings.patches_dir, FI, str(world["series"]))
    assert series is not None
    (tmp_path / "scratch").mkdir()

    def tests(repo: pathlib.Path, commit: str, parent: str) -> tuple[list[prreport.TestFile], ...]:
        return prs.tests_with_and_without(repo, commit, parent, FI, options, tmp_path / "scratch", False)

    run = releasetree.check(settings, series, RELEASE, world["upstream"], pinned,  # type: ignore[arg-type]
                            ("A User", "a@b"), tmp_path / "scratch", tests)  # type: ignore[arg-type]
    fix, follow, notes = run.checks.values()
    assert fix.ok and not fix.recut, fix
    assert [t.outcome for t in fix.tests] == ["passed"] and [t.outcome for t in fix.without_change] == ["failed"]
    assert follow.ok  # on the fix, as on main
    assert notes.status == "does-not-apply" and "flashinfer/notes.py" in notes.detail
    assert not run.ok
    assert run.tree.startswith(f"{FI} {RELEASE}: the sdist flashinfer_python-{RELEASE}.tar.gz with tests of")


def test_a_recut_is_judged_like_its_pull_request(checkout: Settings, world: dict[str, object]) -> None:
    """Its test must run, pass with the change and fail without it; a re-cut that is no
    patch of the series is a lint problem naming it; --release-tree needs a series."""
    def run(outcome: str) -> prreport.TestFile:
        return prreport.TestFile(path="tests/t.py", command="pytest tests/t.py", outcome=outcome, output="")

    assert releasetree.judge([run("passed")], [run("failed")])[0] == "passed"
    assert releasetree.judge([run("passed")], [run("passed")]) == (
        "passes-without", "`pytest tests/t.py` does not fail without the change (it shows no fix there)")
    assert releasetree.judge([run("failed")], [run("failed")])[0] == "fails-with"
    assert releasetree.judge([run("skipped")], [run("failed")])[0] == "not-run"
    assert releasetree.judge([], [])[0] == "no-test"
    # a passing re-cut's body line says it ran as the re-cut
    from fp4graph.forward import prbranches
    from fp4graph.model.series import Patch

    patch = Patch.parse("From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nSubject: [PATCH] x\n\nWhy.\n"
                        "\nTopic: t\n---\ndiff --git a/f b/f\n", pathlib.Path("0001-t.patch"))
    check = prreport.ReleaseTreeCheck(release=f"{FI} {RELEASE}", recut=True, status="passed", detail="",
                                      tests=(run("passed"),), without_change=(run("failed"),))
    pr = prreport.PullRequest(branch=prbranches.Branch(patch=patch, name="fix/t", needs=(), status="built",
                                                       detail=""), tests=(run("passed"),), release_tree=check)
    assert prreport._release_tree_lines(pr, "T")[-1] == (
        f"Also checked on the {RELEASE} release tree (T), as re-cut for {RELEASE}'s code: `pytest tests/t.py` "
        "fails without the change (failed) and passes with it (passed).")
    recuts = pathlib.Path(str(world["directory"])) / pullrequests.RECUTS.format(version=RELEASE)
    recuts.mkdir()
    (recuts / "0009-x.patch").write_text("x")
    assert any(f"release-{RELEASE}/0009-x.patch: names no patch of" in p for p in lint(checkout.patches_dir))
    with pytest.raises(ConfigError, match=f"--release-tree {RELEASE}: checks a pull-request series"):
        prs.prepare(checkout, prs.UpstreamOptions(project=FI, version="0.7.4", release_tree=RELEASE,
                                                  identity=("a", "a@b")), checkout.repo / "x")
