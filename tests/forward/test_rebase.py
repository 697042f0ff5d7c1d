"""forward.rebase: carry a series from one pinned release to another (sdists: cached)."""

from __future__ import annotations

import datetime
import pathlib

import pytest

from fp4graph.forward.rebase import rebase
from fp4graph.model.config import Settings

from .conftest import MARKER

pytestmark = pytest.mark.slow


def test_rebase_carries_and_refreshes(checkout: Settings, tmp_path: pathlib.Path) -> None:
    out = tmp_path / "carried"
    results = rebase(checkout, "sglang", "0.5.9", "0.5.10.post1", out, work_dir=tmp_path / "work",
                     today=datetime.date(2027, 1, 2))
    assert [(r.name, r.status) for r in results] == [(MARKER, "carried")], results
    text = (out / MARKER).read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Subject: [PATCH] Add a marker the fp4graph engine tests look for" in text
    assert "Date: Sun, 29 Nov 2026" in text
    # the same message and diff on 0.5.10.post1: the patch keeps its bytes (no churn)
    assert text == (checkout.patches_dir / "sglang" / "0.5.9" / MARKER).read_text()
    assert "Last-Update: 2027-01-02" not in text
    assert (out / "series").read_text() == MARKER + "\n"
