"""The integration report: one entry per matrix cell, as markdown and JSON.

A cell fails when a server crashes or never becomes healthy, when the greedy outputs with
piecewise CUDA graphs on and off differ, or when the "on" server did not capture piecewise
graphs (or the "off" one did).  Throughput is reported, never judged.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..model.files import write_atomic
from . import benchmark
from .matrix import Cell
from .server import Mismatch


@dataclasses.dataclass(kw_only=True)
class Run:
    """One server start of a cell (piecewise on or off)."""

    command: list[str]
    log: str
    startup_s: float | None = None  # None: never healthy
    captured: bool | None = None  # the piecewise marker in the log
    error: str | None = None


@dataclasses.dataclass(kw_only=True)
class CellResult:
    cell: Cell
    architecture: str
    runs: dict[str, Run] = dataclasses.field(default_factory=dict)  # "off" / "on"
    mismatches: list[Mismatch] = dataclasses.field(default_factory=list)
    compared: int = 0  # prompts whose outputs were compared
    bench: list[benchmark.Row] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        c = self.cell
        return {
            "id": c.id,
            "family": c.family.name,
            "architecture": self.architecture,
            "start_order": c.start_order.value,
            "moe_runner_backend": c.moe_backend,
            "shared_experts_fusion": None if c.fusion is None else c.fusion.value,
            "status": "passed" if self.passed else "failed",
            "problems": list(self.problems),
            "runs": {mode: dataclasses.asdict(run) for mode, run in self.runs.items()},
            "greedy": {
                "compared_prompts": self.compared,
                "identical": self.compared > 0 and not self.mismatches,
                "mismatches": [dataclasses.asdict(m) for m in self.mismatches],
            },
            "bench": benchmark.rows_json(self.bench),
        }


def _run_cell(run: Run | None) -> str:
    if run is None:
        return "-"
    if run.error is not None:
        return "CRASHED" if run.startup_s is None else "failed during the run"
    text = f"up in {run.startup_s:.0f} s" if run.startup_s is not None else "-"
    if run.captured:
        text += ", piecewise captured"
    return text


def _greedy(result: CellResult) -> str:
    if result.compared == 0:
        return "-"
    if result.mismatches:
        return f"DIFFERENT ({len(result.mismatches)} of {result.compared} prompts)"
    return f"identical ({result.compared} prompts)"


def markdown(results: Sequence[CellResult], context: Mapping[str, Any]) -> str:
    title = f"# Piecewise CUDA graphs on vs off: {context.get('stack', '')}"
    lines = [title, ""]
    for key, value in context.items():
        if key not in ("problems",):
            lines.append(f"- {key}: {value}")
    if results:
        passed = sum(r.passed for r in results)
        lines += [
            "",
            f"## Matrix: {passed} of {len(results)} cells passed",
            "",
            "| cell | architecture | piecewise off | piecewise on | greedy on = off | status |",
            "|---|---|---|---|---|---|",
        ]
        for r in results:
            lines.append(
                f"| {r.cell.id} | {r.architecture} | {_run_cell(r.runs.get('off'))} "
                f"| {_run_cell(r.runs.get('on'))} | {_greedy(r)} | {'passed' if r.passed else 'FAILED'} |"
            )
    failed = [r for r in results if not r.passed]
    if failed or context.get("problems"):
        lines += ["", "## Problems", ""]
        lines += [f"- {p}" for p in context.get("problems") or []]
        for r in failed:
            lines += [f"- {r.cell.id}: {p}" for p in r.problems]
    for r in results:
        if r.bench:
            lines += ["", f"## Throughput: {r.cell.id}", "", *benchmark.throughput_table(r.bench)]
    return "\n".join(lines) + "\n"


def write(
    out_dir: pathlib.Path, results: Sequence[CellResult], context: Mapping[str, Any], stem: str = "report"
) -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``<stem>.md`` and ``<stem>.json`` under ``out_dir``; return their paths."""
    md_path, json_path = out_dir / f"{stem}.md", out_dir / f"{stem}.json"
    data = {**context, "cells": [r.to_json() for r in results]}
    write_atomic(json_path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    write_atomic(md_path, markdown(results, context))
    return md_path, json_path
