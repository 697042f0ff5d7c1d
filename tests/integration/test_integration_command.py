"""Arguments, pins, the install plan, the SM120 check and its skip path, the dry-run plan,
and whole runs of the matrix through a fake interpreter and fake sglang servers."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import stat
import sys

import fake_python
import pytest

from fp4graph import commands
from fp4graph.commands import integration as command
from fp4graph.install import stack as installing
from fp4graph.integration import device, flags, options, plan, runner
from fp4graph.model import manifest, stacks
from fp4graph.model.errors import ConfigError
from fp4graph.model.manifest import BuiltStack, Manifest, Pin

REPO = pathlib.Path(__file__).resolve().parents[2]
H200 = "NVIDIA H200, 9.0\n"
PRO6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0\n"
# The fake repository's series exist for sglang only: its pin is the patched version at the
# catalog's current revision, flashinfer's the upstream one.
SGLANG_059 = "sglang==" + stacks.load(REPO / "patches" / "stacks.toml").artifact("sglang", "0.5.9").patched_version


def _args(*argv: str) -> argparse.Namespace:
    return commands.parser().parse_args(["integration", *argv])


def _cells(args: argparse.Namespace) -> list[str]:
    return [c.id for c in options.selected_cells(command.options(args))]


def _fake_repo(tmp: pathlib.Path, built: Manifest | None = None) -> pathlib.Path:
    repo = tmp / "repo"
    if repo.is_dir():
        return repo
    (repo / "patches").mkdir(parents=True)
    shutil.copy(REPO / "patches" / "stacks.toml", repo / "patches" / "stacks.toml")
    shutil.copytree(REPO / "patches" / "locks", repo / "patches" / "locks")
    for version in ("0.5.9", "0.5.11"):
        (repo / "patches" / "sglang" / version).mkdir(parents=True)
        (repo / "patches" / "sglang" / version / "series").write_text("0001-x.patch\n")
    if built is not None:
        (repo / "wheels").mkdir()
        manifest.write(repo / "wheels" / "manifest.json", built)
    return repo


def test_arguments() -> None:
    args = _args("--stack", "sglang-0.5.9")
    assert args.concurrency == (1, 10, 256, 1024) and args.tp == 1 and not args.dry_run
    assert args.family is None and args.bench == "primary"
    args = _args("--stack", "s", "--family", "glm5", "--family", "llama", "--start-order", "no-cuda-graph",
                 "--moe-runner-backend", "flashinfer_cutlass", "--shared-experts-fusion", "off")
    assert args.family == ["glm5", "llama"] and args.start_order == ["no-cuda-graph"]
    assert _cells(args) == [
        "glm5/no-cuda-graph/moe-flashinfer_cutlass/fusion-off", "llama/no-cuda-graph",
    ]
    assert _args("--stack", "s", "--concurrency", "4,64").concurrency == (4, 64)
    for bad in (["--concurrency", "0"], ["--family", "gpt2"], ["--start-order", "eager"]):
        with pytest.raises(SystemExit):
            _args("--stack", "s", *bad)
    with pytest.raises(SystemExit):
        _args("--concurrency", "1")  # --stack is required


def test_tp8_default_is_the_seed_deployment() -> None:
    """--tp 8 alone: GLM-5 in the seed's start order (--disable-cuda-graph, piecewise on),
    every MoE backend and fusion; a family or start order asked for is run as asked."""
    assert _cells(_args("--stack", "sglang-0.5.9", "--tp", "8")) == [
        "glm5/no-cuda-graph/moe-auto/fusion-on", "glm5/no-cuda-graph/moe-auto/fusion-off",
        "glm5/no-cuda-graph/moe-flashinfer_cutlass/fusion-on", "glm5/no-cuda-graph/moe-flashinfer_cutlass/fusion-off",
    ]
    assert _cells(_args("--stack", "sglang-0.5.9", "--tp", "8", "--family", "llama")) == [
        "llama/default", "llama/no-cuda-graph",
    ]
    assert len(_cells(_args("--stack", "sglang-0.5.9", "--tp", "4"))) == 40


def test_tp_beyond_what_a_generated_checkpoint_splits_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--tp 8: the generated checkpoints of qwen3-moe do not split 8 ways.*"
                       r"qwen3-moe 4"):
        _cells(_args("--stack", "sglang-0.5.9", "--tp", "8", "--family", "qwen3-moe"))


def test_user_checkpoint_family(tmp_path: pathlib.Path) -> None:
    ckpt = tmp_path / "GLM-5-NVFP4"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["GlmMoeDsaForCausalLM"]}))
    cells = _cells(_args("--stack", "s", "--model-path", str(ckpt), "--start-order", "no-cuda-graph"))
    assert cells[:2] == ["glm5/no-cuda-graph/moe-auto/fusion-on", "glm5/no-cuda-graph/moe-auto/fusion-off"]
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(ConfigError, match=r"config.json: architectures \['GPT2LMHeadModel'\] is none of"):
        _cells(_args("--stack", "s", "--model-path", str(ckpt)))
    with pytest.raises(ConfigError, match="--model-path brings its own"):
        _cells(_args("--stack", "s", "--model-path", str(ckpt), "--family", "llama"))


def test_pins_from_stacks_toml(tmp_path: pathlib.Path) -> None:
    """Without a manifest: patched local version where a series exists, upstream otherwise."""
    pins = plan.stack_pins(_fake_repo(tmp_path), "sglang-0.5.9")
    assert [p.requirement for p in pins.pins] == [SGLANG_059, "flashinfer-python==0.6.3"]
    assert pins.sglang_version == "0.5.9" and pins.source.endswith("stacks.toml")


def test_pins_from_manifest(tmp_path: pathlib.Path) -> None:
    pins = ("sglang==0.5.9+fp4graph.3", "flashinfer-python==0.6.3+fp4graph.2")
    stack = BuiltStack(name="sglang-0.5.9", artifacts=(), pins=tuple(map(Pin.parse, pins)))
    pins = plan.stack_pins(_fake_repo(tmp_path, Manifest(fp4graph="0", stacks=(stack,), artifacts={})), "sglang-0.5.9")
    assert [str(p.version) for p in pins.pins] == ["0.5.9+fp4graph.3", "0.6.3+fp4graph.2"]
    assert [p.revision for p in pins.pins] == [3, 2] and pins.sglang_version == "0.5.9"
    assert all(p.patched for p in pins.pins) and pins.source.endswith("manifest.json")


def test_unknown_stack(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ConfigError, match="no stack 'sglang-9'"):
        plan.stack_pins(_fake_repo(tmp_path), "sglang-9")


def test_install_commands(tmp_path: pathlib.Path) -> None:
    repo = _fake_repo(tmp_path, Manifest(fp4graph="0", stacks=(), artifacts={}))
    local = plan.make_plan(repo=repo, stack="sglang-0.5.9", work_dir=tmp_path / "w",
                           base_python="python3", wheels_dir=None, index_url=None)
    venv, _, install = local.commands()
    assert venv == ["python3", "-m", "venv", str(tmp_path / "w" / "venv")]
    assert install[install.index("--find-links") + 1] == str(repo / "wheels")
    assert install[-2:] == [SGLANG_059, "flashinfer-python==0.6.3"]
    newer = local.with_overrides("transformers==5.6.0")
    *same, override = newer.commands()
    assert newer.venv == tmp_path / "w" / "venv-transformers-5.6.0"
    assert same[2][-2:] == install[-2:]  # the stack's exact pins first ...
    assert override == [str(newer.python), "-m", "pip", "install", "transformers==5.6.0"]  # ... then over them
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
        pytest.param("NVIDIA GB10, 12.1\n", 1, None, id="gb10-sm121"),  # DGX Spark: the SM12x family
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


def _touch_wheels(repo: pathlib.Path, stack: str) -> None:
    """Empty files named like the stack's patched wheels in wheels/ (the fake pip never opens them)."""
    (repo / "wheels").mkdir(exist_ok=True)
    for pin in plan.stack_pins(repo, stack).pins:
        if pin.patched:
            (repo / "wheels" / f"{pin.project.replace('-', '_')}-{pin.version}-py3-none-any.whl").touch()


