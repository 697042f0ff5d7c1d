"""Per-version test tables that fail loudly on a release they lack.

A table keyed by sglang release (what a release's ServerArgs picks, what it refuses) is
looked up with :func:`row`: a release without a row raises, naming the table to extend,
instead of going quietly unchecked.  Each table also has a ``missing_*_rows(catalog)``
beside it, which lists the catalog's sglang releases it has no row for; those are tested
on the real catalog and on :func:`with_fake_stack` (one more sglang stack), so adding a
stack to patches/stacks.toml fails every table it needs a row in, by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeVar

from fp4graph.model.stacks import Artifact, Catalog, Stack

T = TypeVar("T")

FAKE_SGLANG = "9.9.9"


class MissingRow(LookupError):
    """A per-version table has no row for a release the catalog pins."""


def key_of(table: Mapping[str, object], version: str, *, by_prefix: bool = False) -> str | None:
    """The key of ``table`` that holds ``version``: itself, or with ``by_prefix`` the longest
    key it starts with (``0.5.8`` holds ``0.5.8.post1``); None if none does."""
    if version in table:
        return version
    if by_prefix:
        keys = [k for k in table if version.startswith(k)]
        return max(keys, key=len) if keys else None
    return None


def row(table: Mapping[str, T], name: str, version: str, *, by_prefix: bool = False) -> T:
    """``table``'s row for sglang ``version``; ``name`` (``file: TABLE``) names it when
    there is none."""
    key = key_of(table, version, by_prefix=by_prefix)
    if key is None:
        raise MissingRow(f"{name} has no row for sglang {version}: add one (rows: {', '.join(table)})")
    return table[key]


def sglang_versions(catalog: Catalog) -> list[str]:
    """The sglang releases of the catalog's stacks."""
    return [catalog.versions(stack)["sglang"] for stack in catalog.sglang_stacks()]


def missing(table: Mapping[str, object], catalog: Catalog, *, by_prefix: bool = False) -> list[str]:
    """The catalog's sglang releases ``table`` has no row for."""
    return [v for v in sglang_versions(catalog) if key_of(table, v, by_prefix=by_prefix) is None]


def with_fake_stack(catalog: Catalog, sglang: str = FAKE_SGLANG) -> Catalog:
    """``catalog`` with one more stack, ``sglang-<sglang>``, pinning a new sglang release
    beside the newest stack's other artifacts (as adding a release to stacks.toml does)."""
    newest = catalog.sglang_stacks()[-1]
    template = next(a for a in catalog.stack_artifacts(newest) if a.project == "sglang")
    artifact = dataclasses.replace(template, version=sglang)
    key = f"sglang=={sglang}"
    others = tuple(k for k in newest.artifacts if catalog.artifacts[k].project != "sglang")
    stack = dataclasses.replace(newest, name=f"sglang-{sglang}", artifacts=(key, *others))
    artifacts: dict[str, Artifact] = {**catalog.artifacts, key: artifact}
    stacks: tuple[Stack, ...] = (*catalog.stacks, stack)
    return dataclasses.replace(catalog, artifacts=artifacts, stacks=stacks)
