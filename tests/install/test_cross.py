"""fp4graph.install.cross: the install for another platform (linux aarch64) and its smoke,
on their parts: the command, the one-interpreter smoke, pip check's sbsa tags. The whole
path under the emulated aarch64 python is `nox -s install -- STACK --platform linux-aarch64`
(docs/installing.md has its measurements)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

from fp4graph.install import cross, stack
from fp4graph.model import locks
from fp4graph.platforms.overrides import Override, PlatformPins, TorchBuild
from fp4graph.platforms.targets import LINUX_AARCH64

PINS = ("sglang==1+fp4graph.1", "flashinfer-python==2+fp4graph.3")
TORCH = TorchBuild(platform=LINUX_AARCH64, stacks=("s",), requirement="torch==2.9.1+cu130",
                   index="https://download.pytorch.org/whl/cu130", why="w")
KERNEL = TorchBuild(platform=LINUX_AARCH64, stacks=("s",), requirement="sgl-kernel==0.3.21+cu130",
                    index="https://docs.sglang.ai/whl/cu130/", why="w")
TMS = Override(platform=LINUX_AARCH64, stacks=("s",), requirement="tms==0.0.9.post1", why="w")


def options(tmp_path: pathlib.Path, *, torch_index: bool, checks: tuple[stack.SmokeCheck, ...] = ()
            ) -> cross.CrossOptions:
    base = stack.InstallOptions(stack="s", pins=PINS, repo=tmp_path, wheels_dir=tmp_path / "wheels",
                                venv=tmp_path / "target", base_python=sys.executable, lock=None,
                                lock_file=None, checks=checks)
    return cross.CrossOptions(base=base, platform=LINUX_AARCH64, python_version="3.11", uv=("uv",),
                              interpreter=(sys.executable,), extra=PlatformPins(overrides=(TMS,), torch=TORCH),
                              torch_index=torch_index)


def published(tmp_path: pathlib.Path, *names: str) -> None:
    for name in names:
        (tmp_path / "wheels" / "locks").mkdir(parents=True, exist_ok=True)
        (tmp_path / "wheels" / "locks" / name).write_text("")


def test_the_command_is_the_readmes_for_the_target(tmp_path: pathlib.Path) -> None:
    """The published pins and overrides, uv for aarch64 into --target; torch's CUDA build and
    its index where that index is reachable."""
    published(tmp_path, "s.pins.txt", "s.linux-aarch64.pins.txt", "s.linux-aarch64.overrides.txt")
    where = stack.InstallSources(index_url="http://i/simple/", lock="http://i/locks/s.txt", base="http://i/")
    spark = cross.target_command(options(tmp_path, torch_index=True), where, None)
    assert spark[:4] == ["uv", "pip", "install", "--python-platform"]
    assert spark[4] == "aarch64-manylinux_2_34" and "--no-build" in spark
    assert spark[spark.index("--target") + 1] == str(tmp_path / "target")
    assert spark[spark.index("--index-strategy") - 1] == "https://download.pytorch.org/whl/cu130"
    assert spark[-6:] == ["-c", "http://i/locks/s.txt", "--override", "http://i/locks/s.linux-aarch64.overrides.txt",
                          "-r", "http://i/locks/s.linux-aarch64.pins.txt"]
    # Here: PyPI's torch (the stack's own pins file), said so in the report.
    here = options(tmp_path, torch_index=False)
    emulated = cross.target_command(here, where, None)
    assert "https://download.pytorch.org/whl/cu130" not in emulated and emulated[-1] == "http://i/locks/s.pins.txt"
    # ... and what the CUDA build brings that sglang imports: triton, at the lock's x86_64 pin.
    lock = locks.make("s", [], [locks.LockedPin(name="triton", version="3.5.1",
                                                marker='platform_machine == "x86_64" and sys_platform == "linux"')])
    locked = dataclasses.replace(here, base=dataclasses.replace(here.base, lock=lock))
    assert cross.target_command(locked, where, None)[-3:] == ["-r", "http://i/locks/s.pins.txt", "triton==3.5.1"]
    assert "added what the CUDA build brings and sglang imports: triton==3.5.1" in cross.torch_note(locked)
    assert cross.stand_ins(options(tmp_path, torch_index=True)) == []
    assert "not torch==2.9.1+cu130 from https://download.pytorch.org/whl/cu130" in cross.torch_note(here)
    # No published files (an --index-url given): the pins and a local overrides file.
    bare = stack.InstallSources(index_url="http://i/simple/", lock=None, base=None)
    assert cross.target_command(here, bare, tmp_path / "o.txt")[-4:] == ["--override", str(tmp_path / "o.txt"),
                                                                          *PINS]


def test_the_smoke_runs_every_check_in_one_interpreter_and_reports_each(tmp_path: pathlib.Path) -> None:
    checks = (stack.SmokeCheck(name="fine", code="print('hello')"),
              stack.SmokeCheck(name="broken", code="import no_such_module_here"),
              stack.SmokeCheck(name="driver", code="raise ImportError('libcuda.so.1: cannot open shared object file')"),
              stack.SmokeCheck(name="help", module="json.tool", args=("--help",)))
    report = stack.InstallReport(stack="s", venv="", command="")
    cross._smoke(report, dataclasses.replace(options(tmp_path, torch_index=False), base=dataclasses.replace(
        options(tmp_path, torch_index=False).base, checks=checks)), {}, tmp_path)
    found = {s.name: s for s in report.steps}
    assert list(found) == ["smoke: import torch", "smoke: fine", "smoke: broken", "smoke: driver", "smoke: help"]
    assert found["smoke: fine"].ok and found["smoke: fine"].detail == "hello"
    assert not found["smoke: broken"].ok
    assert found["smoke: broken"].detail == "ModuleNotFoundError: No module named 'no_such_module_here'"
    assert found["smoke: driver"].skipped and found["smoke: help"].ok
    assert found["smoke: import torch"].ok == _has_torch()


def test_the_targets_pth_files_add_their_directories(tmp_path: pathlib.Path) -> None:
    """A --target on PYTHONPATH has its .pth files ignored: nvidia-cutlass-dsl's `cutlass`,
    which sglang 0.5.15's deepseek_v2 imports, would not import under the target's interpreter."""
    target = tmp_path / "target"
    (target / "dsl" / "python_packages").mkdir(parents=True)
    (target / "dsl" / "python_packages" / "cutlass_like.py").write_text("VALUE = 7\n")
    (target / "dsl.pth").write_text("# a comment\nimport os\ndsl/python_packages\nmissing/dir\n")
    code = [sys.executable, "-c", "import cutlass_like; print(cutlass_like.VALUE)"]
    bare = subprocess.run(code, capture_output=True, text=True, env={"PYTHONPATH": str(target)})
    assert "No module named 'cutlass_like'" in bare.stderr
    path = cross.target_path(target)
    assert path.split(os.pathsep) == [str(target), str(target / "dsl" / "python_packages")]
    assert subprocess.run(code, capture_output=True, text=True, env={"PYTHONPATH": path}).stdout == "7\n"


def _has_torch() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def test_pip_checks_sbsa_complaint_is_told_apart(tmp_path: pathlib.Path) -> None:
    """NVIDIA's aarch64 wheels say manylinux2014_sbsa in their WHEEL file: pip check calls them
    unsupported on a Spark too; any other complaint stays a failure."""
    for name, tag in (("nvidia_cusparselt_cu13-0.8.0", "py3-none-manylinux2014_sbsa"),
                      ("other-1.0", "py3-none-manylinux2014_aarch64")):
        (tmp_path / f"{name}.dist-info").mkdir()
        (tmp_path / f"{name}.dist-info" / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")
    assert cross._sbsa_tagged(tmp_path, "nvidia-cusparselt-cu13 0.8.0 is not supported on this platform")
    assert not cross._sbsa_tagged(tmp_path, "other 1.0 is not supported on this platform")
    assert not cross._sbsa_tagged(tmp_path, "sglang 1 has requirement x==1, but you have x 2.")


def test_pip_checks_complaint_about_an_override_is_the_override(tmp_path: pathlib.Path) -> None:
    here = options(tmp_path, torch_index=False)
    assert cross._overridden(here, "sglang 1+fp4graph.1 has requirement tms==0.0.9, but you have tms 0.0.9.post1.")
    assert not cross._overridden(here, "sglang 1 has requirement tms==0.0.9, but you have tms 0.0.8.")
    assert not cross._overridden(here, "sglang 1 has requirement six==1, but you have six 0.0.9.post1.")


def test_the_checks_run_under_the_targets_interpreter_which_they_are_told(tmp_path: pathlib.Path) -> None:
    """A --check script runs by the target's interpreter (an argv prefix: the emulator's) from
    the checkout, the --target install and src/ on its path, and learns that argv (the
    whole-model simulation starts its child with it); a failing script is a failed step."""
    wrapper = tmp_path / "target-python"  # stands for qemu-aarch64-static -L ROOT python3.11
    wrapper.write_text(f"#!/bin/sh\nFP4GRAPH_TEST_WRAPPED=1 exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    (tmp_path / "show.py").write_text(
        "import json, os, sys\nprint(json.dumps({'path': sys.path, 'wrapped': os.environ.get('FP4GRAPH_TEST_WRAPPED'),"
        " 'told': os.environ['FP4GRAPH_INTERPRETER'], 'args': sys.argv[1:], 'cwd': os.getcwd()}))\n")
    checks = (stack.ExtraCheck(name="show", argv=("show.py", "--gpu", "sm121")),
              stack.ExtraCheck(name="broken", argv=("-c", "raise SystemExit('simulation llama: FAILED')")))
    here = options(tmp_path, torch_index=False)
    target = dataclasses.replace(here, interpreter=(str(wrapper), "-X", "utf8"),
                                 base=dataclasses.replace(here.base, extra_checks=checks,
                                                          log_file=tmp_path / "log"))
    report = stack.InstallReport(stack="s", venv="", command="")
    cross._extra_checks(report, target, {})
    show, broken = report.steps
    assert show.ok and show.detail == "passed under the linux-aarch64 interpreter"
    assert show.command.startswith(f"{wrapper} -X utf8 show.py --gpu sm121")
    seen = [json.loads(ln) for ln in (tmp_path / "log").read_text().splitlines() if ln.startswith("{")][0]
    assert seen["wrapped"] == "1" and seen["told"] == f"{wrapper} -X utf8" and seen["args"] == ["--gpu", "sm121"]
    assert seen["path"][1:3] == [str(tmp_path / "target"), str(tmp_path / "src")]
    assert seen["cwd"] == str(tmp_path)
    assert not broken.ok and "simulation llama: FAILED" in broken.detail


def test_another_build_from_its_own_index_goes_beside_torchs(tmp_path: pathlib.Path) -> None:
    """A [[build]] (sgl-kernel's cu130 build): its requirement and index join torch's where the
    indexes are reachable; here PyPI's build stands in, the report says so, and a check that
    fails only for the CUDA 12 library that build needs is skipped with the library named."""
    where = stack.InstallSources(index_url="http://i/simple/", lock=None, base=None)
    both = dataclasses.replace(options(tmp_path, torch_index=True),
                               extra=PlatformPins(overrides=(TMS,), torch=TORCH, builds=(KERNEL,)))
    spark = cross.target_command(both, where, None)
    assert [spark[i + 1] for i, a in enumerate(spark) if a == "--index"] == [
        "https://download.pytorch.org/whl/cu130", "https://docs.sglang.ai/whl/cu130/", "http://i/simple/"]
    assert spark.count("--index-strategy") == 1
    assert spark[-2:] == ["torch==2.9.1+cu130", "sgl-kernel==0.3.21+cu130"]
    here = dataclasses.replace(both, torch_index=False)
    assert "sgl-kernel" not in " ".join(cross.target_command(here, where, None))
    assert "sgl-kernel: PyPI's build, not sgl-kernel==0.3.21+cu130 from https://docs.sglang.ai/whl/cu130/" in (
        cross.torch_note(here))
    missing = "ImportError: libnvrtc.so.12: cannot open shared object file: No such file or directory"
    assert "needs libnvrtc.so.12" in cross.stand_in_failure(here, missing)
    assert cross.stand_in_failure(both, missing) == ""  # the real build was installed: a failure
    assert cross.stand_in_failure(here, "ImportError: libc10_cuda.so: cannot open shared object file") == ""
    assert cross.stand_in_failure(options(tmp_path, torch_index=False), missing) == ""  # no [[build]]
    checks = (stack.SmokeCheck(name="kernel", code=f"raise ImportError({missing!r})"),
              stack.SmokeCheck(name="other", code="raise ImportError('libfoo.so.12: cannot open shared object file')"))
    report = stack.InstallReport(stack="s", venv=str(tmp_path), command="")
    cross._smoke(report, dataclasses.replace(here, base=dataclasses.replace(here.base, checks=checks)), {}, tmp_path)
    found = {s.name: s for s in report.steps}
    assert found["smoke: kernel"].skipped and "sgl-kernel==0.3.21+cu130" in found["smoke: kernel"].detail
    assert found["smoke: other"].skipped  # any CUDA 12 library the stand-in lacks, named
    assert "libfoo.so.12" in found["smoke: other"].detail
