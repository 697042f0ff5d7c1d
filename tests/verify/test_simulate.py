"""fp4graph.verify.simulate: what CPU torch answers once it simulates a GPU.

``install`` changes torch process-wide, so each check runs in its own interpreter.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest

from fp4graph.verify import simulate
from harness.child import run_python, tail


def _child(body: str) -> dict[str, Any]:
    code = "import json, torch\nfrom fp4graph.verify import simulate\n" + textwrap.dedent(body)
    result = run_python(code)
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


@pytest.mark.parametrize("gpu", ["sm120", "sm121"])
def test_torch_answers_as_the_gpu(gpu: str) -> None:
    data = _child(f"""
        gpu = simulate.GPUS[{gpu!r}]
        simulate.install(gpu)
        props = torch.cuda.get_device_properties(0)
        print("OUT " + json.dumps({{
            "capability": list(torch.cuda.get_device_capability()), "name": torch.cuda.get_device_name(),
            "sms": props.multi_processor_count, "integrated": props.is_integrated,
            "cuda": torch.version.cuda, "module": torch.get_device_module().__name__,
        }}))
    """)
    expected = simulate.GPUS[gpu]
    assert data["capability"] == list(expected.capability) and data["name"] == expected.name
    assert data["sms"] == expected.multi_processor_count and data["integrated"] is expected.integrated
    assert data["cuda"] == "12.8" and data["module"] == "torch.cuda"


def test_a_rank_has_its_gpu_current() -> None:
    """A tensor-parallel rank sets its GPU (torch.cuda.set_device); fake CUDA tensors made
    for "cuda" land there, and ``torch.cuda.device`` switches and restores."""
    data = _child("""
        from torch._subclasses.fake_tensor import FakeTensorMode
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
        print("OUT " + json.dumps({"device": str(x.device), "inside": inside, "restored": restored,
                                   "after": torch.cuda.current_device(), "errors": errors,
                                   "count": torch.cuda.device_count()}))
    """)
    assert data["device"] == "cuda:1" and data["inside"] == 0 and data["restored"] == 1, data
    assert data["after"] == 0 and data["count"] == 4, data  # a new machine: device 0 current
    assert len(data["errors"]) == 2 and "2 device(s)" in data["errors"][0], data
