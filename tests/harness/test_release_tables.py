"""Every per-version table of src/, tests/ and benchmarks/ has a row for each release the
catalog pins, and one more release (a fake stack, or a fake pin without a stack) fails it
by name.  The tables are found in the source (a module-level dict or sequence keyed by
release strings), so a new table that is not a :class:`harness.tables.Table` fails here."""

from __future__ import annotations

import ast
import functools
import importlib.util
import pathlib
import re
import sys
import types
from typing import Any

import pytest

from fp4graph.model import stacks, warmup
from harness import tables

REPO = pathlib.Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^\d+\.\d+(\.\d+)?(\.?(post|rc|a|b|dev)\d+)?$")
# A file without a quoted release-like string holds no table (spares parsing it).
QUOTED_RELEASE = re.compile(r"[\"']\d+\.\d+[.\w]*[\"']")
# Version-keyed literals that are not tables of sglang releases, and why.
NOT_RELEASE_TABLES = {
    "src/fp4graph/wheels/kernels/cross.py: CUDART": "keyed by nvcc release and machine (cross.py names a missing one)",
    "tests/harness/aarch64.py: PIP_TARGET": "pip's --python-version argument, not a table",
    "benchmarks/jit_build.py: STACK_OF": "the stacks the benchmark measures by default, a selection",
    "tests/flashinfer/test_cuda_version_releases.py: TOOLKITS": "the stand-in nvcc's versions, not releases",
}
# src/ cannot import the harness: its tables' own lookups, held to the same rule.
SRC_TABLES: dict[str, tuple[dict[str, Any], Any]] = {
    "src/fp4graph/model/warmup.py: DEFAULT_KINDS": (warmup.DEFAULT_KINDS, warmup.requested),
}


def _is_release(node: ast.AST | None, *, key: bool = False) -> bool:
    if key and isinstance(node, ast.Tuple) and node.elts:  # a (release, ...) key
        node = node.elts[0]
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(RELEASE.match(node.value))


# A module-level assignment of a literal: where a table can start.
TOP_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*(?:\s*:[^=\n]+)?\s*=\s*[\[({]", re.MULTILINE)


def top_assignments(text: str, path: pathlib.Path) -> list[ast.stmt]:
    """The module-level assignments of literals in ``text``, each parsed alone (parsing
    every file whole costs a second); the whole file where one does not parse alone."""
    lines = text.splitlines()
    out: list[ast.stmt] = []
    for match in TOP_ASSIGNMENT.finditer(text):
        start = end = text.count("\n", 0, match.start())
        end += 1
        while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t)]}#"):
            end += 1
        try:
            out += ast.parse("\n".join(lines[start:end])).body
        except SyntaxError:
            return ast.parse(text, str(path)).body
    return out


def release_keyed_literals(path: pathlib.Path) -> list[str]:
    """The module-level names of ``path`` bound to a dict keyed by releases, or to a tuple,
    list or set of them."""
    found: list[str] = []
    text = path.read_text(encoding="utf-8")
    if not QUOTED_RELEASE.search(text):
        return found
    for node in top_assignments(text, path):
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        value = node.value
        keyed = isinstance(value, ast.Dict) and any(_is_release(k, key=True) for k in value.keys)
        listed = isinstance(value, ast.Tuple | ast.List | ast.Set) and any(_is_release(e) for e in value.elts)
        if keyed or listed:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [t.id for t in targets if isinstance(t, ast.Name)]
    return found


def found_tables() -> dict[str, pathlib.Path]:
    """``file: NAME`` of every release-keyed literal -> its file."""
    out = {}
    for root in ("src", "tests", "benchmarks"):
        for path in sorted((REPO / root).rglob("*.py")):
            for name in release_keyed_literals(path):
                out[f"{path.relative_to(REPO)}: {name}"] = path
    return out


def load(path: pathlib.Path) -> types.ModuleType:
    """The module at ``path``: the harness's by its name, a test module by its path (with
    its directory on the path, as pytest imports it)."""
    relative = path.relative_to(REPO / "tests")
    if relative.parts[0] == "harness":
        return importlib.import_module(".".join(relative.with_suffix("").parts))
    name = f"_release_tables_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


@functools.cache
def catalog() -> stacks.Catalog:
    return stacks.load(REPO / "patches" / "stacks.toml")


