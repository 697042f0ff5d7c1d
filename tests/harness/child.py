"""Run Python in a clean child interpreter against chosen upstream trees.

Parent side: :func:`run_python`, :func:`run_child_main`, and :func:`run_forked`, whose
child imports torch (and the simulated device) once and runs each case in a fork of
itself.  Child side: :func:`serve`, that fork-per-case loop, over :func:`fork_writing` /
:func:`read_fork` (one fork writing its report to a pipe; the whole-model cases and
ranks, harness.models.case_runs, fork there too).  This module imports only the standard
library, so a child imports it as ``harness.child``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Container, Mapping, Sequence
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
    registrations and the simulated device are process-wide state.  The child's
    ``TMPDIR`` is a directory of its own, removed when it exits (what the simulated
    device, the JIT stand-ins and sglang write there), unless ``env`` names one.
    """
    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["PYTHONPATH"] = os.pathsep.join([*map(str, path), str(SRC)])
    child_env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(pathlib.Path.home() / ".cache/fp4graph/inductor"))
    with tempfile.TemporaryDirectory(prefix="fp4graph-child-") as tmp:
        if not (env and "TMPDIR" in env):
            child_env["TMPDIR"] = tmp
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


# --- fork per case ---------------------------------------------------------------------
FORKED_RESULT = "RESULT:"


@dataclasses.dataclass(frozen=True)
class CaseReport:
    """What one forked case returned (``values``), or how it failed (``crash``: the
    traceback of a case that raised, or how its fork ended)."""

    case: str
    values: Mapping[str, Any]
    crash: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def __contains__(self, key: object) -> bool:
        return key in self.values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def describe(self, n: int = 6000) -> str:
        """The case and what it saw, for an assertion message."""
        if self.crash is not None:
            return f"case {self.case!r} crashed:\n{self.crash[-n:]}"
        return f"case {self.case!r}: " + json.dumps(self.values, indent=1, default=str)[-n:]


def fork_writing(body: Callable[[], Any], failed: Callable[[BaseException], Any]) -> tuple[int, int]:
    """Fork this process: the fork writes ``body()`` to a pipe as JSON (``failed(exc)``, and
    exits 1, where it raised) and exits.  Returns the fork's pid and the pipe's read end."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            out = body()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out, code = failed(exc), 1
        with os.fdopen(write, "w") as f:
            f.write(json.dumps(out, default=str))
        os._exit(code)
    os.close(write)
    return pid, read


def read_fork(pid: int, read: int) -> tuple[str, int]:
    """What the fork of :func:`fork_writing` wrote, once it has ended, and its exit code
    (negative: the signal that ended it)."""
    with os.fdopen(read) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    return text, os.waitstatus_to_exitcode(status)


def serve(case: Callable[[dict[str, Any]], dict[str, Any]], requests: Mapping[str, dict[str, Any]]) -> None:
    """Child side: run ``case(request)`` for each request in a fork of this process (which
    has imported torch once, and nothing of the trees under test), then print one
    ``RESULT:`` line of every case's values or crash."""
    results: dict[str, dict[str, Any]] = {}
    for name, request in requests.items():
        text, code = read_fork(*fork_writing(lambda request=request: {"values": case(request)},
                                             lambda _: {"crash": traceback.format_exc()[-3000:]}))
        results[name] = json.loads(text) if text else {"crash": f"the fork ended with code {code} and no result"}
    print(FORKED_RESULT + json.dumps(results))


def run_forked(
    code: str,
    requests: Mapping[str, dict[str, Any]],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 900,
) -> dict[str, CaseReport]:
    """Parent side: a child that runs ``code`` (imports, set-up, ``def case(request)``) and
    then :func:`serve` over ``requests``; each case's :class:`CaseReport`, by name."""
    program = (
        f"{code}\n"
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom harness.child import serve\n"
        f"sys.path.remove({str(TESTS)!r})\n"
        f"import json as _json\nserve(case, _json.loads({json.dumps(requests)!r}))\n"
    )
    result = run_python(program, env=env, timeout=timeout)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith(FORKED_RESULT)]
    assert result.returncode == 0 and lines, tail(result)
    raw: dict[str, dict[str, Any]] = json.loads(lines[-1][len(FORKED_RESULT):])
    assert list(raw) == list(requests), (list(raw), list(requests))
    return {name: CaseReport(name, r.get("values", {}), r.get("crash")) for name, r in raw.items()}
