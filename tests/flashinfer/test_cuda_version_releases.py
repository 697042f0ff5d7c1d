"""The CUDA-version lookups of the FlashInfer releases we serve pristine (no series), on a
simulated SM12x machine whose toolkit is absent, older than PyTorch's CUDA, or the same.

FlashInfer's ``jit/cpp_ext.py`` ``get_cuda_version()`` asks ``nvcc --version`` (a
subprocess; ``torch.version.cuda`` only where nvcc is missing), and from 0.6.11 runtime
decisions read it: the SM12x arch suffix of the module-level ``CompilationContext``
(``compilation_context.py``, at ``import flashinfer``), ``mm_fp4``'s ``auto`` order
(``gemm/gemm_base.py`` ``_heuristic_func_mm_fp4``: b12x first on SM120 with CUDA 13) and
the b12x GEMM / fused-MoE CUDA-13 requirement.  A DGX Spark peer patches it to read
``torch.version.cuda`` through sglang 0.5.17 (flashinfer 0.6.15.post1).  Measured here, per
release (the flashinfer-python releases pinned in patches/stacks.toml without a series):
nvcc runs, what it answers, what those decisions become, and whether a function that asks
it can be traced by ``torch.compile(fullgraph=True)`` (the peer's symptom).  Our series
(0.6.x revision 3+, ``cuda-version``) split the reading: test_cuda_version.py.  The series
with ``sm120-nvcc-12-8`` (the backport of flashinfer #3633: 0.6.7.post2 ... 0.6.11.post1, and
0.6.12, 0.6.14, 0.6.15.post1, 0.6.17, 0.6.18 for sglang 0.5.13 ... 0.5.21) are checked here with nvcc 12.8,
pristine and the revision before the backport beside patched, all in one child:
test_nvcc_12_8_beside_torch_cu130.

Stand-ins: ``nvcc`` under CUDA_HOME, a script that logs its call and prints the version it is
told to (absent: CUDA_HOME without ``bin/nvcc``); ``torch.version.cuda`` ``13.0`` (torch
2.11.0's CUDA, the pin of sglang 0.5.12 ... 0.5.17); the SM120 / SM121 device
(``fp4graph.verify.simulate``); ``cute_dsl`` availability (b12x's check needs
nvidia-cutlass-dsl, not installed here: forced true); while tracing, ``torch.cuda.is_available``
false (Dynamo saves the CUDA RNG state of a device a CPU build has not).  One child per
release for the pristine lookups, one for every nvcc-12.8 pair; a fork per case.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Any

import pytest
from packaging.version import Version

from fp4graph.model import projects, series
from fp4graph.model.stacks import load
from fp4graph.wheels.apply import apply_patch
from harness.child import CaseReport, run_forked
from harness.targets import beside_sglang, full_matrix, versions_with_topic
from harness.toolkits import fake_cuda_home

PROJECT = "flashinfer-python"
REPO = pathlib.Path(__file__).resolve().parents[2]
TORCH_CUDA = "13.0"
TOOLKITS = ("none", "12.8", "13.0")
GPUS = ("sm120", "sm121")
FIX = "sm120-nvcc-12-8"

CHILD = r"""
import io, logging, os, re, sys, types
import torch
from fp4graph.verify import simulate
BASE = list(sys.path)

