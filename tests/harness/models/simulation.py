"""Parent side of the whole-model simulation: the trees of a stack, one child per run.

``run(stack, patched=..., cases=[...])`` starts one interpreter with the stack's
sglang, flashinfer and sgl_kernel (Python only) trees first on the path, prepares
it once (:func:`modelsim.prepare`) and runs every case in a fork of it; returns one
report per case (see :func:`modelsim.capture`).  ``run_code`` runs your own code
after ``modelsim.prepare()`` instead (``modelsim.build(case)`` is there to use).

Stacks are read from patches/stacks.toml: every stack with an sglang artifact is a
target, so a stack added there is simulated without touching this file; a flashinfer-only
stack is a target beside each pristine sglang release it serves
(:func:`flashinfer_only_targets`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from packaging.version import Version

from fp4graph.model import config
from fp4graph.model.families import by_architecture
from fp4graph.model.stacks import Catalog, load
from harness import pinned_python
from harness.child import HARNESS, TESTS, run_python, tail
from harness.models import families, sgl_kernel_ops
from harness.tables import unstacked_versions
from harness.targets import SEED_STACK, full_matrix
from harness.toolkits import fake_cuda_home

REPO = TESTS.parent
# What a child needs of ours after the upstream trees: this package, and the child
# modules of tests/harness it imports by their own names (sgsim, moe_child, fi_child).
CHILD_PATH = [TESTS, HARNESS]


@dataclasses.dataclass(frozen=True)
class SglangStack:
    name: str
    sglang: str
    flashinfer: str
    torch: str | None = None  # the torch its users install (the stack's, the release row's pin)

    def has_series(self, project: str) -> bool:
        version = self.sglang if project == "sglang" else self.flashinfer
        return (REPO / "patches" / project / version / "series").is_file()


def _catalog() -> Catalog:
    return load(REPO / "patches" / "stacks.toml")


def sglang_stacks() -> list[SglangStack]:
    """Every stack of patches/stacks.toml that pins sglang (and its flashinfer)."""
    catalog = _catalog()
    return [SglangStack(stack.name, v["sglang"], v["flashinfer-python"], stack.torch)
            for stack, v in ((s, catalog.versions(s)) for s in catalog.sglang_stacks())]


def pristine_releases() -> list[SglangStack]:
    """Every sglang release pinned in patches/stacks.toml without a stack (``pin --no-stack``:
    measured pristine, nothing shipped), paired with the flashinfer of its measured row
    (:data:`expected.PRISTINE_RELEASES`; a release without a row raises), oldest first."""
    from harness.models import expected

    rows = {v: expected.pristine_release(v) for v in unstacked_versions(_catalog())}
    out = [SglangStack(f"sglang-{v}", v, row.flashinfer, row.torch) for v, row in rows.items()]
    return sorted(out, key=lambda s: Version(s.sglang))


def flashinfer_only_targets() -> list[SglangStack]:
    """Every flashinfer-only stack of patches/stacks.toml beside each pristine sglang release
    it serves (its ``serves``), as one target named after the stack
    with the release's torch (its measured row, :data:`expected.PRISTINE_RELEASES`): run
    ``patched=True``, pristine sglang and our flashinfer; by stack, then release, oldest first."""
    from harness.models import expected

    catalog = _catalog()
    return [SglangStack(s.name, v, catalog.versions(s).get("flashinfer-python", ""), expected.pristine_release(v).torch)
            for s in catalog.stacks for v in s.serves]


# An interpreter whose venv has a newer torch than this one (with its torchvision and the
# test requirements), for releases that need it: sglang 0.5.22+ pin torch 2.14.1, and the
# transformers they pin reads torchvision's version.
TORCH_PYTHON = "FP4GRAPH_TORCH_PYTHON"


def torch_of(python: str) -> Version:
    """The torch release (no local label) of ``python``'s venv."""
    import subprocess

    out = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Version(Version(out).base_version)


# Releases measured pristine that are older than the first stack (0.5.4 ... 0.5.6.post2:
# piecewise opt-in, nothing shipped) are checked in the full tier only: CI keeps its time.
FIRST_STACKED = "0.5.8"


def tier_pristine_releases() -> list[SglangStack]:
    """The releases of :func:`pristine_releases` whose per-release checks (pins, sgl-kernel
    record) this tier runs: all with ``FP4GRAPH_MODELS=full``, else those from
    :data:`FIRST_STACKED` on."""
    return [t for t in pristine_releases() if full_matrix() or Version(t.sglang) >= Version(FIRST_STACKED)]


