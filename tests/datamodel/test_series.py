"""model.series: the nearest series for a version."""

from __future__ import annotations

import pathlib

from fp4graph.model.series import nearest_series_version

FI = "flashinfer-python"



def test_nearest_series(tmp_path: pathlib.Path) -> None:
    for v in ("0.6.3", "0.6.7.post3", "0.7.4"):
        (tmp_path / FI / v).mkdir(parents=True)
        (tmp_path / FI / v / "series").write_text("")
    pick = lambda v: nearest_series_version(tmp_path, FI, v)  # noqa: E731
    assert [pick(v) for v in ("0.6.0", "0.6.3", "0.6.7", "0.6.7.post3", "0.6.18", "0.7.4", "0.8.0")] == [
        "0.6.3", "0.6.3", "0.6.3", "0.6.7.post3", "0.6.7.post3", "0.7.4", "0.7.4",
    ]
    assert nearest_series_version(tmp_path, "sglang", "0.5.9") is None
