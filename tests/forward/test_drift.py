"""forward.drift: every patch against upstream releases, read through HTTP range requests
(the wheels' zip directory and the touched files), then from the cache alone."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import urllib.request

import pytest

from fp4graph import cli
from fp4graph.forward import drift
from fp4graph.model.config import Settings

from .conftest import FI, MARKER, add_series

pytestmark = pytest.mark.slow


def test_drift_classifies_and_caches(
    checkout: Settings, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = dataclasses.replace(checkout, cache_dir=tmp_path / "cache")
    # already-upstream first: after the marker patch its context would differ
    add_series(settings, FI, "0.6.3", ["0002-already-upstream.patch", MARKER, "0003-conflicts.patch"])
    shutil.rmtree(settings.patches_dir / "sglang" / "0.5.9")
    add_series(settings, "sglang", "0.5.9", ["0001-sglang-fp4-utils.patch"])
    only = {FI: ["0.6.3"], "sglang": ["0.5.11", "0.5.12"]}
    cells, notes = drift.drift(settings, only=only)
    got = {(c.project, c.version, c.patch): c.status for c in cells}
    assert got == {
        (FI, "0.6.3", MARKER): "applies",
        (FI, "0.6.3", "0002-already-upstream.patch"): "upstream",
        (FI, "0.6.3", "0003-conflicts.patch"): "conflicts",
        ("sglang", "0.5.11", "0001-sglang-fp4-utils.patch"): "applies",
        ("sglang", "0.5.12", "0001-sglang-fp4-utils.patch"): "superseded",
    }
    marker = next(c for c in cells if c.patch == MARKER)
    assert "tests/utils/test_fixture_marker.py: not in" in marker.detail
    superseded = next(c for c in cells if c.status == "superseded")
    assert "register_custom_op_from_extern" in superseded.detail
    assert all(c.series_version == "0.5.9" for c in cells if c.project == "sglang")
    # only the touched files were kept
    kept = sorted(p.name for p in (settings.cache_dir / "drift" / "files").iterdir())
    assert kept == ["flashinfer_python-0.6.3-py3-none-any.whl",
                    "sglang-0.5.11-cp311-cp311-manylinux_2_34_x86_64.whl",
                    "sglang-0.5.12-cp311-cp311-manylinux_2_34_x86_64.whl"]

    out = tmp_path / "reports"
    drift.write_reports(out, cells, notes)
    data = json.loads((out / "drift.json").read_text())
    assert set(data[0]) == {"project", "version", "series_version", "patch", "topic", "status", "detail"}
    assert "| 0.5.12 | 0.5.9 | superseded |" in (out / "drift.md").read_text()

    # a second run reads nothing from the network
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("network used on a cached run")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    again, _ = drift.drift(settings, only=only)
    assert again == cells

    # the command over the cache: the matrix, the counts and the reports; an issue that cannot
    # be updated (no `gh`) fails after them, naming what is missing
    monkeypatch.chdir(settings.repo)
    monkeypatch.setenv("FP4GRAPH_CACHE", str(settings.cache_dir))
    monkeypatch.setattr(drift.report.shutil, "which", lambda name: None)
    code = cli.main(["drift", "--project", FI, "--release", "0.6.3", "--offline", "--out", str(tmp_path / "cmd"),
                     "--github-issue", "fp4graph-drift"])
    printed = capsys.readouterr()
    assert code == 2, printed
    lines = printed.out.splitlines()
    assert lines[0] == FI and lines[1].split()[:3] == ["0.6.3", "series", "0.6.3"]
    assert lines[-1].startswith("1 applies, 1 upstream, 0 superseded, 1 conflicts, 0 unchecked; ")
    assert lines[-1].endswith(f"wrote {tmp_path / 'cmd' / 'drift.md'}, {tmp_path / 'cmd' / 'drift.json'}")
    assert printed.err == "Fp4graphError: --github-issue needs the GitHub CLI `gh` on PATH\n"
