"""fp4graph sessions: a thin menu over ``python -m fp4graph`` and pytest.

    nox -s wheels    # build the patched wheels of every stack into wheels/
    nox -s tests     # the CPU test suite (what CI runs)
"""

from __future__ import annotations

import glob

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

# The CPU build of torch CI traces with (it installs from local disk on our machines).
TORCH = "torch==2.13.0"
# The torch pins of the supported stacks: sglang 0.5.9/0.5.10.post1 and 0.5.11.
STACK_TORCHES = ["2.9.1", "2.11.0"]


def _test_requirements() -> list[str]:
    args = []
    for path in sorted(glob.glob("tests/*/requirements.txt")):
        args += ["-r", path]
    return args


def _install_test_env(session: nox.Session, torch: str = TORCH) -> None:
    session.install(torch)
    session.install("-e", ".[test]", *_test_requirements())
    session.run("python", "-c", "import torch; print('torch', torch.__version__)")


@nox.session
def lint(session: nox.Session) -> None:
    """Check patches/ (series membership, DEP-3 headers) and our own code."""
    session.install(TORCH)
    session.install("-e", ".", "ruff==0.17.6", "mypy==2.4.1")
    session.run("python", "-m", "fp4graph", "lint")
    session.run("ruff", "check", "src", "tests", "noxfile.py")
    session.run("mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """The CPU suite: engine, SM120 simulation of the series, ci/ definitions."""
    _install_test_env(session)
    session.run("git", "rev-parse", "HEAD", external=True, success_codes=[0, 128])
    session.run("pytest", "-m", "not gpu and not sm120", *(session.posargs or ["tests"]))


@nox.session(default=False)
def wheels(session: nox.Session) -> None:
    """Build the patched wheels, SHA256SUMS, manifest.json and simple/ into wheels/."""
    session.install("-e", ".")
    session.run("python", "-m", "fp4graph", "wheels", *session.posargs)


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
    """The SM120 simulation under each stack's own torch pin (CUDA wheels from PyPI)."""
    _install_test_env(session, f"torch=={torch}")
    session.run(
        "pytest", "-m", "not gpu and not sm120",
        *(session.posargs or ["tests/flashinfer", "tests/sglang"]),
    )
