"""Flag selection per sglang version, checked against each version's own argparse source."""

from __future__ import annotations

import pathlib

import pytest

from fp4graph.integration import flags
from support.targets import pinned_versions

VERSIONS = pinned_versions("sglang")  # every sglang release patches/stacks.toml pins


@pytest.mark.parametrize(
    ("version", "on", "off"),
    [
        pytest.param("0.5.8.post1", ("--enable-piecewise-cuda-graph",), (), id="0.5.8-opt-in"),
        pytest.param("0.5.9", ("--enable-piecewise-cuda-graph",), (), id="0.5.9-opt-in"),
        pytest.param("0.5.9+fp4graph.1", ("--enable-piecewise-cuda-graph",), (), id="local-label"),
        pytest.param("0.5.10", (), ("--disable-piecewise-cuda-graph",), id="0.5.10-default-on"),
        pytest.param("0.5.10.post1", (), ("--disable-piecewise-cuda-graph",), id="0.5.10.post1"),
        pytest.param("0.5.11", (), ("--disable-piecewise-cuda-graph",), id="0.5.11"),
    ],
)
def test_piecewise_flags(version: str, on: tuple[str, ...], off: tuple[str, ...]) -> None:
    chosen = flags.piecewise_flags(version)
    assert (chosen.on, chosen.off) == (on, off)


def test_server_command_modes() -> None:
    common = dict(model_path="/m", tp=2, port=30000)
    on = flags.server_command("py", sglang_version="0.5.9", mode=flags.Piecewise.ON, **common)
    off = flags.server_command("py", sglang_version="0.5.9", mode=flags.Piecewise.OFF, **common)
    assert on[:3] == ["py", "-m", "sglang.launch_server"]
    assert on[on.index("--quantization") + 1] == "modelopt_fp4"
    assert on[on.index("--tp-size") + 1] == "2"
    assert "--enable-piecewise-cuda-graph" in on and "--enable-piecewise-cuda-graph" not in off
    new_off = flags.server_command("py", sglang_version="0.5.11", mode=flags.Piecewise.OFF, **common)
    assert new_off[-1] == "--disable-piecewise-cuda-graph"


def _bench(tmp: pathlib.Path) -> list[str]:
    return flags.bench_command(
        "py",
        base_url="http://127.0.0.1:1",
        model_path="/m",
        settings=flags.BenchSettings(concurrency=256, num_prompts=512, input_len=1024, output_len=256),
        output_file=tmp / "b.jsonl",
    )


def test_bench_command(tmp_path: pathlib.Path) -> None:
    cmd = _bench(tmp_path)
    assert cmd[cmd.index("--max-concurrency") + 1] == "256"
    assert cmd[cmd.index("--dataset-name") + 1] == "random-ids"  # no dataset download
    assert cmd[cmd.index("--output-file") + 1] == str(tmp_path / "b.jsonl")


def test_declared_flags_reads_literals() -> None:
    source = 'parser.add_argument(\n    "--tp-size",\n)\nparser.add_argument("--port", type=int)'
    assert flags.declared_flags(source) == {"--tp-size", "--port"}


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_flags_exist_in_that_sglang(wheel_tree, version: str, tmp_path: pathlib.Path) -> None:
    """Every flag we pass exists in that release's server_args.py / bench_serving.py."""
    tree = wheel_tree("sglang", version, patched=False)
    server_flags = flags.declared_flags((tree / "sglang/srt/server_args.py").read_text())
    bench_flags = flags.declared_flags((tree / "sglang/bench_serving.py").read_text())
    for mode in flags.Piecewise:
        cmd = flags.server_command("py", sglang_version=version, model_path="/m", mode=mode, tp=1, port=1)
        used = {a for a in cmd if a.startswith("--")}
        assert used <= server_flags, f"{version} launch_server lacks {sorted(used - server_flags)}"
    used = {a for a in _bench(tmp_path) if a.startswith("--")}
    assert used <= bench_flags, f"{version} bench_serving lacks {sorted(used - bench_flags)}"
    # The marker the run looks for in the server log is logged by that version.
    runner = (tree / "sglang/srt/model_executor/model_runner.py").read_text()
    assert flags.PIECEWISE_CAPTURED_MARKER in runner
