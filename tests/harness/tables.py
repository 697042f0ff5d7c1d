"""Per-version test tables that fail loudly on a release they lack.

A table keyed by sglang release (what a release's ServerArgs picks, what it refuses) is a
:class:`Table`, looked up with :meth:`Table.row`: a release without a row raises, naming
the table to extend, instead of going quietly unchecked.  :meth:`Table.missing` lists the
catalog's releases it has no row for (the releases with a stack, or for a table of
releases measured without one, those pinned without a stack).  tests/harness/test_tables.py
finds every per-version table of src/, tests/ and benchmarks/ and holds each to the real
catalog and to :func:`with_fake_stack` / :func:`with_fake_pin` (one more release), so
adding a release to patches/stacks.toml fails every table it needs a row in, by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Generic, TypeVar

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


def unstacked_versions(catalog: Catalog) -> list[str]:
    """The sglang releases pinned without a stack (``pin --no-stack``: measured pristine)."""
    in_stacks = {key for stack in catalog.stacks for key in stack.artifacts}
    return [a.version for k, a in catalog.artifacts.items() if a.project == "sglang" and k not in in_stacks]


@dataclasses.dataclass(frozen=True)
class Table(Generic[T]):
    """A per-version table: ``rows`` keyed by sglang release (with ``by_prefix``, by the
    releases' prefixes), ``name`` (``file: TABLE``) what a missing row names.  ``stacked``:
    every release with a stack needs a row; otherwise every release pinned without one."""

    name: str
    rows: Mapping[str, T]
    by_prefix: bool = False
    stacked: bool = True

    def row(self, version: str) -> T:
        """The row of sglang ``version``; :class:`MissingRow`, naming the table, if none."""
        return row(self.rows, self.name, version, by_prefix=self.by_prefix)

    def missing(self, catalog: Catalog) -> list[str]:
        """The catalog's releases this table needs a row for and has none."""
        versions = sglang_versions(catalog) if self.stacked else unstacked_versions(catalog)
        return [v for v in versions if key_of(self.rows, v, by_prefix=self.by_prefix) is None]


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


def with_fake_pin(catalog: Catalog, sglang: str = FAKE_SGLANG) -> Catalog:
    """``catalog`` with sglang ``sglang`` pinned without a stack (``pin --no-stack``)."""
    template = next(a for a in catalog.artifacts.values() if a.project == "sglang")
    artifacts = {**catalog.artifacts, f"sglang=={sglang}": dataclasses.replace(template, version=sglang)}
    return dataclasses.replace(catalog, artifacts=artifacts)
