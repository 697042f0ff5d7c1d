"""Is there an SM120 GPU?  Asked of nvidia-smi (before any install) and of torch in the venv."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import subprocess

SM120 = (12, 0)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Gpu:
    name: str
    capability: tuple[int, int]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DeviceReport:
    """What a probe saw; ``problem`` says why it saw nothing, when it did not."""

    gpus: tuple[Gpu, ...]
    probe: str
    problem: str | None = None

    @property
    def sm120(self) -> tuple[Gpu, ...]:
        return tuple(g for g in self.gpus if g.capability[0] == SM120[0])

    def skip_reason(self, tp: int) -> str | None:
        """None when ``tp`` SM120 GPUs are there, else the reason to skip."""
        if self.problem:
            return f"no SM120 GPU: {self.problem} ({self.probe})"
        found = ", ".join(f"{g.name} (sm_{g.capability[0]}{g.capability[1]})" for g in self.gpus)
        if not self.sm120:
            return f"no SM120 GPU ({self.probe} sees: {found or 'no GPU'})"
        if len(self.sm120) < tp:
            return f"--tp {tp} needs {tp} SM120 GPUs, {self.probe} sees {len(self.sm120)}: {found}"
        return None


def parse_nvidia_smi(text: str) -> tuple[Gpu, ...]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader``."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, cap = line.rpartition(",")
        major, _, minor = cap.strip().partition(".")
        if not (major.isdigit() and minor.isdigit()):
            continue
        gpus.append(Gpu(name=name.strip(), capability=(int(major), int(minor))))
    return tuple(gpus)


def probe_nvidia_smi(executable: str | None = None) -> DeviceReport:
    exe = executable or shutil.which("nvidia-smi")
    if exe is None:
        return DeviceReport(gpus=(), probe="nvidia-smi", problem="nvidia-smi is not on PATH")
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return DeviceReport(gpus=(), probe=exe, problem=f"nvidia-smi failed: {exc}")
    return DeviceReport(gpus=parse_nvidia_smi(out), probe=exe)


# Printed by the venv's python: one JSON object, no sglang import.
_TORCH_PROBE = """
import json, torch
gpus = []
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        gpus.append([torch.cuda.get_device_name(i), list(torch.cuda.get_device_capability(i))])
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpus}))
"""


def probe_torch(python: pathlib.Path | str) -> DeviceReport:
    """Ask torch in the target venv (the CUDA build sglang pulled in)."""
    probe = f"torch in {python}"
    try:
        out = subprocess.run(
            [str(python), "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=300, check=True
        ).stdout
        data = json.loads(out.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        return DeviceReport(gpus=(), probe=probe, problem=f"torch probe failed: {exc}")
    gpus = tuple(Gpu(name=n, capability=(int(c[0]), int(c[1]))) for n, c in data["gpus"])
    problem = None if gpus else f"torch {data['torch']} (CUDA {data['cuda']}) sees no CUDA device"
    return DeviceReport(gpus=gpus, probe=probe, problem=problem)
