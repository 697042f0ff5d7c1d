"""The whole-model simulation on the packages of the venv running this script.

``nox -s install`` runs it as its simulation step, with the venv where the stack was
installed as users install it (``python -m fp4graph install STACK --check
"simulation=tests/harness/models/simulate_installed.py --family llama"``): sglang, FlashInfer with
the real flashinfer-cubin, sgl-kernel's Python and the release's transformers are the
venv's; the stand-ins are modelsim's (its docstring, "Installed packages").  With
``--platform linux-aarch64`` the install is a ``--target`` directory run by the aarch64
interpreter (emulated on x86_64: ``--gpu sm121`` is a DGX Spark's GB10); the child is
started with the argv the install names in ``FP4GRAPH_INTERPRETER``.  Exit 0 when
every case traces as the patched stack must (0 graph breaks, the fp4 ops in captured
pieces, attention in split ones); 1 naming the case and what failed.

    python tests/harness/models/simulate_installed.py --family llama [--family qwen3-moe] [--no-cuda-graph] [--gpu sm121]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shlex
import sys
from typing import Any

if __name__ == "__main__":  # run as a script: the package from tests/, not this directory
    _HERE = pathlib.Path(__file__).resolve().parent
    sys.path[:] = [str(_HERE.parents[1]), *(p for p in sys.path if pathlib.Path(p or ".").resolve() != _HERE)]

from fp4graph.platforms.targets import INTERPRETER_ENV  # noqa: E402
from harness.models import simulation  # noqa: E402
from harness.models.expected import ATTENTION, FP4_GEMM, FP4_QUANTIZE  # noqa: E402

FP4_OPS = (FP4_QUANTIZE, FP4_GEMM)
# The keys of fp4graph.verify.simulate.GPUS (which imports torch: this process does not).
GPU_NAMES = ("sm100", "sm120", "sm121")


def problems(report: dict[str, Any]) -> list[str]:
    """What differs from a patched stack's trace (tests/models/test_models.py's checks)."""
    if not report.get("ok"):
        return [f"stage {report.get('stage')}: {report.get('error', '')}: {report.get('error_text', '')[-600:]}"]
    out = []
    if report.get("graph_breaks") != 0:
        out.append(f"{report.get('graph_breaks')} graph break(s)")
    if not report.get("graphs") or not report.get("captures"):
        out.append("no piecewise graph captured")
    for pieces in report.get("graphs", []):
        captured = {op for p in pieces if not p["split"] for op in p["ops"]}
        split = {op for p in pieces if p["split"] for op in p["ops"]}
        out += [f"{op} not in a captured piece" for op in FP4_OPS if op not in captured or op in split]
        if ATTENTION not in split or ATTENTION in captured:
            out.append(f"{ATTENTION} not a split op")
    return sorted(set(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", default=[], help="a row of tests/harness/models/families.py")
    parser.add_argument("--moe-runner-backend", default="auto")
    parser.add_argument("--no-cuda-graph", action="store_true", help="--disable-cuda-graph (the other start order)")
    parser.add_argument("--gpu", choices=GPU_NAMES, default="sm120", help="the simulated device (sm121: GB10)")
    args = parser.parse_args(argv)
    cases = [simulation.case(f, moe_runner_backend=args.moe_runner_backend, cuda_graph=not args.no_cuda_graph)
             for f in args.family or ["llama"]]
    interpreter = shlex.split(os.environ.get(INTERPRETER_ENV, "")) or [sys.executable]
    try:
        reports = simulation.run_installed(cases, gpu=args.gpu, interpreter=interpreter)
    except Exception as exc:  # noqa: BLE001 - reported as the step's error
        print(f"simulation: FAILED: {exc}", file=sys.stderr)
        return 1
    failed = 0
    for case, report in zip(cases, reports, strict=True):
        found = problems(report)
        brief = {k: report.get(k) for k in ("ok", "stage", "graph_breaks", "captures", "piecewise_runner", "seconds")}
        brief["graphs"] = [len(pieces) for pieces in report.get("graphs", [])]  # pieces per piecewise graph
        print(f"simulation {case['family']['name']} on {args.gpu} ({platform.machine()} python "
              f"{platform.python_version()}): {'ok' if not found else 'FAILED'} {json.dumps(brief)}")
        for problem in found:
            print(f"  {problem}")
        if found and "traceback" in report:  # where it failed: the frames, not the message
            frames = [ln for ln in report["traceback"].splitlines() if ln.startswith('  File "')]
            print("\n".join(frames[-20:]), file=sys.stderr)
            print("  " + " <- ".join(report.get("error_chain", [])[:3]), file=sys.stderr)
        failed += bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
