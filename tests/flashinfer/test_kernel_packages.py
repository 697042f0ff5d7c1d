"""flashinfer beside its kernel packages, as users install it (sglang pins
``flashinfer_cubin==<its flashinfer>``): pristine beside patched, each case in its own
process (one child per version imports torch and the simulated device, then forks a case
that has imported nothing of flashinfer or the kernel packages: about 2.5x cheaper than a
child a case).

flashinfer's ``jit/env.py`` checks the kernel packages at import against
``flashinfer.__version__``.  Upstream's rule (``flashinfer-cubin`` equal to it,
``flashinfer-jit-cache`` starting with it) refuses the packages of the very release under
our ``+fp4graph.N`` label: 0.6.x raises, 0.7.x logs "Ignoring incompatible ..." and drops
them.  The series' ``kernel-package-version`` patch matches them by release.  Per series
version:

- ``control``: the pristine wheel with the real flashinfer-cubin and a jit-cache of its
  release uses both (``FLASHINFER_CUBIN_DIR`` is the package's, the AOT directory or
  provider is the jit-cache's);
- ``bug-cubin`` / ``bug-jit-cache``: upstream's code under our label, i.e. the pristine tree
  with only ``flashinfer._build_meta.__version__`` relabelled to the artifact's
  ``X+fp4graph.N`` (in the child, before the import), refuses them with upstream's exact
  message (0.6.x: RuntimeError) or ignores them with its warning (0.7.x);
- ``fixed``: the patched wheel with the same packages uses both, and ``flashinfer.__version__``
  and the installed metadata still say ``X+fp4graph.N``;
- ``other-cubin`` / ``other-jit-cache``: the patched wheel refuses (0.6.x) or ignores (0.7.x)
  the packages of another release, with upstream's message.

Stand-ins (nothing of flashinfer's Python is replaced):

- flashinfer-cubin's ``.cubin`` blobs are not unpacked (``harness.kernel_packages``): the
  checks read only the package's ``__version__`` and ``get_cubin_dir()``;
- flashinfer-cubin of a release PyPI lacks (0.7.x: PyPI's stops at 0.6.13): the real
  Python of the newest pinned flashinfer-cubin wheel with its version set to the release;
- flashinfer-jit-cache (not on PyPI): ``harness.kernel_packages.jit_cache_stand_in``, a
  package with ``__version__ = "<release>+cu130"``, ``get_jit_cache_dir()`` and, for 0.7.x,
  ``get_jit_cache_providers()`` (one provider, the attributes ``_get_aot_providers`` reads);
- the SM120 device (``fp4graph.verify.simulate``), as in the other flashinfer tests.

Cost: the five real flashinfer-cubin wheels (``companions`` in patches/stacks.toml, 1.18 GB)
are fetched once into the cache (about 40 s here) and unpacked without their blobs (about
30 s, 60 MB of trees); the 36 cases then take about 65 s of CPU.  The flashinfer-only
stacks' re-cuts (0.6.12 ... 0.6.18) add about 10 s a release: the full tier only (``TESTED``).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import series_versions
from fp4graph.model import config, stacks
from fp4graph.model.stacks import Artifact
from harness import kernel_packages
from harness.child import CaseReport, run_forked
from harness.targets import beside_sglang, full_matrix

PROJECT = "flashinfer-python"
REPO = pathlib.Path(__file__).resolve().parents[2]
CATALOG = stacks.load(REPO / "patches" / "stacks.toml")
VERSIONS = series_versions(PROJECT)
# The releases the cases run on: every series in the full tier; in CI those an sglang stack
# ships and the newest (0.7.x's code), not the flashinfer-only stacks' re-cuts of 0.6.11.post1's
# series (0.6.12 ...: the same patch 0003 at other line numbers), as the nvcc-12.8 pair does.
TESTED = VERSIONS if full_matrix() else [
    v for v in VERSIONS if v in beside_sglang(PROJECT) or v == VERSIONS[-1]]
# PyPI's flashinfer-cubin stops at 0.6.13 (flashinfer#4781): later releases get a stand-in.
CUBIN_ON_PYPI = SpecifierSet("<0.6.14")
# Read in each release's jit/env.py: 0.6.1 ... 0.6.8.post1 raise, 0.7.4 warns and ignores.
IGNORES_MISMATCH = SpecifierSet(">=0.7")
CASES = ("control", "bug-cubin", "bug-jit-cache", "fixed", "other-cubin", "other-jit-cache")

_HINT_06 = (
    "Please install the same version of both packages. "
    "Set FLASHINFER_DISABLE_VERSION_CHECK=1 to bypass this check."
)
_HINT_07 = (
    "Run `flashinfer download-kernels` to install matching kernel wheels, or set "
    "FLASHINFER_DISABLE_VERSION_CHECK=1 to use the installed version anyway."
)

# One child per version: it imports torch (and Dynamo, which the patched flashinfer imports)
# and the simulated device once, then runs each case in a fork of itself that has imported
# nothing of flashinfer or the kernel packages: the trees go first on sys.path there.
CHILD = r"""
import importlib, importlib.metadata, importlib.util, logging, os, pathlib, sys, types
for name in ("FLASHINFER_DISABLE_VERSION_CHECK", "FLASHINFER_CUBIN_DIR"):
    os.environ.pop(name, None)
