"""Carry built modules between machines: the build where the cores are, the wheel here.

``export`` writes, per arch, one xz-compressed tar of the modules and their record
(``record.json``: what they were built from and with, and how long each took), split into
parts of at most ``part_size`` bytes (a machine that sends back few small files), plus
``kernels-<version, + as _>-<arch>.json`` naming the parts and their sha256.  ``load`` joins and
checks the parts, unpacks the tar (``filter="data"``) and checks each module against the
record; packaging them (:mod:`.package`) is then the same as after a local build.  The
tar is deterministic (sorted members, fixed owner, modes and times), so equal builds
export equal bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import lzma
import pathlib
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...model.files import atomic_directory
from . import cross
from .compile import ArchBuild, Module
from .targets import Arch, KernelsError

PART_SIZE = 15 * 1024 * 1024
FORMAT = "fp4graph-kernels-export/1"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    """What the modules were built from and with (the same for every arch of a call)."""

    stack: str
    flashinfer: str  # flashinfer-python==0.6.3+fp4graph.4
    flashinfer_sha256: str
    cuda: str  # the nvcc release
    toolchain: Mapping[str, str]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Imported:
    provenance: Provenance
    build: ArchBuild
    seconds: Mapping[str, float | None]  # module name -> its build time on the building machine
    platform: str = cross.LINUX_X86_64.name  # the modules' host machine (an older export: x86_64)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tar(members: Sequence[tuple[str, bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def export(dest: pathlib.Path, builds: Iterable[ArchBuild], provenance: Provenance,
           *, part_size: int = PART_SIZE, target: cross.Platform = cross.LINUX_X86_64) -> list[pathlib.Path]:
    """Write each arch's finished modules (host code of ``target``) to ``dest``; the files written."""
    dest.mkdir(parents=True, exist_ok=True)
    written: list[pathlib.Path] = []
    version = provenance.flashinfer.partition("==")[2]
    for build in builds:
        # Letters, digits, '.', '_' and '-' only (the version's '+' as a wheel's file name
        # writes it): a machine that sends files back may drop any other name.
        platform = "" if target == cross.LINUX_X86_64 else f"-{target.name}"
        stem = f"kernels-{version.replace('+', '_')}-{build.arch}{platform}"
        record = {
            "format": FORMAT,
            **dataclasses.asdict(provenance),
            "toolchain": dict(provenance.toolchain),
            "arch": str(build.arch),
            "platform": target.name,
            "modules": [{"kind": m.kind, "name": m.name, "sha256": m.sha256, "seconds": m.seconds}
                        for m in build.modules],
            "unfinished": [dataclasses.asdict(u) for u in build.unfinished],
        }
        members = [("record.json", (json.dumps(record, indent=1, sort_keys=True) + "\n").encode(), 0o644)]
        members += [(f"{m.name}/{m.name}.so", m.library.read_bytes(), 0o755) for m in build.modules]
        archive = lzma.compress(_tar(members), preset=9)
        parts = []
        for index, start in enumerate(range(0, max(len(archive), 1), part_size)):
            part = dest / f"{stem}.tar.xz.{index:03d}"
            chunk = archive[start:start + part_size]
            part.write_bytes(chunk)
            parts.append({"name": part.name, "sha256": _sha256(chunk), "size": len(chunk)})
            written.append(part)
        index_file = dest / f"{stem}.json"
        index_file.write_text(json.dumps({"format": FORMAT, "archive_sha256": _sha256(archive), "parts": parts,
                                          "record": record}, indent=1, sort_keys=True) + "\n")
        written.append(index_file)
    return written


def _check(condition: bool, where: pathlib.Path, what: str) -> None:
    if not condition:
        raise KernelsError(f"{where}: {what}; export it again (python -m fp4graph kernels ... --export DIR)")


def find_exports(dirs: Iterable[pathlib.Path]) -> list[pathlib.Path]:
    found = []
    for d in dirs:
        for candidate in sorted(d.glob("kernels-*.json")):
            try:
                data = json.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(data, dict) and data.get("format") == FORMAT:
                found.append(candidate)
    if not found:
        raise KernelsError(f"no kernels export (kernels-*.json) in {', '.join(map(str, dirs))}")
    return found


def load(index_file: pathlib.Path, cache_dir: pathlib.Path) -> Imported:
    """The modules of one export, checked, unpacked under ``cache_dir``."""
    data: dict[str, Any] = json.loads(index_file.read_text(encoding="utf-8"))
    chunks = []
    for part in data["parts"]:
        path = index_file.parent / part["name"]
        _check(path.exists(), path, "missing part")
        chunk = path.read_bytes()
        _check(_sha256(chunk) == part["sha256"], path, f"sha256 is not the recorded {part['sha256']}")
        chunks.append(chunk)
    archive = b"".join(chunks)
    _check(_sha256(archive) == data["archive_sha256"], index_file, "the joined parts do not match")
    dest = cache_dir / "kernels" / "imports" / data["archive_sha256"][:32]
    if not (dest / "record.json").exists():
        with atomic_directory(dest, replace=True) as staging:
            with tarfile.open(fileobj=io.BytesIO(lzma.decompress(archive)), mode="r") as tar:
                tar.extractall(staging, filter="data")
    record = json.loads((dest / "record.json").read_text(encoding="utf-8"))
    _check(record == data["record"], index_file, "record.json differs from the index")
    modules = []
    for m in record["modules"]:
        library = dest / m["name"] / f"{m['name']}.so"
        _check(library.exists() and _sha256(library.read_bytes()) == m["sha256"], library,
               f"not the recorded module (sha256 {m['sha256']})")
        modules.append(Module(kind=m["kind"], name=m["name"], library=library, sha256=m["sha256"], seconds=None))
    provenance = Provenance(stack=record["stack"], flashinfer=record["flashinfer"],
                            flashinfer_sha256=record["flashinfer_sha256"], cuda=record["cuda"],
                            toolchain=record["toolchain"])
    build = ArchBuild(arch=Arch.parse(record["arch"]), modules=tuple(modules), unfinished=(), log=None)
    seconds = {m["name"]: m.get("seconds") for m in record["modules"]}
    return Imported(provenance=provenance, build=build, seconds=seconds,
                    platform=record.get("platform", cross.LINUX_X86_64.name))

