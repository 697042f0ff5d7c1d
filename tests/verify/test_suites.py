"""The upstream-suite gate (fp4graph.verify.suites) on a tiny upstream world (conftest.py).

Each test builds real wheels with the engine, installs them with pip and runs upstream-style
pytest files in child processes, patched beside pristine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import pytest
from packaging.version import Version

from fp4graph import cli
from fp4graph.model import config, projects, stacks
from fp4graph.model.errors import ConfigError, SuiteError
from fp4graph.verify import suites
from fp4graph.verify.suites import report as suite_report
from fp4graph.verify.suites import source as suite_source
from harness.targets import full_matrix

from .conftest import PROJECT, SELECTION, STACK, Run, World

REPO = pathlib.Path(__file__).resolve().parents[2]


def prepare(world: World, dest: pathlib.Path, **kwargs: object) -> suites.Bundle:
    kwargs.setdefault("repo", world.upstream)
    return suites.prepare_bundle(world.settings, STACK, PROJECT, dest, selection=SELECTION, **kwargs)  # type: ignore[arg-type]


def by_path(report: dict[str, object]) -> dict[str, dict[str, object]]:
    return {f["path"]: f for f in report["files"]}  # type: ignore[attr-defined,index]


def test_regression_is_found_and_named(bad_run: Run) -> None:
    report = bad_run.report
    files = by_path(report)

    ops = files["tests/test_ops.py"]
    assert ops["status"] == "regression"
    assert [r["nodeid"] for r in ops["regressions"]] == ["tests/test_ops.py::test_scale[3]"]
    assert ops["fixed"] == ["tests/test_ops.py::test_neg"]  # fails pristine, passes patched
    # passed / failed / skipped(+xfailed): 2 add, 2 of 3 scale, neg, the wheel-not-source check
    assert (ops["patched"]["passed"], ops["patched"]["failed"], ops["patched"]["skipped"]) == (6, 1, 2)
    assert (ops["pristine"]["passed"], ops["pristine"]["failed"], ops["pristine"]["skipped"]) == (6, 1, 2)

    legacy = files["tests/test_legacy.py"]
    assert legacy["status"] == "regression"
    assert "collects pristine, not patched" in legacy["notes"]
    assert "legacy" in legacy["patched"]["collect_errors"][0]["message"]

    # The series-touched-module rule: CPU-marked tests importing demo_kernels.ops, only.
    assert report["series_modules"] == ["demo_kernels.ops"]
    unit = files["test/unit/test_ops_unit.py"]
    assert [r["nodeid"] for r in unit["regressions"]] == ["test/unit/test_ops_unit.py::test_scale_three"]
    assert "test/unit/test_unrelated.py" not in files and "test/unit/test_gpu_only.py" not in files

    assert report["absent"] == ["tests/test_not_at_this_tag.py"]
    assert report["ok"] is False and report["regressions"] == 2 and report["collection_regressions"] == 1

    md = suite_report.markdown(report)
    assert "**2 regression(s)**, 1 file(s) that collect only pristine" in md
    assert "- `tests/test_ops.py::test_scale[3]`: failed" in md
    assert "| tests/test_ops.py | core | 6 / 1 / 2 | 6 / 1 / 2 | 9 | 1 |" in md
    assert f"tag v1.0, commit {bad_run.world.commits['tag']}" in md
    assert "| tests/test_not_at_this_tag.py | - | - | - | - | - | absent at v1.0 |" in md


def test_both_variants_share_one_jit_cache_when_only_python_differs(bad_run: Run) -> None:
    assert bad_run.bundle.manifest["jit_shareable"] is True  # the series changes ops.py only
    assert bad_run.report["jit_cache"] == "shared"
    seen = (bad_run.work / "jit" / "seen.txt").read_text().splitlines()
    assert len(seen) == 2 and seen[0] == seen[1]  # one install path, one cache, both variants
    assert by_path(bad_run.report)["tests/test_jit.py"]["status"] == "ok"


def test_good_series_passes_and_upstream_source_is_not_exported(good_run: Run) -> None:
    bundle, report = good_run.bundle, good_run.report
    # Only tests and their support travel: never upstream's source of the package.
    assert not (bundle.tests_root / "demo_kernels").exists()
    assert (bundle.tests_root / "tests" / "helpers.py").is_file()
    assert not (bundle.tests_root / "tests" / "test_later.py").exists()  # after the tag
    assert report["ok"] is True, suite_report.markdown(report)
    files = by_path(report)
    assert files["tests/test_ops.py"]["regressions"] == []
    assert files["tests/test_ops.py"]["fixed"] == ["tests/test_ops.py::test_neg"]
    assert files["tests/test_legacy.py"]["status"] == "ok"
    assert report["wheels"]["patched"][0]["filename"] == "demo_kernels-1.0+fp4graph.1-py3-none-any.whl"
    assert report["wheels"]["pristine"][0]["filename"] == "demo_kernels-1.0-py3-none-any.whl"
    assert "**no regression**" in suite_report.markdown(report)


def test_time_budget_cuts_a_file_without_failing_it(good_world: World, tmp_path: pathlib.Path) -> None:
    selection = dataclasses.replace(
        SELECTION, files=(suites.SuiteFile(pattern="tests/test_slow.py", area="slow", budget_s=1),),
        series_tests=None,
    )
    bundle = suites.prepare_bundle(good_world.settings, STACK, PROJECT, tmp_path / "b",
                            repo=good_world.upstream, selection=selection)
    report = suites.run_bundle(bundle, tmp_path / "run", suites.RunOptions(budget_s=1.5, grace_s=30))
    row = by_path(report)["tests/test_slow.py"]
    assert row["status"] == "ok" and report["ok"] is True
    for variant in ("patched", "pristine"):
        s = row[variant]
        assert s["ended"] == "budget" and s["failed"] == 0
        assert 0 < s["passed"] < 40 and s["not_run"] == 40 - s["passed"]
    assert row["compared"] == min(row["patched"]["passed"], row["pristine"]["passed"])
    assert any(n.startswith("patched: budget of 2 s spent") for n in row["notes"])


def test_a_hanging_test_is_killed_and_reported_as_such(good_world: World, tmp_path: pathlib.Path) -> None:
    selection = dataclasses.replace(
        SELECTION, files=(suites.SuiteFile(pattern="tests/test_hang.py", area="hang", budget_s=1),),
        series_tests=None,
    )
    bundle = suites.prepare_bundle(good_world.settings, STACK, PROJECT, tmp_path / "b",
                            repo=good_world.upstream, selection=selection)
    report = suites.run_bundle(bundle, tmp_path / "run", suites.RunOptions(grace_s=2.0))
    row = by_path(report)["tests/test_hang.py"]
    assert row["status"] == "ok" and row["regressions"] == []  # not held against the wheel
    # ... but a run in which nothing passed pristine and ran patched proves nothing.
    assert report["checked"] == 0 and report["verdict"] == "inconclusive" and report["ok"] is False
    for variant in ("patched", "pristine"):
        s = row[variant]
        # Killed inside test_hang: neither it nor the test after it counts as failed.
        assert s["ended"] == "killed" and s["wall_s"] < 60
        assert (s["passed"], s["failed"]) == (0, 0)
    assert any(n.startswith("patched: killed after") for n in row["notes"])


def test_wrong_commit_is_refused_naming_stack_and_pin(bad_world: World, tmp_path: pathlib.Path) -> None:
    later = bad_world.commits["later"]
    bad_world.pin(later)  # stacks.toml now pins a commit the tag does not name
    with pytest.raises(SuiteError) as info:
        prepare(bad_world, tmp_path / "bundle")
    message = str(info.value)
    assert message.startswith(f"stack {STACK}: {PROJECT} 1.0: ")
    assert f"tag v1.0 is commit {bad_world.commits['tag']}" in message
    assert f"patches/stacks.toml pins {later}" in message
    assert not (tmp_path / "bundle").exists()


def test_clone_without_the_tag_or_commit_is_refused(bad_world: World, tmp_path: pathlib.Path) -> None:
    bad_world.pin("0" * 40)
    subprocess_git(bad_world.upstream, "tag", "-d", "v1.0")
    with pytest.raises(SuiteError, match=f"has neither tag v1.0 nor the pinned commit {'0' * 40}"):
        prepare(bad_world, tmp_path / "bundle")


def test_pinned_commit_without_its_tag_is_used(good_world: World, tmp_path: pathlib.Path) -> None:
    subprocess_git(good_world.upstream, "tag", "-d", "v1.0")
    bundle = prepare(good_world, tmp_path / "bundle")
    assert "(tag v1.0 absent there)" in bundle.manifest["source"]["origin"]


def test_default_path_fetches_the_tag_from_the_remote(good_world: World, tmp_path: pathlib.Path) -> None:
    # The GitHub path, with the fixture repository standing in for github.com.
    bundle = prepare(good_world, tmp_path / "bundle", repo=None, url=good_world.upstream.as_uri())
    assert bundle.manifest["source"]["origin"].startswith(good_world.upstream.as_uri() + " (fetched): tag v1.0")
    assert (good_world.settings.cache_dir / "upstream-git" / "example+demo-kernels.git").is_dir()


def test_unreachable_remote_says_to_pass_repo(good_world: World, tmp_path: pathlib.Path) -> None:
    with pytest.raises(SuiteError, match=r"pass --repo PATH \(a clone of example/demo-kernels"):
        prepare(good_world, tmp_path / "bundle", repo=None, url=(tmp_path / "nowhere").as_uri())


def test_packed_bundle_runs_elsewhere_and_refuses_a_moved_pin(bad_run: Run, tmp_path: pathlib.Path) -> None:
    packed = suites.pack(bad_run.bundle, tmp_path / "carry" / "demo.tar.xz")
    assert suites.pack(bad_run.bundle, tmp_path / "again.tar.xz").read_bytes() == packed.read_bytes()

    opened = suites.open_bundle(packed, tmp_path / "device")
    catalog = stacks.load(bad_run.world.settings.stacks_file)
    suites.check_bundle_pin(opened, catalog)
    options = suites.RunOptions(grace_s=5.0, files=("tests/test_ops.py", "tests/test_jit.py"), jit_cache="separate")
    report = suites.run_bundle(opened, tmp_path / "run", options)
    assert [f["path"] for f in report["files"]] == ["tests/test_ops.py", "tests/test_jit.py"]
    assert report["jit_cache"] == "separate" and report["regressions"] == 1
    for variant in ("patched", "pristine"):
        assert len((tmp_path / "run" / f"jit-{variant}" / "seen.txt").read_text().splitlines()) == 1

    moved = dataclasses.replace(
        catalog.artifacts[f"{PROJECT}==1.0"],
        source=stacks.SourcePin(repo="example/demo-kernels", tag="v1.0", commit=bad_run.world.commits["later"]),
    )
    catalog = dataclasses.replace(catalog, artifacts={f"{PROJECT}==1.0": moved})
    with pytest.raises(SuiteError, match=f"stack {STACK}: {PROJECT} 1.0: bundle .* from commit "
                       f"{bad_run.world.commits['tag']}, but patches/stacks.toml pins {bad_run.world.commits['later']}"):
        suites.check_bundle_pin(opened, catalog)


def test_jit_cache_is_not_shared_when_data_files_differ(tmp_path: pathlib.Path) -> None:
    a, b = tmp_path / "a" / "pkg", tmp_path / "b" / "pkg"
    for root, text in ((a, "x"), (b, "y")):
        root.mkdir(parents=True)
        (root / "mod.py").write_text(text)
        (root / "kernel.cu").write_text("same")
    assert suites.jit_difference(a.parent, b.parent) is None  # Python files may differ
    (b / "kernel.cu").write_text("different")
    assert suites.jit_difference(a.parent, b.parent) == "1 non-Python file(s) differ, e.g. pkg/kernel.cu"


def test_cli_writes_reports_and_fails_on_regression(
    bad_world: World, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(suites.SELECTIONS, PROJECT, SELECTION)
    monkeypatch.chdir(bad_world.settings.repo)
    monkeypatch.setenv("FP4GRAPH_CACHE", str(bad_world.settings.cache_dir))
    monkeypatch.setenv("FP4GRAPH_FIND_LINKS", str(bad_world.wheel.parent))
    out = tmp_path / "out"
    assert cli.main(["suites", STACK, "--repo", str(bad_world.upstream), "--out", str(out),
                     "--file", "tests/test_ops.py"]) == 1
    report = json.loads((out / f"{STACK}-{PROJECT}-1.0.json").read_text())
    assert [f["path"] for f in report["files"]] == ["tests/test_ops.py"]
    assert report["ok"] is False
    assert (out / f"{STACK}-{PROJECT}-1.0.md").read_text().startswith(f"# Upstream tests: {PROJECT} 1.0")
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "suites: FAILED, a test passes pristine and fails patched (or a file collects only pristine) "
        f"in {PROJECT} 1.0: tests/test_ops.py ("
    )


def test_plan_leaves_out_gpu_projects_without_a_gpu(
    bad_world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(suites.SELECTIONS, PROJECT, dataclasses.replace(SELECTION, needs_cuda=True))
    here = suites.plan(bad_world.settings, STACK, cuda=False)
    assert here.projects == () and here.skipped == (f"{PROJECT}: its tests need a CUDA GPU and torch sees none",)
    assert suites.plan(bad_world.settings, STACK, cuda=None).projects == (PROJECT,)  # --pack, --requirements


def test_outcomes_name_the_test_a_crash_interrupted() -> None:
    events = [{"event": "begin", "nodeid": "t::a"}, {"event": "test", "nodeid": "t::a", "outcome": "passed"},
              {"event": "begin", "nodeid": "t::b"}]
    assert suite_report.outcomes({"events": events, "killed": False}) == {"t::a": "passed", "t::b": "crashed"}
    assert suite_report.outcomes({"events": events, "killed": True}) == {"t::a": "passed"}


def subprocess_git(repo: pathlib.Path, *args: str) -> None:
    import subprocess

    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


# --------------------------------------------------------------------------- the real pins


@pytest.mark.parametrize(
    "version", [a.version for a in stacks.load(REPO / "patches" / "stacks.toml").artifacts.values()
                # 0.5.x: pinned only for sglang releases measured pristine (older than the
                # first stack, harness.models.simulation.FIRST_STACKED): the full tier.
                if a.project == "flashinfer-python" and (full_matrix() or Version(a.version) >= Version("0.6"))],
)
def test_flashinfer_pins_match_the_commit_each_wheel_records(version: str) -> None:
    """flashinfer writes its git commit into flashinfer/_build_meta.py (of the wheel, or of the
    sdist where PyPI has no wheel: 0.4.1): it must be the pin."""
    settings = config.Settings.from_env(REPO)
    artifact = stacks.load(settings.stacks_file).artifact("flashinfer-python", version)
    assert artifact.source is not None and artifact.source.tag == f"v{version}"
    from fp4graph.forward.pin import pinned_member
    from fp4graph.wheels.fetch import fetch

    recorded = artifact.sdist if artifact.sdist_only else artifact.file()
    assert recorded is not None
    meta = pinned_member(fetch(settings, artifact.project, recorded), "flashinfer/_build_meta.py")
    assert meta is not None and f'"{artifact.source.commit}"'.encode() in meta, meta


def test_source_pins_name_the_projects_github_repository() -> None:
    for artifact in stacks.load(REPO / "patches" / "stacks.toml").artifacts.values():
        if artifact.source is not None:
            assert artifact.source.repo == projects.get(artifact.project).github, artifact.key


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        pytest.param({"repo": "flashinfer-ai/flashinfer", "tag": "v0.6.3"}, "exactly 'repo', 'tag' and 'commit'",
                     id="no-commit"),
        pytest.param({"repo": "flashinfer", "tag": "v0.6.3", "commit": "a" * 40}, "GitHub 'owner/name'",
                     id="not-owner-name"),
        pytest.param({"repo": "a/b", "tag": "v0.6.4", "commit": "a" * 40}, "tag 'v0.6.4' does not name",
                     id="other-version-tag"),
        pytest.param({"repo": "a/b", "tag": "v0.6.3", "commit": "d0886ce"},
                     r"40 lowercase hex digits \(git rev-parse v0.6.3\^\{commit\}\), got 'd0886ce'",
                     id="short-commit"),
    ],
)
def test_bad_source_pin_is_rejected(raw: dict[str, str], match: str) -> None:
    artifact = {
        "project": "flashinfer-python", "version": "0.6.3", "revision": 1,
        "files": [{"filename": "flashinfer_python-0.6.3-py3-none-any.whl", "sha256": "0" * 64}],
        "source": raw,
    }
    with pytest.raises(ConfigError, match=match):
        stacks.parse({"artifact": [artifact]})


def test_selection_table_paths_exist_at_each_pinned_tag() -> None:
    """The flashinfer table names files upstream has at every pinned tag we can read here."""
    clone = os.environ.get("FP4GRAPH_FLASHINFER_CLONE")
    if not clone:
        pytest.skip("set FP4GRAPH_FLASHINFER_CLONE to a clone of flashinfer-ai/flashinfer")
    mirror = pathlib.Path(clone)
    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    for artifact in catalog.artifacts.values():
        pin = artifact.source
        if artifact.project != "flashinfer-python" or pin is None:
            continue
        if suite_source.rev(mirror, f"{pin.commit}^{{commit}}") is None:
            continue
        tree = suite_source.tree_paths(mirror, pin.commit)
        chosen, absent = suites.select(suites.FLASHINFER, tree, lambda p: {}, [])
        assert absent == [], (artifact.version, absent)
        assert len(chosen) == len(suites.FLASHINFER.files)


def _events(*outcomes: tuple[str, str]) -> dict[str, object]:
    events: list[dict[str, object]] = [{"event": "collected", "count": len(outcomes)}]
    for nodeid, outcome in outcomes:
        events += [{"event": "begin", "nodeid": nodeid}, {"event": "test", "nodeid": nodeid, "outcome": outcome}]
    events.append({"event": "finish", "exitstatus": 0})
    return {"events": events, "killed": False, "returncode": 0, "wall_s": 1.0, "budget_s": 60, "log_tail": ""}


def test_a_file_that_skips_everywhere_says_so() -> None:
    row = suite_report.compare(_events(("t::a", "skipped")), _events(("t::a", "skipped")))
    assert row["status"] == "ok" and row["compared"] == 1
    assert "every test skips itself here, in both installs (upstream's own gate)" in row["notes"]
    some_fail_both = suite_report.compare(_events(("t::a", "failed"), ("t::b", "passed")),
                                          _events(("t::a", "failed"), ("t::b", "passed")))
    assert some_fail_both["status"] == "ok" and some_fail_both["regressions"] == []  # upstream's
    assert some_fail_both["checked"] == 1


def test_a_file_pristine_passes_none_of_proves_nothing() -> None:
    row = suite_report.compare(_events(("t::a", "failed"), ("t::b", "skipped")),
                               _events(("t::a", "failed"), ("t::b", "skipped")))
    assert row["status"] == "inconclusive" and row["checked"] == 0
    assert row["inconclusive"] == ["pristine passes none of the 1 test(s) that ran"]
    # A regression stays a regression, whatever else the file shows.
    row = suite_report.compare(_events(("t::a", "failed")), _events(("t::a", "passed")))
    assert row["status"] == "regression" and row["inconclusive"] == []


def test_cli_packs_bundles_and_runs_them(
    bad_world: World, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(suites.SELECTIONS, PROJECT, SELECTION)
    monkeypatch.chdir(bad_world.settings.repo)
    monkeypatch.setenv("FP4GRAPH_CACHE", str(bad_world.settings.cache_dir))
    monkeypatch.setenv("FP4GRAPH_FIND_LINKS", str(bad_world.wheel.parent))
    carry = tmp_path / "carry"
    assert cli.main(["suites", STACK, "--repo", str(bad_world.upstream), "--pack", str(carry)]) == 0
    packed = carry / f"{PROJECT}-1.0.tar.xz"
    assert f"{packed}  " in capsys.readouterr().out
    out = tmp_path / "out"
    # test_legacy.py collects only pristine
    assert cli.main(["suites", "--bundle", str(packed), "--file", "tests/test_legacy.py", "--out", str(out)]) == 1
    report = json.loads((out / f"{STACK}-{PROJECT}-1.0.json").read_text())
    assert report["collection_regressions"] == 1 and report["files_compared"] == 1
