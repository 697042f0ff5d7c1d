"""bench_serving results: parse them into metrics, and the on-vs-off table of a cell."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Sequence
from typing import Any

from ..model.errors import Fp4graphError

# The seed's concurrency levels (1,520 output tok/s at 1024 on TP8, piecewise off).
CONCURRENCY = (1, 10, 256, 1024)


class BenchError(Fp4graphError):
    """bench_serving output could not be read."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BenchMetrics:
    """What the report compares; names follow bench_serving's JSONL keys."""

    completed: int
    output_throughput: float  # output tok/s
    total_throughput: float  # input + output tok/s
    mean_ttft_ms: float
    median_ttft_ms: float
    mean_itl_ms: float
    median_itl_ms: float


# bench_serving's printed labels (``"{:<40} {:<10}"`` lines) -> BenchMetrics fields.
_LABELS = {
    "Successful requests:": "completed",
    "Output token throughput (tok/s):": "output_throughput",
    "Total token throughput (tok/s):": "total_throughput",
    "Mean TTFT (ms):": "mean_ttft_ms",
    "Median TTFT (ms):": "median_ttft_ms",
    "Mean ITL (ms):": "mean_itl_ms",
    "Median ITL (ms):": "median_itl_ms",
}
_LINE = re.compile(r"^(?P<label>[A-Za-z][^:]*:)\s+(?P<value>-?[0-9.]+|nan|inf)\s*$")
_HEADER = "Serving Benchmark Result"


def parse_stdout(text: str) -> BenchMetrics:
    """Parse the result block bench_serving prints (the last one, if several)."""
    start = text.rfind(_HEADER)
    if start < 0:
        raise BenchError(f"no {_HEADER!r} block in bench_serving output:\n{text[-2000:]}")
    found: dict[str, float] = {}
    for line in text[start:].splitlines():
        match = _LINE.match(line.strip())
        if match and match["label"] in _LABELS:
            found.setdefault(_LABELS[match["label"]], float(match["value"]))
    missing = sorted(set(_LABELS.values()) - set(found))
    if missing:
        raise BenchError(f"bench_serving result block lacks {', '.join(missing)}")
    return BenchMetrics(**{k: (int(v) if k == "completed" else v) for k, v in found.items()})  # type: ignore[arg-type]


def parse_jsonl(path: pathlib.Path) -> BenchMetrics:
    """Parse the last record of bench_serving's ``--output-file`` (one JSON object a line)."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        record = json.loads(lines[-1])
    except (OSError, IndexError, json.JSONDecodeError) as exc:
        raise BenchError(f"{path}: no bench_serving record ({exc})") from None
    fields = [f.name for f in dataclasses.fields(BenchMetrics)]
    missing = [f for f in fields if f not in record]
    if missing:
        raise BenchError(f"{path}: record lacks {', '.join(missing)}")
    return BenchMetrics(**{f: record[f] for f in fields})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    concurrency: int
    on: BenchMetrics | None
    off: BenchMetrics | None

    def ratio(self, field: str) -> float | None:
        """on / off of ``field`` (> 1 is better for throughput, < 1 for latency)."""
        if self.on is None or self.off is None:
            return None
        a, b = getattr(self.on, field), getattr(self.off, field)
        return a / b if b else None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _get(metrics: BenchMetrics | None, field: str) -> float | None:
    return None if metrics is None else float(getattr(metrics, field))


RATIO_FIELDS = ("output_throughput", "total_throughput", "mean_ttft_ms", "mean_itl_ms")


def throughput_table(rows: Sequence[Row]) -> list[str]:
    """The on-vs-off table of one cell, as markdown lines."""
    lines = [
        "| concurrency | output tok/s on | off | on/off | total tok/s on | off | on/off "
        "| mean TTFT ms on | off | mean ITL ms on | off | on/off |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        on, off = r.on, r.off
        cells = [
            str(r.concurrency),
            _fmt(_get(on, "output_throughput")),
            _fmt(_get(off, "output_throughput")),
            _fmt(r.ratio("output_throughput"), 3),
            _fmt(_get(on, "total_throughput")),
            _fmt(_get(off, "total_throughput")),
            _fmt(r.ratio("total_throughput"), 3),
            _fmt(_get(on, "mean_ttft_ms")),
            _fmt(_get(off, "mean_ttft_ms")),
            _fmt(_get(on, "mean_itl_ms")),
            _fmt(_get(off, "mean_itl_ms")),
            _fmt(r.ratio("mean_itl_ms"), 3),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def rows_json(rows: Sequence[Row]) -> list[dict[str, Any]]:
    return [
        {
            "concurrency": r.concurrency,
            "on": None if r.on is None else dataclasses.asdict(r.on),
            "off": None if r.off is None else dataclasses.asdict(r.off),
            "ratio_on_off": {f: r.ratio(f) for f in RATIO_FIELDS},
        }
        for r in rows
    ]