def python_for(torch_pin: str) -> str | None:
    """The interpreter that measures a release pinning ``torch_pin``: this one where its torch
    is at least as new (CPU torch 2.13.0 measures 0.5.12 ... 0.5.21), else
    ``$FP4GRAPH_TORCH_PYTHON`` where that venv's torch is; None where neither is."""
    if torch_of(sys.executable) >= Version(torch_pin):
        return sys.executable
    other = os.environ.get(TORCH_PYTHON)
    if other and torch_of(other) >= Version(torch_pin):
        return other
    return None


def simulated_cuda(target: SglangStack, gpu: str, cuda_version: str | None = None) -> str:
    """The ``torch.version.cuda`` the simulated ``gpu`` answers for ``target``: ``cuda_version``
    where given, else that of the torch ``target`` pins (``fp4graph.verify.simulate.torch_cuda``:
    13.0 for torch 2.11.0+ and on SM121, else 12.8)."""
    if cuda_version is not None:
        return cuda_version
    if target.torch is None:
        raise ValueError(f"{target.name}: no torch pin to simulate the CUDA of; pass cuda_version")
    from fp4graph.verify import simulate  # imports torch: not at the top (simulate_installed)

    return simulate.torch_cuda(simulate.GPUS[gpu], target.torch)


def stack(name: str) -> SglangStack:
    for s in sglang_stacks():
        if s.name == name:
            return s
    raise KeyError(f"no sglang stack {name!r} in patches/stacks.toml")


def tp_stacks() -> list[SglangStack]:
    """The stacks of the tensor-parallel cases: sglang 0.5.9 (the seed's release) and the
    newest stack."""
    stacks = sglang_stacks()
    newest = max(stacks, key=lambda s: Version(s.sglang))
    return [s for s in stacks if s.name == SEED_STACK] + ([newest] if newest.name != SEED_STACK else [])


TreeGetter = Callable[..., pathlib.Path]


def trees(
    wheel_tree: TreeGetter, target: SglangStack, *, patched: bool, cases: Sequence[dict[str, Any]] = ()
) -> tuple[list[pathlib.Path], pathlib.Path]:
    """(the child's path, the sgl-kernel record) for running ``cases`` on ``target``,
    pristine or patched.

    Patched means the stack as users install it: patched sglang and patched
    flashinfer (each where a series exists).  sglang's pure-Python pins that the test
    venv does not meet come first (:mod:`harness.pinned_python`)."""
    sglang = wheel_tree("sglang", target.sglang, patched=patched and target.has_series("sglang"))
    flashinfer = wheel_tree(
        "flashinfer-python", target.flashinfer, patched=patched and target.has_series("flashinfer-python")
    )
    project, version = sgl_kernel_ops.kernel_requirement(sglang)
    sgl_kernel_ops.check_companions(project, version, sglang)
    companions = sgl_kernel_ops.companion_requirements(sglang)
    cache = config.default_cache_dir()
    kernel = sgl_kernel_ops.python_tree(project, version, cache, companions)
    models = [by_architecture(c["family"]["architecture"]) for c in cases]
    pins = pinned_python.path_for(sglang, cache, [f for f in models if f is not None])
    pins += pinned_python.cute_dsl_path(sglang, target.flashinfer, cache)
    return [*pins, sglang, flashinfer, kernel, *CHILD_PATH], sgl_kernel_ops.record_path(project, version, companions)


def case(
    family: str,
    *,
    moe_runner_backend: str = "auto",
    cuda_graph: bool = True,
    replay_tokens: int | None = None,
    tp_size: int = 1,
    **server_args: Any,
) -> dict[str, Any]:
    """A case of the matrix; ``replay_tokens``: after capture, replay the piecewise graphs
    once for an extend batch of that many tokens (padded to the next capture size);
    ``tp_size`` > 1: one process per rank (:func:`modelsim.run_ranks`), each also running
    the eager forwards its replay is compared with."""
    return {
        "family": families.row(family, tp=tp_size),
        "moe_runner_backend": moe_runner_backend,
        "cuda_graph": cuda_graph,
        "replay_tokens": replay_tokens,
        "tp_size": tp_size,
        "server_args": server_args,
    }


