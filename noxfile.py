"""fp4graph sessions: a thin menu over ``python -m fp4graph`` and pytest.

    nox -s wheels    # build the patched wheels of every stack into wheels/
    nox -s tests     # the CPU test suite (what CI runs)
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import sys

import nox
from packaging.requirements import Requirement

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

# The CPU build of torch CI traces with (it installs from local disk on our machines).
TORCH = "torch==2.13.0"


# The torch pins of the supported stacks (sglang 0.5.8 ... 0.5.10.post1: 2.9.1, 0.5.11 ...
# 0.5.12.post1: 2.11.0; the flashinfer-only stacks: their served releases') and the stacks
# each traces; read with our own stacks module (nox brings `packaging`).
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "src"))
from fp4graph.model.stacks import DEFAULT_STACK, load  # noqa: E402

CATALOG = load(HERE / "patches" / "stacks.toml")
STACKS_BY_TORCH = CATALOG.stacks_by_torch()
STACK_TORCHES = sorted(STACKS_BY_TORCH)
# The stacks with sglang, by torch pin: tracing installs each (nox -s install) under its pin.
SGLANG_STACKS_BY_TORCH = {
    torch: [s.name for s in CATALOG.sglang_stacks() if s.torch == torch] for torch in STACK_TORCHES
}
TRACED = ["tests/flashinfer", "tests/sglang", "tests/models"]


# The whole-model simulation on the installed packages: the last step of an install.
INSTALLED_SIMULATION = "simulation=tests/harness/models/simulate_installed.py --family llama"
# The same on a simulated GB10 under the aarch64 interpreter (emulated on x86_64) over the
# stack's linux-aarch64 install (DGX Spark), for the stacks whose aarch64 closure imports its
# model classes (the torch 2.9.1 stacks' sgl-kernel needs libnvrtc.so.12: docs/installing.md).
SPARK_SIMULATION = INSTALLED_SIMULATION + " --gpu sm121"
SPARK_SIMULATED_STACKS = ("sglang-0.5.11",)

# pytest-xdist, one worker a CPU; a test file stays on one worker, so its module fixtures
# (one child interpreter for a stack's whole-model batch) run once.
PARALLEL = ["-n", "auto", "--dist", "loadfile"]


def _test_requirements() -> list[str]:
    args = []
    for path in sorted(glob.glob("tests/*/requirements.txt")):
        args += ["-r", path]
    return args


def _stack(session: nox.Session) -> str:
    """The stack GPU-side sessions use: FP4GRAPH_STACK, default stacks.DEFAULT_STACK."""
    stack = os.environ.get("FP4GRAPH_STACK", DEFAULT_STACK)
    session.log(f"stack {stack}")
    return stack


def _install_patched(session: nox.Session, stack: str, *, project: str | None = None) -> None:
    """Install the stack's patched wheels from wheels/ (built by `nox -s wheels`) and its torch."""
    session.install("-e", ".[test]")
    pins = [p["requirement"] for p in _pins(session, stack, "--torch", *(["--project", project] if project else []))]
    session.install("--find-links", "wheels", *pins)
    session.run("python", "-m", "pip", "list", "--format=freeze", silent=False)


def _pins(session: nox.Session, stack: str, *args: str) -> list[dict[str, object]]:
    """``python -m fp4graph pins STACK --json``: each pin's project, version, requirement,
    upstream_version and revision (stderr stays on the terminal)."""
    out = session.run("python", "-m", "fp4graph", "pins", stack, *args, "--json", silent=True, stderr=None)
    return list(json.loads(str(out))["pins"])


def _install_test_env(session: nox.Session, torch: str = TORCH) -> None:
    session.install(torch)
    # The pin again, so no test requirement can move torch off it.
    session.install("-e", ".[test]", *_test_requirements(), torch)
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")


@nox.session
def lint(session: nox.Session) -> None:
    """Check patches/ (series membership, DEP-3 headers) and our own code (ruff, mypy, layers;
    the benchmarks: ruff and mypy)."""
    session.install(TORCH)
    session.install(
        "-e", ".", "ruff==0.17.6", "mypy==2.4.1", "import-linter==2.16", "types-PyYAML",
        "safetensors", "tokenizers", "pytest",
    )
    session.run("python", "-m", "fp4graph", "lint")
    session.run("ruff", "check", "src", "tests", "benchmarks", "noxfile.py")
    session.run("mypy")
    session.run("mypy", "--config-file", "benchmarks/mypy.ini")
    session.run("lint-imports", "--no-cache")  # pyproject.toml [tool.importlinter]


@nox.session
def tests(session: nox.Session) -> None:
    """The CPU suite: engine, SM120 simulation of the series, pipelines/ definitions."""
    _install_test_env(session)
    session.run("git", "rev-parse", "HEAD", external=True, success_codes=[0, 128])
    session.run("pytest", *PARALLEL, "--durations=30", "-m", "not gpu and not sm120",
                *(session.posargs or ["tests"]))


