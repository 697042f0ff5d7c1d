"""bench_serving output parsing and the on-vs-off table."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from fp4graph.integration import benchmark

DATA = pathlib.Path(__file__).parent / "data"


def test_parse_recorded_stdout() -> None:
    """A result block as sglang's bench_serving printed it (quoted from sglang PR #9428)."""
    text = (DATA / "bench_serving_pr9428.txt").read_text()
    m = benchmark.parse_stdout(text)
    assert m == benchmark.BenchMetrics(
        completed=64,
        output_throughput=6.60,
        total_throughput=137029.34,
        mean_ttft_ms=7252.11,
        median_ttft_ms=6711.85,
        mean_itl_ms=8132.74,
        median_itl_ms=8584.20,
    )


def test_parse_stdout_takes_last_block_and_rejects_missing() -> None:
    text = (DATA / "bench_serving_pr9428.txt").read_text()
    twice = text.replace("6.60 ", "1.00 ") + "\n" + text
    assert benchmark.parse_stdout(twice).output_throughput == 6.60
    with pytest.raises(benchmark.BenchError, match="no 'Serving Benchmark Result'"):
        benchmark.parse_stdout("Traceback ...")
    cut = text.split("---------------Inter-Token Latency")[0]
    with pytest.raises(benchmark.BenchError, match="mean_itl_ms, median_itl_ms"):
        benchmark.parse_stdout(cut)


def test_parse_jsonl(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "b.jsonl"
    record = {
        "completed": 8, "output_throughput": 100.5, "total_throughput": 500.25,
        "mean_ttft_ms": 12.0, "median_ttft_ms": 11.0, "mean_itl_ms": 3.5, "median_itl_ms": 3.0,
        "duration": 1.0,
    }
    path.write_text(json.dumps({**record, "completed": 1}) + "\n" + json.dumps(record) + "\n")
    assert benchmark.parse_jsonl(path).total_throughput == 500.25
    path.write_text(json.dumps({"completed": 1}) + "\n")
    with pytest.raises(benchmark.BenchError, match="lacks output_throughput"):
        benchmark.parse_jsonl(path)


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.5.9", "0.5.10.post1", "0.5.11"])
def test_labels_and_keys_are_that_versions(wheel_tree, version: str) -> None:
    """The printed labels and JSONL keys we read are in that release's bench_serving.py."""
    source = (wheel_tree("sglang", version, patched=False) / "sglang/bench_serving.py").read_text()
    for label in benchmark._LABELS:
        assert f'"{label}"' in source, f"{version}: no label {label!r}"
    for field in benchmark.BenchMetrics.__dataclass_fields__:
        assert re.search(rf'"{field}":\s*metrics\.|"{field}":', source), f"{version}: no key {field}"
    assert "Serving Benchmark Result" in source


def metrics(out: float, itl: float) -> benchmark.BenchMetrics:
    return benchmark.BenchMetrics(
        completed=8, output_throughput=out, total_throughput=out * 2,
        mean_ttft_ms=10.0, median_ttft_ms=9.0, mean_itl_ms=itl, median_itl_ms=itl,
    )


def test_ratios_and_table() -> None:
    rows = [
        benchmark.Row(concurrency=1, on=metrics(300.0, 2.0), off=metrics(100.0, 6.0)),
        benchmark.Row(concurrency=1024, on=None, off=metrics(1520.0, 50.0)),
    ]
    data = benchmark.rows_json(rows)
    assert data[0]["ratio_on_off"]["output_throughput"] == pytest.approx(3.0)
    assert data[0]["ratio_on_off"]["mean_itl_ms"] == pytest.approx(1 / 3)
    assert data[1]["on"] is None and data[1]["ratio_on_off"]["total_throughput"] is None
    text = "\n".join(benchmark.throughput_table(rows))
    assert "| 1 | 300.00 | 100.00 | 3.000 |" in text
    assert "| 1024 | - | 1,520.00 | - |" in text
