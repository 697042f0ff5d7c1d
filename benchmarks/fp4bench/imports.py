"""(i) Import cost of each design: what a process pays before its first call.

Two measurements, each in fresh interpreters (a process imports once), alternated in
ABBA order so that the order bias between fresh processes (FINDINGS: A/B 0.55-1.70 for
one wheel) cancels in pairs:

- ``register``: per design of (p), ``import torch`` and then registering ONE wrapper the
  design's way (a substitute_in_graph twin, an always-dispatch custom_op, a
  ``Library.define`` op, AMD #210's compile guard, ...): seconds spent registering, and
  whether it imported ``torch._dynamo`` (the seconds a process that never compiles pays).
- ``flashinfer``: ``import flashinfer`` from the patched and the pristine tree (wall
  time, and whether ``torch._dynamo`` ends up imported), median of the pairs and the
  per-pair patched/pristine ratio.
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import subprocess
import sys
from typing import Any

from . import common
from .common import log, summary

_PROBE = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
before = 'torch._dynamo' in sys.modules
{body}
t2 = time.perf_counter()
print(json.dumps({{"torch_s": t1 - t0, "register_s": t2 - t1, "dynamo_before": before,
                  "dynamo_after": 'torch._dynamo' in sys.modules}}))
"""

_OP = '''
def q(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.clone(), scale.clone()
'''

# One registration per design, as its project does it (peers.py has the call paths).
DESIGNS: dict[str, str] = {
    "pristine": "pass",
    "ours": _OP + "def twin(x, scale):\n    return q(x, scale)\n"
    "torch.compiler.substitute_in_graph(q)(twin)",
    "custom_op": _OP + "torch.library.custom_op('fp4imp::q', q, mutates_args=())",
    "sglang_extern": _OP + "lib = torch.library.Library('fp4imp', 'FRAGMENT')\n"
    "lib.define('q' + torch.library.infer_schema(q, mutates_args=()))\n"
    "lib.impl('q', q, 'CPU')",
    "vllm": _OP + "torch.library.custom_op('fp4imp::q', q, mutates_args=(), device_types='cpu')",
    "amd_off": _OP + "import functools\n"
    "def guard(f):\n    @functools.wraps(f)\n    def g(*a, **k):\n"
    "        if torch.compiler.is_compiling():\n            raise RuntimeError('custom ops off')\n"
    "        return f(*a, **k)\n    return g\nq2 = guard(q)",
}

_IMPORT = """
import json, sys, time
sys.path.insert(0, {tree!r})
t0 = time.perf_counter()
import flashinfer
print(json.dumps({{"import_s": time.perf_counter() - t0,
                  "dynamo": 'torch._dynamo' in sys.modules,
                  "file": flashinfer.__file__}}))
"""


def _fresh(code: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-800:]}
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return parsed


def _abba(arms: dict[str, str], pairs: int, env: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    names = list(arms)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for p in range(pairs):
        order = names if p % 2 == 0 else names[::-1]
        for name in order:
            runs[name].append(_fresh(arms[name], env))
    return runs


def bench_imports(
    patched_tree: pathlib.Path, pristine_tree: pathlib.Path, work: pathlib.Path, pairs: int
) -> dict[str, Any]:
    env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(work / "ws-imports"))
    register = _abba({n: _PROBE.format(body=b) for n, b in DESIGNS.items()}, pairs, env)
    out: dict[str, Any] = {"register": {}, "flashinfer": {}}
    for name, runs in register.items():
        ok = [r for r in runs if "error" not in r]
        out["register"][name] = {
            "register_ms": statistics.median(r["register_s"] for r in ok) * 1e3 if ok else None,
            "torch_s": statistics.median(r["torch_s"] for r in ok) if ok else None,
            "imports_dynamo": any(r["dynamo_after"] and not r["dynamo_before"] for r in ok),
            "errors": [r["error"] for r in runs if "error" in r][:1],
        }
        log(f"imports register {name}: {out['register'][name]}")
    if common.SMOKE:
        return out
    trees = {"patched": _IMPORT.format(tree=str(patched_tree)),
             "pristine": _IMPORT.format(tree=str(pristine_tree))}
    imported = _abba(trees, pairs, env)
    for name, rs in imported.items():
        ok = [r for r in rs if "error" not in r]
        out["flashinfer"][name] = {
            "import_s": statistics.median(r["import_s"] for r in ok) if ok else None,
            "all_s": [r["import_s"] for r in ok],
            "imports_dynamo": any(r["dynamo"] for r in ok),
            "errors": [r["error"] for r in rs if "error" in r][:1],
        }
    good = [(a, b) for a, b in zip(imported["patched"], imported["pristine"], strict=True)
            if "error" not in a and "error" not in b]
    if good:
        out["flashinfer"]["ratio"] = summary([a["import_s"] / b["import_s"] for a, b in good])
    out["method"] = (f"fresh interpreters, {pairs} ABBA pairs per comparison; register = one "
                     "wrapper registered the design's way after `import torch`")
    log(f"imports flashinfer: {out['flashinfer']}")
    return out
