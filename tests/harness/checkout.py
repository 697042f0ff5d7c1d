"""A throw-away fp4graph checkout whose patches/ holds the engine's fixture series."""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import shutil
from collections.abc import Iterator

import pytest

from fp4graph.model import config, projects

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_PATCHES = REPO / "tests" / "wheels" / "fixtures" / "patches"
# The engine tests' own catalog (fixed revisions, one stack) and the repository's.
FIXTURE_STACKS = FIXTURE_PATCHES / "stacks.toml"
REPOSITORY_STACKS = REPO / "patches" / "stacks.toml"
# The stack the engine tests build: both projects, small wheels.
STACK = "sglang-0.5.9"


def make_checkout(
    root: pathlib.Path, cache: pathlib.Path, *, stacks_toml: pathlib.Path = REPOSITORY_STACKS
) -> config.Settings:
    """A minimal checkout at ``root``: ``stacks_toml`` (default: the repository's), the
    fixture series, wheels/README."""
    shutil.copytree(FIXTURE_PATCHES, root / "patches")
    shutil.copy(stacks_toml, root / "patches" / "stacks.toml")
    (root / "wheels").mkdir()
    shutil.copy(REPO / "wheels" / "README.md", root / "wheels" / "README.md")
    return config.Settings(repo=root, cache_dir=cache)


# The topic the fixture series carry: what fixture checkouts require instead of the real
# fp4 topics (their series hold one marker patch, not the fix).
FIXTURE_TOPIC = "fixture-marker"
REAL_PROJECTS = projects.PROJECTS


@contextlib.contextmanager
def fixture_requirements(*topics: str) -> Iterator[None]:
    """Every project requires ``topics`` (default: the fixture marker) instead of its own."""
    required = tuple(projects.RequiredTopic(name=t, why="the fixture series' patch")
                     for t in (topics or (FIXTURE_TOPIC,)))
    patched = {name: dataclasses.replace(p, required_topics=required)
               for name, p in REAL_PROJECTS.items()}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(projects, "PROJECTS", patched)
        yield


@contextlib.contextmanager
def real_requirements() -> Iterator[None]:
    """The registry's own required topics (inside a fixture-topics module)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(projects, "PROJECTS", REAL_PROJECTS)
        yield


def upstream_history(root: pathlib.Path, commits: list[dict[str, str]]) -> list[str]:
    """A git repository at ``root`` with one commit per mapping of files (path -> text,
    written over the previous commit's tree) on branch ``main``; the commit ids."""
    from fp4graph.forward.sources import git

    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    shas = []
    for number, files in enumerate(commits, 1):
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"upstream commit {number}")
        shas.append(git(root, "rev-parse", "HEAD").stdout.strip())
    return shas
