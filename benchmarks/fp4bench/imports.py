"""(i) Import cost of each design: what a process pays before its first call.

Two measurements, each in fresh interpreters (a process imports once), alternated in
ABBA order so that the order bias between fresh processes (FINDINGS: A/B 0.55-1.70 for
one wheel) cancels in pairs:

- ``register`` (``--import-parts``): per design of (p), ``import torch`` and then
  registering ONE wrapper the design's way (a substitute_in_graph twin, an always-dispatch
  custom_op, a ``Library.define`` op, AMD #210's compile guard, ...): seconds spent
  registering, and whether it imported ``torch._dynamo`` (the seconds a process that
  never compiles pays).
- ``flashinfer``: each interpreter imports torch first, untimed for the comparison, then
  times ``import flashinfer`` from the patched or the pristine tree alone (torch's own
  import, seconds and noisy, is not part of either arm); whether ``torch._dynamo`` ends up
  imported, and how many ``flashinfer::`` ops the import registered.  Per-pair
  patched/pristine ratio, its median and 95 % interval, decided against ``goal``.
  Then ``-X importtime`` runs of each tree (ABBA too) attribute the difference to
  flashinfer's modules (self time: the module's own code, not what it imports).

A deadline stops starting new pairs: the JSON records how many ran.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time
from typing import Any

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

# torch is imported (and timed) first; the arm's figure is `import flashinfer` alone.
_IMPORT = """
import sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
sys.path.insert(0, {tree!r})
t2 = time.perf_counter()
import flashinfer
t3 = time.perf_counter()
import json
ops = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith('flashinfer::')]
print(json.dumps({{"import_s": t3 - t2, "torch_s": t1 - t0,
                  "dynamo": 'torch._dynamo' in sys.modules, "flashinfer_ops": len(ops),
                  "file": flashinfer.__file__}}))
