"""The harness's own shape, read from its source with ``ast`` (nothing is imported): no
import cycle between its modules, counting imports inside functions (a cycle hidden there
is still a cycle)."""

from __future__ import annotations

import ast
import pathlib

HARNESS = pathlib.Path(__file__).resolve().parent


def module_names(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Each module under ``root`` by its dotted name (``root``'s own name first)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _package_of(name: str, path: pathlib.Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _targets(node: ast.Import | ast.ImportFrom, package: str, root: str) -> list[str]:
    """The dotted names an import statement may load: a module and, for ``from m import x``,
    ``m.x`` as well (x may be a submodule).  A bare name that is a module at the top of
    ``root`` is that module: the children run with ``root`` itself on their path."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        return [*names, *(f"{root}.{n}" for n in names)]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*anchor, *([base] if base else [])])
    found = [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return found if node.level else [*found, *(f"{root}.{n}" for n in found)]


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of ``tree``, in functions too, but not under ``if
    TYPE_CHECKING:`` (type checkers read those; nothing runs them)."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return found


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """Which of ``root``'s modules each of its modules imports at run time, anywhere in its
    body."""
    modules = module_names(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = _package_of(name, path)
        edges = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            edges |= {t for t in _targets(node, package, root.name) if t in modules and t != name}
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_harness_has_no_import_cycle() -> None:
    graph = import_graph(HARNESS)
    assert "harness.models.stand_ins" in graph and "harness.models.collectives" in graph["harness.models.stand_ins"]
    assert cycles(graph) == [], "import cycles in tests/harness: " + "; ".join(" <-> ".join(c) for c in cycles(graph))


def test_a_cycle_hidden_in_a_function_is_found(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "a.py").write_text("from pkg.sub import b\n")
    (root / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (root / "sub" / "c.py").write_text("def g():\n    import d\n")  # bare: the children's path
    (root / "d.py").write_text("from .sub import a\n")
    (root / "e.py").write_text("import pkg.d\n")
    (root / "f.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n")
    graph = import_graph(root)
    assert graph["pkg.sub.c"] == {"pkg.d"} and graph["pkg.e"] == {"pkg.d"} and graph["pkg.f"] == set()
    assert cycles(graph) == [["pkg.d", "pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]


LONGEST = 100


def long_functions(root: pathlib.Path, limit: int = LONGEST) -> list[str]:
    """``path:line name (n lines)`` for each function or method under ``root`` longer than
    ``limit`` lines, its decorators and docstring included."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({length} lines)")
    return found


def test_no_harness_function_is_over_100_lines() -> None:
    assert long_functions(HARNESS) == [], "split these into named steps: " + "; ".join(long_functions(HARNESS))


def test_a_long_method_is_named(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "pkg"
    root.mkdir()
    body = "".join("    x = 1\n" for _ in range(98))
    (root / "m.py").write_text(f"def short():\n{body}    return x\n\nclass C:\n    @staticmethod\n    def long():\n    {body.replace(chr(10), chr(10) + '    ')}    return x\n")
    assert long_functions(root) == ["pkg/m.py:104 long (101 lines)"]
