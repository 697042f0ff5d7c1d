"""A throw-away fp4graph checkout whose patches/ holds the engine's fixture series."""

from __future__ import annotations

import pathlib
import shutil

from fp4graph.model import config

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_PATCHES = REPO / "tests" / "wheels" / "fixtures" / "patches"
# The stack the engine tests build: both projects, small wheels.
STACK = "sglang-0.5.9"


def make_checkout(root: pathlib.Path, cache: pathlib.Path) -> config.Settings:
    """A minimal checkout at ``root``: stacks.toml, the fixture series, wheels/README."""
    shutil.copytree(FIXTURE_PATCHES, root / "patches")
    shutil.copy(REPO / "patches" / "stacks.toml", root / "patches" / "stacks.toml")
    (root / "wheels").mkdir()
    shutil.copy(REPO / "wheels" / "README.md", root / "wheels" / "README.md")
    return config.Settings(repo=root, cache_dir=cache)
