"""model.files: a directory appears whole at its place, or not at all."""

from __future__ import annotations

import pathlib

import pytest

from fp4graph.model.files import atomic_directory, recover


def listing(root: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_block_s_files_appear_at_once(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "out"
    with atomic_directory(dest, replace=True) as staging:
        (staging / "a").write_text("new")
        assert staging.parent == tmp_path and staging.name.startswith(".out.tmp-")
        assert not dest.exists()
    assert listing(tmp_path) == ["out", "out/a"]
    assert (dest.stat().st_mode & 0o777) == 0o755


@pytest.mark.parametrize("replace", [True, False])
def test_a_failed_block_leaves_dest_as_it_was(tmp_path: pathlib.Path, replace: bool) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_directory(dest, replace=replace) as staging:
        (staging / "new").write_text("new")
        raise KeyboardInterrupt
    assert listing(tmp_path) == ["out", "out/old"]


def test_replace_swaps_an_existing_dest(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old").write_text("old")
    with atomic_directory(dest, replace=True) as staging:
        (staging / "new").write_text("new")
    assert listing(tmp_path) == ["out", "out/new"]


def test_without_replace_the_first_writer_wins(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "out"
    with atomic_directory(dest, replace=False) as staging:
        (staging / "second").write_text("")
        dest.mkdir()  # a concurrent writer finishes first
        (dest / "first").write_text("")
    assert listing(tmp_path) == ["out", "out/first"]


def test_recover_finishes_a_swap_cut_between_its_renames(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "out"
    backup = tmp_path / ".out.old"
    backup.mkdir()
    (backup / "old").write_text("old")
    recover(dest)  # killed after renaming dest aside: the old copy comes back
    assert listing(tmp_path) == ["out", "out/old"]
    backup.mkdir()
    recover(dest)  # killed after renaming the new copy in: the old one goes
    assert listing(tmp_path) == ["out", "out/old"]
