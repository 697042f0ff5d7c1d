"""The child modules' own building blocks, each in a fresh interpreter as the children run."""

from __future__ import annotations

import json

from harness.child import HARNESS, run_python, tail


def _report(code: str) -> dict[str, object]:
    result = run_python(code + "\nprint('R ' + json.dumps(out))\n", path=[HARNESS])
    lines = [line for line in result.stdout.splitlines() if line.startswith("R ")]
    assert result.returncode == 0 and lines, tail(result)
    data: dict[str, object] = json.loads(lines[-1][2:])
    return data


def test_compiling_flag_is_the_state_non_strict_export_runs_in() -> None:
    out = _report(
        "import json, torch, fi_child\n"
        "out = {'before': [torch.compiler.is_compiling(), torch.compiler.is_exporting()]}\n"
        "try:\n"
        "    with fi_child.compiling_flag():\n"
        "        out['inside'] = [torch.compiler.is_compiling(), torch.compiler.is_exporting()]\n"
        "        raise KeyError('leaves the block')\n"
        "except KeyError:\n"
        "    pass\n"
        "out['after'] = [torch.compiler.is_compiling(), torch.compiler.is_exporting()]\n"
    )
    assert out == {"before": [False, False], "inside": [True, True], "after": [False, False]}


def test_sgsim_stub_modules_are_inert_and_scoped_to_their_root() -> None:
    out = _report(
        "import json, sys, sgsim\n"
        "sys.meta_path.insert(0, sgsim._StubFinder('stubbed_kernels'))\n"
        "from stubbed_kernels.mnnvl import McastGPUBuffer\n"
        "import stubbed_kernels.trtllm_ar as ar\n"
        "buffer = McastGPUBuffer(1, 2, group=None)\n"
        "out = {'class': isinstance(McastGPUBuffer, type), 'nested': isinstance(ar.Strategy.ONESHOT, type),\n"
        "       'dunder': not hasattr(ar, '__wrapped__')}\n"
        "try:\n"
        "    import flashinfer_comm_lookalike\n"
        "    out['outside'] = 'imported'\n"
        "except ImportError:\n"
        "    out['outside'] = 'ImportError'\n"
    )
    assert out == {"class": True, "nested": True, "dunder": True, "outside": "ImportError"}
