"""model.files: a directory appears whole at its place, or not at all."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap

import pytest

from fp4graph.model.files import atomic_directory, atomic_file, recover, remove_stale, write_atomic


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


def _killed_writer(dest: pathlib.Path, kind: str) -> subprocess.CompletedProcess[str]:
    """A child that stages ``dest`` (a directory or a file) and is killed with SIGKILL."""
    src = pathlib.Path(__file__).resolve().parents[2] / "src"
    code = textwrap.dedent(f"""
        import os, pathlib, signal
        from fp4graph.model.files import atomic_directory, atomic_file
        dest = pathlib.Path({str(dest)!r})
        if {kind!r} == "dir":
            with atomic_directory(dest, replace=True) as staging:
                (staging / "half").write_text("half")
                os.kill(os.getpid(), signal.SIGKILL)
        else:
            with atomic_file(dest) as staging:
                staging.write_text("half")
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(src)),
                          capture_output=True, text=True)


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_the_next_writer_removes_what_a_killed_writer_staged(tmp_path: pathlib.Path, kind: str) -> None:
    dest = tmp_path / "wheels"
    assert _killed_writer(dest, kind).returncode == -9
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".wheels.tmp-"), left  # kill -9 leaves it
    if kind == "dir":
        with atomic_directory(dest, replace=True) as staging:
            (staging / "whole").write_text("whole")
        assert listing(tmp_path) == ["wheels", "wheels/whole"]
    else:
        write_atomic(dest, "whole")
        assert listing(tmp_path) == ["wheels"] and dest.read_text() == "whole"


def test_a_live_writer_s_staging_is_kept(tmp_path: pathlib.Path) -> None:
    dest = tmp_path / "out"
    with atomic_directory(dest, replace=True) as staging:
        (staging / "a").write_text("a")
        assert remove_stale(dest) == []  # another writer of dest leaves ours alone
        with atomic_directory(tmp_path / "other", replace=True):
            pass
        assert staging.exists()
    assert listing(tmp_path) == ["other", "out", "out/a"]


@pytest.mark.parametrize("kind", ["dir", "file"])
def test_staging_taken_between_creation_and_lock_is_made_again(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Two writers of one destination (parallel test workers, two builds): the second's
    cleanup can find the first's staging entry created but not yet locked, and remove it."""
    dest = tmp_path / "out"
    name = "mkdtemp" if kind == "dir" else "mkstemp"
    create = getattr(tempfile, name)
    taken: list[pathlib.Path] = []

    def create_then_race(*args: object, **kwargs: object) -> object:
        made = create(*args, **kwargs)
        if not taken:
            taken.extend(remove_stale(dest))  # the other writer's cleanup runs here
        return made

    monkeypatch.setattr(tempfile, name, create_then_race)
    writer = atomic_directory(dest, replace=True) if kind == "dir" else atomic_file(dest)
    with writer as staging:
        assert staging.exists() and remove_stale(dest) == []  # ours, and locked
        if kind == "dir":
            (staging / "a").write_text("a")
        else:
            staging.write_text("a")
    assert len(taken) == 1 and not taken[0].exists()
    assert listing(tmp_path) == (["out", "out/a"] if kind == "dir" else ["out"])


def test_git_ignores_staging_entries() -> None:
    repo = pathlib.Path(__file__).resolve().parents[2]
    names = [".wheels.tmp-abc123/", ".wheels.old/", "patches/sglang/.0.5.8.tmp-x1/",
             "wheels/.index.html.tmp-k2"]
    result = subprocess.run(["git", "-C", str(repo), "check-ignore", "--no-index", *names],
                            capture_output=True, text=True)
    assert sorted(result.stdout.split()) == sorted(names), result.stdout + result.stderr