import torch, torch._dynamo
from fp4graph.verify import simulate
simulate.install()
BASE = list(sys.path)

def case(request):
    sys.path[:] = [*request["path"], *BASE]
    importlib.invalidate_caches()
    warnings = []
    class Keep(logging.Handler):
        def emit(self, record):
            warnings.append(record.getMessage())
    logging.getLogger().addHandler(Keep(logging.WARNING))
    if request["relabel"]:
        # Upstream's code under our label: only _build_meta.__version__ differs.
        spec = importlib.util.find_spec("flashinfer")
        root = pathlib.Path(spec.submodule_search_locations[0])
        source = (root / "_build_meta.py").read_text()
        old, new = request["relabel"]
        assert f'__version__ = "{old}"' in source, source
        meta = types.ModuleType("flashinfer._build_meta")
        meta.__file__ = str(root / "_build_meta.py")
        exec(source.replace(f'"{old}"', f'"{new}"'), meta.__dict__)
        sys.modules["flashinfer._build_meta"] = meta
    out = {"warnings": warnings}
    try:
        import flashinfer
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    from flashinfer.jit import env
    out["file"] = flashinfer.__file__
    out["version"] = flashinfer.__version__
    out["metadata_version"] = importlib.metadata.version("flashinfer-python")
    out["cubin_dir"] = str(env.FLASHINFER_CUBIN_DIR)
    out["cache_dir"] = str(env.FLASHINFER_CACHE_DIR)
    out["aot_dir"] = str(env.FLASHINFER_AOT_DIR)
    out["aot_providers"] = [[p.provider_id, str(p.jit_cache_dir)]
                            for p in getattr(env, "FLASHINFER_AOT_PROVIDERS", ())]
    if importlib.util.find_spec("flashinfer_cubin"):
        import flashinfer_cubin
        out["package_cubin_dir"] = flashinfer_cubin.get_cubin_dir()
    if importlib.util.find_spec("flashinfer_jit_cache"):
        import flashinfer_jit_cache
        out["package_jit_cache_dir"] = flashinfer_jit_cache.get_jit_cache_dir()
        out["package_providers"] = [[p.provider_id, p.jit_cache_dir]
                                    for p in flashinfer_jit_cache.get_jit_cache_providers()]
    if importlib.util.find_spec("flashinfer.collect_env"):
        from flashinfer import collect_env
        # 0.7.x: the kernel packages' own section; 0.6.17 ... 0.6.x: part of flashinfer's.
        report = getattr(collect_env, "_get_kernel_package_info", None) or collect_env._get_flashinfer_info
        out["collect_env"] = {k: v for k, v in report().items() if k in ("flashinfer-cubin", "flashinfer-jit-cache")}
    return out