def run(
    wheel_tree: TreeGetter,
    target: SglangStack,
    *,
    patched: bool,
    cases: Sequence[dict[str, Any]],
    timeout: float = 1800,
    gpu: str = "sm120",
    python: str = sys.executable,
    cuda_version: str | None = None,
    toolkit: str | None = None,
) -> list[dict[str, Any]]:
    """Every case on a simulated ``gpu`` (a key of ``fp4graph.verify.simulate.GPUS``), by
    ``python`` (another venv's interpreter: a release that needs a newer torch,
    :func:`python_for`); torch answers the CUDA of :func:`simulated_cuda` (``cuda_version``
    where given).  ``toolkit``: the CUDA release of a system toolkit on the child's CUDA_HOME
    and PATH (:func:`harness.toolkits.fake_cuda_home`: its ``nvcc`` only reports it; builds
    are stood in); None: the machine's ``nvcc`` for pristine FlashInfer, 12.9 for our series."""
    path, record = trees(wheel_tree, target, patched=patched, cases=cases)
    request = {"record": str(record), "cases": list(cases), "gpu": gpu,
               "cuda_version": simulated_cuda(target, gpu, cuda_version)}
    with tempfile.TemporaryDirectory(prefix="fp4graph-toolkit-") as root:
        if toolkit is not None:
            request["cuda_home"] = str(fake_cuda_home(pathlib.Path(root), toolkit))
        code = f"from harness.models import modelsim\nmodelsim.main({json.dumps(request)!r})\n"
        result = run_python(code, path=path, timeout=timeout, interpreter=(python,))
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("MODELS ")]
    assert result.returncode == 0 and lines, tail(result, 6000)
    reports: list[dict[str, Any]] = json.loads(lines[-1][len("MODELS ") :])
    return reports


def installed_record() -> pathlib.Path:
    """The sgl-kernel record of the sgl-kernel installed in this interpreter."""
    import importlib.metadata

    for project in ("sglang-kernel", "sgl-kernel"):
        try:
            version = importlib.metadata.version(project)
        except importlib.metadata.PackageNotFoundError:
            continue
        return sgl_kernel_ops.record_path(project, version)
    raise sgl_kernel_ops.SglKernelError(f"{sys.executable}: neither sglang-kernel nor sgl-kernel is installed")


def run_installed(
    cases: Sequence[dict[str, Any]],
    *,
    gpu: str = "sm120",
    interpreter: Sequence[str] = (sys.executable,),
    timeout: float = 1800,
) -> list[dict[str, Any]]:
    """``cases`` on a simulated ``gpu`` with the packages installed for this interpreter
    (``nox -s install``): its venv, or the ``--target`` directories on its PYTHONPATH (a
    cross install).  The child is ``interpreter`` (this one; under emulation the argv that
    starts this one, as a subprocess of an emulated python runs natively) with the harness
    (:data:`CHILD_PATH`), this PYTHONPATH and fp4graph's src/ on its path, prepared with
    ``installed=True`` (modelsim's docstring): torch answers the CUDA of the venv's torch
    (``fp4graph.verify.simulate.torch_cuda``)."""
    request = {"record": str(installed_record()), "cases": list(cases), "installed": True, "gpu": gpu}
    code = f"from harness.models import modelsim\nmodelsim.main({json.dumps(request)!r})\n"
    inherited = [pathlib.Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    result = run_python(code, path=[*CHILD_PATH, *inherited], timeout=timeout, interpreter=interpreter)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("MODELS ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError("the simulation child failed:\n" + tail(result, 6000))
    reports: list[dict[str, Any]] = json.loads(lines[-1][len("MODELS ") :])
    return reports


def run_code(
    wheel_tree: TreeGetter,
    target: SglangStack,
    *,
    patched: bool,
    body: str,
    cases: Sequence[dict[str, Any]] = (),
    timeout: float = 1800,
    gpu: str = "sm120",
    cuda_version: str | None = None,
) -> dict[str, Any]:
    """``body`` after ``modelsim.prepare()``, with ``CASES`` (the ``cases`` given) in
    scope; it reports with ``stand_ins.report("RESULT", data)``.  torch answers the CUDA
    of :func:`simulated_cuda` (``cuda_version`` where given).  For example::

        body = '''
        built = modelsim.build(CASES[0])
        stand_ins.report("RESULT", {"moe": built.moe_runner_backend,
                                    "methods": sorted(set(built.quant_methods.values()))})
        '''
        run_code(wheel_tree, stack(SEED_STACK), patched=True, body=body,
                 cases=[case("qwen3-moe", moe_runner_backend="flashinfer_cutlass")])
    """
    path, record = trees(wheel_tree, target, patched=patched, cases=cases)
    code = (
        "import json\nfrom harness.models import modelsim, stand_ins\n"
        f"modelsim.prepare({str(record)!r}, {gpu!r}, cuda_version={simulated_cuda(target, gpu, cuda_version)!r})\n"
        f"CASES = json.loads({json.dumps(list(cases))!r})\n"
    ) + textwrap.dedent(body)
    result = run_python(code, path=path, timeout=timeout)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result.returncode == 0 and lines, tail(result, 6000)
    data: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :])
    return data
