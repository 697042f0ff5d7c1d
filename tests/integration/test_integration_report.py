"""The report: every cell with its status, problems and throughput; throughput never fails."""

from __future__ import annotations

import json
import pathlib

from fp4graph.integration import benchmark, report
from fp4graph.integration.matrix import Cell, Fusion, StartOrder
from fp4graph.integration.server import Mismatch
from fp4graph.model.families import GLM5, LLAMA


def metrics(out: float, itl: float) -> benchmark.BenchMetrics:
    return benchmark.BenchMetrics(
        completed=8, output_throughput=out, total_throughput=out * 2,
        mean_ttft_ms=10.0, median_ttft_ms=9.0, mean_itl_ms=itl, median_itl_ms=itl,
    )


def _results() -> list[report.CellResult]:
    passed = report.CellResult(cell=Cell(family=LLAMA, start_order=StartOrder.DEFAULT), architecture="LlamaForCausalLM")
    passed.runs = {"off": report.Run(command=["x"], log="off.log", startup_s=12.0, captured=False),
                   "on": report.Run(command=["x"], log="on.log", startup_s=40.0, captured=True)}
    passed.compared = 5
    # piecewise on slower than off: reported, not a failure
    passed.bench = [benchmark.Row(concurrency=1, on=metrics(90.0, 2.0), off=metrics(100.0, 2.0))]
    failed = report.CellResult(
        cell=Cell(family=GLM5, start_order=StartOrder.NO_CUDA_GRAPH, moe_backend="auto", fusion=Fusion.OFF),
        architecture="GlmMoeDsaForCausalLM",
    )
    failed.runs = {"off": report.Run(command=["y"], log="off.log", startup_s=20.0, captured=False),
                   "on": report.Run(command=["y"], log="on.log", error="sglang exited with code 1")}
    failed.problems = ["piecewise on: sglang exited with code 1"]
    differ = report.CellResult(cell=Cell(family=LLAMA, start_order=StartOrder.NO_CUDA_GRAPH),
                               architecture="LlamaForCausalLM")
    differ.compared = 5
    differ.mismatches = [Mismatch(prompt="p", on="a", off="b", first_divergent_token=3)]
    differ.problems = ["greedy output differs for 'p'"]
    return [passed, failed, differ]


def test_report_files(tmp_path: pathlib.Path) -> None:
    results = _results()
    assert [r.passed for r in results] == [True, False, False]
    md, js = report.write(tmp_path / "out", results, {"stack": "sglang-0.5.9", "tp": 1, "status": "failed"})
    data = json.loads(js.read_text())
    assert data["stack"] == "sglang-0.5.9"
    cells = {c["id"]: c for c in data["cells"]}
    assert cells["llama/default"]["status"] == "passed" and cells["llama/default"]["greedy"]["identical"]
    assert cells["llama/default"]["bench"][0]["ratio_on_off"]["output_throughput"] == 0.9
    glm5 = cells["glm5/no-cuda-graph/moe-auto/fusion-off"]
    assert glm5["status"] == "failed" and glm5["shared_experts_fusion"] == "off"
    assert glm5["runs"]["on"]["error"] == "sglang exited with code 1"
    assert cells["llama/no-cuda-graph"]["greedy"]["mismatches"][0]["first_divergent_token"] == 3
    text = md.read_text()
    assert "## Matrix: 1 of 3 cells passed" in text
    assert "| llama/default | LlamaForCausalLM | up in 12 s | up in 40 s, piecewise captured | identical (5 prompts) | passed |" in text
    assert "| glm5/no-cuda-graph/moe-auto/fusion-off | GlmMoeDsaForCausalLM | up in 20 s | CRASHED | - | FAILED |" in text
    assert "DIFFERENT (1 of 5 prompts)" in text
    assert "- glm5/no-cuda-graph/moe-auto/fusion-off: piecewise on: sglang exited with code 1" in text
    assert "## Throughput: llama/default" in text and "| 1 | 90.00 | 100.00 | 0.900 |" in text
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_skipped_report_has_no_matrix(tmp_path: pathlib.Path) -> None:
    md, js = report.write(tmp_path, [], {"stack": "s", "status": "skipped", "reason": "no SM120 GPU"})
    assert json.loads(js.read_text())["cells"] == []
    assert "## Matrix" not in md.read_text() and "- reason: no SM120 GPU" in md.read_text()