FOUND = found_tables()
# The tables of tests/ (harness.tables.Table), looked up by table().
NAMES = sorted(n for n in FOUND if n not in NOT_RELEASE_TABLES and n not in SRC_TABLES)


def table(name: str) -> tables.Table[Any]:
    """The :class:`Table` over the literal ``name`` (by identity); fails naming a bare one."""
    module = load(FOUND[name])
    rows = getattr(module, name.rpartition(": ")[2])
    wrapping = [t for t in vars(module).values() if isinstance(t, tables.Table) and t.rows is rows]
    assert wrapping, f"{name} is a per-version table: wrap it in harness.tables.Table and look it up with .row"
    assert wrapping[0].name == name, f"{name}'s Table names {wrapping[0].name!r}"
    return wrapping[0]


def test_the_tables_found_are_the_ones_known() -> None:
    """Every per-version table the issue and docs/adding-a-release.md name is found."""
    found = set(FOUND)
    assert set(NOT_RELEASE_TABLES) | set(SRC_TABLES) <= found, found
    assert {
        "tests/harness/models/expected.py: NSA_BACKENDS_ON_SM120",
        "tests/harness/models/expected.py: EXPECT_BY_RELEASE",
        "tests/harness/models/expected.py: PRISTINE_OF_STACKS",
        "tests/harness/models/expected.py: PRISTINE_RELEASES",
        "tests/integration/test_integration_flags.py: SPECULATIVE_ON",
        "tests/integration/test_integration_flags.py: SPECULATIVE_ENFORCED",
        "tests/models/test_speculative.py: REPLAYS_FULL_HIDDEN",
    } <= set(NAMES), NAMES


def test_every_table_is_named_in_adding_a_release() -> None:
    guide = (REPO / "docs" / "adding-a-release.md").read_text(encoding="utf-8")
    for name in [*NAMES, *SRC_TABLES]:
        path, _, table = name.partition(": ")
        assert f"`{table}`" in guide and f"`{path}`" in guide, name


@pytest.mark.parametrize("name", NAMES)
def test_every_table_has_a_row_for_each_release_pinned(name: str) -> None:
    assert table(name).missing(catalog()) == [], name


@pytest.mark.parametrize("name", NAMES)
def test_a_new_release_fails_the_table_by_name(name: str) -> None:
    """A fake stack (a table of releases measured without one: a fake pin) lacks a row."""
    found = table(name)
    fake = tables.with_fake_stack(catalog()) if found.stacked else tables.with_fake_pin(catalog())
    assert found.missing(fake) == [tables.FAKE_SGLANG], name
    with pytest.raises(tables.MissingRow, match=f"^{re.escape(name)} has no row for sglang {tables.FAKE_SGLANG}"):
        found.row(tables.FAKE_SGLANG)


@pytest.mark.parametrize("name", sorted(SRC_TABLES))
def test_a_new_stack_fails_the_src_tables_by_name(name: str) -> None:
    """The catalog's stacks all have a row; one more lacks it, and the lookup says where."""
    rows, lookup = SRC_TABLES[name]
    assert [v for v in tables.sglang_versions(catalog()) if v not in rows] == [], name
    fake = tables.with_fake_stack(catalog())
    assert [v for v in tables.sglang_versions(fake) if v not in rows] == [tables.FAKE_SGLANG], name
    table = name.rpartition(": ")[2]
    with pytest.raises(LookupError, match=rf"sglang {re.escape(tables.FAKE_SGLANG)} .*{table}"):
        lookup(tables.FAKE_SGLANG)


def test_a_bare_table_is_found(tmp_path: pathlib.Path) -> None:
    """What the scan sees: release-keyed dicts (a ``(release, ...)`` key too) and sequences
    of releases at module level; not a CUDA pair, nor a table inside a function."""
    path = tmp_path / "tables.py"
    path.write_text('KINDS: dict[str, int] = {\n    "0.5.9": 1,\n}\nBY = {("0.5.12.post1", "glm5"): 0}\n'
                    'OLD = ("0.5.8", "0.5.9")\nCUDA = [("12.8", "13.0")]\n\n\ndef f() -> None:\n'
                    '    local = {"0.5.9": 1}\n', encoding="utf-8")
    assert release_keyed_literals(path) == ["KINDS", "BY", "OLD"]
