"""pytest plugin for one run of an upstream test file (``-p fp4graph_suite_plugin``).

Loaded into upstream's own pytest run as a standalone module (it imports nothing of
fp4graph, so the run sees only upstream's code and the wheel under test).  It

- writes one JSON line per test begun and finished to ``$FP4GRAPH_SUITE_RESULTS`` as it goes,
  so a run that crashes or is killed still leaves what it did, and names the test it was in;
- stops the session cleanly after the test during which ``$FP4GRAPH_SUITE_DEADLINE`` (a Unix
  time) passed: the tests not run are reported as cut by the time budget, not as failures.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

_RESULTS = os.environ.get("FP4GRAPH_SUITE_RESULTS", "")
_DEADLINE = float(os.environ.get("FP4GRAPH_SUITE_DEADLINE", "inf"))
_BUDGET = os.environ.get("FP4GRAPH_SUITE_BUDGET", "?")

_session: pytest.Session | None = None
_outcomes: dict[str, str] = {}
_durations: dict[str, float] = {}


def _write(record: dict[str, Any]) -> None:
    if _RESULTS:
        with open(_RESULTS, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def pytest_sessionstart(session: pytest.Session) -> None:
    global _session
    _session = session
    _write({"event": "start", "time": time.time()})


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _write({"event": "collect_error", "nodeid": report.nodeid, "message": str(report.longrepr)[-4000:]})


def pytest_collection_finish(session: pytest.Session) -> None:
    _write({"event": "collected", "count": len(session.items)})


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    # The last test begun and never finished is the one a crash or a kill interrupted.
    _write({"event": "begin", "nodeid": nodeid})


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Fold setup/call/teardown into one outcome, as pytest's terminal summary does."""
    nodeid, outcome = report.nodeid, _outcomes.get(report.nodeid)
    _durations[nodeid] = _durations.get(nodeid, 0.0) + report.duration
    xfail = hasattr(report, "wasxfail")
    if report.when == "setup":
        if report.failed:
            outcome = "error"
        elif report.skipped:
            outcome = "xfailed" if xfail else "skipped"
    elif report.when == "call":
        if report.passed:
            outcome = "xpassed" if xfail else "passed"
        elif report.failed:
            outcome = "failed"
        else:
            outcome = "xfailed" if xfail else "skipped"
    elif report.failed and outcome not in ("failed", "error"):
        outcome = "error"  # a teardown that fails after a passing or skipped test
    if outcome is not None:
        _outcomes[nodeid] = outcome


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    _write(
        {
            "event": "test",
            "nodeid": nodeid,
            "outcome": _outcomes.pop(nodeid, "error"),
            "duration": round(_durations.pop(nodeid, 0.0), 4),
        }
    )
    if time.time() > _DEADLINE and _session is not None and not _session.shouldstop:
        _write({"event": "budget_spent", "budget_s": _BUDGET})
        _session.shouldstop = f"fp4graph: the time budget of {_BUDGET} s for this file is spent"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _write({"event": "finish", "exitstatus": int(exitstatus), "time": time.time()})
