"""upstream / drift / rebase against git repositories built from pinned sdists.

Uses the engine's fixture series (a throw-away checkout, as tests/engine does) and the
small fixture patches next to this file: one upstream already has, one that conflicts,
one upstream's formatter rejects, and an sglang fp4 patch that sglang 0.5.12 supersedes.
Downloads: the flashinfer 0.6.3 and sglang 0.5.9 sdists (about 5 and 4 MB, cached), and
for drift a few HTTP range reads of wheels (their zip directory and the touched files).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import subprocess
import sys
import urllib.request

import pytest

from fp4graph import cli
from fp4graph.forward import checks, drift, prs
from fp4graph.forward.rebase import rebase
from fp4graph.forward.sources import git
from fp4graph.model import config
from fp4graph.model.config import Settings
from fp4graph.model.errors import PatchError
from fp4graph.model.series import nearest_series_version
from support.checkout import make_checkout

HERE = pathlib.Path(__file__).parent
FIXTURES = HERE / "fixtures"
FI = "flashinfer-python"
MARKER = "0001-add-fixture-marker.patch"

pytestmark = pytest.mark.slow


@pytest.fixture
def checkout(tmp_path: pathlib.Path) -> Settings:
    """A throw-away checkout with the engine fixture series; the user's artifact cache."""
    return make_checkout(tmp_path / "repo", config.default_cache_dir())


def add_series(settings: Settings, project: str, version: str, names: list[str]) -> pathlib.Path:
    """Replace ``project`` ``version``'s series with the named fixture patches."""
    directory = settings.patches_dir / project / version
    directory.mkdir(parents=True, exist_ok=True)
    kept = []
    for name in names:
        source = FIXTURES / name
        if source.is_file():
            shutil.copy(source, directory / name)
        kept.append(name)
    (directory / "series").write_text("".join(n + "\n" for n in kept))
    return directory


def has_tools(*names: str) -> bool:
    return all(shutil.which(n) for n in names)


# --- upstream -----------------------------------------------------------------------


