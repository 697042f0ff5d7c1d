"""``python -m fp4graph install`` end to end against a fixture index served over HTTP, and
its parts: the one install command (the README's), the lock check, the error lines."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from fp4graph.commands import install as install_command
from fp4graph.install import stack
from fp4graph.model import locks
from fp4graph.model.config import Settings
from harness.install_world import CUBIN_ERROR, KERNEL, SERVED_NAME, SERVED_PINS, STACK, World

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_the_readme_shows_the_command_the_session_runs() -> None:
    """One command and only the index URL (no checkout): x86_64 with pip, a DGX Spark with uv."""
    readme = (REPO / "README.md").read_text()
    assert install_command.readme_command("sglang-0.5.9") in readme
    assert install_command.readme_command("sglang-0.5.9") == (
        "pip install --index-url https://pypi.internal/simple/ -c https://pypi.internal/locks/sglang-0.5.9.txt "
        "-r https://pypi.internal/locks/sglang-0.5.9.pins.txt")
    spark = install_command.readme_command("sglang-0.5.9", platform="linux-aarch64")
    assert spark in readme
    assert spark == (
        "uv pip install --index-url https://pypi.internal/simple/ -c https://pypi.internal/locks/sglang-0.5.9.txt "
        "--override https://pypi.internal/locks/sglang-0.5.9.linux-aarch64.overrides.txt "
        "-r https://pypi.internal/locks/sglang-0.5.9.linux-aarch64.pins.txt")


def test_install_command_pip_and_uv() -> None:
    pins = ["sglang==1+fp4graph.1"]
    assert stack.install_command(["pip"], index_url="http://ours/simple/", extra_index_urls=["https://pypi/"],
                                 lock="l.txt", pins=pins) == [
        "pip", "install", "--index-url", "http://ours/simple/", "--extra-index-url", "https://pypi/",
        "-c", "l.txt", "sglang==1+fp4graph.1"]
    # uv: ours first, PyPI the default; a name ours has in other versions only (a pristine
    # pin) may come from PyPI (first-index would stop at ours).
    assert stack.install_command(["uv", "pip"], index_url="http://ours/simple/", extra_index_urls=["https://pypi/"],
                                 lock=None, pins=pins, uv=True) == [
        "uv", "pip", "install", "--index", "http://ours/simple/", "--default-index", "https://pypi/",
        "--index-strategy", "unsafe-first-match", "sglang==1+fp4graph.1"]
    # One index (the README's mirror), or a strategy of the caller's: none added.
    assert "--index-strategy" not in stack.install_command(["uv", "pip"], index_url="http://ours/simple/",
                                                           lock=None, pins=pins, uv=True)
    chosen = stack.install_command(["uv", "pip"], index_url="http://ours/simple/", extra_index_urls=["https://pypi/"],
                                   lock=None, pins=pins, uv=True, options=["--index-strategy", "unsafe-best-match"])
    assert chosen.count("--index-strategy") == 1


def test_lock_problems_name_each_difference() -> None:
    lock = locks.make("s", [], [locks.LockedPin(name="six", version="1.0"),
                                locks.LockedPin(name="attrs", version="2.0", marker='python_version < "3"')])
    installed = {"six": "1.1", "attrs": "3.0", "pip": "26.3", "sglang": "1+fp4graph.1"}
    assert stack.lock_problems(lock, installed, ["sglang==1+fp4graph.1"], None) == [
        "six 1.1 installed, locked 1.0", "attrs 3.0 installed, not in the lock"]


def test_fp4_warmup_is_checked_only_where_flashinfer_is_ours(tmp_path: pathlib.Path) -> None:
    """fp4_warmup is our series' function (topic fp4-warmup): a stack serving flashinfer
    pristine, or ours without that topic (0.6.11.post1's CUDA-version series), does not fail
    its smoke on it."""
    settings = Settings(repo=REPO, cache_dir=tmp_path / "cache")

    def names(*pins: str) -> list[str]:
        options = stack.options_for(settings, "s", venv=tmp_path / "v", base_python="python", locked=False,
                                    pins=pins)
        return [c.name for c in options.checks]

    assert "flashinfer.fp4_warmup" in names("sglang==0.5.9+fp4graph.4", "flashinfer-python==0.6.3+fp4graph.5")
    assert "flashinfer.fp4_warmup" not in names("sglang==0.5.12.post1+fp4graph.1", "flashinfer-python==0.6.11.post1")
    assert "flashinfer.fp4_warmup" not in names("sglang==0.5.12.post1+fp4graph.1",
                                                "flashinfer-python==0.6.11.post1+fp4graph.1")


def test_error_line_is_the_last_exception() -> None:
    out = "Traceback (most recent call last):\n  File x\nImportError: first\nduring handling\nRuntimeError: last one\n"
    assert stack.error_line(out) == "RuntimeError: last one"
    assert stack.error_line("") == "(no output)"


def run_install(world: World, tmp_path: pathlib.Path, *args: str,
                name: str = STACK) -> tuple[subprocess.CompletedProcess[str], dict]:
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(world.repo / "src")}
    argv = [sys.executable, "-m", "fp4graph", "install", name, "--python", sys.executable, "--keep-pip",
            "--extra-index-url", world.pypi, "--venv", str(tmp_path / "venv"), "--report", str(report), *args]
    result = subprocess.run(argv, cwd=world.repo, env=env, capture_output=True, text=True, timeout=600)
    assert report.is_file(), result.stdout + result.stderr
    return result, json.loads(report.read_text())


def steps(report: dict) -> dict[str, dict]:
    return {s["name"]: s for s in report["steps"]}


def test_unlocked_takes_the_newest_and_the_smoke_names_what_breaks(world: World, tmp_path: pathlib.Path) -> None:
    result, report = run_install(world, tmp_path, "--no-lock", "--keep")
    assert result.returncode == 1
    versions = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                              capture_output=True, text=True, check=True).stdout
    assert {"name": KERNEL, "version": "9.1.0"} in json.loads(versions)
    failed = {s["name"]: s for s in report["steps"] if not s["ok"]}
    assert set(failed) == {"smoke: import sgl_kernel", "smoke: ModelOpt fp4 method", "smoke: launch_server --help"}
    assert failed["smoke: import sgl_kernel"]["detail"] == "exit 1: ImportError: 9.1"
    assert "smoke: import sgl_kernel: FAILED" in result.stdout and "ImportError: 9.1" in result.stdout
    assert (f"install {STACK}: FAILED: smoke: import sgl_kernel, smoke: ModelOpt fp4 method, "
            "smoke: launch_server --help") in result.stdout


@pytest.mark.parametrize("world", [True], indirect=True, ids=["cubin-mismatch"])
def test_a_failing_import_fails_the_command_naming_the_module(world: World, tmp_path: pathlib.Path) -> None:
    result, report = run_install(world, tmp_path)
    assert result.returncode == 1
    failed = [s for s in report["steps"] if not s["ok"]]
    assert failed[0]["name"] == "smoke: import flashinfer"
    assert failed[0]["detail"] == f"exit 1: {CUBIN_ERROR}"
    assert "flashinfer/__init__.py" in failed[0]["tail"]  # the traceback's last lines
    assert f"smoke: import flashinfer: FAILED (0 s): exit 1: {CUBIN_ERROR}" in result.stdout.replace("(1 s)", "(0 s)")
    assert not (tmp_path / "venv").exists()  # removed unless --keep


def test_installs_with_the_lock_from_the_served_index(world: World, tmp_path: pathlib.Path) -> None:
    """sglang-9.1.0, served by the flashinfer-only stack: the fixture PyPI's sglang (our
    index serves sglang too, in 9.0.0+fp4graph.1 only), our flashinfer (PyPI's pristine 9.0.0
    would also meet sglang's pin), the release's published lock and pins files. (A stack's
    own sglang installs the same way: the other tests here.)"""
    result, report = run_install(world, tmp_path, "--keep", name=SERVED_NAME)
    assert result.returncode == 0, result.stdout + result.stderr
    done = steps(report)
    assert all(s["ok"] for s in done.values()), done
    assert list(done)[:5] == ["venv", "install", "disk", "pip check", "lock"]
    # The fixture's flashinfer 9.0.0 has no series here, so no fp4-warmup topic: no fp4_warmup check.
    assert [n for n in done if n.startswith("smoke: ")] == [f"smoke: {c.name}"
                                                           for c in stack.smoke_checks([], fp4_warmup=False)]
    # The README's command: our index over HTTP, PyPI's stand-in, the published lock and pins.
    assert "--index-url http://127.0.0.1:" in report["command"] and f"--extra-index-url {world.pypi}" in report["command"]
    assert f"/locks/{SERVED_NAME}.txt -r http://127.0.0.1:" in report["command"]
    assert report["command"].endswith(f"/locks/{SERVED_NAME}.pins.txt")
    assert f"$ {report['command']}" in result.stdout and f"install {SERVED_NAME}: ok" in result.stdout
    listed = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "list", "--format=json"],
                            capture_output=True, text=True, check=True).stdout
    versions = {d["name"]: d["version"] for d in json.loads(listed)}
    assert (versions["sglang"], versions["flashinfer-python"], versions[KERNEL]) == ("9.1.0", "9.0.0+fp4graph.1", "9.0.0")
    assert done["lock"]["detail"].endswith("distributions as locked")


def test_the_smoke_refuses_a_flashinfer_that_is_not_ours_or_imports_dynamo(tmp_path: pathlib.Path) -> None:
    """``import flashinfer`` imports the pinned version (ours, not PyPI's of the same release)
    and leaves torch._dynamo unloaded."""
    package = tmp_path / "flashinfer"
    package.mkdir()
    (check,) = [c for c in stack.smoke_checks([], flashinfer="9.0.0+fp4graph.1") if c.name == "import flashinfer"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def run(body: str) -> subprocess.CompletedProcess[str]:
        (package / "__init__.py").write_text(body)
        return subprocess.run(check.argv(pathlib.Path(sys.executable)), capture_output=True, text=True, env=env)

    assert run('__version__ = "9.0.0+fp4graph.1"\n').returncode == 0
    pristine = run('__version__ = "9.0.0"\n')
    assert pristine.returncode == 1
    assert stack.error_line(pristine.stderr) == "AssertionError: flashinfer 9.0.0 imports, not the pinned 9.0.0+fp4graph.1"
    dynamo = run('import sys, types\nsys.modules["torch._dynamo"] = types.ModuleType("d")\n__version__ = "9.0.0+fp4graph.1"\n')
    assert "AssertionError: import flashinfer imported torch._dynamo" in stack.error_line(dynamo.stderr)


def test_lock_problems_name_our_pins_not_installed_as_pinned() -> None:
    lock = locks.make("s", [], [locks.LockedPin(name="six", version="1.0")])
    installed = {"six": "1.0", "sglang": "9.1.0", "flashinfer-python": "9.0.0"}
    assert stack.lock_problems(lock, installed, SERVED_PINS, None) == [
        "flashinfer-python 9.0.0 installed, pinned 9.0.0+fp4graph.1"]
    assert stack.lock_problems(lock, {"six": "1.0"}, SERVED_PINS[:1], None) == ["sglang not installed, pinned 9.1.0"]


def test_a_package_left_out_is_excluded_by_uv_and_fails_the_report(tmp_path: pathlib.Path) -> None:
    """``--leave-out cuda-tile`` (sglang 0.5.18+: a stub sdist that fetches from NVIDIA's
    index): uv resolves and installs the rest (``--excludes``); the report names what is
    missing at the lock's version and is never ok; pip has no such option."""
    cmd = stack.install_command(["uv", "pip"], index_url="http://ours/simple/", lock="l.txt", pins=SERVED_PINS,
                                uv=True, excludes="ex.txt")
    assert cmd[cmd.index("--excludes") + 1] == "ex.txt"
    with stack.excludes_file(["cuda-tile"]) as path:
        assert path is not None and pathlib.Path(path).read_text() == "cuda-tile\n"
    with stack.excludes_file([]) as none:
        assert none is None
    lock = locks.make("s", [], [locks.LockedPin(name="cuda-tile", version="1.6.0rc5")])
    options = stack.InstallOptions(stack=SERVED_NAME, pins=tuple(SERVED_PINS), repo=REPO, wheels_dir=tmp_path,
                                   venv=tmp_path / "v", base_python=sys.executable, lock=lock, lock_file=None,
                                   leave_out=("cuda-tile",))
    step = stack.left_out_step(options, None)
    assert not step.ok and step.detail.startswith("not installed (--leave-out): cuda-tile==1.6.0rc5;")
    with pytest.raises(stack.InstallError, match=r"--leave-out cuda-tile needs --installer uv"):
        stack.install_stack(options)


def test_a_flashinfer_only_stack_is_installed_by_the_release_it_serves() -> None:
    from fp4graph.model import stacks
    from fp4graph.model.errors import ConfigError

    catalog = stacks.load(REPO / "patches" / "stacks.toml")
    with pytest.raises(ConfigError, match=r"flashinfer-0\.6\.14 has no sglang: install the sglang release it serves "
                                          r"beside it, sglang-0\.5\.16, e\.g\. `python -m fp4graph install sglang-0\.5\.16`"):
        catalog.refuse_unserved("flashinfer-0.6.14")
    with pytest.raises(ConfigError, match=r"flashinfer-0\.7\.4 has no sglang and serves no sglang release"):
        catalog.refuse_unserved("flashinfer-0.7.4")
    catalog.refuse_unserved("sglang-0.5.16")
    catalog.refuse_unserved("sglang-0.5.9")
