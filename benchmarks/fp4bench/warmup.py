"""(c) Warm-up cost: the first fp4 call (or ``flashinfer.fp4_warmup``) in a fresh process,
on an empty and on a warm JIT cache."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

from .common import log

WARMUP_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t1 = time.perf_counter()
import flashinfer
t2 = time.perf_counter()
dev = torch.device("cuda")
res = {"torch_init_s": t1 - t0, "import_flashinfer_s": t2 - t1}
if hasattr(flashinfer, "fp4_warmup"):
    res["method"] = "flashinfer.fp4_warmup(device)"
    t = time.perf_counter(); names = flashinfer.fp4_warmup(dev); torch.cuda.synchronize()
    res["first_s"] = time.perf_counter() - t
    res["modules"] = list(names)
    t = time.perf_counter(); flashinfer.fp4_warmup(dev); torch.cuda.synchronize()
    res["again_in_process_s"] = time.perf_counter() - t
else:
    res["method"] = "first eager flashinfer.fp4_quantize call (no fp4_warmup: pristine wheel)"
    x = torch.randn(16, 4096, dtype=torch.bfloat16, device=dev)
    gs = torch.ones(1, device=dev)
    t = time.perf_counter(); flashinfer.fp4_quantize(x, gs); torch.cuda.synchronize()
    res["first_s"] = time.perf_counter() - t
    t = time.perf_counter(); flashinfer.fp4_quantize(x, gs); torch.cuda.synchronize()
    res["again_in_process_s"] = time.perf_counter() - t
print("WARMUP_JSON " + json.dumps(res))
"""


def run_warmup_child(workspace: pathlib.Path) -> dict[str, Any]:
    env = dict(os.environ, FLASHINFER_WORKSPACE_BASE=str(workspace))
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", WARMUP_CHILD], capture_output=True, text=True, env=env, timeout=900
    )
    wall = time.perf_counter() - t
    for line in proc.stdout.splitlines():
        if line.startswith("WARMUP_JSON "):
            res: dict[str, Any] = json.loads(line[len("WARMUP_JSON ") :])
            res["process_wall_s"] = wall
            return res
    raise RuntimeError(
        f"warm-up child failed rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def bench_warmup(workspace: pathlib.Path) -> dict[str, Any]:
    log(f"warmup: cold JIT cache at {workspace}")
    cold = run_warmup_child(workspace)
    log(f"warmup: cold first={cold['first_s']:.2f}s; warm-cache process next")
    warm = run_warmup_child(workspace)
    log(f"warmup: warm-cache first={warm['first_s'] * 1e3:.1f} ms")
    return {"cold_cache": cold, "warm_cache": warm}
