"""The gate's verdict as a user meets it: ``fp4graph suites --bundle`` on the fixture world.

Each case packs a bundle of the fixture upstream (conftest.py) with ``--pack`` and runs it as
the H200 run did, through the command line: its exit code, the lines it prints, report.md.
A run that proves nothing about the wheel (crashes in both installs, pristine passing
nothing, nothing compared) fails; so does a regression; a clean run passes; a bundle whose
test requirements the interpreter lacks is refused before anything runs.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Callable

import pytest

from fp4graph import cli
from fp4graph.verify import suites

from .conftest import PROJECT, SELECTION, STACK, World

REPORT = f"{STACK}-{PROJECT}-1.0"


@dataclasses.dataclass
class Gate:
    code: int
    out: str
    err: str
    reports: pathlib.Path
    work: pathlib.Path

    @property
    def verdict(self) -> str:
        return self.out.strip().splitlines()[-1]

    @property
    def markdown(self) -> str:
        return (self.reports / f"{REPORT}.md").read_text()


@pytest.fixture
def gate(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Callable[..., Gate]:
    """``gate(*files, args=(), series="good", **selection_changes)``: pack a bundle of those
    files with the good (or bad) series, run it with ``--bundle`` (and ``args``)."""

    def run(*files: str, args: tuple[str, ...] = (), series: str = "good", **changes: object) -> Gate:
        world: World = request.getfixturevalue(f"{series}_world")
        monkeypatch.chdir(world.settings.repo)
        monkeypatch.setenv("FP4GRAPH_CACHE", str(world.settings.cache_dir))
        monkeypatch.setenv("FP4GRAPH_FIND_LINKS", str(world.wheel.parent))
        selection = dataclasses.replace(
            SELECTION, series_tests=None,
            files=tuple(suites.SuiteFile(pattern=f, area="core", budget_s=60) for f in files), **changes,
        )
        monkeypatch.setitem(suites.SELECTIONS, PROJECT, selection)
        carry = tmp_path / "carry"
        assert cli.main(["suites", STACK, "--repo", str(world.upstream), "--pack", str(carry)]) == 0
        capsys.readouterr()
        reports, work = tmp_path / "out", tmp_path / "work"
        code = cli.main(["suites", "--bundle", str(carry / f"{PROJECT}-1.0.tar.xz"), "--out", str(reports),
                         "--work", str(work), *args])
        printed = capsys.readouterr()
        return Gate(code, printed.out, printed.err, reports, work)

    return run


def test_a_file_that_crashes_in_both_installs_is_inconclusive_and_shows_its_output(gate: Callable[..., Gate]) -> None:
    result = gate("tests/test_crash.py", "tests/test_crash_at_import.py", "tests/test_ops.py")
    assert result.code == 1
    assert result.verdict.startswith(
        f"suites: INCONCLUSIVE, nothing proven about the wheel in {PROJECT} 1.0: "
        "tests/test_crash.py (crashed in both installs); "
        "tests/test_crash_at_import.py (crashed in both installs) ("
    )
    assert "points at the environment (a test requirement, the driver, the GPU)" in result.out
    md = result.markdown
    assert ("- result: **INCONCLUSIVE**: 2 file(s) prove nothing: tests/test_crash.py (crashed in both "
            "installs); tests/test_crash_at_import.py (crashed in both installs)") in md
    for variant in ("patched", "pristine"):
        crash = (f"tests/test_crash.py: crashed ({variant}), killed by SIGSEGV, in "
                 "`tests/test_crash.py::test_crashes`; its output ends:")
        at_import = f"tests/test_crash_at_import.py: crashed ({variant}), killed by SIGSEGV, while collecting"
        assert crash in md and at_import in md
    # The tails: what the test printed, and pytest's faulthandler naming the line.
    tails = md.split("its output ends:")[1:]
    assert len(tails) == 4
    assert all("Fatal Python error: Segmentation fault" in t for t in tails)
    assert sum('test_crash.py", line 11 in test_crashes' in t for t in tails) == 2
    assert sum('test_crash_at_import.py", line 5 in <module>' in t for t in tails) == 2
    assert all("frames of pytest and pluggy left out" in t and "/_pytest/" not in t for t in tails)
    assert sum("CUDA error: an illegal memory access was encountered" in t for t in tails) == 2
    assert sum("loading the kernel library failed" in t for t in tails) == 2
    assert md in result.out  # the command prints the report too
    # What did compare is still compared: test_ops.py's regression-free rows are there.
    assert "| tests/test_ops.py | core | 7 / 0 / 2 | 6 / 1 / 2 | 9 | 0 |" in md


def test_a_regression_fails_and_names_what_proves_nothing_too(gate: Callable[..., Gate]) -> None:
    result = gate("tests/test_ops.py", "tests/test_crash.py", series="bad")
    assert result.code == 1
    assert result.verdict.startswith(
        "suites: FAILED, a test passes pristine and fails patched (or a file collects only pristine) "
        f"in {PROJECT} 1.0: tests/test_ops.py; also INCONCLUSIVE: {PROJECT} 1.0: tests/test_crash.py "
        "(crashed in both installs) ("
    )
    assert ("- result: **1 regression(s)**; also INCONCLUSIVE: tests/test_crash.py (crashed in both "
            "installs) (a regression: passes pristine, fails patched)") in result.markdown
    assert "- `tests/test_ops.py::test_scale[3]`: failed" in result.markdown


def test_pristine_passing_nothing_is_inconclusive(gate: Callable[..., Gate]) -> None:
    result = gate("tests/test_toolchain.py", "tests/test_ops.py")
    assert result.code == 1
    assert result.verdict.startswith(
        f"suites: INCONCLUSIVE, nothing proven about the wheel in {PROJECT} 1.0: "
        "tests/test_toolchain.py (pristine passes none of the 3 test(s) that ran)"
    )
    assert "INCONCLUSIVE: pristine passes none of the 3 test(s) that ran" in result.markdown


def test_the_same_file_in_a_working_environment_passes(
    gate: Callable[..., Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMO_TOOLCHAIN", "1")
    result = gate("tests/test_toolchain.py", "tests/test_ops.py")
    assert result.code == 0, result.out
    assert result.verdict.startswith("suites: ok: no regression, 9 test(s) checked in 2 file(s) (")
    assert "- result: **no regression** (9 test(s) pass pristine and ran patched)" in result.markdown


def test_a_run_that_compares_nothing_fails(gate: Callable[..., Gate]) -> None:
    # Only tests that skip themselves (as every fp4 test does below SM100): nothing checked.
    result = gate("tests/test_ops.py", args=("--pytest-arg=-k", "--pytest-arg=fp4_numerics"))
    assert result.code == 1
    assert result.verdict.startswith(
        f"suites: INCONCLUSIVE, nothing proven about the wheel in {PROJECT} 1.0: "
        "nothing compared (no test passed pristine and ran patched)"
    )


def test_a_missing_requirement_is_named_before_anything_runs(gate: Callable[..., Gate]) -> None:
    result = gate("tests/test_ops.py", requirements=("demo-toolchain>=2", "pytest>=999"))
    assert result.code == 2
    pytest_version = pytest.__version__
    assert result.err.startswith(
        f"SuiteError: the test interpreter {sys.executable} lacks what upstream's tests import; "
        f"nothing was run:\n  {PROJECT}-1.0 ("
    )
    assert f"): demo-toolchain>=2 (not installed), pytest>=999 ({pytest_version} installed)\n" in result.err
    assert f"install them ({sys.executable} -m pip install 'demo-toolchain>=2' 'pytest>=999')" in result.err
    assert not result.reports.exists() and not list(result.work.glob("run-*"))


def test_without_a_gpu_a_gpu_bundle_skips_with_its_reason(gate: Callable[..., Gate]) -> None:
    if suites.cuda_available():
        pytest.skip("this machine has a GPU")
    result = gate("tests/test_ops.py", needs_cuda=True)
    assert result.code == 0
    assert f"suites: skip {PROJECT}-1.0 (" in result.out
    assert "): its tests need a CUDA GPU and torch sees none" in result.out
    assert result.verdict.startswith("suites: skipped: nothing to run here (")
    assert not result.reports.exists()
