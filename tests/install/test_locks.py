"""The lock format (fp4graph.model.locks): round trip, and every refusal names file and line."""

from __future__ import annotations

import pathlib

import pytest

from fp4graph.model import locks, stacks
from fp4graph.model.errors import ConfigError

LOCK = """\
# fp4graph lock of stack sglang-9.0: a header line
#   with an indented one
aiohttp==3.14.5
airportsdata==20260315 ; python_full_version < "3.11"
airportsdata==20261103 ; python_full_version >= "3.11"
Torch==2.9.1
"""


def test_round_trip(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sglang-9.0.txt"
    path.write_text(LOCK)
    lock = locks.read(path)
    assert lock.stack == "sglang-9.0"
    assert lock.header == ("fp4graph lock of stack sglang-9.0: a header line", "  with an indented one")
    assert [p.line for p in lock.pins][:2] == ["aiohttp==3.14.5", 'airportsdata==20260315 ; python_full_version < "3.11"']
    again = tmp_path / "again.txt"
    locks.write(again, lock)
    assert again.read_text() == LOCK
    assert locks.read(again, "sglang-9.0") == lock


def test_markers_pick_the_environment(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text(LOCK)
    lock = locks.read(path)
    assert lock.versions({"python_full_version": "3.10.4"})["airportsdata"] == "20260315"
    assert lock.versions({"python_full_version": "3.12.1"})["airportsdata"] == "20261103"
    assert lock.versions({"python_full_version": "3.12.1"})["torch"] == "2.9.1"  # canonical names


@pytest.mark.parametrize(("lines", "match"), [
    pytest.param(["aiohttp==3.14.5", "AIOHTTP==3.14.6"], r"s\.txt:2: AIOHTTP is locked twice \(also at .*s\.txt:1\)",
                 id="twice"),
    pytest.param(['six==1.0 ; python_version < "3.11"', 'six==1.1 ; python_version < "3.11"'],
                 r"s\.txt:2: six is locked twice", id="twice-same-marker"),
    pytest.param(['six==1.0 ; python_version < "3.11"', "six==1.1"], r"s\.txt:2: six is locked twice",
                 id="twice-one-unmarked"),
    pytest.param(["aiohttp>=3.14"], r"s\.txt:1: 'aiohttp>=3.14' is not an exact pin", id="range"),
    pytest.param(["aiohttp==3.*"], r"s\.txt:1: 'aiohttp==3\.\*' is not an exact pin", id="wildcard"),
    pytest.param(["requests[socks]==2.0"], r"s\.txt:1: .* is not an exact pin", id="extras"),
    pytest.param(["# header", "", "sglang==0.5.9+fp4graph.4"], r"s\.txt:3: .* pins a local version", id="ours"),
    pytest.param(["aiohttp 3.14.5"], r"s\.txt:1: 'aiohttp 3\.14\.5' is not a requirement", id="garbage"),
    pytest.param(["# only a header"], r"s\.txt: locks nothing", id="empty"),
])
def test_refusals_name_file_and_line(tmp_path: pathlib.Path, lines: list[str], match: str) -> None:
    path = tmp_path / "s.txt"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=match):
        locks.read(path)


def test_missing_lock_says_how_to_make_it(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match=r"no lock for stack 'sglang-9\.0'; make it with `python -m fp4graph lock sglang-9\.0`"):
        locks.read(tmp_path / "sglang-9.0.txt")


def test_make_leaves_our_pins_out_and_checks_like_parse() -> None:
    pins = [locks.LockedPin(name="sglang", version="9.0+fp4graph.1"), locks.LockedPin(name="six", version="1.0")]
    lock = locks.make("s", ["h"], pins, leave_out=["sglang"])
    assert [p.line for p in lock.pins] == ["six==1.0"]
    with pytest.raises(ConfigError, match="Six is locked twice"):
        locks.make("s", [], [*pins, locks.LockedPin(name="Six", version="1.1")], leave_out=["sglang"])


def test_holds(tmp_path: pathlib.Path) -> None:
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / "holds.toml").write_text(
        '[[hold]]\nstacks = ["s"]\nrequirement = "kernels<0.17"\nwhy = """a \\\n  reason"""\n')
    assert locks.read_holds(tmp_path) == [locks.Hold(stacks=("s",), requirement="kernels<0.17", why="a reason")]
    (tmp_path / "locks" / "holds.toml").write_text('[[hold]]\nstacks = ["s"]\nrequirement = "kernels<<"\nwhy = "x"\n')
    with pytest.raises(ConfigError, match=r"holds\.toml: \[\[hold\]\] #1: requirement 'kernels<<'"):
        locks.read_holds(tmp_path)


def test_the_committed_locks_parse_and_leave_our_pins_out() -> None:
    patches = pathlib.Path(__file__).resolve().parents[2] / "patches"
    found = sorted((patches / locks.LOCKS_DIR).glob("*.txt"))
    assert found, "no lock under patches/locks/"
    served = {stacks.served_name(v) for s in stacks.load(patches / "stacks.toml").stacks for v in s.serves}
    for path in found:
        lock = locks.read(path)
        names = {p.key for p in lock.pins}
        # sglang 0.5.16+ pins no flashinfer-cubin (FlashInfer fetches its cubins at run time).
        assert {"torch", "transformers"} | (set() if lock.stack in served else {"flashinfer-cubin"}) <= names, path
        assert not names & {"sglang", "flashinfer-python"}, path
        assert any("For: CPython" in line for line in lock.header), path
    assert locks.read_holds(patches)


def test_every_served_release_has_its_lock_naming_its_pins() -> None:
    """Each sglang release a flashinfer-only stack serves has patches/locks/sglang-X.txt, whose
    header names PyPI's sglang X and the stack's flashinfer at its current revision (a bumped
    revision needs the lock made again: `python -m fp4graph lock flashinfer-V`), and which
    locks the torch the sglang wheel pins (test_stacks holds the flashinfer pin to it)."""
    import zipfile

    from fp4graph.model.config import Settings
    from fp4graph.wheels.fetch import fetch

    repo = pathlib.Path(__file__).resolve().parents[2]
    catalog = stacks.load(repo / "patches" / "stacks.toml")
    served = [(s, v) for s in catalog.stacks for v in s.serves]
    assert served
    for stack, release in served:
        name = stacks.served_name(release)
        lock = locks.read(locks.lock_path(repo / "patches", name))
        flashinfer = catalog.artifact("flashinfer-python", catalog.versions(stack)["flashinfer-python"])
        assert lock.header[0].startswith(f"fp4graph lock of sglang {release} (PyPI's, pristine) beside stack "
                                         f"{stack.name} "), lock.header
        assert lock.header[1].split() == [f"sglang=={release}", f"flashinfer-python=={flashinfer.patched_version}"]
        pinned = catalog.artifact("sglang", release).file()
        with zipfile.ZipFile(fetch(Settings.from_env(repo), "sglang", pinned)) as wheel:
            info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            torch = stacks.exact_pins(wheel.read(info).decode(), pinned.filename)["torch"]
        assert lock.versions({"platform_machine": "x86_64", "sys_platform": "linux", "platform_system": "Linux",
                              "python_full_version": "3.11.7", "python_version": "3.11"})["torch"] == torch, name
