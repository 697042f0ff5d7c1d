"""The reports of a whole-model test module, one child per group of its cases.

A test asks for the report of its ``case`` parameter; the first ask of a group (the test
parameters ``group`` names, and the case's ``gpu``) runs every case of that group this
session selected (``-k`` narrows them) in one child, and keeps each report by case id.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import pytest

Report = dict[str, Any]


class GroupedReports:
    """One per test module (tests/models/test_models.py, test_releases.py, ...)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[Hashable, ...], dict[str, Report]] = {}

    def report(self, request: pytest.FixtureRequest, case: Any, run: Callable[[list[Any]], list[Report]],
               **group: Hashable) -> Report:
        """``case``'s report; ``run(cases)`` returns one report per case, in order."""
        key = (*group.items(), case.gpu)
        if key not in self._groups:
            cases = selected(request.session, case.gpu, group) or [case]
            self._groups[key] = {c.id: r for c, r in zip(cases, run(cases), strict=True)}
        return self._groups[key][case.id]


def selected(session: pytest.Session, gpu: str, group: dict[str, Hashable]) -> list[Any]:
    """The ``case`` parameters of the session's items on ``gpu`` whose ``group`` parameters
    are those given."""
    out = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        case = params.get("case")
        if getattr(case, "gpu", None) == gpu and all(params.get(k) == v for k, v in group.items()):
            out.append(case)
    return out
