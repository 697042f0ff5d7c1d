"""What the test interpreter needs besides the wheels under test, and whether it has it.

A bundle records its requirements (the selection's own and the Requires-Dist of the wheels it
installs, as at prepare time); before anything runs, :func:`unmet` asks the interpreter that
will run the tests which of them it lacks, so a missing package is named up front instead of
crashing every file in both installs.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import zipfile
from collections.abc import Sequence
from email.parser import HeaderParser

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ...model.errors import SuiteError
from .selection import Selection


def requires_dist(wheel: pathlib.Path) -> list[str]:
    """The wheel's Requires-Dist that apply without extras, markers dropped."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = HeaderParser().parsestr(zf.read(name).decode())
    out = []
    for raw in metadata.get_all("Requires-Dist") or []:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            req.marker = None
            out.append(str(req))
    return out


def bundle_requirements(
    selection: Selection, project_wheel: pathlib.Path, companions: Sequence[pathlib.Path]
) -> list[str]:
    """pytest, the selection's requirements, then the wheels' (the project's where the
    selection installs them, its companions' always); torch unpinned: its version is the
    run's choice (the report records it)."""
    wheels = [*([project_wheel] if selection.wheel_requirements else []), *companions]
    reqs = ["pytest", *selection.requirements, *(r for w in wheels for r in requires_dist(w))]
    out: list[str] = []
    for raw in reqs:
        req = "torch" if canonicalize_name(Requirement(raw).name) == "torch" else raw
        if req not in out:
            out.append(req)
    return out


_PROBE = """\
import importlib.metadata, json, sys
found = {}
for name in json.loads(sys.argv[1]):
    try:
        found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        found[name] = None
print(json.dumps(found))
"""


def unmet(python: str, requirements: Sequence[str]) -> list[tuple[str, str]]:
    """The ``requirements`` that ``python`` does not satisfy: (requirement, what it has)."""
    reqs = [Requirement(r) for r in requirements]
    names = sorted({canonicalize_name(r.name) for r in reqs})
    result = subprocess.run([python, "-c", _PROBE, json.dumps(names)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SuiteError(f"{python} could not list its installed packages: {result.stderr.strip()[-500:]}")
    found: dict[str, str | None] = json.loads(result.stdout.strip().splitlines()[-1])
    missing = []
    for req in reqs:
        version = found[canonicalize_name(req.name)]
        if version is None:
            missing.append((str(req), "not installed"))
        elif not req.specifier.contains(version, prereleases=True):
            missing.append((str(req), f"{version} installed"))
    return missing