"""


def _artifact(version: str) -> Artifact:
    return CATALOG.artifact(PROJECT, version)


def _other_release(version: str) -> str:
    """The nearest other series version with a real flashinfer-cubin (older first)."""
    real = [v for v in VERSIONS if v != version and _artifact(v).companion(kernel_packages.CUBIN)]
    older = [v for v in real if Version(v) < Version(version)]
    return older[-1] if older else real[0]


@pytest.fixture(scope="module")
def cubin(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], pathlib.Path]:
    """``cubin(release)``: the flashinfer-cubin tree of ``release`` (real where PyPI has it)."""
    settings = config.Settings.from_env(REPO)
    made: dict[str, pathlib.Path] = {}

    def get(release: str) -> pathlib.Path:
        pinned = _artifact(release).companion(kernel_packages.CUBIN)
        if pinned is not None:
            return kernel_packages.cubin_tree(settings, pinned)
        assert Version(release) not in CUBIN_ON_PYPI, (
            f"flashinfer-python {release}: PyPI has flashinfer-cubin {release}; pin it in "
            "patches/stacks.toml (companions = [{ filename, sha256 }] on the artifact)"
        )
        if release not in made:
            newest = max((v for v in VERSIONS if _artifact(v).companion(kernel_packages.CUBIN)),
                         key=Version)
            made[release] = kernel_packages.cubin_stand_in(
                tmp_path_factory.mktemp(f"cubin-{release}"), release, like=get(newest))
        return made[release]

    return get


def _jit_cache(tmp: pathlib.Path, release: str) -> pathlib.Path:
    return kernel_packages.jit_cache_stand_in(tmp / f"jit-cache-{release}", f"{release}+cu130")


def _requests(version: str, trees: Callable[..., pathlib.Path],
              cubin: Callable[[str], pathlib.Path], tmp: pathlib.Path) -> dict[str, Any]:
    """Each case of ``version``: the trees on its path, and the relabel of upstream's code."""
    pristine = trees(PROJECT, version, patched=False)
    patched = trees(PROJECT, version, patched=True)
    other = _other_release(version)
    ours = [cubin(version), _jit_cache(tmp, version)]
    relabel = [version, _artifact(version).patched_version]
    paths: dict[str, tuple[list[pathlib.Path], list[str] | None]] = {
        "control": ([pristine, *ours], None),
        "bug-cubin": ([pristine, ours[0]], relabel),
        "bug-jit-cache": ([pristine, ours[1]], relabel),
        "fixed": ([patched, *ours], None),
        "other-cubin": ([patched, cubin(other)], None),
        "other-jit-cache": ([patched, _jit_cache(tmp, other)], None),
    }
    assert list(paths) == list(CASES)
    return {case: {"path": list(map(str, path)), "relabel": relabel}
            for case, (path, relabel) in paths.items()}


@pytest.fixture(scope="module")
def results(wheel_tree: Any, cubin: Callable[[str], pathlib.Path],
            tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, CaseReport]]:
    """``results(version)``: what each case's fork saw (one child per version, run once)."""
    done: dict[str, dict[str, CaseReport]] = {}

    def get(version: str) -> dict[str, CaseReport]:
        if version not in done:
            requests = _requests(version, wheel_tree, cubin, tmp_path_factory.mktemp(version))
            done[version] = run_forked(CHILD, requests)
        return done[version]

    return get


def _refusal(kind: str, package: str, flashinfer: str, cache_dir: str = "") -> str:
    """Upstream's message for a kernel package that does not match (0.6.x / 0.7.x)."""
    mismatch = f"{kind} version ({package}) does not match flashinfer version ({flashinfer})."
    if not cache_dir:
        return f"RuntimeError: {mismatch} {_HINT_06}"
    if kind == "flashinfer-cubin":
        return (f"Ignoring incompatible flashinfer-cubin package (cubins will be downloaded on "
                f"demand to {cache_dir}/cubins): {mismatch} {_HINT_07}")
    return (f"Ignoring incompatible flashinfer-jit-cache package (kernels will be JIT-compiled "
            f"instead): {mismatch} {_HINT_07}")


