from __future__ import annotations

import pathlib

import pytest

from fp4graph.model.config import Settings
from fp4graph.wheels import lint
from harness.checkout import real_requirements

from .conftest import REPO


def test_repository_patches_are_clean() -> None:
    with real_requirements():
        assert lint.lint(REPO / "patches") == []


def test_fixture_series_is_clean(checkout: Settings) -> None:
    assert lint.lint(checkout.patches_dir) == []


def fixture_patch(settings: Settings) -> pathlib.Path:
    return settings.patches_dir / "flashinfer-python/0.6.3/0001-add-fixture-marker.patch"


@pytest.mark.parametrize(
    ("field", "problem"),
    [
        ("Forwarded: not-needed\n", "missing DEP-3 field Forwarded"),
        ("Bug: https://github.com/flashinfer-ai/flashinfer/issues/2999\n", "missing DEP-3 field Bug"),
        ("Last-Update: 2026-11-29\n", "missing DEP-3 field Last-Update"),
    ],
)
def test_missing_dep3_field(checkout: Settings, field: str, problem: str) -> None:
    path = fixture_patch(checkout)
    path.write_text(path.read_text().replace(field, "", 1))
    assert lint.lint(checkout.patches_dir) == [
        f"patches/flashinfer-python/0.6.3/0001-add-fixture-marker.patch: {problem}"
    ]


def test_bad_last_update(checkout: Settings) -> None:
    path = fixture_patch(checkout)
    path.write_text(path.read_text().replace("Last-Update: 2026-11-29", "Last-Update: yesterday"))
    assert any("Last-Update 'yesterday' is not YYYY-MM-DD" in p for p in lint.lint(checkout.patches_dir))


def test_patch_not_in_series(checkout: Settings) -> None:
    stray = checkout.patches_dir / "flashinfer-python/0.6.3/0002-stray.patch"
    stray.write_text(fixture_patch(checkout).read_text())
    assert lint.lint(checkout.patches_dir) == [
        "patches/flashinfer-python/0.6.3/0002-stray.patch: not listed in series"
    ]


def test_series_lists_missing_patch(checkout: Settings) -> None:
    series = checkout.patches_dir / "sglang/0.5.9/series"
    series.write_text(series.read_text() + "0002-gone.patch\n")
    assert lint.lint(checkout.patches_dir) == [
        "patches/sglang/0.5.9/series: lists 0002-gone.patch, which does not exist"
    ]


def test_series_for_unpinned_version(checkout: Settings) -> None:
    target = checkout.patches_dir / "flashinfer-python/0.6.99"
    (checkout.patches_dir / "flashinfer-python/0.6.3").rename(target)
    assert lint.lint(checkout.patches_dir) == [
        "patches/flashinfer-python/0.6.99: flashinfer-python 0.6.99 is not pinned in patches/stacks.toml"
    ]


def test_not_a_format_patch(checkout: Settings) -> None:
    fixture_patch(checkout).write_text("just some text\n")
    problems = lint.lint(checkout.patches_dir)
    assert len(problems) == 1 and "not a 'git format-patch' file" in problems[0]


def test_patch_without_topic(checkout: Settings) -> None:
    path = fixture_patch(checkout)
    path.write_text(path.read_text().replace("Topic: fixture-marker\n", "", 1))
    where = "patches/flashinfer-python/0.6.3"
    assert lint.lint(checkout.patches_dir) == [
        f"{where}/0001-add-fixture-marker.patch: missing DEP-3 field Topic",
        f"{where}/series: no patch carries topic 'fixture-marker', which every flashinfer-python "
        "series needs (the fixture series' patch); carry it over with `python -m fp4graph rebase`, "
        "or change the requirement in fp4graph/model/projects.py",
    ]


def test_topic_spelling_and_duplicates(checkout: Settings) -> None:
    path = fixture_patch(checkout)
    path.write_text(path.read_text().replace("Topic: fixture-marker", "Topic: fixture-marker, Fp4_Ops"))
    copy = path.with_name("0002-again.patch")
    copy.write_text(path.read_text())
    (path.parent / "series").write_text(f"{path.name}\n{copy.name}\n")
    where = "patches/flashinfer-python/0.6.3"
    problems = lint.lint(checkout.patches_dir)
    assert f"{where}/0002-again.patch: topic 'fixture-marker' is also 0001-add-fixture-marker.patch's" in problems
    assert (f"{where}/0001-add-fixture-marker.patch: Topic 'Fp4_Ops': topics are lower-case words "
            "joined by '-'") in problems


def test_unresolved_patch_is_named_with_the_fix(checkout: Settings) -> None:
    series = checkout.patches_dir / "sglang/0.5.9/series"
    series.write_text("0001-add-fixture-marker.patch unresolved  # conflicts in python/sglang/x.py\n")
    assert lint.lint(checkout.patches_dir) == [
        "patches/sglang/0.5.9/series: 0001-add-fixture-marker.patch is unresolved (conflicts in "
        "python/sglang/x.py); resolve it in the rebase work repository and run "
        "`python -m fp4graph refresh sglang 0.5.9`"
    ]


def test_series_line_with_an_unknown_state(checkout: Settings) -> None:
    series = checkout.patches_dir / "sglang/0.5.9/series"
    series.write_text("0001-add-fixture-marker.patch maybe\n")
    assert lint.lint(checkout.patches_dir) == [
        f"{series}:1: '0001-add-fixture-marker.patch maybe': expected a patch name, optionally "
        "followed by 'unresolved' and a '#' comment"
    ]


def test_series_lacking_the_projects_core_topics(checkout: Settings) -> None:
    with real_requirements():  # the fixture series lack every real fp4 topic
        problems = lint.lint(checkout.patches_dir)
    missing = sorted(p.split("topic ")[1].split(",")[0] for p in problems)
    assert missing == sorted([
        "'api-logging'", "'cuda-version'", "'cutlass-moe-op'", "'fp4-quantize-ops'", "'fp4-warmup'",
        "'kernel-package-version'", "'mm-fp4-op'", "'trtllm-moe-ops'", "'fp4-quantize-op'", "'fp4-warmup'",
        "'nsa-piecewise-cuda-graph'",  # the fixture's sglang 0.5.9 (required from 0.5.9 to 0.5.12)
    ]), problems
