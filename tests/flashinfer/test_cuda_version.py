"""Build decisions follow the toolkit that builds, whatever PyTorch's CUDA: pristine beside patched.

The series' cuda-version patch gives runtime decisions (which kernel, which backend)
``torch.version.cuda`` first and leaves build decisions (nvcc flags, ``min_cuda``, the
SM capabilities a build can target) on the toolkit, read when a spec is generated, never
while tracing.  So with a PyTorch built for CUDA 12.8 and an nvcc 13.0 on PATH, and the
reverse, every JIT spec FlashInfer's AOT build generates (each generator it calls isolated: one
that raises is compared by its error) (``aot.gen_all_modules`` with
``aot.get_default_config()`` and ``aot.detect_sm_capabilities()``, for SM 9.0a, 10.0a and
12.0a) gets, patched, the same compile and link lines as pristine's for that toolkit, and
the two toolkits give different lines (else the check proves nothing).

Stand-ins: ``nvcc`` under CUDA_HOME, a script that prints the version it is told to;
``torch.version.cuda`` (a CPU build of PyTorch has none); the SM120 device
(``fp4graph.verify.simulate``); and, of FlashInfer's Python, only its artifact fetch,
which needs the network: ``get_cubin`` / ``get_artifact`` (placeholder bytes),
``get_meta_hash`` (zeros), ``ensure_symlink``, ``verify_symlinked_headers`` and 0.7.x's
``write_filtered_metainfo`` (nothing to link or filter; FLASHINFER_CUBIN_DIR in the case's
workspace).  Left out:
``add_comm`` (its specs need the nvshmem wheel, not installed here).  One child per
version imports torch once and forks a case per (tree, torch CUDA, nvcc).
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import series_versions
from harness.child import CaseReport, run_forked
from harness.targets import ci_versions
from harness.toolkits import fake_cuda_home

PROJECT = "flashinfer-python"
# Every JIT spec of a version under both toolkits is minutes of CPU: every version in
# nox -s tracing, the seed stack's and the newest in CI (harness.targets.ci_versions).
VERSIONS = ci_versions(series_versions(PROJECT))
ARCHS = "9.0a 10.0a 12.0a"
# (torch.version.cuda, nvcc --version): both mismatches.
MISMATCHED = [("12.8", "13.0"), ("13.0", "12.8")]

CHILD = r"""
import os, re, sys
import torch
from fp4graph.verify import simulate
simulate.install(simulate.GPUS["sm120"])
BASE = list(sys.path)

def case(request):
    os.environ.pop("FLASHINFER_NVCC_VERSION", None)
    os.environ["CUDA_HOME"] = request["cuda_home"]
    os.environ["PATH"] = request["cuda_home"] + "/bin" + os.pathsep + os.environ["PATH"]
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = request["archs"]
    os.environ["FLASHINFER_WORKSPACE_BASE"] = request["workspace"]
    os.environ["FLASHINFER_CUBIN_DIR"] = request["workspace"] + "/cubins"
    sys.path[:] = [request["tree"], *BASE]
    torch.version.cuda = request["torch"]
    import flashinfer
    from flashinfer import aot
    from flashinfer.jit import cpp_ext, cubin_loader
    try:
        from flashinfer.jit import trtllm_gen_metainfo as metainfo
    except ImportError:  # before 0.7
        metainfo = None

    def fetch(name, sha256, session=None):
        if name.endswith("checksums.txt"):
            return b"0" * 64 + b" flashInferMetaInfo.h\n"
        return b"// stand-in\n"

    def meta_hash(checksums, target_file="flashinferMetaInfo.h"):
        return "0" * 64

    # get_cubin (0.6.1-0.6.3), get_artifact (0.6.7+), and the hash of a header in the
    # checksums those fetch; modules imported later take ours.
    def nothing(*args, **kwargs):
        return None

    stand_ins = (("get_cubin", fetch), ("get_artifact", fetch), ("get_meta_hash", meta_hash),
                 ("ensure_symlink", nothing), ("verify_symlinked_headers", nothing),
                 ("write_filtered_metainfo", lambda *args, **kwargs: (0, 0)))
    for attr, ours in stand_ins:
        real = getattr(cubin_loader, attr, None) or getattr(metainfo, attr, None)
        for module in list(sys.modules.values()):
            if real is not None and getattr(module, "__name__", "").startswith("flashinfer") \
                    and getattr(module, attr, None) is real:
                setattr(module, attr, ours)
    class Failed:
        "A generator that raised (0.7.4's fmha_v2 SM120 one compiles and runs a helper)."
        def __init__(self, name, exc):
            self.name = "failed: " + name
            self.error = f"{type(exc).__name__}: {exc}"[:300]

    def isolated(gen):
        def call(*args, **kwargs):
            try:
                return gen(*args, **kwargs)
            except Exception as exc:
                return Failed(gen.__name__, exc)
        return call

    for attr, value in list(vars(aot).items()):
        if attr.startswith("gen_") and callable(value) and getattr(value, "__module__", "") != aot.__name__:
            setattr(aot, attr, isolated(value))
    cfg = aot.get_default_config()
    specs = aot.gen_all_modules(
        cfg["f16_dtype"], cfg["f8_dtype"], cfg["fa2_head_dim"], cfg["fa3_head_dim"],
        cfg["use_sliding_window"], cfg["use_logits_soft_cap"], aot.detect_sm_capabilities(),
        False, cfg["add_gemma"], cfg["add_oai_oss"], cfg["add_moe"], cfg["add_act"],
        cfg["add_misc"], cfg["add_xqa"],
    )
    lines = {}
    for s in specs:
        if isinstance(s, Failed):
            lines[s.name] = [s.error.replace(request["tree"], "<tree>")]
            continue
        text = cpp_ext.generate_ninja_build_for_op(
            s.name, s.sources, s.extra_cflags, s.extra_cuda_cflags, s.extra_ldflags,
            s.extra_include_dirs, s.needs_device_linking,
        ).replace(" $\n", " ")
        for path, mark in ((request["tree"], "<tree>"), (request["workspace"], "<workspace>"),
                           ("/" + flashinfer.__version__ + "/", "/<flashinfer version>/")):
            text = text.replace(path, mark)
        lines[s.name] = [ln for ln in text.splitlines()
                         if re.match(r"(common_cflags|cflags|cuda_cflags|ldflags) = ", ln)]
    return {"version": flashinfer.__version__, "lines": lines}

