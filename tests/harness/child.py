"""Run Python in a clean child interpreter against chosen upstream trees."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Container, Sequence
from typing import Any

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
HARNESS = pathlib.Path(__file__).resolve().parent  # the child modules (fi_child, ...)
TESTS = HARNESS.parent  # on a child's path for the package: ``from harness.models import ...``


def run_python(
    code: str,
    *,
    path: Sequence[pathlib.Path] = (),
    env: dict[str, str] | None = None,
    timeout: float = 900,
    interpreter: Sequence[str] = (sys.executable,),
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``path`` first on sys.path (then fp4graph's src/), by
    ``interpreter`` (an argv prefix: the emulated aarch64 python's, say).

    Each trace runs in its own interpreter: Dynamo caches, torch.library
    registrations and the simulated device are process-wide state.
    """
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(SRC)])
    child_env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(pathlib.Path.home() / ".cache/fp4graph/inductor"))
    return subprocess.run(
        [*interpreter, "-c", code],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=timeout,
    )


def tail(result: subprocess.CompletedProcess[str], n: int = 3000) -> str:
    """The end of a child's output, for assertion messages."""
    return f"rc={result.returncode}\nstdout:\n{result.stdout[-n:]}\nstderr:\n{result.stderr[-n:]}"


def run_child_main(
    module: str,
    request: dict[str, Any],
    *,
    tree: pathlib.Path,
    loglevel: str = "0",
    directory: pathlib.Path = HARNESS,
) -> dict[str, Any]:
    """``<module>.main(json)`` (a child module in ``directory``, default tests/harness)
    with ``tree`` first on the path; its last ``RESULT:`` JSON line, which must hold no
    ``crash``."""
    code = (
        f"import sys; sys.path.insert(0, {str(directory)!r})\n"
        f"import {module}\n"
        f"{module}.main({json.dumps(request)!r})\n"
    )
    result = run_python(code, path=[tree], env={"FLASHINFER_LOGLEVEL": loglevel})
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT:")]
    assert result.returncode == 0 and lines, tail(result)
    data: dict[str, Any] = json.loads(lines[-1][len("RESULT:") :])
    assert "crash" not in data, data["crash"]
    return data


def opcheck_failures(records: dict[str, Any], skip: Container[str] = ()) -> dict[str, Any]:
    """The ``opcheck`` records of a child (fi_child.opcheck_cases) that did not pass:
    name -> the error, or the opcheck tests that did not succeed."""
    bad: dict[str, Any] = {}
    for name, rec in records.items():
        if name in skip:
            continue
        if "error" in rec:
            bad[name] = rec["error"]
        elif failed := {t: v for t, v in rec["opcheck"].items() if v != "SUCCESS"}:
            bad[name] = failed
    return bad