def _uses_both(data: CaseReport, version: str) -> None:
    """Both checks passed: the import uses the cubin and jit-cache packages, warning about none."""
    assert "error" not in data, data["error"]
    assert not [w for w in data["warnings"] if "flashinfer-cubin" in w or "jit-cache" in w], data.describe()
    assert data["cubin_dir"] == data["package_cubin_dir"], data.describe()
    if Version(version) in IGNORES_MISMATCH:
        assert data["aot_providers"] == data["package_providers"] != [], data.describe()  # 0.7.x: providers
    else:
        assert data["aot_dir"] == data["package_jit_cache_dir"], data.describe()  # 0.6.x: one directory


def _refuses(data: CaseReport, version: str, kind: str, package: str, flashinfer: str) -> None:
    """upstream's refusal: 0.6.x raises at import, 0.7.x warns and drops the package."""
    if Version(version) not in IGNORES_MISMATCH:
        assert data.get("error") == _refusal(kind, package, flashinfer), data.describe()
        return
    assert "error" not in data, data["error"]
    assert data["version"] == flashinfer, data.describe()
    assert data["warnings"] == [_refusal(kind, package, flashinfer, data["cache_dir"])], data.describe()
    if kind == "flashinfer-cubin":
        assert data["cubin_dir"] == f"{data['cache_dir']}/cubins", data.describe()
    else:
        assert data["aot_providers"] == [], data.describe()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("version", TESTED)
def test_kernel_packages(results: Callable[[str], dict[str, CaseReport]], version: str, case: str) -> None:
    data = results(version)[case]
    assert data.crash is None, data.describe()
    label = _artifact(version).patched_version
    other = _other_release(version)
    if case == "control":
        assert data["version"] == data["metadata_version"] == version, data.describe()
        _uses_both(data, version)
    elif case == "bug-cubin":
        _refuses(data, version, "flashinfer-cubin", version, label)
    elif case == "bug-jit-cache":
        _refuses(data, version, "flashinfer-jit-cache", f"{version}+cu130", label)
    elif case == "fixed":
        _uses_both(data, version)
        assert data["version"] == data["metadata_version"] == label, data.describe()  # pip show says it too
        if "collect_env" in data:  # collect_env's report (0.6.17+): no MISMATCH for the packages it uses
            assert data["collect_env"]["flashinfer-cubin"] == version, data.describe()
            assert data["collect_env"]["flashinfer-jit-cache"] == f"{version}+cu130", data.describe()
    elif case == "other-cubin":
        _refuses(data, version, "flashinfer-cubin", other, label)
        if "collect_env" in data:  # the report (0.6.17+) still flags it
            assert "MISMATCH" in data["collect_env"]["flashinfer-cubin"], data.describe()
    else:
        _refuses(data, version, "flashinfer-jit-cache", f"{other}+cu130", label)
        if "collect_env" in data:
            assert "MISMATCH" in data["collect_env"]["flashinfer-jit-cache"], data.describe()


@pytest.mark.parametrize("version", [v for v in VERSIONS if Version(v) in CUBIN_ON_PYPI])
def test_each_cubin_pin_is_its_releases_build(cubin: Callable[[str], pathlib.Path],
                                               version: str) -> None:
    """The pinned flashinfer-cubin was built from the commit flashinfer's own source pin
    names (both wheels record it in _build_meta.py), and says the release's version."""
    artifact = _artifact(version)
    assert artifact.companion(kernel_packages.CUBIN) is not None, (
        f"flashinfer-python {version}: pin flashinfer_cubin-{version} in patches/stacks.toml "
        "(companions = [{ filename, sha256 }] on the artifact)"
    )
    tree = cubin(version)
    meta = (tree / "flashinfer_cubin" / "_build_meta.py").read_text(encoding="utf-8")
    assert artifact.source is not None
    assert f'__version__ = "{version}"' in meta and f'"{artifact.source.commit}"' in meta, meta
    assert (tree / f"flashinfer_cubin-{version}.dist-info" / "METADATA").is_file()
