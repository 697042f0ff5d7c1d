"""The package as its children import it: nothing at package import (they put upstream
trees first), and each module once, under its package name."""

from __future__ import annotations

import json

from harness.child import TESTS, run_python, tail

LIGHT = """
import json, sys
import harness, harness.models
print("R " + json.dumps(sorted(m for m in ("torch", "sglang", "flashinfer", "fp4graph") if m in sys.modules)))
"""

CHILD_SIDE = """
import json, sys
from harness.models import capturing, collectives, stand_ins
phase = collectives._phase()
try:
    stand_ins._meta_kernel("sgl_kernel", "no_such_op", False)()
except NotImplementedError as exc:
    missing = str(exc)
print("R " + json.dumps({"phase": phase, "same": stand_ins.collectives is collectives
                         and stand_ins.capturing is collectives.capturing is capturing
                         and sys.modules["harness.models.stand_ins"] is stand_ins,
                         "bare": sorted({"capturing", "collectives", "stand_ins"} & set(sys.modules)),
                         "missing": missing}))
"""


def _run(code: str) -> object:
    result = run_python(code, path=[TESTS])
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("R ")]
    assert result.returncode == 0 and lines, tail(result)
    return json.loads(lines[-1][2:])


def test_package_import_imports_nothing_heavy() -> None:
    assert _run(LIGHT) == []


def test_child_side_modules_import_once_by_package_name() -> None:
    out = _run(CHILD_SIDE)
    assert out["phase"] == "eager" and out["same"] and out["bare"] == [], out
    # A compiled op without a shape function names the file to add it to.
    assert "sgl_kernel::no_such_op returns tensors and tests/harness/models/stand_ins.py" in out["missing"], out
    assert (TESTS / "harness" / "models" / "stand_ins.py").is_file()