@nox.session(default=False)
def wheels(session: nox.Session) -> None:
    """Build the patched wheels, SHA256SUMS, manifest.json and simple/ into wheels/."""
    session.install("-e", ".")
    session.run("python", "-m", "fp4graph", "wheels", *session.posargs)


@nox.session(default=False)
def kernels(session: nox.Session) -> None:
    """Prebuilt FlashInfer fp4 modules for SM12x (nvcc): one flashinfer-jit-cache wheel per arch
    into wheels/. Usage: nox -s kernels -- [STACK] [--arch 12.0a,12.1a] [--modules KIND,...]
    [--platform linux-aarch64] [--jobs N] [--export DIR | --import DIR]"""
    # FlashInfer's JIT imports torch (a CPU build does: the modules do not link it).
    session.install(TORCH)
    session.install("-e", ".", TORCH)
    args = list(session.posargs)
    session.run("git", "rev-parse", "HEAD", external=True, success_codes=[0, 128])
    if "--import" not in args:
        requirements = pathlib.Path(session.create_tmp()) / "kernels-requirements.txt"
        session.run("python", "-m", "fp4graph", "kernels", *args, "--requirements", str(requirements))
        session.install("-r", str(requirements), TORCH)
    session.run("python", "-m", "fp4graph", "kernels", *args)


@nox.session(default=False)
def publish(session: nox.Session) -> None:
    """Upload wheels/ to an index with twine; refuses to overwrite."""
    if not session.posargs:
        session.error("Usage: nox -s publish -- <repository-url> [--simple-url URL]")
    session.install("-e", ".[publish]")
    session.run("python", "-m", "fp4graph", "publish", *session.posargs)


@nox.session(default=False)
@nox.parametrize("torch", STACK_TORCHES)
def tracing(session: nox.Session, torch: str) -> None:
    """The SM120 simulation under each stack's own torch pin (CUDA wheels from PyPI),
    for the stacks that pin it (pytest --stack: tests/harness/stack_selection.py); whole
    models: the full matrix (the per-stack ServerArgs and loader checks:
    `FP4GRAPH_MODELS=full pytest tests/integration`); then the full install of each of those
    stacks as users install it (nox -s install), and of sglang-0.5.11 for linux aarch64 with
    Llama simulated on a GB10 under the aarch64 interpreter. FP4GRAPH_TRACING_K (-k) narrows
    the tests and leaves the installs out; posargs replace the test paths."""
    _install_test_env(session, f"torch=={torch}")
    narrowed = ["-k", os.environ["FP4GRAPH_TRACING_K"]] if os.environ.get("FP4GRAPH_TRACING_K") else []
    session.run(
        "pytest", *PARALLEL, "-m", "not gpu and not sm120",
        *(f"--stack={name}" for name in STACKS_BY_TORCH[torch]), *narrowed,
        *(session.posargs or TRACED),
        env={"FP4GRAPH_MODELS": "full"},
    )
    stacks = SGLANG_STACKS_BY_TORCH[torch]
    if os.environ.get("FP4GRAPH_TRACING_K") or session.posargs or not stacks:
        return
    session.run("python", "-m", "fp4graph", "wheels", *(a for s in stacks for a in ("--stack", s)))
    for stack in stacks:  # one 8.5-11 GB venv at a time, removed after its checks
        session.run("python", "-m", "fp4graph", "install", stack, "--check", INSTALLED_SIMULATION)
        if stack in SPARK_SIMULATED_STACKS:  # the 7.8 GB aarch64 target, removed after its checks
            session.install("uv")
            session.run("python", "-m", "fp4graph", "install", stack, "--platform", "linux-aarch64",
                        "--check", SPARK_SIMULATION)


@nox.session(default=False)
def gpu(session: nox.Session) -> None:
    """GPU tests of the patched flashinfer (warm-up, capture/replay; numerics on SM100+)."""
    stack = _stack(session)
    _install_patched(session, stack, project="flashinfer-python")
    # Without a GPU, tests/gpu skips as a module and pytest says "no tests ran" (exit 5).
    cuda = session.run("python", "-c", "import torch; print(torch.cuda.is_available())", silent=True)
    if "True" not in str(cuda):
        session.skip("no CUDA GPU here (the patched wheels and the stack's torch installed)")
    session.run("pytest", "-m", "gpu", *(session.posargs or ["tests/gpu"]))