"""


@pytest.fixture(scope="module")
def results(wheel_tree: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    done: dict[str, dict[str, CaseReport]] = {}

    def get(version: str) -> dict[str, CaseReport]:
        if version not in done:
            root = tmp_path_factory.mktemp(f"cuda-version-{version}")
            homes = {nvcc: fake_cuda_home(root, nvcc) for _, nvcc in MISMATCHED}
            requests = {}
            for tree_name, patched in (("patched", True), ("pristine", False)):
                tree = wheel_tree(PROJECT, version, patched=patched)
                for torch_cuda, nvcc in MISMATCHED:
                    name = f"{tree_name} torch={torch_cuda} nvcc={nvcc}"
                    requests[name] = {"tree": str(tree), "torch": torch_cuda, "archs": ARCHS,
                                      "cuda_home": str(homes[nvcc]),
                                      "workspace": str(root / name.replace(" ", "_"))}
            done[version] = run_forked(CHILD, requests)
        return done[version]

    return get


@pytest.mark.parametrize(("torch_cuda", "nvcc"), MISMATCHED)
@pytest.mark.parametrize("version", VERSIONS)
def test_every_jit_spec_gets_pristine_s_flags_for_the_toolkit(
    results: Any, version: str, torch_cuda: str, nvcc: str
) -> None:
    cases = results(version)
    patched = cases[f"patched torch={torch_cuda} nvcc={nvcc}"]
    pristine = cases[f"pristine torch={torch_cuda} nvcc={nvcc}"]
    assert patched.crash is None and pristine.crash is None, (patched.describe(), pristine.describe())
    assert "+fp4graph" in patched["version"] and "+" not in pristine["version"], (patched.describe(), pristine.describe())
    assert sorted(patched["lines"]) == sorted(pristine["lines"])
    differ = {}  # spec: (flags only patched has, flags only pristine has)
    for name, lines in pristine["lines"].items():
        if patched["lines"][name] != lines:
            ours, theirs = (set(" ".join(x).split()) for x in (patched["lines"][name], lines))
            differ[name] = (sorted(ours - theirs), sorted(theirs - ours))
    assert differ == {}, f"{len(differ)} of {len(pristine['lines'])} specs differ"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_toolkit_changes_the_flags(results: Any, version: str) -> None:
    """Nvcc 12.8 and 13.0 give pristine different lines (and spec lists): the check above
    would see a patch that took its flags from torch.version.cuda."""
    cases = results(version)
    at_13 = cases["pristine torch=12.8 nvcc=13.0"]["lines"]
    at_128 = cases["pristine torch=13.0 nvcc=12.8"]["lines"]
    assert len(at_13) > 100, len(at_13)
    assert at_13 != at_128
