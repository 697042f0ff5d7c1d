"""The whole-model simulation's own parts: sgl-kernel records, stand-ins that must agree
with what they stand in for."""

from __future__ import annotations

import json

import pytest
from packaging.version import Version

from harness.child import TESTS, run_python, tail
from harness.models import sgl_kernel_ops, simulation


@pytest.mark.parametrize("target", simulation.sglang_stacks() + simulation.tier_pristine_releases(),
                         ids=lambda s: s.name)
def test_every_stack_has_its_sgl_kernel_record(wheel_tree, target: simulation.SglangStack) -> None:
    """The sgl-kernel each stack's (and each release measured pristine) sglang pins has a
    record (else: how to generate it), with the companions it pins (sgl-deep-gemm)."""
    tree = wheel_tree("sglang", target.sglang, patched=False)
    project, version = sgl_kernel_ops.kernel_requirement(tree)
    sgl_kernel_ops.check_companions(project, version, tree)
    record = sgl_kernel_ops.load_record(project, version)
    assert record["wheel"]["filename"].startswith(project.replace("-", "_") + f"-{version}-")
    assert len(record["wheel"]["sha256"]) == 64
    names = {s.split("(", 1)[0] for s in record["schemas"]}
    # The ops sglang's NVFP4 models call through sgl_kernel on every release; moe_fused_gate
    # left sglang-kernel with 0.4.5 (sglang 0.5.16+ call their jit_kernel/moe_fused_gate.py).
    wanted = {"rmsnorm", "fused_add_rmsnorm", "silu_and_mul", "topk_softmax"}
    if Version(version) < Version("0.4.5"):
        wanted.add("moe_fused_gate")
    assert wanted <= names, sorted(wanted - names)
    assert any(e["name"] == "sgl_kernel/__init__.py" for e in record["python"])


def test_missing_record_names_the_command() -> None:
    with pytest.raises(sgl_kernel_ops.SglKernelError, match="sgl_kernel_ops.py generate sgl-kernel==0.0.0"):
        sgl_kernel_ops.load_record("sgl-kernel", "0.0.0")


INDEXING = """
import json
from fp4graph.verify import simulate
simulate.install()
import torch
from harness.models import stand_ins
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
    result = run_python(INDEXING, path=[TESTS])
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result)
    for name, (got, want, device) in json.loads(lines[-1][len("RESULT ") :]).items():
        assert got == want and device == "cuda", name


COLLECTIVES = """
import json, os, socket, sys
import torch, torch.distributed as dist
from harness.models import collectives

with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
SCHEDULES = {"same": [[("custom_ar", "all_reduce", 8), ("nccl", "all_gather", 4), ("nccl", "broadcast", 3),
                       ("torch.distributed", "reduce_scatter", 2)]] * 2,
             "differ": [[("custom_ar", "all_reduce", 8)], [("custom_ar", "all_reduce", 16)]]}
schedules = SCHEDULES[sys.argv[1] if len(sys.argv) > 1 else os.environ["SCHEDULE"]]
pids = []
for rank in range(2):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
        out = []
        for via, kind, count in schedules[rank]:
            try:
                collectives.run(via, kind, count, torch.bfloat16)
                out.append("ok")
            except collectives.ScheduleMismatch as exc:
                out.append("mismatch: " + str(exc))
        out.append([c.key() for c in collectives.LOG])
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    pids.append((pid, read))
results = []
for pid, read in pids:
    results.append(json.loads(os.read(read, 1 << 20)))
    os.waitpid(pid, 0)
nvml = collectives.nvml_module()
status = nvml.nvmlDeviceGetP2PStatus(nvml.nvmlDeviceGetHandleByIndex(0), nvml.nvmlDeviceGetHandleByIndex(1),
                                     nvml.NVML_P2P_CAPS_INDEX_NVLINK)
print("RESULT " + json.dumps({"ranks": results, "nvlink": status == nvml.NVML_P2P_STATUS_OK}))
"""


@pytest.mark.parametrize("schedule", ["same", "differ"])
def test_collectives_run_through_gloo_and_check_the_schedule(schedule: str) -> None:
    """Every collective a stand-in kernel runs goes through a real gloo world (each rank's
    placeholder checked on arrival); ranks about to run different collectives fail,
    naming both, where NCCL would hang.  NVML answers a PCIe box: no NVLink."""
    result = run_python(COLLECTIVES, path=[TESTS], env={"SCHEDULE": schedule})
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result)
    data = json.loads(lines[-1][len("RESULT ") :])
    assert data["nvlink"] is False
    for out in data["ranks"]:
        *verdicts, log = out
        if schedule == "same":
            assert verdicts == ["ok"] * 4, out
            assert log == [["custom_ar", "all_reduce", 8, "bfloat16"], ["nccl", "all_gather", 4, "bfloat16"],
                           ["nccl", "broadcast", 3, "bfloat16"],
                           ["torch.distributed", "reduce_scatter", 2, "bfloat16"]], out
        else:
            assert len(verdicts) == 1 and verdicts[0].startswith("mismatch"), out
            assert "of 8 torch.bfloat16" in verdicts[0] and "of 16 torch.bfloat16" in verdicts[0], out