def case(request):
    simulate.install(simulate.GPUS[request["gpu"]])
    torch.version.cuda = request["torch"]
    os.environ["CUDA_HOME"] = request["cuda_home"]
    os.environ["FP4GRAPH_NVCC_LOG"] = request["log"]
    os.environ.pop("FLASHINFER_CUDA_ARCH_LIST", None)
    sys.path[:] = [request["tree"], *BASE]
    caught = io.StringIO()
    logging.getLogger().addHandler(logging.StreamHandler(caught))
    import flashinfer
    from flashinfer.jit import core, cpp_ext
    from flashinfer.gemm import gemm_base

    def calls():
        try:
            return len(open(request["log"]).read().split())
        except FileNotFoundError:
            return 0

    out = {"version": flashinfer.__version__, "nvcc_at_import": calls(),
           "archs": sorted(f"{a}.{b}" for a, b in core.current_compilation_context.TARGET_CUDA_ARCHS),
           "import_warning": "requires CUDA >= 12.9" in caught.getvalue(),
           "get_cuda_version": str(cpp_ext.get_cuda_version())}
    # The fp4 quantization module an SM12x fp4_quantize builds (its JIT build stood in).
    from flashinfer.quantization import fp4_quantization
    built = []
    core.JitSpec.build_and_load = lambda spec: built.append(spec) or types.SimpleNamespace()
    major, minor = torch.cuda.get_device_capability()
    try:
        fp4_quantization.get_fp4_quantization_module(f"{major}{minor}")
        flags = " ".join(built[0].extra_cuda_cflags or [])
        out["fp4_module"] = [built[0].name, sorted(set(re.findall(r"compute_\w+", flags)))]
    except Exception as exc:
        out["fp4_module"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
    if not request["full"]:
        return out  # b12x and its mm_fp4 order exist from 0.6.11
    device = types.SimpleNamespace(device=torch.device("cuda", 0))
    out["mm_fp4_auto"] = gemm_base._heuristic_func_mm_fp4(["cudnn", "cutlass", "b12x"], device, None, None, None)
    gemm_base._check_cute_dsl_availability = lambda: None
    try:
        a = types.SimpleNamespace(shape=(128, 64))  # packed fp4: K = 128 (0.6.15 checks it)
        gemm_base._b12x_gemm_fp4_requirement(a, a, None, None)
        out["b12x_gemm"] = "ok"
    except ValueError as exc:
        out["b12x_gemm"] = str(exc)

    def asks(x):
        return x + 1 if cpp_ext.is_cuda_version_at_least("12.8") else x

    before = calls()
    torch.cuda.is_available = lambda: False  # Dynamo would save the (absent) CUDA RNG state
    try:
        torch.compile(asks, fullgraph=True, backend="eager")(torch.zeros(2))
        out["traced"] = "ok"
    except Exception as exc:
        out["traced"] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
    out["nvcc_while_tracing"] = calls() - before
    return out
"""


def fixed_releases() -> list[str]:
    """The releases whose series gives SM120 a target with nvcc 12.8 (the #3633 backport).
    CI checks those an sglang stack serves; the flashinfer-only stacks' series (0.6.12 ...:
    0.6.11.post1's three patches, re-cut by line numbers only) join in the full tier."""
    fixed = versions_with_topic(PROJECT, FIX)
    if full_matrix():
        return fixed
    shipped = beside_sglang(PROJECT)
    return [version for version in fixed if version in shipped]


def link_or_copy(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def previous_revision_tree(version: str, pristine: pathlib.Path, dest: pathlib.Path) -> pathlib.Path | None:
    """The tree of the revision before the backport: the pristine tree with the series'
    other patches applied (as the engine applies them; it would refuse the series, which
    lacks a required topic); None where the backport came with the first series (the
    revision before is the pristine wheel)."""
    if load(REPO / "patches" / "stacks.toml").artifact(PROJECT, version).revision == 1:
        return None
    current = series.load_series(REPO / "patches", PROJECT, version)
    assert current is not None, f"patches/{PROJECT}/{version}: no series"
    assert FIX in current.patches[-1].topics, f"{version}: the backport is not the last patch"
    kept = [p for p in current.patches if FIX not in p.topics]
    shutil.copytree(pristine, dest, copy_function=link_or_copy)  # git apply replaces, never edits
    for patch in kept:
        apply_patch(patch, dest, projects.get(PROJECT).layout)
    return dest


def releases() -> list[str]:
    """The pinned flashinfer-python 0.6.x releases from 0.6.11 (b12x, the first runtime
    readers of the toolkit's version) that no series covers, and those whose series is
    the nvcc-12.8 fix (measured pristine here too), oldest first."""
    catalog = load(REPO / "patches" / "stacks.toml")
    covered = set(series.series_versions(REPO / "patches", PROJECT)) - set(fixed_releases())
    found = {a.version for a in catalog.artifacts.values() if a.project == PROJECT} - covered
    return sorted((v for v in found if Version("0.6.11") <= Version(v) < Version("0.7")), key=Version)


@pytest.fixture(scope="module")
def results(wheel_tree: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    done: dict[str, dict[str, CaseReport]] = {}

    def get(versions: tuple[str, ...], *, trees: tuple[str, ...] = ("pristine",),
            toolkits: tuple[str, ...] = TOOLKITS, full: bool = True) -> dict[str, CaseReport]:
        """Reports named "<version> <tree> <gpu> nvcc=<toolkit>": one child for all the
        versions, a fork per case (each fork imports the tree it is given); ``full`` adds
        the runtime decisions and the trace."""
        key = f"{','.join(versions)} {','.join(trees)} nvcc={','.join(toolkits)} full={full}"
        if key not in done:
            requests = {}
            for version in versions:
                root = tmp_path_factory.mktemp(f"cuda-lookup-{version}")
                for kind in trees:
                    tree = (previous_revision_tree(version, wheel_tree(PROJECT, version, patched=False),
                                                   root / "previous-tree") if kind == "previous"
                            else wheel_tree(PROJECT, version, patched=kind == "patched"))
                    if tree is None:
                        continue
                    # The revision before differs from pristine on SM120 alone (SM121: no target either way).
                    for gpu in GPUS[:1] if kind == "previous" else GPUS:
                        for nvcc in toolkits:
                            requests[f"{version} {kind} {gpu} nvcc={nvcc}"] = {
                                "tree": str(tree), "torch": TORCH_CUDA, "gpu": gpu,
                                "cuda_home": str(fake_cuda_home(root / kind / gpu, nvcc)),
                                "log": str(root / f"{kind}-{gpu}-{nvcc}.log"), "full": full}
            done[key] = run_forked(CHILD, requests)
        return done[key]

    return get


# Six forks per release, each importing FlashInfer and compiling once: the full tier only
# (nox -s tracing); CI runs none of it.
@pytest.mark.skipif(not full_matrix(), reason="FP4GRAPH_MODELS=full (nox -s tracing)")
@pytest.mark.parametrize("version", releases())
def test_pristine_lookups(results: Any, version: str) -> None:
    """What pristine does with each toolkit (the peer's failure: nvcc, not PyTorch's CUDA)."""
    cases = results((version,))
    for name, report in cases.items():
        assert report.crash is None, report.describe()
        assert report["version"] == version, report.describe()
        gpu, nvcc = name.removeprefix(f"{version} pristine ").split(" nvcc=")
        # nvcc runs at import on SM12x (CompilationContext), answered or fallen back.
        assert report["nvcc_at_import"] == (0 if nvcc == "none" else 1), report.describe()
        seen = TORCH_CUDA if nvcc == "none" else nvcc
        assert report["get_cuda_version"] == seen, report.describe()
        family = "12.0f" if gpu == "sm120" else "12.1a"
        # An nvcc older than 12.9 leaves import with no SM12x target (a logged warning):
        # every later JIT build has no arch, though PyTorch's CUDA (13.0) has it.
        assert report["archs"] == ([] if seen == "12.8" else [family]), report.describe()
        assert report["import_warning"] is (seen == "12.8"), report.describe()
        # fp4_quantize's module: the SM12x family one (120f) by torch.version.cuda, on GB10
        # too; with nvcc 12.8 no module can be generated: jit/core.py check_cuda_arch finds
        # no target (a misleading "sm75" error on an SM12x GPU).
        if seen == "12.8":
            assert report["fp4_module"] == "RuntimeError: FlashInfer requires GPUs with sm75 or higher", report.describe()
        else:
            assert report["fp4_module"] == ["fp4_quantization_120f", ["compute_120f"]], report.describe()
        # Runtime decisions follow the toolkit: with nvcc 12.8 beside torch cu130, mm_fp4's
        # auto order drops b12x on SM120 and b12x refuses "CUDA 13 or later".
        b12x_first = gpu == "sm120" and seen == "13.0"
        assert (report["mm_fp4_auto"][0] == "b12x") is b12x_first, report.describe()
        assert (report["b12x_gemm"] == "ok") is (seen == "13.0"), report.describe()
        # Traced, the lookup cannot be: Dynamo ignores functools.cache and reaches the
        # subprocess (or, without nvcc, the same call that raises).
        assert report["traced"] == "Unsupported: Attempted to call function marked as skipped", report.describe()
        assert report["nvcc_while_tracing"] == 0, report.describe()


@pytest.mark.parametrize("version", fixed_releases())
def test_nvcc_12_8_beside_torch_cu130(results: Any, version: str) -> None:
    """A system nvcc 12.8 beside PyTorch's CUDA 13.0 (the Spark peer's finding): pristine,
    import runs nvcc, SM12x gets no target and fp4_quantize's JIT build fails with the
    misleading "requires GPUs with sm75 or higher"; so does the revision before the
    backport (its series without it; import runs no nvcc there); patched, import runs no
    nvcc, SM120 builds fp4_quantize for compute_120a (what nvcc 12.8 has), and SM121, which
    nvcc 12.8 cannot target, says so and names the empty target list."""
    # Every fixed release in one child (one torch import), whichever the test runs first.
    cases = results(tuple(fixed_releases()), trees=("pristine", "previous", "patched"), toolkits=("12.8",),
                    full=False)
    for gpu in GPUS:
        after = cases[f"{version} patched {gpu} nvcc=12.8"]
        # Where the first series brought the backport (0.6.11.post1), the revision before is pristine.
        had_previous = load(REPO / "patches" / "stacks.toml").artifact(PROJECT, version).revision > 1
        unfixed = [cases[f"{version} {kind} {gpu} nvcc=12.8"] for kind in ("pristine", "previous")
                   if f"{version} {kind} {gpu} nvcc=12.8" in cases]
        assert len(unfixed) == (2 if gpu == "sm120" and had_previous else 1), list(cases)
        for report in (*unfixed, after):
            assert report.crash is None, report.describe()
            assert report["version"].split("+")[0] == version, report.describe()
            assert report["get_cuda_version"] == "12.8", report.describe()
        for report in unfixed:
            assert report["archs"] == [], report.describe()
            assert report["fp4_module"] == "RuntimeError: FlashInfer requires GPUs with sm75 or higher", report.describe()
        assert unfixed[0]["nvcc_at_import"] == 1, unfixed[0].describe()
        assert after["nvcc_at_import"] == 0, after.describe()
        if gpu == "sm120":
            assert after["archs"] == ["12.0a"], after.describe()
            assert after["fp4_module"] == ["fp4_quantization_120", ["compute_120a"]], after.describe()
        else:
            assert after["archs"] == [], after.describe()
            # Logged on the first use of the targets: "SM 12.1+ requires CUDA >= 12.9".
            assert after["import_warning"] is True, after.describe()
            assert after["fp4_module"] == (
                "RuntimeError: FlashInfer requires GPUs with sm75 or higher. Detected TARGET_CUDA_ARCHS=[]."
            ), after.describe()
