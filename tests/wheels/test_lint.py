from __future__ import annotations

import pathlib

import pytest

from fp4graph.model.config import Settings
from fp4graph.wheels import lint

from .conftest import REPO


def test_repository_patches_are_clean() -> None:
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
