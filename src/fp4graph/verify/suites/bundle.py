"""A bundle: upstream's test files at the pinned commit and the two installs.

``upstream/`` holds the files, ``site-patched/`` and ``site-pristine/`` what ``pip install
--no-deps --target`` made of each variant's wheels, and ``bundle.json`` where all of it came
from.  A bundle packs into one reproducible ``.tar.xz`` that runs where neither GitHub nor
PyPI can be reached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import subprocess
import tarfile
from collections.abc import Sequence
from typing import Any

from ...model.errors import SuiteError
from ...model.log import log
from ...model.stacks import Catalog

BUNDLE_FORMAT = 2  # 2: bundle.json lists the test interpreter's requirements
# Installed files get this mtime (2000-01-01), so that two installs at one path look alike to
# ninja and a JIT cache can be shared between them (see ``jit_difference``).
FIXED_MTIME = 946684800
VARIANTS = ("patched", "pristine")


def install(python: str, wheels: Sequence[pathlib.Path], dest: pathlib.Path) -> None:
    """``pip install --no-deps --target dest`` of ``wheels``; mtimes fixed (see FIXED_MTIME)."""
    cmd = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-index",
           "--disable-pip-version-check", "--target", str(dest), *map(str, wheels)]
    log(subprocess.list2cmdline(cmd))
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise SuiteError(f"`{subprocess.list2cmdline(cmd)}` failed:\n{result.stderr.strip()}")
    for path in [dest, *dest.rglob("*")]:
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)


def _digests(tree: pathlib.Path) -> dict[str, str]:
    out = {}
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            rel = path.relative_to(tree).as_posix()
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def jit_difference(a: pathlib.Path, b: pathlib.Path) -> str | None:
    """Why two installs cannot share a JIT cache, or None.

    They can when they differ in Python files and metadata only: then every source, header and
    generated file a JIT build reads is the same, and ninja rebuilds exactly the modules whose
    command line differs.
    """
    da, db = _digests(a), _digests(b)

    def relevant(rel: str) -> bool:
        top = rel.split("/", 1)[0]
        return not rel.endswith(".py") and not top.endswith(".dist-info")

    diff = sorted(
        rel for rel in set(da) | set(db) if relevant(rel) and da.get(rel) != db.get(rel)
    )
    if diff:
        return f"{len(diff)} non-Python file(s) differ, e.g. {diff[0]}"
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Bundle:
    """Upstream's test files at the pinned commit and the two installs, ready to run."""

    path: pathlib.Path
    manifest: dict[str, Any]

    @property
    def tests_root(self) -> pathlib.Path:
        return self.path / "upstream"

    def site(self, variant: str) -> pathlib.Path:
        return self.path / f"site-{variant}"

    @property
    def name(self) -> str:
        return f"{self.manifest['project']}-{self.manifest['version']}"


def pack(bundle: Bundle, dest: pathlib.Path) -> pathlib.Path:
    """Write ``bundle`` as one reproducible ``.tar.xz``.

    Members are sorted by their path inside each install, so the two near-identical installs
    alternate file by file and xz stores the second copy of each file almost for free.
    """
    def key(path: pathlib.Path) -> tuple[str, str]:
        rel = path.relative_to(bundle.path)
        top, *rest = rel.parts
        return ("/".join(rest), top) if top.startswith("site-") else (rel.as_posix(), "")

    members = sorted((p for p in bundle.path.rglob("*") if p.is_file()), key=key)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        for path in members:
            info = tar.gettarinfo(str(path), arcname=f"{bundle.name}/{path.relative_to(bundle.path).as_posix()}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = FIXED_MTIME, 0, 0, "", ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    os.replace(tmp, dest)
    return dest


def open_bundle(path: pathlib.Path, work: pathlib.Path) -> Bundle:
    """A bundle directory, or a packed one unpacked under ``work``."""
    if path.is_file():
        with tarfile.open(path) as tar:
            tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
            if len(tops) != 1:
                raise SuiteError(f"{path}: not a suite bundle (top-level entries {sorted(tops)})")
            tar.extractall(work, filter="data")
        path = work / tops.pop()
    manifest_path = path / "bundle.json"
    if not manifest_path.is_file():
        raise SuiteError(f"{path}: not a suite bundle (no bundle.json)")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format") != BUNDLE_FORMAT:
        raise SuiteError(f"{manifest_path}: bundle format {manifest.get('format')}, expected {BUNDLE_FORMAT} "
                         "(made by another fp4graph: prepare it again with `fp4graph suites STACK --pack DIR`)")
    return Bundle(path, manifest)


def check_bundle_pin(bundle: Bundle, catalog: Catalog) -> None:
    """Refuse a bundle whose upstream files are not from the commit stacks.toml pins now."""
    m = bundle.manifest
    where = f"stack {m['stack']}: {m['project']} {m['version']}"
    pin = catalog.artifact(m["project"], m["version"]).source
    if pin is None or pin.commit != m["source"]["commit"]:
        raise SuiteError(
            f"{where}: bundle {bundle.path} holds upstream files from commit {m['source']['commit']}, "
            f"but patches/stacks.toml pins {pin.commit if pin else 'no source'}; prepare it again"
        )
