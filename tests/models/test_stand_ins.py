"""The whole-model simulation's own parts: sgl-kernel records, stand-ins that must agree
with what they stand in for."""

from __future__ import annotations

import json
import pathlib

import pytest

import sgl_kernel_ops
import simulation
from harness.child import run_python, tail

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("target", simulation.sglang_stacks(), ids=lambda s: s.name)
def test_every_stack_has_its_sgl_kernel_record(wheel_tree, target: simulation.SglangStack) -> None:
    """The sgl-kernel each stack's sglang pins has a record (else: how to generate it)."""
    project, version = sgl_kernel_ops.kernel_requirement(wheel_tree("sglang", target.sglang, patched=False))
    record = sgl_kernel_ops.load_record(project, version)
    assert record["wheel"]["filename"].startswith(project.replace("-", "_") + f"-{version}-")
    assert len(record["wheel"]["sha256"]) == 64
    names = {s.split("(", 1)[0] for s in record["schemas"]}
    # The ops sglang's NVFP4 models call through sgl_kernel on every release.
    assert {"rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "moe_fused_gate", "topk_softmax"} <= names
    assert any(e["name"] == "sgl_kernel/__init__.py" for e in record["python"])


def test_missing_record_names_the_command() -> None:
    with pytest.raises(sgl_kernel_ops.SglKernelError, match="sgl_kernel_ops.py generate sgl-kernel==0.0.0"):
        sgl_kernel_ops.load_record("sgl-kernel", "0.0.0")


INDEXING = """
import json
from fp4graph.verify import simulate
simulate.install()
import torch, stand_ins
stand_ins.install_cuda_runtime(1 << 30)
stand_ins.install_fake_cuda_indexing()
from torch._subclasses.fake_tensor import FakeTensorMode
cases = [
    ("slice", lambda t, i: t[1:5]),
    ("int", lambda t, i: t[2]),
    ("ellipsis-none", lambda t, i: t[..., None]),
    ("tensor", lambda t, i: t[i]),
    ("slice-tensor", lambda t, i: t[:, i]),
    ("int-slice", lambda t, i: t[0, 2:6]),
]
out = {}
host = torch.zeros(8, 8, 4)
index = torch.tensor([0, 3, 1])
with FakeTensorMode(allow_non_fake_inputs=True):
    dev = torch.empty(8, 8, 4, device="cuda")
    dev_index = torch.tensor([0, 3, 1], device="cuda")
    small = torch.zeros((), dtype=torch.int32, device="cuda")
    small[...] = 3
    dev.copy_(torch.empty(8, 8, 4, device="cuda"))
    for name, fn in cases:
        got, want = fn(dev, dev_index), fn(host, index)
        out[name] = [list(got.shape), list(want.shape), got.device.type]
print("RESULT " + json.dumps(out))
"""


def test_fake_cuda_indexing_has_host_shapes() -> None:
    result = run_python(INDEXING, path=[HERE])
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result)
    for name, (got, want, device) in json.loads(lines[-1][len("RESULT ") :]).items():
        assert got == want and device == "cuda", name