def test_flashinfer_prs_from_the_sdist(checkout: Settings, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    result = prs.prepare(checkout, FI, out, version="0.6.3", run_checks=False, run_tests=False)
    assert result.origin == "sdist flashinfer_python-0.6.3.tar.gz"
    assert [pr.branch for pr in result.prs] == ["fp4graph/0001-add-fixture-marker"]
    repo = out / "repo"
    log = git(repo, "log", "--format=%an|%s", "-2", "fp4graph/0001-add-fixture-marker").stdout
    assert log.splitlines() == [
        "fp4graph|test: add a marker the engine tests look for",
        "fp4graph|flashinfer-python 0.6.3 (flashinfer_python-0.6.3.tar.gz)",
    ]
    assert 'FP4GRAPH_FIXTURE = "applied"' in (repo / "flashinfer/__init__.py").read_text()
    assert (repo / "tests/utils/test_fixture_marker.py").is_file()
    # format-patch output carries the DEP-3 header and the same diff
    made = result.prs[0].patch_file.read_text()
    assert "Last-Update: 2026-11-29" in made and "+FP4GRAPH_FIXTURE" in made
    body = result.prs[0].body_file.read_text()
    for heading in ("Description", "Related Issues", "Pull Request Checklist", "Tests", "Reviewer Notes"):
        assert heading in body
    assert "#2999" in body and "#2733" in body
    assert "No benchmark results yet" in body
    summary = json.loads((out / "summary.json").read_text())
    assert summary["prs"][0]["branch"] == "fp4graph/0001-add-fixture-marker"
    # the same inputs make the same commits (fixed committer identity and date)
    again = prs.prepare(checkout, FI, tmp_path / "again", version="0.6.3",
                             run_checks=False, run_tests=False)
    assert again.prs[0].commit == result.prs[0].commit


def test_conflict_fails_clearly(checkout: Settings, tmp_path: pathlib.Path) -> None:
    add_series(checkout, FI, "0.6.3", [MARKER, "0003-conflicts.patch"])
    with pytest.raises(PatchError, match=r"0003-conflicts\.patch: does not apply to flashinfer-python "
                       r"0\.6\.3 .*git am -3.*flashinfer/__init__\.py.*fp4graph rebase"):
        prs.prepare(checkout, FI, tmp_path / "out", version="0.6.3", run_checks=False, run_tests=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not has_tools("ruff", "mypy"), reason="ruff/mypy not installed (tests/upstream/requirements.txt)")
def test_flashinfer_checks_use_upstream_config(checkout: Settings, tmp_path: pathlib.Path) -> None:
    add_series(checkout, FI, "0.6.3", [MARKER, "0004-bad-style.patch"])
    result = prs.prepare(checkout, FI, tmp_path / "out", version="0.6.3", tools="path",
                              run_tests=False)
    by_hook = {c.hook: c for c in result.checks}
    assert set(by_hook) == {"ruff-check", "ruff-format", "mypy"}, result.checks
    assert by_hook["mypy"].command.startswith("mypy --config-file pyproject.toml")
    assert "tests/utils/test_fixture_marker.py" not in by_hook["mypy"].files  # files: ^flashinfer/
    assert by_hook["ruff-check"].ok
    assert not by_hook["ruff-format"].ok and "fp4graph_fixture_style.py" in by_hook["ruff-format"].output
    assert not result.ok
    assert "(the tree has no .pre-commit-config.yaml)" in result.checks_source
    bodies = {pr.patch.name: pr.body_file.read_text() for pr in result.prs}
    assert "ruff format --check" in bodies["0004-bad-style.patch"] and "FAILED" in bodies["0004-bad-style.patch"]


def test_hooks_read_from_the_tree_config(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("yaml")
    (tmp_path / ".pre-commit-config.yaml").write_text(
        "exclude: ^python/sglang/srt/grpc/\nrepos:\n"
        "  - repo: https://github.com/psf/black\n    rev: 25.1.0\n    hooks:\n      - id: black-jupyter\n"
        "  - repo: https://github.com/PyCQA/isort\n    rev: 6.0.1\n    hooks:\n      - id: isort\n"
        "  - repo: https://github.com/codespell-project/codespell\n    rev: v2.4.1\n    hooks:\n"
        "      - id: codespell\n        args: ['-L', 'thi']\n"
        "  - repo: https://github.com/pre-commit/mirrors-clang-format\n    rev: v18.1.8\n    hooks:\n"
        "      - id: clang-format\n"
    )
    config, source = checks.load_config(tmp_path, "sglang")
    assert source == ".pre-commit-config.yaml in the tree"
    hooks = checks.hooks_for(config, "sglang")
    assert [(h.id, h.requirements[0]) for h in hooks] == [
        ("black-jupyter", "black==25.1.0"), ("isort", "isort==6.0.1"), ("codespell", "codespell==2.4.1"),
    ]
    black = hooks[0]
    assert black.selects("python/sglang/srt/x.py") and not black.selects("python/sglang/srt/grpc/x.py")
    assert not black.selects("README.md") and hooks[2].selects("README.md")


def test_sglang_fallback_config_carries_the_isort_settings() -> None:
    config, source = checks.load_config(pathlib.Path("/nonexistent"), "sglang")
    assert "(the tree has no .pre-commit-config.yaml)" in source
    isort = {h.id: h for h in checks.hooks_for(config, "sglang")}["isort"]
    # sglang's repo-root .isort.cfg: profile=black, known_first_party=sglang.
    assert isort.command == ("isort", "--check-only", "--diff", "--profile", "black", "--project", "sglang")


def test_missing_config_files_are_left_out(tmp_path: pathlib.Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    args = ["--toml", "python/pyproject.toml", "-L", "thi", "--config-file", "pyproject.toml"]
    kept, missing = checks.without_missing_configs(tmp_path, args)
    assert kept == ["-L", "thi", "--config-file", "pyproject.toml"]
    assert missing == ["python/pyproject.toml"]


@pytest.mark.skipif(not has_tools("ruff"), reason="ruff not installed (tests/upstream/requirements.txt)")
def test_failures_upstream_has_too_are_not_the_series(tmp_path: pathlib.Path) -> None:
    base, tree = tmp_path / "base", tmp_path / "tree"
    for root in (base, tree):
        root.mkdir()
        (root / "old.py").write_text("x = [1,2]\n")  # unformatted upstream
        (root / "ok.py").write_text("y = 1\n")
    hook = checks.Hook(id="ruff-format", requirements=("ruff",), command=("ruff", "format", "--check"),
                       files=(), exclude=(), python_only=True)
    cache = tmp_path / "cache"
    run = checks.run_hooks(tree, [hook], ["old.py", "ok.py"], tools="path", cache_dir=cache)
    [before] = checks.mark_upstream_failures(run, [hook], tree, base, tools="path", cache_dir=cache)
    assert not before.ok and before.fails_upstream and not before.blocks
    assert before.status == "failed on upstream's files too"
    (tree / "ok.py").write_text("y = {1:2}\n")  # the series breaks a clean file
    (tree / "new.py").write_text("z = (1,2)\n")
    for files in (["old.py", "ok.py"], ["old.py", "new.py"]):
        run = checks.run_hooks(tree, [hook], files, tools="path", cache_dir=cache)
        [after] = checks.mark_upstream_failures(run, [hook], tree, base, tools="path", cache_dir=cache)
        assert after.blocks and after.status == "FAILED", files


def test_sglang_prs_use_the_python_layout(checkout: Settings, tmp_path: pathlib.Path) -> None:
    tools = has_tools("black", "isort", "codespell")
    result = prs.prepare(checkout, "sglang", tmp_path / "out", version="0.5.9",
                              run_checks=tools, tools="path", python=sys.executable)
    repo = tmp_path / "out" / "repo"
    assert 'FP4GRAPH_FIXTURE = "applied"' in (repo / "python/sglang/global_config.py").read_text()
    assert (repo / "test/registered/test_fixture_marker.py").is_file()
    body = result.prs[0].body_file.read_text()
    for heading in ("## Motivation", "## Modifications", "## Benchmark & Profiling", "## Checklist"):
        assert heading in body
    assert "flashinfer-ai/flashinfer#2999" in body
    assert [t.path for t in result.tests] == ["test/registered/test_fixture_marker.py"]
    # passes where sglang's dependencies are installed; else reported, not failed
    assert result.tests[0].outcome in ("passed", "not-run"), result.tests[0].output
    if tools:
        assert {c.hook for c in result.checks} == {"isort", "black-jupyter", "codespell"}
        assert result.ok, [c.output for c in result.checks if not c.ok]


def test_local_clone_and_explicit_push(checkout: Settings, tmp_path: pathlib.Path) -> None:
    # a user's clone: the pristine source repository, with upstream's tag
    user = tmp_path / "flashinfer"
    pristine = prs.prepare(checkout, FI, tmp_path / "first", version="0.6.3",
                                run_checks=False, run_tests=False)
    subprocess.run(["git", "clone", "-q", str(pristine.repo), str(user)], check=True)
    assert git(user, "tag", "--list").stdout.split() == ["v0.6.3"]
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    result = prs.prepare(checkout, FI, tmp_path / "out", version="0.6.3", repo=user,
                              run_checks=False, run_tests=False)
    assert result.origin.startswith(f"clone of {user}")
    assert not git(remote, "branch", "--list").stdout.strip()  # dry run: nothing pushed
    prs.push(result, str(remote), user)
    assert "fp4graph/0001-add-fixture-marker" in git(remote, "branch", "--list").stdout


def test_push_needs_a_remote(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["upstream", FI, "--push"]) == 2
    assert "Fp4graphError: --push needs an explicit --remote" in capsys.readouterr().err


# --- nearest series, rebase ---------------------------------------------------------


def test_nearest_series(tmp_path: pathlib.Path) -> None:
    for v in ("0.6.3", "0.6.7.post3", "0.7.4"):
        (tmp_path / FI / v).mkdir(parents=True)
        (tmp_path / FI / v / "series").write_text("")
    pick = lambda v: nearest_series_version(tmp_path, FI, v)  # noqa: E731
    assert [pick(v) for v in ("0.6.0", "0.6.3", "0.6.7", "0.6.7.post3", "0.6.18", "0.7.4", "0.8.0")] == [
        "0.6.3", "0.6.3", "0.6.3", "0.6.7.post3", "0.6.7.post3", "0.7.4", "0.7.4",
    ]
    assert nearest_series_version(tmp_path, "sglang", "0.5.9") is None


def test_rebase_carries_and_refreshes(checkout: Settings, tmp_path: pathlib.Path) -> None:
    import datetime

    out = tmp_path / "carried"
    results = rebase(checkout, "sglang", "0.5.9", "0.5.10.post1", out, work_dir=tmp_path / "work",
                     today=datetime.date(2027, 1, 2))
    assert [(r.name, r.status) for r in results] == [(MARKER, "carried")], results
    text = (out / MARKER).read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] Add a marker the fp4graph engine tests look for" in text
    assert "Last-Update: 2027-01-02" in text and "Date: Sun, 29 Nov 2026" in text
    assert (out / "series").read_text() == MARKER + "\n"


# --- drift --------------------------------------------------------------------------


def test_drift_classifies_and_caches(
    checkout: Settings, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = dataclasses.replace(checkout, cache_dir=tmp_path / "cache")
    # already-upstream first: after the marker patch its context would differ
    add_series(settings, FI, "0.6.3", ["0002-already-upstream.patch", MARKER, "0003-conflicts.patch"])
    shutil.rmtree(settings.patches_dir / "sglang" / "0.5.9")
    add_series(settings, "sglang", "0.5.9", ["0001-sglang-fp4-utils.patch"])
    only = {FI: ["0.6.3"], "sglang": ["0.5.11", "0.5.12"]}
    cells, notes = drift.drift(settings, only=only)
    got = {(c.project, c.version, c.patch): c.status for c in cells}
    assert got == {
        (FI, "0.6.3", MARKER): "applies",
        (FI, "0.6.3", "0002-already-upstream.patch"): "upstream",
        (FI, "0.6.3", "0003-conflicts.patch"): "conflicts",
        ("sglang", "0.5.11", "0001-sglang-fp4-utils.patch"): "applies",
        ("sglang", "0.5.12", "0001-sglang-fp4-utils.patch"): "superseded",
    }
    marker = next(c for c in cells if c.patch == MARKER)
    assert "tests/utils/test_fixture_marker.py: not in" in marker.detail
    superseded = next(c for c in cells if c.status == "superseded")
    assert "register_custom_op_from_extern" in superseded.detail
    assert all(c.series_version == "0.5.9" for c in cells if c.project == "sglang")
    # only the touched files were kept
    kept = sorted(p.name for p in (settings.cache_dir / "drift" / "files").iterdir())
    assert kept == ["flashinfer_python-0.6.3-py3-none-any.whl",
                    "sglang-0.5.11-cp311-cp311-manylinux_2_34_x86_64.whl",
                    "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl"]

    out = tmp_path / "reports"
    drift.write_reports(out, cells, notes)
    data = json.loads((out / "drift.json").read_text())
    assert set(data[0]) == {"project", "version", "series_version", "patch", "status", "detail"}
    assert "| 0.5.12 | 0.5.9 | superseded |" in (out / "drift.md").read_text()

    # a second run reads nothing from the network
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used on a cached run")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    again, _ = drift.drift(settings, only=only)
    assert again == cells