@nox.session(default=False)
def suites(session: nox.Session) -> None:
    """Upstream's own tests from the pinned tag, patched wheel beside pristine (FlashInfer on a GPU;
    sglang's CPU unit tests). Usage: nox -s suites -- [STACK] [--repo PATH] [--project P] ..."""
    session.install("-e", ".")
    args = list(session.posargs)
    if not args or args[0].startswith("-"):
        args.insert(0, _stack(session))
    session.run("git", "rev-parse", "HEAD", external=True, success_codes=[0, 128])
    if "--bundle" not in args:
        requirements = pathlib.Path(session.create_tmp()) / "suites-requirements.txt"
        session.run("python", "-m", "fp4graph", "suites", *args, "--requirements", str(requirements))
        session.install("-r", str(requirements))
    session.run("python", "-m", "pip", "list", "--format=freeze")
    session.run("python", "-m", "fp4graph", "suites", *args)


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Eager overhead vs pristine, fullgraph + CUDA-graph speed-up, warm-up cost (GPU)."""
    stack = _stack(session)
    _install_patched(session, stack, project="flashinfer-python")
    session.install("matplotlib")
    (pin,) = _pins(session, stack, "--project", "flashinfer-python")
    version = str(pin["upstream_version"])
    pristine = session.run("python", "-m", "fp4graph", "fetch", "flashinfer-python", version,
                           silent=True).strip()
    session.run("python", "benchmarks/bench_fp4.py", "--pristine", pristine, *session.posargs)


@nox.session(default=False)
def integration(session: nox.Session) -> None:
    """SM120: every model family under sglang, piecewise CUDA graphs on vs off (crashes,
    greedy outputs, throughput); without SM120 GPUs it installs the stack as users do, runs
    the import smoke, and skips the rest."""
    session.install("-e", ".")
    session.run("git", "rev-parse", "HEAD", external=True, success_codes=[0, 128])
    # A later --stack in posargs wins over FP4GRAPH_STACK. Without SM120 GPUs the command
    # still installs the stack as users do and runs the import smoke, then says SKIPPED.
    session.run("python", "-m", "fp4graph", "integration", "--stack", _stack(session), *session.posargs)


@nox.session(default=False)
def upstream(session: nox.Session) -> None:
    """PR-ready branches, format-patch output and PR bodies from a series (dry run), upstream's
    checks, and the tests the patches add, which must run (sglang's on the release's own torch:
    a CUDA build from PyPI, ~5 GB; --no-tests leaves them out)."""
    if not session.posargs:
        session.error("Usage: nox -s upstream -- <project> [--version V] [--repo PATH] [--no-tests]")
    # pyyaml reads the tree's pre-commit config; what the tests the patches add import
    # (pytest, the release's own requirements; sglang's at the release's torch pin), fp4graph
    # says: nothing with --no-tests.
    session.install("-e", ".", "pyyaml")
    printed = session.run("python", "-m", "fp4graph", "upstream", *session.posargs,
                          "--print-test-requirements", silent=True)
    needs = str(printed or "").split()
    if needs:
        release_torch = [n for n in needs if Requirement(n).name == "torch"]
        session.log(f"the tests the patches add run on {release_torch[0] if release_torch else TORCH}")
        session.install(*needs, *([] if release_torch else [TORCH]))
    session.run("python", "-m", "fp4graph", "upstream", *session.posargs, "--tests-must-run")


@nox.session(default=False)
def install(session: nox.Session) -> None:
    """Install a stack as the README says (wheels/ served over HTTP + PyPI, its lock), then
    pip check, the import smoke and the whole-model simulation on the installed packages.
    Usage: nox -s install [-- STACK [python -m fp4graph install options]]; with
    --platform linux-aarch64: uv installs for DGX Spark's platform and the emulated aarch64
    python runs pip check and the smoke; the whole-model simulation there (a simulated GB10,
    tens of minutes emulated) when asked: --check "simulation=tests/harness/models/
    simulate_installed.py --family llama --gpu sm121" (nox -s tracing runs it)."""
    args = list(session.posargs)
    cross = "--platform" in args
    session.install("-e", ".", *(["uv"] if cross else []))
    if not args or args[0].startswith("-"):
        args.insert(0, _stack(session))
    session.run("git", "rev-parse", "HEAD", external=True, success_codes=[0, 128])
    # A --check of the user's replaces the default one (asked twice, it ran twice).
    checks = [] if cross or "--check" in args else ["--check", INSTALLED_SIMULATION]
    session.run("python", "-m", "fp4graph", "install", *args, *checks)


@nox.session(default=False)
def lock(session: nox.Session) -> None:
    """Maintainer: resolve each stack's whole dependency closure (uv, universal) into
    patches/locks/<stack>.txt, keeping patches/locks/holds.toml. Usage: nox -s lock [-- STACK]"""
    session.install("-e", ".", "uv")
    session.run("python", "-m", "fp4graph", "lock", *session.posargs)


@nox.session(default=False)
def deps(session: nox.Session) -> None:
    """The dependency drift report: what the newest versions would change in each lock;
    --heavy also installs each stack unlocked and runs the import smoke (wheels/reports/deps-drift.md)."""
    session.install("-e", ".", "uv")
    session.run("python", "-m", "fp4graph", "deps", *session.posargs)


@nox.session(default=False)
def drift(session: nox.Session) -> None:
    """Which patches still apply, are already upstream or conflict, release by release."""
    session.install("-e", ".")
    session.run("python", "-m", "fp4graph", "drift", *session.posargs)
