"""What the simulation tests run on, read from patches/stacks.toml and the series.

A new stack (``pin``, then ``rebase``/``refresh``) gets every test without a code change:
nothing here lists a version.  A version whose series has an unresolved patch is listed
too, so its tests fail naming the patch rather than skip it.
"""

from __future__ import annotations

import os
import pathlib

from packaging.version import Version

from fp4graph.model import stacks
from fp4graph.model.series import load_series, series_versions

REPO = pathlib.Path(__file__).resolve().parents[2]
FLASHINFER = "flashinfer-python"


def full_matrix() -> bool:
    """Whether the whole matrix runs (``nox -s tracing`` sets ``FP4GRAPH_MODELS=full``) or the
    CI tier: which part of a matrix each tier runs is said where the matrix is defined."""
    return os.environ.get("FP4GRAPH_MODELS") == "full"


# The seed user's stack (GLM-5-NVFP4 on RTX PRO 6000s), also the sessions' default stack.
SEED_STACK = stacks.DEFAULT_STACK


def ci_versions(versions: list[str], project: str = FLASHINFER, repo: pathlib.Path = REPO) -> list[str]:
    """The versions a matrix's secondary checks run on: all of ``versions`` in the full
    tier; in CI the seed stack's and the newest (the two API generations a series spans at
    most), so each check still meets the oldest and the newest code it must handle.  Every
    version keeps its primary check (pristine fails, patched passes) in CI: said where each
    matrix is defined."""
    if full_matrix() or not versions:
        return list(versions)
    catalog = stacks.load(repo / "patches" / "stacks.toml")
    seed = {a.version for a in catalog.stack_artifacts(catalog.stack(SEED_STACK)) if a.project == project}
    return [v for v in versions if v in seed or v == versions[-1]] or [versions[-1]]


def beside_sglang(project: str = FLASHINFER, repo: pathlib.Path = REPO) -> set[str]:
    """The versions of ``project`` some sglang stack ships (not a flashinfer-only stack's)."""
    catalog = stacks.load(repo / "patches" / "stacks.toml")
    return {artifact.version for stack in catalog.stacks
            if any(key.startswith("sglang==") for key in stack.artifacts)
            for artifact in catalog.stack_artifacts(stack) if artifact.project == project}


def ci_stacks(names: list[str]) -> list[str]:
    """The stacks a matrix's per-stack checks of a whole release (one child with that
    release's sglang) run on: all of ``names`` in the full tier; in CI the seed stack and the
    newest, as :func:`ci_versions` samples versions."""
    if full_matrix() or not names:
        return list(names)
    return [name for name in names if name in (SEED_STACK, names[-1])]


def sm12x_gpus() -> list[str]:
    """The simulated SM12x GPUs (``fp4graph.verify.simulate.GPUS`` keys: ``sm120``, the RTX
    PRO 6000; ``sm121``, the DGX Spark's GB10), SM120 first: every path the series take on
    SM120 they must take on the whole family.  A matrix runs all of them in the full tier
    and a subset in CI (said where the matrix is defined)."""
    from fp4graph.verify import simulate

    return sorted((gpu.arch for gpu in simulate.SM12X), key=lambda arch: arch != "sm120")


def sglang_targets(repo: pathlib.Path = REPO) -> dict[str, str]:
    """sglang version -> the flashinfer-python version of its stack, for every stack whose
    sglang has a series (oldest first)."""
    catalog = stacks.load(repo / "patches" / "stacks.toml")
    with_series = set(series_versions(repo / "patches", "sglang"))
    out = {}
    for stack in catalog.stacks:
        artifacts = {a.project: a.version for a in catalog.stack_artifacts(stack)}
        if artifacts.get("sglang") in with_series and FLASHINFER in artifacts:
            out[artifacts["sglang"]] = artifacts[FLASHINFER]
    return dict(sorted(out.items(), key=lambda kv: Version(kv[0])))


def pinned_versions(project: str, repo: pathlib.Path = REPO) -> list[str]:
    """Every version of ``project`` pinned in patches/stacks.toml, oldest first."""
    catalog = stacks.load(repo / "patches" / "stacks.toml")
    return sorted((a.version for a in catalog.artifacts.values() if a.project == project), key=Version)


def versions_with_topic(
    project: str, topic: str, *, below: str | None = None, at_least: str | None = None,
    repo: pathlib.Path = REPO,
) -> list[str]:
    """Versions of ``project`` whose series carries ``topic`` (in any patch), oldest first;
    ``below`` / ``at_least`` bound them where a harness follows one API generation."""
    out = []
    for version in series_versions(repo / "patches", project):
        if below is not None and Version(version) >= Version(below):
            continue
        if at_least is not None and Version(version) < Version(at_least):
            continue
        series = load_series(repo / "patches", project, version)
        if series is not None and topic in series.topics:
            out.append(version)
    return out