"""

# One interpreter imports torch once, then forks a child per sample that times `import
# flashinfer` from one tree (its stdout: one JSON line per sample, in the given order).
_FORKSERVER = """
import json, os, sys, time
import torch
trees = json.loads(sys.argv[1])
for tree in trees:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        sys.path.insert(0, tree)
        t0 = time.perf_counter()
        import flashinfer
        t1 = time.perf_counter()
        ops = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith('flashinfer::')]
        os.write(w, json.dumps({"import_s": t1 - t0, "torch_s": 0.0,
                                "dynamo": 'torch._dynamo' in sys.modules,
                                "flashinfer_ops": len(ops), "file": flashinfer.__file__}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    print(data.decode() if data else json.dumps({"error": "child failed"}), flush=True)
"""

_IMPORTTIME = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)")

Arms = dict[str, list[str]]


def _fresh(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=env, timeout=600
    )
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-800:]}
    parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if "-X" in argv:
        parsed["importtime"] = parse_importtime(done.stderr)
    return parsed


def parse_importtime(stderr: str) -> dict[str, list[int]]:
    """``-X importtime`` lines -> module -> [self us, cumulative us] (first import only)."""
    out: dict[str, list[int]] = {}
    for line in stderr.splitlines():
        m = _IMPORTTIME.match(line)
        if m and m.group(4) not in out:
            out[m.group(4)] = [int(m.group(1)), int(m.group(2))]
    return out


def _abba(
    arms: Arms, pairs: int, env: dict[str, str], deadline: float = float("inf")
) -> dict[str, list[dict[str, Any]]]:
    """Up to ``pairs`` rounds, each arm once, the order reversed every other round; no
    round starts after ``deadline`` (rounds come in ABBA quads where time allows)."""
    names = list(arms)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for p in range(pairs):
        if p % 2 == 0 and time.monotonic() > deadline:
            break
        order = names if p % 2 == 0 else names[::-1]
        for name in order:
            runs[name].append(_fresh(arms[name], env))
    return runs


def _forked(
    trees: dict[str, pathlib.Path], pairs: int, env: dict[str, str], deadline: float
) -> dict[str, list[dict[str, Any]]]:
    """As ``_abba`` over forked children of one torch-only interpreter, in batches of
    ABBA quads (one interpreter per batch) until ``pairs`` or the deadline."""
    names = list(trees)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    done = 0
    while done < pairs and time.monotonic() <= deadline:
        batch = min(8, pairs - done)
        order = [n for p in range(batch) for n in (names if p % 2 == 0 else names[::-1])]
        out = subprocess.run(
            [sys.executable, "-c", _FORKSERVER, json.dumps([str(trees[n]) for n in order])],
            capture_output=True, text=True, env=env, timeout=600,
        )
        lines = out.stdout.strip().splitlines()
        if out.returncode != 0 or len(lines) != len(order):
            for n in names:
                runs[n].append({"error": out.stderr.strip()[-800:] or "fork server failed"})
            break
        for n, line in zip(order, lines, strict=True):
            runs[n].append(json.loads(line))
        done += batch
    return runs


def decide(ratio: dict[str, Any], goal: float) -> str:
    """Where the ratio's 95 % interval lies against ``goal``."""
    lo, hi = ratio["ci95"]
    if hi <= goal:
        return f"within {goal}: the whole interval is <= {goal}"
    if lo > goal:
        return f"over {goal}: the whole interval is > {goal}"
    return f"undecided: the interval [{lo:.3f}, {hi:.3f}] contains {goal}"


def attribute(runs: dict[str, list[dict[str, Any]]], top: int = 12) -> dict[str, Any]:
    """flashinfer's modules by the patched - pristine difference of their median self time
    (ms), over the ``-X importtime`` runs; and the total of flashinfer's self times."""
    med: dict[str, dict[str, float]] = {}
    for arm, rs in runs.items():
        ok = [r["importtime"] for r in rs if "importtime" in r]
        names = {n for r in ok for n in r if n.startswith("flashinfer")}
        med[arm] = {n: statistics.median(r.get(n, [0, 0])[0] for r in ok) / 1e3 for n in names}
    p, q = med.get("patched", {}), med.get("pristine", {})
    diff = sorted(
        ((p.get(n, 0.0) - q.get(n, 0.0), n) for n in set(p) | set(q)), reverse=True
    )
    return {
        "runs_per_arm": min((len(v) for v in runs.values()), default=0),
        "flashinfer_self_ms": {"patched": sum(p.values()), "pristine": sum(q.values())},
        "top_self_ms_difference": [
            {"module": n, "patched_ms": p.get(n, 0.0), "pristine_ms": q.get(n, 0.0), "diff_ms": d}
            for d, n in diff[:top]
        ],
        "only_patched": sorted(set(p) - set(q)),
    }


def _register_part(pairs: int, env: dict[str, str], deadline: float) -> dict[str, Any]:
    arms = {n: ["-c", _PROBE.format(body=b)] for n, b in DESIGNS.items()}
    out: dict[str, Any] = {}
    for name, runs in _abba(arms, pairs, env, deadline).items():
        ok = [r for r in runs if "error" not in r]
        out[name] = {
            "register_ms": statistics.median(r["register_s"] for r in ok) * 1e3 if ok else None,
            "torch_s": statistics.median(r["torch_s"] for r in ok) if ok else None,
            "imports_dynamo": any(r["dynamo_after"] and not r["dynamo_before"] for r in ok),
            "errors": [r["error"] for r in runs if "error" in r][:1],
        }
        log(f"imports register {name}: {out[name]}")
    return out


def _flashinfer_part(
    trees: dict[str, pathlib.Path],
    pairs: int,
    attribution_pairs: int,
    env: dict[str, str],
    deadline: float,
    goal: float,
    fork: bool = False,
) -> dict[str, Any]:
    arms = {n: ["-c", _IMPORT.format(tree=str(t))] for n, t in trees.items()}
    if fork:
        imported = _forked(trees, pairs, env, deadline)
    else:
        imported = _abba(arms, pairs, env, deadline)
    out: dict[str, Any] = {}
    for name, rs in imported.items():
        ok = [r for r in rs if "error" not in r]
        out[name] = {
            "import_s": statistics.median(r["import_s"] for r in ok) if ok else None,
            "all_s": [r["import_s"] for r in ok],
            "torch_s": statistics.median(r["torch_s"] for r in ok) if ok else None,
            "imports_dynamo": any(r["dynamo"] for r in ok),
            "flashinfer_ops": max((r["flashinfer_ops"] for r in ok), default=None),
            "errors": [r["error"] for r in rs if "error" in r][:1],
        }
    good = [
        (a, b)
        for a, b in zip(imported["patched"], imported["pristine"], strict=True)
        if "error" not in a and "error" not in b
    ]
    out["pairs"] = len(good)
    if good:
        out["ratio"] = summary([a["import_s"] / b["import_s"] for a, b in good])
        out["difference_ms"] = summary([(a["import_s"] - b["import_s"]) * 1e3 for a, b in good])
        out["goal"] = goal
        out["verdict"] = decide(out["ratio"], goal)
    timed = {n: ["-X", "importtime", *argv] for n, argv in arms.items()}
    out["attribution"] = attribute(_abba(timed, attribution_pairs, env))
    return out


def bench_imports(
    patched_tree: pathlib.Path,
    pristine_tree: pathlib.Path,
    work: pathlib.Path,
    pairs: int,
    parts: tuple[str, ...] = ("register", "flashinfer"),
    deadline: float = float("inf"),
    goal: float = 1.05,
    attribution_pairs: int = 2,
    fork: bool = False,
) -> dict[str, Any]:
    env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(work / "ws-imports"))
    out: dict[str, Any] = {
        "method": (
            f"fresh interpreters, up to {pairs} ABBA pairs per comparison (see `pairs`); "
            "register = one wrapper registered the design's way after `import torch`; "
            "flashinfer = `import flashinfer` timed alone, after an untimed `import torch` "
            f"in the same interpreter; attribution = {attribution_pairs} ABBA pairs of "
            "`python -X importtime` runs, median self time per flashinfer module"
        )
    }
    if "register" in parts:
        out["register"] = _register_part(pairs, env, deadline)
    if "flashinfer" in parts:
        trees = {"patched": patched_tree, "pristine": pristine_tree}
        out["flashinfer"] = _flashinfer_part(
            trees, pairs, attribution_pairs, env, deadline, goal, fork
        )
        out["flashinfer"]["mode"] = (
            "forked children of one interpreter that imported torch (8 pairs an interpreter)"
            if fork
            else "fresh interpreters"
        )
        log(f"imports flashinfer: {json.dumps(out['flashinfer'])[:3000]}")
    return out
