"""Flags per sglang release and cell, checked against each release's own argument handling."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
from matrix_cells import CHECKED_STACK_IDS, STACK_IDS, families, stack_versions
from packaging.version import Version

from fp4graph.integration import flags
from fp4graph.integration.matrix import Cell, Fusion, Selection, StartOrder
from fp4graph.model import projects
from fp4graph.model.families import FAMILIES, GLM5, LLAMA, QWEN3_MOE
from fp4graph.model.series import load_series
from harness import tables

REPO = pathlib.Path(__file__).resolve().parents[2]
# The series' backport of sglang PR #23351 (upstream from 0.5.13): NSA models under piecewise.
NSA_TOPIC = "nsa-piecewise-cuda-graph"
NSA_OFF_TOPIC = "nsa-piecewise-off"  # 0.5.9's old 0003, which it replaced: piecewise off for NSA
NSA_UPSTREAM_SINCE = Version("0.5.13")


@pytest.mark.parametrize(
    ("version", "family", "on", "off"),
    [
        pytest.param("0.5.8.post1", LLAMA, ("--enable-piecewise-cuda-graph",), (), id="0.5.8-opt-in"),
        pytest.param("0.5.9", LLAMA, ("--enable-piecewise-cuda-graph",), (), id="0.5.9-opt-in"),
        pytest.param("0.5.9", GLM5, ("--enable-piecewise-cuda-graph",), (), id="0.5.9-nsa-opt-in"),
        pytest.param("0.5.9+fp4graph.1", LLAMA, ("--enable-piecewise-cuda-graph",), (), id="local-label"),
        pytest.param("0.5.10", LLAMA, (), ("--disable-piecewise-cuda-graph",), id="0.5.10-default-on"),
        pytest.param("0.5.10.post1", GLM5, ("--enforce-piecewise-cuda-graph",),
                     ("--disable-piecewise-cuda-graph",), id="0.5.10.post1-nsa-enforce"),
        pytest.param("0.5.11", QWEN3_MOE, (), ("--disable-piecewise-cuda-graph",), id="0.5.11"),
        pytest.param("0.5.11", GLM5, ("--enforce-piecewise-cuda-graph",),
                     ("--disable-piecewise-cuda-graph",), id="0.5.11-nsa-enforce"),
        pytest.param("0.5.12.post1", QWEN3_MOE, (), ("--disable-piecewise-cuda-graph",), id="0.5.12.post1"),
        pytest.param("0.5.12.post1", GLM5, ("--enforce-piecewise-cuda-graph",),
                     ("--disable-piecewise-cuda-graph",), id="0.5.12.post1-nsa-enforce"),
    ],
)
def test_piecewise_flags(version: str, family: Any, on: tuple[str, ...], off: tuple[str, ...]) -> None:
    chosen = flags.piecewise_flags(version, family)
    assert (chosen.on, chosen.off) == (on, off)


def test_cell_flags() -> None:
    cell = Cell(family=GLM5, start_order=StartOrder.NO_CUDA_GRAPH, moe_backend="flashinfer_cutlass",
                fusion=Fusion.OFF)
    assert flags.cell_flags(cell) == (
        "--disable-cuda-graph", "--moe-runner-backend", "flashinfer_cutlass", "--disable-shared-experts-fusion",
    )
    assert flags.cell_flags(Cell(family=LLAMA, start_order=StartOrder.DEFAULT)) == ()
    moe = Cell(family=QWEN3_MOE, start_order=StartOrder.DEFAULT, moe_backend="auto")
    assert flags.cell_flags(moe) == ("--moe-runner-backend", "auto")


def test_server_command_modes() -> None:
    cell = Cell(family=LLAMA, start_order=StartOrder.NO_CUDA_GRAPH)
    common: dict[str, Any] = dict(model_path="/m", cell=cell, tp=2, port=30000)
    on = flags.server_command("py", sglang_version="0.5.9", mode=flags.Piecewise.ON, **common)
    off = flags.server_command("py", sglang_version="0.5.9", mode=flags.Piecewise.OFF, **common)
    assert on[:3] == ["py", "-m", "sglang.launch_server"]
    assert on[on.index("--quantization") + 1] == "modelopt_fp4"
    assert on[on.index("--tp-size") + 1] == "2"
    assert "--enable-piecewise-cuda-graph" in on and "--enable-piecewise-cuda-graph" not in off
    assert "--disable-cuda-graph" in on and "--disable-cuda-graph" in off
    new_off = flags.server_command("py", sglang_version="0.5.11", mode=flags.Piecewise.OFF, **common)
    assert new_off[-1] == "--disable-piecewise-cuda-graph"
    extra = flags.server_command("py", sglang_version="0.5.11", mode=flags.Piecewise.ON, extra=["--x"], **common)
    assert extra[-1] == "--x"


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


def _series_topics(version: str) -> list[str]:
    series = load_series(REPO / "patches", "sglang", version)
    return series.topics if series is not None else []


def expected_piecewise(version: str, cell: Cell, mode: flags.Piecewise) -> bool:
    """What the patched release must decide: piecewise exactly in the "on" runs, NSA
    models included (the series' backport of PR #23351; 0.5.10+ with the enforce flag),
    except where the series turns piecewise off for NSA models instead (0.5.8.x, which
    the backport does not reach)."""
    if cell.family.nsa and NSA_OFF_TOPIC in _series_topics(version):
        return False
    return mode is flags.Piecewise.ON


@pytest.mark.parametrize("stack", STACK_IDS)
def test_nsa_series_carry_the_backport(stack: str) -> None:
    """Every sglang series before 0.5.13 runs NSA models piecewise: it carries the backport
    and no longer the patch that turned piecewise off for them."""
    version, _ = stack_versions(stack)
    topics = _series_topics(version)
    if Version(version) >= NSA_UPSTREAM_SINCE:
        assert NSA_TOPIC not in topics, f"sglang {version} has PR #23351 itself"
        return
    required = [t.name for t in projects.get("sglang").topics_required_for(version)]
    if NSA_TOPIC not in required:
        pytest.skip(f"sglang {version}: projects.py requires the NSA backport from 0.5.9 on")
    assert NSA_TOPIC in topics and NSA_OFF_TOPIC not in topics, (version, topics)


@pytest.mark.slow
@pytest.mark.parametrize("stack", STACK_IDS)
def test_flags_exist_in_that_sglang(wheel_tree: Any, stack: str, tmp_path: pathlib.Path) -> None:
    """Every flag of every cell exists in that release's server_args.py / bench_serving.py,
    and the marker the run looks for is logged by that release."""
    version, _ = stack_versions(stack)
    tree = wheel_tree("sglang", version, patched=True)
    server_flags = flags.declared_flags((tree / "sglang/srt/server_args.py").read_text())
    bench_flags = flags.declared_flags((tree / "sglang/bench_serving.py").read_text())
    for cell in Selection(sglang_version=version).cells():
        for mode in flags.Piecewise:
            cmd = flags.server_command("py", sglang_version=version, model_path="/m", cell=cell, mode=mode,
                                       tp=1, port=1)
            used = {a for a in cmd if a.startswith("--")}
            assert used <= server_flags, f"{version} {cell.id}: launch_server lacks {sorted(used - server_flags)}"
    used = {a for a in _bench(tmp_path) if a.startswith("--")}
    assert used <= bench_flags, f"{version} bench_serving lacks {sorted(used - bench_flags)}"
    runner = (tree / "sglang/srt/model_executor/model_runner.py").read_text()
    assert flags.PIECEWISE_CAPTURED_MARKER in runner


@pytest.mark.slow
@pytest.mark.parametrize("stack", CHECKED_STACK_IDS)
def test_every_cell_through_that_releases_server_args(sglang_checks: Any, stack: str) -> None:
    """sglang's own ServerArgs (argparse + __post_init__) of the stack's patched release takes
    every cell's arguments and decides piecewise exactly as the cell expects; the MoE
    backend, start order and fusion flags arrive as set."""
    version, _ = stack_versions(stack)
    results = sglang_checks(stack)
    errors = {k: v["error"] for k, v in results.items() if "error" in v}
    assert not errors, errors
    for cell in Selection(sglang_version=version).cells():
        for mode in flags.Piecewise:
            got = results[f"{cell.id}/{mode.value}"]
            # sglang up to 0.5.11 reads a deepseek_v32 config as deepseek_v3
            # (utils/hf_transformers/common.py _load_deepseek_v32_model); 0.5.12 has no such step.
            v3 = cell.family.name == "deepseek-v3.2" and Version(version) < Version("0.5.12")
            expected = "DeepseekV3ForCausalLM" if v3 else cell.family.architecture
            assert got["architecture"] == expected, (cell.id, got["architecture"])
            assert got["piecewise"]["enabled"] is expected_piecewise(version, cell, mode), (cell.id, mode, got)
            args = got["args"]
            assert args["quantization"] == "modelopt_fp4"
            assert args["disable_cuda_graph"] is (cell.start_order is StartOrder.NO_CUDA_GRAPH), (cell.id, args)
            if cell.moe_backend is not None:
                assert args["moe_runner_backend"] == cell.moe_backend, (cell.id, args)
            if cell.fusion is Fusion.OFF:
                assert args["disable_shared_experts_fusion"] is True, (cell.id, args)
            if cell.family.nsa:
                assert args["attention_backend"] == "nsa", (cell.id, args)
                # 0.5.10+ decide in ServerArgs: on for an NSA model only through the enforce flag.
                if mode is flags.Piecewise.ON and "enforce" in got["piecewise"]:
                    assert got["piecewise"]["enforce"] is True, (cell.id, got)


@pytest.mark.slow
@pytest.mark.parametrize("stack", CHECKED_STACK_IDS)
def test_nsa_needs_its_flag(sglang_checks: Any, stack: str) -> None:
    """Without a piecewise flag, sglang turns piecewise off for NSA models (0.5.9: opt-in;
    0.5.10+: the NSA auto-disable rule), and leaves it at its default for the others."""
    version, _ = stack_versions(stack)
    results = sglang_checks(stack)
    default_on = flags.piecewise_flags(version).on == ()
    for family in families(version):
        got = results[f"{family.name}/sglang-default"]["piecewise"]["enabled"]
        assert got is (default_on and not family.nsa), (family.name, got)


@pytest.mark.parametrize("stack", STACK_IDS)
def test_families_left_out_are_those_the_release_lacks(wheel_tree: Any, stack: str) -> None:
    """Family.min_sglang is a fact of each release: a family is in its matrix exactly
    when the release's models/ define its architecture."""
    version, _ = stack_versions(stack)
    models = wheel_tree("sglang", version, patched=False) / "sglang" / "srt" / "models"
    source = "\n".join(f.read_text(encoding="utf-8") for f in models.glob("*.py"))
    for family in FAMILIES.values():
        defined = re.search(rf"^class {family.architecture}\b", source, re.M) is not None
        assert defined is family.in_sglang(version), (version, family.name, family.architecture)


# What each release decides for piecewise CUDA graphs with MTP speculative decoding (NEXTN,
# which sglang turns into EAGLE), read from its code (README "Speculative decoding"): per
# release prefix, (the target model's runner captures piecewise graphs, the draft worker's
# does, the target's speculative prefill replays them), for the "on" runs of the matrix.
# Models with NSA attention on 0.5.10+ are "on" through --enforce-piecewise-cuda-graph,
# which skips every auto-disable rule (the speculative one included).
SPECULATIVE_ON = {
    "0.5.8": (True, False, True),  # can_run_piecewise_cuda_graph: False for a draft worker
    "0.5.9": (True, False, True),
    "0.5.10": (False, False, False),  # ServerArgs: speculative decoding turns piecewise off
    "0.5.11": (True, False, False),  # init_piecewise_cuda_graphs skips a draft worker; can_run
                                     # refuses a batch asking for other hidden states (FULL)
    "0.5.12": (True, False, False),  # as 0.5.11 (the same ServerArgs rules, draft skip, can_run)
}
# The same with --enforce-piecewise-cuda-graph (NSA models on 0.5.10+); None: the release
# has no such flag (NSA models opt in as the others do: SPECULATIVE_ON holds).
SPECULATIVE_ENFORCED: dict[str, tuple[bool, bool, bool] | None] = {
    "0.5.8": None,
    "0.5.9": None,
    "0.5.10": (True, False, True),
    "0.5.11": (True, False, False),
    "0.5.12": (True, False, False),
}
SPECULATIVE_TABLE = tables.Table("tests/integration/test_integration_flags.py: SPECULATIVE_ON", SPECULATIVE_ON,
                                 by_prefix=True)
SPECULATIVE_ENFORCED_TABLE = tables.Table("tests/integration/test_integration_flags.py: SPECULATIVE_ENFORCED",
                                          SPECULATIVE_ENFORCED, by_prefix=True)


def _speculative_expectation(version: str, family: Any) -> tuple[bool, bool, bool]:
    enforced = SPECULATIVE_ENFORCED_TABLE.row(version) if family.nsa else None
    return enforced if enforced is not None else SPECULATIVE_TABLE.row(version)


@pytest.mark.parametrize("family", [LLAMA, GLM5], ids=["llama", "glm5"])
def test_speculative_tables_fail_on_a_new_stack_by_name(family: Any) -> None:
    """The NSA family reads SPECULATIVE_ENFORCED first, the others SPECULATIVE_ON: a new
    release without a row in the one it reads fails naming that table (the tables
    themselves: tests/harness/test_release_tables.py)."""
    table = SPECULATIVE_ENFORCED_TABLE if family.nsa else SPECULATIVE_TABLE
    with pytest.raises(tables.MissingRow, match=f"{table.name} has no row for sglang {tables.FAKE_SGLANG}"):
        _speculative_expectation(tables.FAKE_SGLANG, family)


@pytest.mark.slow
@pytest.mark.parametrize("stack", CHECKED_STACK_IDS)
def test_speculative_decoding_and_piecewise(sglang_checks: Any, stack: str) -> None:
    """GLM-5 and DeepSeek-V3 with MTP through each release's own ServerArgs, ModelRunner
    and PiecewiseCudaGraphRunner.can_run: the target runs piecewise where the table says,
    the draft worker never does, and with piecewise off neither."""
    version, _ = stack_versions(stack)
    results = sglang_checks(stack)
    ran = [f for f in families(version) if f.name in ("glm5", "deepseek-v3")]
    assert ran, version
    for family in ran:
        on = results[f"spec:{family.name}/on"]
        off = results[f"spec:{family.name}/off"]
        assert "error" not in on and "error" not in off, (on, off)
        for got in (on["speculative"], off["speculative"]):
            assert got["algorithm"] == "EAGLE" and got["draft_is_target"] is True, got
            assert got["target_prefill_hidden"] == "FULL", got
        spec = on["speculative"]
        assert (spec["target"], spec["draft"], spec["target_prefill_replays"]) == _speculative_expectation(
            version, family), (family.name, spec)
        assert off["speculative"]["target"] is False and off["speculative"]["draft"] is False, off
