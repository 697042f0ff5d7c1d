"""fp4graph.verify.simulate: what CPU torch answers once it simulates a GPU.

``install`` changes torch process-wide, so the checks run in one interpreter of their own.
"""

from __future__ import annotations

import json
import pathlib
import re
import textwrap
from typing import Any

from fp4graph.platforms import overrides
from fp4graph.verify import simulate
from harness.child import run_python, tail

LOCKS = pathlib.Path(__file__).resolve().parents[2] / "patches" / "locks"

CHILD = """
import json, torch
from torch._subclasses.fake_tensor import FakeTensorMode
from fp4graph.verify import simulate
out = {}
for key in ("sm120", "sm121"):
    simulate.install(simulate.GPUS[key])
    props = torch.cuda.get_device_properties(0)
    out[key] = {
        "capability": list(torch.cuda.get_device_capability()), "name": torch.cuda.get_device_name(),
        "sms": props.multi_processor_count, "integrated": props.is_integrated,
        "cuda": torch.version.cuda, "module": torch.get_device_module().__name__,
    }
# A tensor-parallel rank sets its GPU: fake CUDA tensors made for "cuda" land there.
simulate.install(simulate.SM120, device_count=2)
simulate.set_device(1)
with FakeTensorMode():
    x = torch.empty(2, device="cuda")
with torch.cuda.device(0):
    inside = torch.cuda.current_device()
restored = torch.cuda.current_device()
errors = []
for bad in (2, "cuda:5"):
    try:
        torch.cuda.set_device(bad)
    except RuntimeError as exc:
        errors.append(str(exc))
simulate.set_device_count(4)
out["rank"] = {"device": str(x.device), "inside": inside, "restored": restored,
               "after": torch.cuda.current_device(), "errors": errors, "count": torch.cuda.device_count()}
simulate.install(simulate.SM120, device_count=2, cuda_version="13.0")  # a torch built for CUDA 13.0
out["told"] = torch.version.cuda
print("OUT " + json.dumps(out))
"""


def _child() -> dict[str, Any]:
    result = run_python(textwrap.dedent(CHILD))
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("OUT ")]
    assert result.returncode == 0 and lines, tail(result)
    data: dict[str, Any] = json.loads(lines[-1][4:])
    return data


def test_the_gpus_and_the_sm12x_family() -> None:
    assert list(simulate.GPUS) == ["sm120", "sm121", "sm100"]
    assert [g.arch for g in simulate.SM12X] == ["sm120", "sm121"]
    gb10 = simulate.SM121
    assert (gb10.capability, gb10.multi_processor_count, gb10.integrated) == ((12, 1), 48, True)
    assert not simulate.SM120.integrated and simulate.SM120.properties().is_integrated is False
    assert (simulate.SM120.cuda_version, gb10.cuda_version) == ("12.8", "13.0")


# Every linux machine, as a lock's marker says it: a stack's lock (`sys_platform == "linux"`)
# or a served release's, whose sglang has no darwin wheel filter (`!= "darwin"`).
LINUX = r'sys_platform (?:== "linux"|!= "darwin")$'


def test_gb10_answers_the_cuda_of_the_torch_a_dgx_spark_installs() -> None:
    """SM121's CUDA is every stack's torch build on linux aarch64: the CUDA build
    patches/locks/platforms.toml adds (``[[torch]]``), else the lock's own torch, whose
    CUDA runtime the lock pins for every machine."""
    cuda = simulate.SM121.cuda_version
    builds = [b for b in overrides.read(LOCKS)[1] if b.name == "torch" and b.platform.machine == "aarch64"]
    assert builds and all(b.requirement.endswith(f"+cu{cuda.replace('.', '')}") for b in builds), builds
    locks = sorted(LOCKS.glob("sglang-*.txt"))
    assert locks
    for lock in locks:
        if any(lock.stem in b.stacks for b in builds):
            continue
        runtime = re.search(r"^nvidia-cuda-runtime==(\d+\.\d+)\.\S* ; " + LINUX, lock.read_text(), re.M)
        assert runtime and runtime[1] == cuda, f"{lock}: its torch's CUDA runtime is not {cuda}"


# x86_64: the CUDA runtime a lock pins for every linux machine, or for x86_64 beside another
# one for aarch64 (0.5.8 ... 0.5.10.post1: cu12 on x86_64).
X86_64_RUNTIME = re.compile(r'^nvidia-cuda-runtime(?:-cu\d+)?==(\d+\.\d+)\.\S* ; '
                            r'(?:platform_machine == "x86_64" and )?' + LINUX, re.M)


def test_sm120_answers_the_cuda_of_the_torch_each_lock_installs() -> None:
    """torch_cuda (what the whole-model simulation's SM120 answers for a stack) is the CUDA
    runtime each lock pins beside its torch for linux x86_64 (PyPI's torch 2.8.0 / 2.9.1:
    12.8; 2.11.0: 13.0), and on SM121 every stack's 13.0; a local label names its CUDA."""
    locks = sorted(LOCKS.glob("sglang-*.txt"))
    seen = set()
    for lock in locks:
        text = lock.read_text()
        torch_pin = re.search(r"^torch==(\S+)$", text, re.M)
        runtime = X86_64_RUNTIME.findall(text)
        assert torch_pin and len(runtime) == 1, f"{lock}: no torch pin or not one x86_64 CUDA runtime"
        assert simulate.torch_cuda(simulate.SM120, torch_pin[1]) == runtime[0], lock
        assert simulate.torch_cuda(simulate.SM121, torch_pin[1]) == "13.0", lock
        seen.add(runtime[0])
    assert seen == {"12.8", "13.0"}, seen  # both sides of FIRST_CUDA13_TORCH are held
    assert simulate.torch_cuda(simulate.SM120, "2.9.1+cu130") == "13.0"
    assert simulate.torch_cuda(simulate.SM120, "2.11.0+cu128") == "12.8"
    assert simulate.torch_cuda(simulate.SM100, "2.14.1") == "13.0"
    for bad in ("2", "2.x.1", "latest"):
        try:
            simulate.torch_cuda(simulate.SM120, bad)
        except ValueError as exc:
            assert repr(bad) in str(exc)
        else:
            raise AssertionError(f"torch {bad!r} was taken")


def test_torch_answers_as_the_gpu_and_a_rank_has_its_gpu_current() -> None:
    data = _child()
    for key in ("sm120", "sm121"):
        got, expected = data[key], simulate.GPUS[key]
        assert got["capability"] == list(expected.capability) and got["name"] == expected.name, got
        assert got["sms"] == expected.multi_processor_count and got["integrated"] is expected.integrated, got
        assert got["cuda"] == expected.cuda_version and got["module"] == "torch.cuda", got
    assert data["told"] == "13.0", data
    rank = data["rank"]
    assert rank["device"] == "cuda:1" and rank["inside"] == 0 and rank["restored"] == 1, rank
    assert rank["after"] == 0 and rank["count"] == 4, rank  # a new machine: device 0 current
    assert len(rank["errors"]) == 2 and "2 device(s)" in rank["errors"][0], rank
