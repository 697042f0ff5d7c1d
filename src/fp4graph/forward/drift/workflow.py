"""``fp4graph drift`` as one call: classify, write the reports, update the GitHub issue."""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Sequence

from ...model import projects as registry
from ...model.config import Settings
from ...model.errors import Fp4graphError
from .classify import STATUSES, Cell, drift
from .report import report_to_github, write_reports


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DriftOptions:
    projects: tuple[str, ...] = registry.NAMES
    releases: tuple[str, ...] = ()  # only these releases (of each project); default every one
    out: pathlib.Path | None = None  # the report directory; default wheels/reports
    refresh: bool = False  # re-read the release lists now
    offline: bool = False  # use only the cache
    github_issue: str | None = None  # open or update the open issue with this label


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DriftResult:
    cells: tuple[Cell, ...]
    notes: tuple[str, ...]
    reports: tuple[pathlib.Path, pathlib.Path]  # drift.md, drift.json
    seconds: float  # classification and reports
    issue: str | None = None  # what was done to the issue
    issue_failure: Fp4graphError | None = None  # the issue could not be updated (reports are written)

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.cells) for s in STATUSES}


def run_drift(settings: Settings, options: DriftOptions) -> DriftResult:
    started = time.monotonic()
    only: dict[str, Sequence[str]] | None = (
        {p: options.releases for p in options.projects} if options.releases else None
    )
    cells, notes = drift(settings, options.projects, refresh=options.refresh, offline=options.offline, only=only)
    out = options.out or settings.wheels_dir / "reports"
    write_reports(out, cells, notes)
    result = DriftResult(cells=tuple(cells), notes=tuple(notes), reports=(out / "drift.md", out / "drift.json"),
                         seconds=time.monotonic() - started)
    if options.github_issue:
        try:
            return dataclasses.replace(result, issue=report_to_github(settings, options.github_issue, cells))
        except Fp4graphError as exc:
            return dataclasses.replace(result, issue_failure=exc)
    return result
