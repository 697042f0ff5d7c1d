"""Arguments, pins, the install plan, the SM120 check and its skip path, the dry-run plan."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import stat
import sys

import pytest

from fp4graph import cli
from fp4graph.integration import command, device, plan
from fp4graph.model.errors import ConfigError

REPO = pathlib.Path(__file__).resolve().parents[2]
H200 = "NVIDIA H200, 9.0\n"
PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0\n"


def _args(*argv: str) -> argparse.Namespace:
    return cli.parser().parse_args(["integration", *argv])


def _fake_repo(tmp: pathlib.Path, manifest: dict[str, object] | None = None) -> pathlib.Path:
    repo = tmp / "repo"
    (repo / "patches").mkdir(parents=True)
    shutil.copy(REPO / "patches" / "stacks.toml", repo / "patches" / "stacks.toml")
    (repo / "patches" / "sglang" / "0.5.9").mkdir(parents=True)
    (repo / "patches" / "sglang" / "0.5.9" / "series").write_text("0001-x.patch\n")
    if manifest is not None:
        (repo / "wheels").mkdir()
        (repo / "wheels" / "manifest.json").write_text(json.dumps(manifest))
    return repo


def test_arguments() -> None:
    args = _args("--stack", "sglang-0.5.9")
    assert args.concurrency == (1, 10, 256, 1024) and args.tp == 1 and not args.dry_run
    assert _args("--stack", "s", "--concurrency", "4,64").concurrency == (4, 64)
    with pytest.raises(SystemExit):
        _args("--stack", "s", "--concurrency", "0")
    with pytest.raises(SystemExit):
        _args("--concurrency", "1")  # --stack is required


def test_pins_from_stacks_toml(tmp_path: pathlib.Path) -> None:
    """Without a manifest: patched local version where a series exists, upstream otherwise."""
    pins = plan.stack_pins(_fake_repo(tmp_path), "sglang-0.5.9")
    assert [p.requirement for p in pins.pins] == ["sglang==0.5.9+fp4graph.1", "flashinfer-python==0.6.3"]
    assert pins.sglang_version == "0.5.9" and pins.source.endswith("stacks.toml")


def test_pins_from_manifest(tmp_path: pathlib.Path) -> None:
    manifest = {"stacks": [{"name": "sglang-0.5.9",
                            "pins": ["sglang==0.5.9+fp4graph.3", "flashinfer-python==0.6.3+fp4graph.2"]}]}
    pins = plan.stack_pins(_fake_repo(tmp_path, manifest), "sglang-0.5.9")
    assert [p.version for p in pins.pins] == ["0.5.9+fp4graph.3", "0.6.3+fp4graph.2"]
    assert all(p.patched for p in pins.pins) and pins.source.endswith("manifest.json")


def test_unknown_stack(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="no stack 'sglang-9'"):
        plan.stack_pins(_fake_repo(tmp_path), "sglang-9")


def test_install_commands(tmp_path: pathlib.Path) -> None:
    repo = _fake_repo(tmp_path, {"stacks": []})
    local = plan.make_plan(repo=repo, stack="sglang-0.5.9", work_dir=tmp_path / "w",
                           base_python="python3", wheels_dir=None, index_url=None)
    venv, _, install = local.commands()
    assert venv == ["python3", "-m", "venv", str(tmp_path / "w" / "venv")]
    assert install[install.index("--find-links") + 1] == str(repo / "wheels")
    assert install[-2:] == ["sglang==0.5.9+fp4graph.1", "flashinfer-python==0.6.3"]
    remote = plan.make_plan(repo=_fake_repo(tmp_path / "b"), stack="sglang-0.5.9", work_dir=tmp_path / "w",
                            base_python="python3", wheels_dir=None, index_url="https://idx/simple/")
    install = remote.commands()[-1]
    assert "--find-links" not in install
    assert install[install.index("--extra-index-url") + 1] == "https://idx/simple/"


@pytest.mark.parametrize(
    ("smi", "tp", "reason"),
    [
        pytest.param(PRO6000, 1, None, id="sm120"),
        pytest.param(H200, 1, r"no SM120 GPU \(.* sees: NVIDIA H200 \(sm_90\)\)", id="sm90"),
        pytest.param(PRO6000, 8, "--tp 8 needs 8 SM120 GPUs", id="too-few"),
        pytest.param(PRO6000 * 8, 8, None, id="tp8"),
        pytest.param("", 1, "sees: no GPU", id="none"),
    ],
)
def test_skip_reason(smi: str, tp: int, reason: str | None) -> None:
    report = device.DeviceReport(gpus=device.parse_nvidia_smi(smi), probe="nvidia-smi")
    got = report.skip_reason(tp)
    if reason is None:
        assert got is None
    else:
        assert got is not None and re.search(reason, got), got


def _fake_smi(tmp: pathlib.Path, output: str) -> pathlib.Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "nvidia-smi"
    escaped = output.replace("\n", "\\n")
    exe.write_text(f"#!/bin/sh\nprintf '{escaped}'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def test_probe_nvidia_smi(tmp_path: pathlib.Path) -> None:
    bin_dir = _fake_smi(tmp_path, PRO6000)
    report = device.probe_nvidia_smi(str(bin_dir / "nvidia-smi"))
    assert report.sm120 == (device.Gpu(name=PRO6000.split(",")[0], capability=(12, 0)),)
    missing = device.probe_nvidia_smi(str(tmp_path / "nope"))
    assert "nvidia-smi failed" in (missing.problem or "")


def test_probe_torch_on_a_cpu_build() -> None:
    report = device.probe_torch(sys.executable)
    assert report.skip_reason(1) is not None


def _run(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.chdir(_fake_repo(tmp))
    return command.run(_args("--stack", "sglang-0.5.9", "--work-dir", str(tmp / "w"),
                             "--output", str(tmp / "out"), *argv))


def test_skips_without_sm120(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", f"{_fake_smi(tmp_path, H200)}{os.pathsep}{os.environ['PATH']}")
    assert _run(tmp_path, monkeypatch) == 0
    out = capsys.readouterr().out
    assert out.startswith(command.SKIPPED) and "NVIDIA H200 (sm_90)" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["status"] == "skipped" and "sm_90" in report["reason"]
    assert not (tmp_path / "w" / "venv").exists()  # nothing installed


def test_skips_without_nvidia_smi(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert _run(tmp_path, monkeypatch) == 0
    assert "nvidia-smi is not on PATH" in capsys.readouterr().out


def test_dry_run_plan(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, monkeypatch, "--dry-run", "--tp", "8", "--concurrency", "1,1024",
                "--sglang-checkout", str(tmp_path / "sglang")) == 0
    out = capsys.readouterr().out
    venv_python = str(tmp_path / "w" / "venv" / "bin" / "python")
    assert f"venv: {tmp_path / 'w' / 'venv'}" in out
    assert "sglang==0.5.9+fp4graph.1 flashinfer-python==0.6.3" in out
    assert f"{venv_python} -m fp4graph.integration.checkpoint" in out
    off = next(line for line in out.splitlines() if line.startswith("server piecewise off:"))
    on = next(line for line in out.splitlines() if line.startswith("server piecewise on:"))
    assert "--enable-piecewise-cuda-graph" in on and "--enable-piecewise-cuda-graph" not in off
    assert "--quantization modelopt_fp4 --tp-size 8" in on
    assert out.count("--max-concurrency 1024") == 2 and out.count("bench c=") == 4
    assert "test_piecewise_cuda_graph_small_1_gpu.py" in out
    assert not (tmp_path / "w").exists()  # a dry run creates nothing
