"""Where things live: the repository, the artifact cache, the index to fetch from."""

from __future__ import annotations

import dataclasses
import os
import pathlib

from .errors import ConfigError

DEFAULT_INDEX_URL = "https://pypi.org/simple/"


def find_checkout(start: pathlib.Path | None = None) -> pathlib.Path:
    """The fp4graph checkout holding ``start`` (default: the working directory)."""
    here = start or pathlib.Path.cwd()
    for candidate in (here, *here.parents):
        if (candidate / "patches" / "stacks.toml").is_file():
            return candidate
    raise ConfigError(f"{here}: not inside an fp4graph checkout (no patches/stacks.toml)")


def default_cache_dir() -> pathlib.Path:
    if "FP4GRAPH_CACHE" in os.environ:
        return pathlib.Path(os.environ["FP4GRAPH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "fp4graph"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the engine needs to know about its surroundings."""

    repo: pathlib.Path
    cache_dir: pathlib.Path
    index_url: str = DEFAULT_INDEX_URL
    find_links: tuple[pathlib.Path, ...] = ()

    @property
    def patches_dir(self) -> pathlib.Path:
        return self.repo / "patches"

    @property
    def stacks_file(self) -> pathlib.Path:
        return self.patches_dir / "stacks.toml"

    @property
    def wheels_dir(self) -> pathlib.Path:
        return self.repo / "wheels"

    @classmethod
    def from_env(cls, repo: pathlib.Path) -> Settings:
        """Settings from FP4GRAPH_CACHE, FP4GRAPH_INDEX_URL and FP4GRAPH_FIND_LINKS."""
        links = os.environ.get("FP4GRAPH_FIND_LINKS", "")
        return cls(
            repo=repo,
            cache_dir=default_cache_dir(),
            index_url=os.environ.get("FP4GRAPH_INDEX_URL") or DEFAULT_INDEX_URL,
            find_links=tuple(pathlib.Path(p) for p in links.split(os.pathsep) if p),
        )