def _run(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch, *argv: str, stack: str = "sglang-0.5.9") -> int:
    monkeypatch.chdir(_fake_repo(tmp))
    return command.run(_args("--stack", stack, "--work-dir", str(tmp / "w"), "--output", str(tmp / "out"), *argv))


def test_skips_without_sm120_after_installing_as_users_do(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """On a machine without SM120 GPUs the run installs the stack as `nox -s install` does
    (the served wheels/, PyPI, the stack's lock), runs pip check and the import smoke, then
    skips: no checkpoint, no server."""
    python = _fake_env(tmp_path, monkeypatch, version="0.5.9", faults=[], smi=H200)
    assert _run(tmp_path, monkeypatch, "--python", str(python)) == 0
    out = capsys.readouterr().out
    assert command.SKIPPED + " no SM120 GPU" in out and "NVIDIA H200 (sm_90)" in out
    assert "installed and imported" in out and "install sglang-0.5.9: ok" in out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["status"] == "skipped" and "sm_90" in report["reason"] and report["cells"] == []
    assert report["families"] == ["llama", "qwen3", "qwen3-moe", "deepseek-v3", "glm4-moe", "glm5", "deepseek-v3.2"]
    argvs = [c["argv"] for c in _calls(tmp_path / "calls.jsonl")]
    (install,) = [a for a in argvs if a[:3] == ["-m", "pip", "install"] and "-c" in a]
    assert install[install.index("--index-url") + 1].startswith("http://127.0.0.1:")
    assert install[install.index("--extra-index-url") + 1] == "https://pypi.org/simple/"
    assert install[install.index("-c") + 1] == str(tmp_path / "repo" / "patches" / "locks" / "sglang-0.5.9.txt")
    assert install[-2:] == [SGLANG_059, "flashinfer-python==0.6.3"]
    assert ["-m", "pip", "check"] in argvs and ["-m", "sglang.launch_server", "--help"] in argvs
    assert not [a for a in argvs if a[:2] == ["-m", "fp4graph.integration.checkpoint"]]


def test_a_failed_import_fails_the_run_naming_it(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = _fake_env(tmp_path, monkeypatch, version="0.5.9", faults=[], smi=H200)
    cubin = "RuntimeError: flashinfer-cubin version (0.6.3) does not match flashinfer version (0.6.3+fp4graph.3)"
    monkeypatch.setenv("FAKE_IMPORT_ERRORS", json.dumps({"import flashinfer": cubin}))
    with pytest.raises(installing.InstallError, match=re.escape(f"smoke: import flashinfer: exit 1: {cubin}")):
        _run(tmp_path, monkeypatch, "--python", str(python))
    assert not (tmp_path / "out" / "report.json").exists()


def test_without_nvidia_smi_it_installs_then_skips(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    python = _fake_env(tmp_path, monkeypatch, version="0.5.9", faults=[], smi=None)
    assert _run(tmp_path, monkeypatch, "--python", str(python)) == 0
    assert "nvidia-smi is not on PATH" in capsys.readouterr().out


def test_dry_run_plan(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, monkeypatch, "--dry-run", "--tp", "4", "--concurrency", "1,1024",
                "--sglang-checkout", str(tmp_path / "sglang")) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    venv_python = str(tmp_path / "w" / "venv" / "bin" / "python")
    assert f"venv: {tmp_path / 'w' / 'venv'}" in out
    assert f"{SGLANG_059} flashinfer-python==0.6.3" in out
    assert "matrix: 40 cells x piecewise off/on" in out
    for family in ("llama", "qwen3", "qwen3-moe", "deepseek-v3", "glm4-moe", "glm5", "deepseek-v3.2"):
        assert f"{venv_python} -m fp4graph.integration.checkpoint" in out and f"--family {family}" in out
    assert "transformers: glm5 (>= 5.2.0)" in out and "pip install transformers==5.6.0" in out
    cell = lines.index("cell glm5/no-cuda-graph/moe-flashinfer_cutlass/fusion-off (GlmMoeDsaForCausalLM; "
                       "venv-transformers-5.6.0 where the venv's transformers predates 5.2.0):")
    off, on = lines[cell + 1], lines[cell + 3]
    assert off.startswith("  server piecewise off:") and on.startswith("  server piecewise on:")
    assert "--enable-piecewise-cuda-graph" in on and "--enable-piecewise-cuda-graph" not in off
    for flag in ("--disable-cuda-graph", "--moe-runner-backend flashinfer_cutlass", "--disable-shared-experts-fusion"):
        assert flag in on and flag in off
    assert "--quantization modelopt_fp4 --tp-size 4" in on
    # bench_serving only in the primary cells (MoE backend auto, fusion on): 2 per family
    assert out.count("--max-concurrency 1024") == 2 * 7 * 2
    assert "test_piecewise_cuda_graph_small_1_gpu.py" in out
    assert not (tmp_path / "w").exists()  # a dry run creates nothing


def test_dry_run_leaves_out_what_the_release_lacks(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """sglang 0.5.8 has no GLM-5 model class: the plan leaves GLM-5 out and says why;
    asked for by name, the run stops with an error before it installs anything."""
    assert _run(tmp_path, monkeypatch, "--dry-run", stack="sglang-0.5.8") == 0
    out = capsys.readouterr().out
    assert "matrix: 32 cells x piecewise off/on" in out and "cell glm5/" not in out
    assert "left out: glm5 (sglang 0.5.8 has no model class for GlmMoeDsaForCausalLM, new in 0.5.9)" in out
    with pytest.raises(ConfigError, match="sglang 0.5.8 has no model class for glm5"):
        _run(tmp_path, monkeypatch, "--family", "glm5", stack="sglang-0.5.8")
    assert not (tmp_path / "w").exists()


def test_device_check_and_missing_wheels(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """--device-check only reports (nox uses it to skip); without the patched wheels the run
    stops before installing anything and says how to build them."""
    monkeypatch.setenv("PATH", f"{_fake_smi(tmp_path, PRO6000)}{os.pathsep}{os.environ['PATH']}")
    assert _run(tmp_path, monkeypatch, "--device-check") == 0
    assert capsys.readouterr().out == "integration: 1 SM120 GPU(s) found\n"
    assert _run(tmp_path, monkeypatch, "--device-check", "--tp", "2") == 0
    assert capsys.readouterr().out.startswith(command.SKIPPED + " --tp 2 needs 2 SM120 GPUs")
    assert _run(tmp_path, monkeypatch, "--device-check", "--json") == 0  # what nox -s integration reads
    assert json.loads(capsys.readouterr().out) == {"tp": 1, "sm120_gpus": 1, "skip_reason": None}
    assert _run(tmp_path, monkeypatch, "--device-check", "--json", "--tp", "2") == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["sm120_gpus"] == 1 and answer["skip_reason"].startswith("--tp 2 needs 2 SM120 GPUs")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match=f"has no wheel for {re.escape(SGLANG_059)}: build them with "
                                          r"`nox -s wheels -- --stack sglang-0\.5\.9`"):
        _run(tmp_path, monkeypatch, "--python", sys.executable)
    assert not (tmp_path / "w").exists()


def _calls(log: pathlib.Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _fake_env(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch, *, version: str,
              faults: list[dict[str, object]], transformers: str = "4.57.1",
              smi: str | None = PRO6000) -> pathlib.Path:
    if smi is None:  # no nvidia-smi on PATH at all
        empty = tmp / "no-smi"
        empty.mkdir(exist_ok=True)
        monkeypatch.setenv("PATH", str(empty))
    else:
        monkeypatch.setenv("PATH", f"{_fake_smi(tmp, smi)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PYTHON_LOG", str(tmp / "calls.jsonl"))
    monkeypatch.setenv("FAKE_SGLANG_VERSION", version)
    monkeypatch.setenv("FAKE_SGLANG_FAULTS", json.dumps(faults))
    monkeypatch.setenv("FAKE_TRANSFORMERS", transformers)
    _touch_wheels(_fake_repo(tmp), "sglang-0.5.9")
    _touch_wheels(_fake_repo(tmp), "sglang-0.5.11")
    fake_python.make_venv(tmp / "base")
    return tmp / "base" / "bin" / "python"


def test_matrix_run_reports_every_cell(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.9: a crash in one cell and a different greedy output in another fail the run;
    every other cell still runs and passes; throughput is reported, never judged; GLM-5
    gets a venv with a transformers that knows its model type."""
    faults = [
        {"match": ["tiny-nvfp4-qwen3-moe", "flashinfer_cutlass", "--enable-piecewise-cuda-graph"], "fault": "crash"},
        {"match": ["tiny-nvfp4-llama", "--disable-cuda-graph", "--enable-piecewise-cuda-graph"], "fault": "differ"},
    ]
    python = _fake_env(tmp_path, monkeypatch, version="0.5.9", faults=faults)
    code = _run(tmp_path, monkeypatch, "--python", str(python), "--family", "llama", "--family", "qwen3-moe",
                "--family", "glm5", "--shared-experts-fusion", "on", "--start-order", "default",
                "--start-order", "no-cuda-graph", "--concurrency", "1,4", "--server-timeout", "60")
    out = capsys.readouterr().out
    assert code == 1, out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    cells = {c["id"]: c for c in report["cells"]}
    assert list(cells) == [
        "llama/default", "llama/no-cuda-graph",
        "qwen3-moe/default/moe-auto", "qwen3-moe/default/moe-flashinfer_cutlass",
        "qwen3-moe/no-cuda-graph/moe-auto", "qwen3-moe/no-cuda-graph/moe-flashinfer_cutlass",
        "glm5/default/moe-auto/fusion-on", "glm5/default/moe-flashinfer_cutlass/fusion-on",
        "glm5/no-cuda-graph/moe-auto/fusion-on", "glm5/no-cuda-graph/moe-flashinfer_cutlass/fusion-on",
    ]
    failed = {k for k, c in cells.items() if c["status"] == "failed"}
    assert failed == {"llama/no-cuda-graph", "qwen3-moe/default/moe-flashinfer_cutlass",
                      "qwen3-moe/no-cuda-graph/moe-flashinfer_cutlass"}
    crashed = cells["qwen3-moe/default/moe-flashinfer_cutlass"]
    assert crashed["runs"]["on"]["startup_s"] is None and "exited with code 1" in crashed["runs"]["on"]["error"]
    assert crashed["runs"]["off"]["startup_s"] is not None and crashed["greedy"]["compared_prompts"] == 0
    differ = cells["llama/no-cuda-graph"]
    assert [m["prompt"] for m in differ["greedy"]["mismatches"]] == ["def fibonacci(n):"]
    passed = cells["glm5/no-cuda-graph/moe-auto/fusion-on"]
    assert passed["greedy"]["identical"] and passed["runs"]["on"]["captured"] and not passed["runs"]["off"]["captured"]
    on_cmd = passed["runs"]["on"]["command"]
    assert "--enable-piecewise-cuda-graph" in on_cmd and "--disable-cuda-graph" in on_cmd
    # bench_serving in the primary cells only, at the chosen levels
    benched = {k for k, c in cells.items() if c["bench"]}
    assert benched == {"llama/default", "llama/no-cuda-graph", "qwen3-moe/default/moe-auto",
                       "qwen3-moe/no-cuda-graph/moe-auto", "glm5/default/moe-auto/fusion-on",
                       "glm5/no-cuda-graph/moe-auto/fusion-on"}
    assert [r["concurrency"] for r in cells["llama/default"]["bench"]] == [1, 4]
    # GLM-5 ran from the second venv (transformers 5.6.0 over the 0.5.9 pins), the rest not
    calls = _calls(tmp_path / "calls.jsonl")
    newer = str(tmp_path / "w" / "venv-transformers-5.6.0")
    assert report["transformers"] == {str(tmp_path / "w" / "venv"): "4.57.1", newer: "5.6.0"}
    servers = [c for c in calls if c["argv"][:2] == ["-m", "sglang.launch_server"] and "--help" not in c["argv"]]
    assert len(servers) == 2 * len(cells)
    for call in servers:
        is_glm5 = "tiny-nvfp4-glm5" in " ".join(call["argv"])  # type: ignore[arg-type]
        assert (call["venv"] == newer) is is_glm5, call
    checkpoints = [c for c in calls if c["argv"][:2] == ["-m", "fp4graph.integration.checkpoint"]]
    assert [c["argv"][-1] for c in checkpoints] == ["llama", "qwen3-moe", "glm5"]
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Matrix: 7 of 10 cells passed" in text
    assert "FAILED: qwen3-moe/default/moe-flashinfer_cutlass: piecewise on:" in out


def test_nsa_on_newer_releases_and_cached_checkpoints(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """0.5.11: piecewise is on by default; GLM-5 runs with --enforce-piecewise-cuda-graph and
    no second venv (its transformers knows glm_moe_dsa); a second run reuses the
    checkpoint, and a run whose "on" server does not capture fails."""
    python = _fake_env(tmp_path, monkeypatch, version="0.5.11", faults=[], transformers="5.6.0")
    argv = ("--python", str(python), "--family", "glm5", "--start-order", "no-cuda-graph",
            "--moe-runner-backend", "auto", "--shared-experts-fusion", "off", "--bench", "none")
    assert _run(tmp_path, monkeypatch, *argv, stack="sglang-0.5.11") == 0, capsys.readouterr().out
    cell = json.loads((tmp_path / "out" / "report.json").read_text())["cells"][0]
    assert cell["id"] == "glm5/no-cuda-graph/moe-auto/fusion-off" and cell["status"] == "passed"
    assert cell["runs"]["on"]["command"][-1] == "--enforce-piecewise-cuda-graph"
    assert cell["runs"]["off"]["command"][-1] == "--disable-piecewise-cuda-graph"
    assert cell["bench"] == []
    assert not (tmp_path / "w" / "venv-transformers-5.6.0").exists()
    calls = _calls(tmp_path / "calls.jsonl")
    assert sum(c["argv"][:2] == ["-m", "fp4graph.integration.checkpoint"] for c in calls) == 1
    stamp = json.loads((tmp_path / "w" / "checkpoints" / "tiny-nvfp4-glm5" / runner.STAMP).read_text())
    assert stamp["family"] == "glm5" and stamp["size"] == "serve"

    monkeypatch.setenv("FAKE_SGLANG_FAULTS", json.dumps([{"match": ["--enforce"], "fault": "no-capture"}]))
    assert _run(tmp_path, monkeypatch, *argv, stack="sglang-0.5.11") == 1
    calls = _calls(tmp_path / "calls.jsonl")
    assert sum(c["argv"][:2] == ["-m", "fp4graph.integration.checkpoint"] for c in calls) == 1  # reused
    cell = json.loads((tmp_path / "out" / "report.json").read_text())["cells"][0]
    assert cell["problems"] == [
        f"piecewise on: the server log lacks {flags.PIECEWISE_CAPTURED_MARKER!r} "
        "(sglang switched piecewise CUDA graphs off?)"
    ]
