"""The flashinfer-only stacks on whole models: pristine sglang beside our FlashInfer, with an
nvcc 12.8 on CUDA_HOME / PATH and a CUDA 13.0 torch.

sglang 0.5.13 ... 0.5.21 pin torch 2.11.0 / 2.13.0 (CUDA 13.0 builds) and FlashInfer 0.6.12
... 0.6.18, which asks ``nvcc --version`` for its JIT targets.  A user whose system toolkit is
older than 12.9 (here 12.8) gets no SM12x target from pristine FlashInfer: its first JIT spec
raises "FlashInfer requires GPUs with sm75 or higher" (``jit/core.py`` ``check_cuda_arch``);
our series (``sm120-nvcc-12-8``, upstream #3633) gives SM120 ``12.0a``.  The flashinfer-only
stacks (patches/stacks.toml) ship that series for the releases each serves
(:func:`harness.models.simulation.flashinfer_only_targets`).

Each target runs the release's own sglang wheel, pristine, in the whole-model simulation
(tests/harness/models/modelsim.py lists the stand-ins), with FlashInfer pristine or ours; the
toolkit is a stand-in ``nvcc`` that reports 12.8 (:func:`harness.toolkits.fake_cuda_home`;
the JIT builds are stood in, spec generation and its checks are FlashInfer's own), torch
answers CUDA 13.0:

- pristine FlashInfer: every family stops at FlashInfer's first JIT spec (mostly the RMSNorm
  module, from sgl-kernel's ``rmsnorm`` in the first forward of the prefill graph runner; on
  0.5.18 the CUTLASS fused-MoE module, and Llama / Qwen3 reach none there:
  :data:`NO_FLASHINFER_SPEC`), FlashInfer's targets empty;
- ours: FlashInfer reads nvcc 12.8 and targets ``12.0a``; each family does what the release's
  row says (:data:`harness.models.expected.PRISTINE_RELEASES`, measured with the machine's
  nvcc 13.0): works, or the same break outside our scope;
- SM121 (GB10): nvcc 12.8 has no ``sm_121``; ours keeps upstream's rule (SM 12.1+ needs nvcc
  12.9), so both stop at the first spec, ours naming the empty target list.

Which part runs: ``FP4GRAPH_MODELS=full`` (``nox -s tracing``) every target, every family of
the release on SM120 with decode CUDA graphs on (the default server), both sides, and Llama
on SM121 for each stack's newest release; CI Llama on SM120, both sides, on :data:`CI` (the
newest served release on which every family works).  One child per (target, side, GPU).  A
release whose torch pin is newer than this venv's runs under ``$FP4GRAPH_TORCH_PYTHON``
(:func:`harness.models.simulation.python_for`), and is skipped, naming it, where that is unset.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.models import expected, families, simulation
from harness.models.reports import GroupedReports
from harness.targets import full_matrix

TOOLKIT = "12.8"  # an nvcc older than 12.9 on CUDA_HOME / PATH
TORCH_CUDA = "13.0"  # the releases pin torch 2.11.0 / 2.13.0: CUDA 13.0 builds
# What FlashInfer raises where a JIT spec finds no target for the device, and the function
# of the traceback that raises it: gen_jit_spec's check (every spec); the CUTLASS fused-MoE
# SM120 module's flags (compilation_context.py get_nvcc_flags_list), which comes first for
# the families of :data:`MOE_SPEC_FIRST`.
NO_TARGET = ("FlashInfer requires GPUs with sm75 or higher", "in check_cuda_arch")
NO_SM12X_FLAGS = ("No supported CUDA architectures found for major versions [12]", "in get_nvcc_flags_list")
# The one served release whose sgl-kernel (sglang-kernel 0.4.6.post1) runs RMSNorm itself;
# every other's calls FlashInfer's RMSNorm module, the first spec of every family.
OWN_RMSNORM_RELEASE = "0.5.18"
# There, FlashInfer's first spec is the fused MoE's for these families:
MOE_SPEC_FIRST = ("qwen3-moe", "deepseek-v3", "deepseek-v3-no-fusion", "glm4-moe", "glm5")
# and these ask FlashInfer for no JIT module, so an nvcc 12.8 changes nothing (they do what
# their row says, pristine and on SM121 too): the dense models' fp4 ops are sglang's, and the
# attention kernels are the harness's stand-ins (modelsim 5; a GPU server's FlashInfer
# attention backend builds FlashInfer's attention modules, not simulated).
NO_FLASHINFER_SPEC = ("llama", "qwen3")
FULL = full_matrix()
TARGETS = simulation.flashinfer_only_targets()


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    gpu: str = "sm120"

    @property
    def id(self) -> str:
        return f"{self.family}-{self.gpu}"

    def request(self) -> dict[str, Any]:
        nsa = self.family in families.NSA_FAMILIES
        return simulation.case(self.family, replay_tokens=expected.REPLAY_TOKENS if nsa else None)


def ci_target() -> simulation.SglangStack:
    """The newest served release on which every family works pristine (the harness traces
    the whole release; later ones import what CI's test venv leaves out, e.g. 0.5.21's
    uvicorn / fastapi), beside the stack that serves it."""
    return [t for t in TARGETS if all(f.works for f in expected.pristine_release(t.sglang).families.values())][-1]


CI = ci_target()


def matrix(target: simulation.SglangStack) -> list[Case]:
    if not FULL:
        return [Case("llama")] if target == CI else []
    out = [Case(name) for name in expected.pristine_release(target.sglang).families]
    newest = [t for t in TARGETS if t.name == target.name][-1]
    return out + ([Case("llama", "sm121")] if target == newest else [])


PARAMS = [
    pytest.param(t, patched, c, id=f"{t.name}-sglang-{t.sglang}-{'ours' if patched else 'pristine'}-{c.id}")
    for t in TARGETS
    for patched in (False, True)
    for c in matrix(t)
]
_REPORTS = GroupedReports()


def report_of(request: pytest.FixtureRequest, wheel_tree: Any, target: simulation.SglangStack, patched: bool,
              case: Case) -> dict[str, Any]:
    """The report of ``case``; the first call for a (target, side, GPU) runs every selected
    case of that triple in one child."""
    def run(cases: list[Case]) -> list[dict[str, Any]]:
        torch_pin = expected.pristine_release(target.sglang).torch
        python = simulation.python_for(torch_pin)
        if python is None:
            pytest.skip(f"sglang {target.sglang} pins torch {torch_pin}, newer than this venv's: "
                        f"${simulation.TORCH_PYTHON} names a python that has it")
        return simulation.run(wheel_tree, target, patched=patched, cases=[c.request() for c in cases],
                              gpu=case.gpu, python=python, toolkit=TOOLKIT)

    return _REPORTS.report(request, case, run, target=target, patched=patched)


def test_targets_are_the_flashinfer_only_stacks() -> None:
    """Every flashinfer-only stack serves at least one measured release, and a release is
    served by one stack only, the one whose flashinfer its row pins."""
    assert {t.name for t in TARGETS} >= {"flashinfer-0.6.12", "flashinfer-0.6.18"}, TARGETS
    releases = [t.sglang for t in TARGETS]
    assert len(releases) == len(set(releases)), TARGETS
    for t in TARGETS:
        assert t.name == f"flashinfer-{t.flashinfer}" == f"flashinfer-{expected.pristine_release(t.sglang).flashinfer}"
        assert t.has_series("flashinfer-python") and not t.has_series("sglang"), t


@pytest.mark.parametrize(("target", "patched", "case"), PARAMS)
def test_nvcc_12_8_whole_model(request: pytest.FixtureRequest, wheel_tree: Any, target: simulation.SglangStack,
                               patched: bool, case: Case) -> None:
    report = report_of(request, wheel_tree, target, patched, case)
    describe = expected.describe(report)
    sm120 = case.gpu == "sm120"
    assert report["torch_cuda"] == TORCH_CUDA, describe  # the release's torch (simulation.simulated_cuda)
    assert report.get("flashinfer_toolkit") == {"nvcc": TOOLKIT, "archs": ["12.0a"] if patched and sm120 else []}, describe
    own_rmsnorm = target.sglang == OWN_RMSNORM_RELEASE
    if (patched and sm120) or (own_rmsnorm and case.family in NO_FLASHINFER_SPEC):
        expected.assert_release_outcome(target.sglang, case.family, case.gpu, True, report)
        return
    # No target: the first JIT spec FlashInfer generates refuses (pristine; ours on SM121,
    # where gen_jit_spec's error names the empty target list).
    text = report.get("error_text", "")
    assert not report["ok"] and report["stage"] != "build", describe
    error, where = NO_SM12X_FLAGS if own_rmsnorm and case.family in MOE_SPEC_FIRST else NO_TARGET
    assert error in text and where in report["traceback"], describe
    assert not patched or "Detected TARGET_CUDA_ARCHS=[]" in text, describe
