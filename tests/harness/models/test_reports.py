"""GroupedReports: one run per group of the cases the session selected."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

from harness.models.reports import GroupedReports


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    gpu: str = "sm120"


def item(**params: Any) -> types.SimpleNamespace:
    return types.SimpleNamespace(callspec=types.SimpleNamespace(params=params))


def test_one_run_per_group_of_the_selected_cases() -> None:
    a, b, c, other_gpu = Case("a"), Case("b"), Case("c"), Case("a", "sm121")
    items = [item(stack="s", patched=True, case=a), item(stack="s", patched=True, case=b),
             item(stack="s", patched=False, case=c), item(stack="s", patched=True, case=other_gpu),
             item(stack="s"), types.SimpleNamespace()]  # no case; no callspec
    request: Any = types.SimpleNamespace(session=types.SimpleNamespace(items=items))
    runs: list[list[str]] = []

    def run(cases: list[Case]) -> list[dict[str, Any]]:
        runs.append([x.id for x in cases])
        return [{"id": x.id, "gpu": x.gpu} for x in cases]

    reports = GroupedReports()
    assert reports.report(request, b, run, stack="s", patched=True) == {"id": "b", "gpu": "sm120"}
    assert reports.report(request, a, run, stack="s", patched=True) == {"id": "a", "gpu": "sm120"}
    assert reports.report(request, other_gpu, run, stack="s", patched=True) == {"id": "a", "gpu": "sm121"}
    assert runs == [["a", "b"], ["a"]]
    unselected = Case("d", "sm121")  # not among the session's items: runs alone
    assert reports.report(request, unselected, run, stack="s", patched=False)["id"] == "d"
    assert runs[-1] == ["d"]
