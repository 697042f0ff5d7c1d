"""forward.prs on a release series: PR-ready branches on git repositories built from pinned sdists.

Downloads the flashinfer 0.6.3 and sglang 0.5.9 sdists (about 5 and 4 MB, cached).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

from fp4graph import cli
from fp4graph.forward import checks, prbranches, prreport, prs
from fp4graph.forward.sources import git
from fp4graph.model import projects
from fp4graph.model.config import Settings
from fp4graph.model.errors import PatchError
from fp4graph.model.series import Patch

from .conftest import FI, MARKER, add_series, assert_claims_only_what_ran, has_tools

pytestmark = pytest.mark.slow
USER = ("A User", "a.user@example.org")


def _release(checkout: Settings, project: str, out: pathlib.Path, **kw: object) -> prreport.Report:
    return prs.prepare(checkout, prs.UpstreamOptions(project=project, **kw), out)  # type: ignore[arg-type]


def _body(out: pathlib.Path, number: int = 1) -> str:
    return next((out / "prs").glob(f"{number:02d}-*/PR.md")).read_text()


def _checks(result: prreport.Report) -> list[checks.CheckResult]:
    return [c for pr in result.prs for c in pr.checks]


def test_flashinfer_prs_from_the_sdist(checkout: Settings, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    result = _release(checkout, FI, out, version="0.6.3", run_checks=False, run_tests=False, identity=USER)
    assert result.source_note == "sdist flashinfer_python-0.6.3.tar.gz"
    assert [pr.branch.name for pr in result.prs] == ["test/fixture-marker"]  # named for the change
    repo = out / "repo"
    log = git(repo, "log", "--format=%an <%ae>|%cn|%s", "-2", "test/fixture-marker").stdout
    assert log.splitlines() == [  # the change is the user's; the sdist's import commit is ours
        "A User <a.user@example.org>|A User|test: add a marker the engine tests look for",
        "fp4graph <fp4graph@users.noreply.github.com>|fp4graph|"
        "flashinfer-python 0.6.3 (flashinfer_python-0.6.3.tar.gz)",
    ]
    assert 'FP4GRAPH_FIXTURE = "applied"' in (repo / "flashinfer/__init__.py").read_text()
    assert (repo / "tests/utils/test_fixture_marker.py").is_file()
    # format-patch output carries the DEP-3 header and the same diff
    made = next((out / "prs" / "01-fixture-marker").glob("*.patch")).read_text()
    assert "+FP4GRAPH_FIXTURE" in made and "Last-Update:" not in made  # our DEP-3 lines stay ours
    body = _body(out)
    for heading in ("Description", "Related Issues", "Pull Request Checklist", "Tests", "Reviewer Notes"):
        assert heading in body
    assert "#2999" in body and "#2733" in body
    assert "No benchmark: this change makes no performance claim." in body
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prs"][0]["branch"] == "test/fixture-marker"
    # the same inputs make the same commits (fixed committer identity and date)
    again = _release(checkout, FI, tmp_path / "again", version="0.6.3", run_checks=False,
                     run_tests=False, identity=USER)
    assert again.prs[0].branch.commit == result.prs[0].branch.commit


def test_conflict_fails_clearly(checkout: Settings, tmp_path: pathlib.Path) -> None:
    add_series(checkout, FI, "0.6.3", [MARKER, "0003-conflicts.patch"])
    with pytest.raises(PatchError, match=r"0003-conflicts\.patch: does not apply to flashinfer-python "
                       r"0\.6\.3 .*git am -3.*flashinfer/__init__\.py.*fp4graph rebase"):
        _release(checkout, FI, tmp_path / "out", version="0.6.3", run_checks=False, run_tests=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not has_tools("ruff", "mypy"), reason="ruff/mypy not installed (tests/forward/requirements.txt)")
def test_flashinfer_checks_use_upstream_config(checkout: Settings, tmp_path: pathlib.Path) -> None:
    add_series(checkout, FI, "0.6.3", [MARKER, "0004-bad-style.patch"])
    result = _release(checkout, FI, tmp_path / "out", version="0.6.3", tools="path", run_tests=False)
    marker, bad = ({c.hook: c for c in pr.checks} for pr in result.prs)  # each on its own branch
    assert set(marker) == set(bad) == {"ruff-check", "ruff-format", "mypy"}, _checks(result)
    assert marker["mypy"].command.startswith("mypy --config-file pyproject.toml")
    assert "tests/utils/test_fixture_marker.py" not in marker["mypy"].files  # files: ^flashinfer/
    assert marker["ruff-format"].ok and bad["ruff-check"].ok
    assert not bad["ruff-format"].ok and "fp4graph_fixture_style.py" in bad["ruff-format"].output
    assert not result.ok
    assert "(the tree has no .pre-commit-config.yaml)" in result.checks_source
    assert "`ruff-format` on 1 file(s): FAILED" in _body(tmp_path / "out", 2)


@pytest.mark.skipif(not has_tools("ruff", "mypy"), reason="ruff/mypy not installed (tests/forward/requirements.txt)")
def test_hooks_run_once_over_a_passing_stack(
    checkout: Settings, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hooks that pass over the stack's top are not run again per branch (a failing stack
    is checked branch by branch: test_flashinfer_checks_use_upstream_config)."""
    runs: list[tuple[str, ...]] = []
    real = checks.run_hooks

    def counted(tree: pathlib.Path, hooks: object, files: tuple[str, ...], **kw: object) -> object:
        runs.append(tuple(files))
        return real(tree, hooks, files, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(checks, "run_hooks", counted)
    add_series(checkout, FI, "0.6.3", [MARKER, "0005-test-without-change.patch"])
    result = _release(checkout, FI, tmp_path / "out", version="0.6.3", tools="path", run_tests=False)
    assert len(runs) == 1, runs
    assert all(pr.checks and all(c.ok for c in pr.checks) for pr in result.prs), _checks(result)
    assert [set(c.files) <= set(pr.files) for pr in result.prs for c in pr.checks] == [True] * len(_checks(result))
    assert "run once over the files of all 2 pull requests" in _body(tmp_path / "out", 2)


def test_sglang_prs_use_the_python_layout(checkout: Settings, tmp_path: pathlib.Path) -> None:
    tools = has_tools("black", "isort", "codespell")
    result = _release(checkout, "sglang", tmp_path / "out", version="0.5.9", run_checks=tools,
                      tools="path", python=sys.executable)
    repo = tmp_path / "out" / "repo"
    assert 'FP4GRAPH_FIXTURE = "applied"' in (repo / "python/sglang/global_config.py").read_text()
    assert (repo / "test/registered/test_fixture_marker.py").is_file()
    body = _body(tmp_path / "out")
    for heading in ("## Motivation", "## Modifications", "## Benchmark & Profiling", "## Checklist"):
        assert heading in body
    assert "flashinfer-ai/flashinfer#2999" in body
    assert_claims_only_what_ran(body)
    pr = result.prs[0]
    assert [t.path for t in pr.tests] == ["test/registered/test_fixture_marker.py"]
    # passes where sglang's dependencies are installed; else reported, not failed
    assert pr.tests[0].outcome in ("passed", "not-run"), pr.tests[0].output
    if pr.tests[0].outcome == "passed":  # the marker is the patch's own
        assert pr.outcome_without(pr.tests[0].path) == "failed", pr
    if tools:
        assert {c.hook for c in pr.checks} == {"isort", "black-jupyter", "codespell"}
        assert result.ok, [c.output for c in pr.checks if not c.ok]


def test_local_clone_and_explicit_push(checkout: Settings, tmp_path: pathlib.Path) -> None:
    # a user's clone: the pristine source repository, with upstream's tag
    user = tmp_path / "flashinfer"
    pristine = _release(checkout, FI, tmp_path / "first", version="0.6.3", run_checks=False,
                        run_tests=False)
    subprocess.run(["git", "clone", "-q", str(pristine.repo), str(user)], check=True)
    assert git(user, "tag", "--list").stdout.split() == ["v0.6.3"]
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    result = _release(checkout, FI, tmp_path / "out", version="0.6.3", repo=user, run_checks=False,
                      run_tests=False)
    assert result.source_note.startswith(f"clone of {user}")
    assert not git(remote, "branch", "--list").stdout.strip()  # dry run: nothing pushed
    prs.push(result, str(remote), user)
    assert "test/fixture-marker" in git(remote, "branch", "--list").stdout


def test_push_needs_a_remote(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["upstream", FI, "--push"]) == 2
    assert "Fp4graphError: --push needs an explicit --remote" in capsys.readouterr().err


def test_the_added_tests_requirements_come_from_the_release(checkout: Settings) -> None:
    """What `nox -s upstream` installs: pytest and flashinfer's own Requires-Dist, no torch."""
    needs = prs.release_requirements(checkout, FI, "0.6.3")
    assert needs[0] == "pytest"
    assert "apache-tvm-ffi!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6" in needs and "numpy" in needs
    assert not [n for n in needs if n.startswith("torch")]


def test_sglangs_added_tests_need_its_runtime_at_the_releases_pins(checkout: Settings) -> None:
    """sglang's tests import its runtime from the tree: the names projects.py lists, each at
    the release's own pin; torch too (PyPI's torchvision imports only beside PyPI's torch of
    its release)."""
    needs = prs.release_requirements(checkout, "sglang", "0.5.9")
    assert needs[:4] == ["torch==2.9.1", "torchvision", "transformers==4.57.1", "flashinfer_python==0.6.3"]
    assert {"orjson", "IPython", "datasets"} <= set(needs)  # its spelling, where it lists one
    assert len(needs) == len(set(needs)) == len(projects.SGLANG.test_requirements)


@pytest.mark.parametrize(
    ("output", "skipped"),
    [
        pytest.param("..s\n2 passed, 1 skipped in 0.1s", False, id="pytest-some-skipped"),
        pytest.param("ss\n2 skipped in 0.1s", True, id="pytest-all-skipped"),
        pytest.param("Ran 13 tests in 0.084s\n\nOK", False, id="unittest-passed"),
        pytest.param("Ran 13 tests in 0.000s\n\nOK (skipped=13)", True, id="unittest-all-skipped"),
        pytest.param("Ran 13 tests in 0.001s\n\nOK (skipped=2)", False, id="unittest-some-skipped"),
        pytest.param("Ran 0 tests in 0.000s\n\nOK", True, id="unittest-none"),
    ],
)
def test_a_test_file_that_skipped_everything_is_not_a_pass(output: str, skipped: bool) -> None:
    assert prs._all_skipped(output) is skipped


def test_tests_must_run_fails_a_file_that_ran_nothing() -> None:
    patch = Patch.parse("From 0 Mon Sep 17 00:00:00 2001\nFrom: a <a@b>\nSubject: [PATCH] x\n\n"
                        "Why.\n\nTopic: t\n---\ndiff --git a/f b/f\n", pathlib.Path("x.patch"))

    def result(outcome: str, must_run: bool) -> prreport.Report:
        run = prreport.TestFile(path="test/t.py", command="python test/t.py", outcome=outcome, output="")
        branch = prbranches.Branch(patch=patch, name="t", needs=(), status="built", detail="",
                                   commit="c", parent="p")
        return prreport.Report(project="sglang", title="sglang 0.5.11", base_note="b", target="p",
                               source_note="o", series_dir="d", repo=pathlib.Path("r"), carried=(),
                               prs=(prreport.PullRequest(branch=branch, tests=(run,)),),
                               tests_must_run=must_run)

    assert result("passed", True).ok and result("skipped", False).ok
    assert not result("skipped", True).ok and not result("not-run", True).ok


def test_a_test_that_passes_without_its_change_is_inconclusive(checkout: Settings, tmp_path: pathlib.Path) -> None:
    """Each added test runs again on the commit below its patch with only the file taken
    over; one that passes there too shows no fix: reported, and under --tests-must-run a
    failure."""
    add_series(checkout, "sglang", "0.5.9", ["0005-test-without-change.patch"])
    result = _release(checkout, "sglang", tmp_path / "out", version="0.5.9", run_checks=False,
                      python=sys.executable, tests_must_run=True)
    pr = result.prs[0]
    shows, anyway = "test/registered/test_fixture_reads_flag.py", "test/registered/test_fixture_passes_anyway.py"
    assert {t.path: t.outcome for t in pr.tests} == {shows: "passed", anyway: "passed"}, pr.tests
    assert (pr.outcome_without(shows), pr.outcome_without(anyway)) == ("failed", "passed")
    assert pr.inconclusive == [anyway] and not pr.shows_no_fix
    assert not result.ok
    assert dataclasses.replace(result, tests_must_run=False).ok
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert f"{anyway}: passes without the change too" in summary
    assert f"`{shows}` passed / failed" in summary
    body = _body(tmp_path / "out")
    assert f"- `python {shows}`: passed (passed); without the change: failed" in body
    assert f"Tests that pass without this change as well (they do not show the fix):\n- `{anyway}`" in body
    assert_claims_only_what_ran(body)
    # the repository is left on the last pull request's branch
    repo = tmp_path / "out" / "repo"
    assert (repo / "python/sglang/fp4graph_fixture_flag.py").is_file()


def test_a_release_only_fix_is_carried_downstream_and_named_beneath(
    checkout: Settings, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fix main made moot is no pull request: the report says it is carried downstream with
    the upstream commit, and the branch above it says it sits beneath."""
    add_series(checkout, "sglang", "0.5.9", [MARKER, "0005-test-without-change.patch"])
    monkeypatch.setitem(prs.MOOT_ON_MAIN, ("sglang", "fixture-marker"), "sgl-project/sglang@0123abc (#1)")
    result = _release(checkout, "sglang", tmp_path / "out", version="0.5.9", run_checks=False,
                      run_tests=False, identity=USER)
    assert [pr.patch.topic for pr in result.prs] == ["fixture-without-change"]
    assert dict(result.not_proposed) == {MARKER: "carried downstream: a fix for the release only, "
                                         "moot on main since sgl-project/sglang@0123abc (#1)"}
    assert "carried downstream" in (tmp_path / "out" / "summary.md").read_text()
    body = _body(tmp_path / "out")
    assert ("below this commit, changes that are not proposed here:\n"
            "- Add a marker the fp4graph engine tests look for: carried downstream") in body
    assert_claims_only_what_ran(body)


def test_the_deep_gemm_fix_is_moot_on_sglang_main() -> None:
    assert "1df9edcd015d (#23856" in prs.MOOT_ON_MAIN[("sglang", "deep-gemm-precompile-eager")]
