"""The drift reports: a text matrix for the terminal, ``drift.md`` / ``drift.json``, and the
GitHub issue (``--github-issue``) for patches that drift in releases newer than every series."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from packaging.version import Version

from ...model.config import Settings
from ...model.errors import Fp4graphError
from ...model.files import write_atomic
from ...model.series import series_versions
from .classify import Cell

SYMBOL = {"applies": "ok", "upstream": "UP", "superseded": "SUP", "conflicts": "XX", "unchecked": "-"}


def matrix_rows(cells: Sequence[Cell]) -> dict[tuple[str, str], list[Cell]]:
    rows: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        rows.setdefault((c.project, c.version), []).append(c)
    return rows


def text_matrix(cells: Sequence[Cell]) -> str:
    out = []
    for project in dict.fromkeys(c.project for c in cells):
        rows = {k: v for k, v in matrix_rows(cells).items() if k[0] == project}
        width = max(len(k[1]) for k in rows)
        out.append(f"{project}")
        for (_, version), row in rows.items():
            marks = " ".join(f"{c.topic}:{SYMBOL[c.status]}" for c in row)
            out.append(f"  {version:<{width}}  series {row[0].series_version:<12} {marks}")
    out.append("columns are patch topics; legend: ok applies, UP already upstream (reverse-applies), SUP superseded "
               "(same fix upstream), XX conflicts, - not in the wheel")
    return "\n".join(out)


def markdown(cells: Sequence[Cell], notes: Sequence[str]) -> str:
    lines = ["# Drift: fp4graph patches against upstream releases", ""]
    lines.append(
        "`applies`: `git apply --check` succeeds; `upstream`: `git apply -R --check` succeeds; "
        "`superseded`: upstream fixed it its own way (detected in its code); `conflicts`: "
        "neither; `unchecked`: the patch only touches files outside the wheel."
    )
    lines.append("")
    for note in notes:
        lines.append(f"- {note}")
    for project in dict.fromkeys(c.project for c in cells):
        rows = {k: v for k, v in matrix_rows(cells).items() if k[0] == project}
        topics = list(dict.fromkeys(c.topic for row in rows.values() for c in row))
        lines += ["", f"## {project}", ""]
        header = ["release", "series", *topics]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        for (_, version), row in rows.items():
            status = {c.topic: c.status for c in row}
            lines.append("| " + " | ".join(
                [version, row[0].series_version, *[status.get(t, "") for t in topics]]
            ) + " |")
        lines += ["", "Topics (the patch of each series):", ""]
        for topic in topics:
            names = dict.fromkeys(f"{c.series_version}: `{c.patch}`"
                                  for row in rows.values() for c in row if c.topic == topic)
            lines.append(f"- `{topic}`: " + ", ".join(names))
        problems = [c for row in rows.values() for c in row if c.status not in ("applies",)]
        if problems:
            lines += ["", "Details:", ""]
            lines += [f"- {c.version} `{c.patch}`: {c.status}: {c.detail}" for c in problems]
    return "\n".join(lines) + "\n"


def write_reports(out_dir: pathlib.Path, cells: Sequence[Cell], notes: Sequence[str]) -> None:
    write_atomic(out_dir / "drift.json", json.dumps([c.as_dict() for c in cells], indent=1) + "\n")
    write_atomic(out_dir / "drift.md", markdown(cells, notes))


def needs_attention(settings: Settings, cells: Sequence[Cell]) -> list[Cell]:
    """Patches that no longer apply (or are upstream) in releases newer than every series."""
    newest = {
        p: max((Version(v) for v in series_versions(settings.patches_dir, p)), default=None)
        for p in {c.project for c in cells}
    }
    return [
        c for c in cells
        if c.status in ("conflicts", "upstream", "superseded")
        and (top := newest[c.project]) is not None and Version(c.version) > top
    ]


def report_to_github(settings: Settings, label: str, cells: Sequence[Cell]) -> str:
    """Open or update the ``label`` issue with the cells that need attention; what was done."""
    attention = needs_attention(settings, cells)
    report = markdown(attention, [f"{len(attention)} pair(s) in releases newer than every series."]
                      ) if attention else "No patch drifts in releases newer than the series.\n"
    return github_issue(label, attention, report)


def github_issue(label: str, cells: Sequence[Cell], report: str) -> str:
    """Open the issue labelled ``label`` (or update the open one) with ``report``."""
    if shutil.which("gh") is None:
        raise Fp4graphError("--github-issue needs the GitHub CLI `gh` on PATH")
    title = f"fp4graph drift: {len(cells)} patch/release pair(s) need attention"

    def gh(*args: str) -> str:
        result = subprocess.run(["gh", *args], capture_output=True, text=True)
        if result.returncode != 0:
            raise Fp4graphError(f"`gh {' '.join(args[:3])} ...` failed: {result.stderr.strip()}")
        return result.stdout

    listed = json.loads(gh("issue", "list", "--label", label, "--state", "open",
                           "--json", "number", "--limit", "1") or "[]")
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False, encoding="utf-8") as f:
        f.write(report)
    try:
        if listed:
            number = str(listed[0]["number"])
            gh("issue", "edit", number, "--title", title, "--body-file", f.name)
            return f"updated issue #{number}"
        if not cells:
            return "nothing needs attention; no issue opened"
        gh("issue", "create", "--title", title, "--label", label, "--body-file", f.name)
        return "opened an issue"
    finally:
        os.unlink(f.name)
