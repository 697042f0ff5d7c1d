"""docs/layout.md against the tree: every room of src/fp4graph and of tests/harness, and
every module directly in one, is named in that room's entry, so the map cannot go stale
silently (a new module fails here, naming the entry to extend)."""

from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[1]
LAYOUT = REPO / "docs" / "layout.md"
# Rooms whose modules the entry need not list, and where they are listed instead.
LISTED_ELSEWHERE = {
    "src/fp4graph/commands": "one module per verb: `python -m fp4graph --help`, checked by tests/test_commands.py",
}


def entries() -> dict[str, str]:
    """Each entry of the layout's map (its first column: a path, or several names) -> its
    text (the description and its continuation lines); an indented entry's path is
    relative to the unindented entry above it."""
    text = LAYOUT.read_text(encoding="utf-8").split("```")[1]
    out: dict[str, str] = {}
    parent, key = "", ""
    for line in text.splitlines():
        match = re.match(r"^( {0,2})(\S.*?)(?: {2,}(.*))?$", line)
        if match is None:  # a continuation line
            if key:
                out[key] += " " + line.strip()
            continue
        indent, name, rest = match.groups()
        if not indent:
            parent = name.rstrip("/") + "/" if name.endswith("/") else ""
        key = (parent if indent else "") + name
        out[key] = key + " " + (rest or "")
    return out


def _words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


def _entry_of(room: pathlib.Path, found: dict[str, str]) -> str:
    """The text of ``room``'s entry: the one whose first column names the directory."""
    relative = room.relative_to(REPO).as_posix()
    for key, text in found.items():
        names = [n.strip() for n in key.replace("src/fp4graph/", "").split(",")]
        if relative + "/" in key or any(relative.endswith("/" + n.rstrip("/")) and n.endswith("/") for n in names):
            return text
    raise AssertionError(f"docs/layout.md has no entry for {relative}/: add one")


def rooms() -> list[pathlib.Path]:
    """The packages directly under src/fp4graph, and tests/harness with its packages."""
    src = sorted(p.parent for p in (REPO / "src" / "fp4graph").glob("*/__init__.py"))
    harness = REPO / "tests" / "harness"
    return [*src, harness, *sorted(p.parent for p in harness.glob("*/__init__.py"))]


def members(room: pathlib.Path) -> list[str]:
    """What a room holds: its modules (not tests, not __init__/__main__) and packages."""
    modules = [p.stem for p in room.glob("*.py")
               if not p.name.startswith(("test_", "__")) and p.name != "conftest.py"]
    packages = [p.parent.name for p in room.glob("*/__init__.py")]
    return sorted(modules + packages)


def test_every_room_and_module_is_on_the_map() -> None:
    found = entries()
    missing = {}
    for room in rooms():
        if room.relative_to(REPO).as_posix() in LISTED_ELSEWHERE:
            _entry_of(room, found)
            continue
        below = " ".join(k for k in found if k.startswith(room.relative_to(REPO).as_posix() + "/"))
        words = _words(_entry_of(room, found) + " " + below)
        if absent := [m for m in members(room) if m not in words]:
            missing[room.relative_to(REPO).as_posix()] = absent
    assert not missing, f"docs/layout.md does not name {missing}: add each to its room's entry"


def test_the_map_names_no_module_that_is_gone() -> None:
    """A ``name.py`` on the map exists somewhere in the tree."""
    named = set(re.findall(r"([\w/]+\.py)\b", LAYOUT.read_text(encoding="utf-8")))
    files = {p.relative_to(REPO).as_posix() for top in ("src", "tests", "benchmarks")
             for p in (REPO / top).rglob("*.py")} | {"noxfile.py"}
    gone = [n for n in named if not any(f == n or f.endswith("/" + n) for f in files)]
    assert not gone, f"docs/layout.md names {gone}, which the tree lacks"
