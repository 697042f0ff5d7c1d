"""sgl_kernel without its compiled libraries: the op schemas, and its Python from PyPI.

sglang calls sgl_kernel's Python wrappers (``sgl_kernel.rmsnorm`` ...), which call
``torch.ops.sgl_kernel.*`` ops registered by ``sgl_kernel/sm100/common_ops.abi3.so``
(the variant ``load_utils`` picks on SM120).  A CPU cannot load that library, and the
wheels are 0.3-0.5 GB, so the simulation uses:

* a committed record per sgl-kernel release, ``data/<project>-<version>.json``: the
  source wheel (name, URL, sha256), every op schema the library defines as text (read
  out of the library's read-only data; ops whose schema is inferred from a C++
  signature have no text and are listed by name), the same for the libraries NSA
  models call (:data:`EXTRA_LIBRARIES`: FA3's ``flash_ops``, FlashMLA's ``flashmla_ops``
  and DeepGEMM's ``deep_gemm_cpp``, which the wheel bundles), and every Python file of the
  ``sgl_kernel`` and ``deep_gemm`` packages with its offset in the wheel and its sha256
  (sglang 0.5.12+ pin DeepGEMM as its own wheel, ``sgl-deep-gemm``, a tvm-ffi module no
  longer bundled: the record names it as a companion, ``--with``, whose Python files it
  lists the same way, and records no ``deep_gemm_cpp`` schemas);
* at test time, only those Python files, read out of the pinned wheel on PyPI with
  HTTP range requests (about 200 KB), each checked against its recorded sha256.

Regenerate a record (downloads the whole wheel once, checks its sha256 against
PyPI's)::

    python tests/harness/models/sgl_kernel_ops.py generate sglang-kernel==0.4.2
    python tests/harness/models/sgl_kernel_ops.py generate sglang-kernel==0.4.2.post2 --with sgl-deep-gemm==0.1.0

The child side turns the schemas into ``torch.library`` definitions with Meta kernels
(``stand_ins.install_sgl_kernel_ops``).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import pathlib
import re
import struct
import sys
import tempfile
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Sequence
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
DATA = HERE / "data"
# The command that writes a record (this file run from the checkout).
GENERATE = f"python {pathlib.Path(__file__).resolve().relative_to(REPO)} generate"
# load_utils._load_architecture_specific_ops: capability 90 -> sm90, anything else -> sm100.
LIBRARY = "sgl_kernel/sm100/common_ops.abi3.so"
# The other compiled libraries of the wheel whose ops sglang's NSA (DSA) attention calls
# or imports: (library, torch.library namespace, the module name that loads it).
EXTRA_LIBRARIES = (
    ("sgl_kernel/flash_ops.abi3.so", "sgl_kernel", "sgl_kernel.flash_ops"),
    ("sgl_kernel/flashmla_ops.abi3.so", "sgl_kernel", "sgl_kernel.flashmla_ops"),
    ("deep_gemm/deep_gemm_cpp.abi3.so", "deep_gemm", "deep_gemm.deep_gemm_cpp"),
)
# A companion's compiled libraries whose op schemas the record carries: sgl-deep-gemm
# 0.2+ is a TORCH_LIBRARY module (``deep_gemm/_C.so``, ops ``torch.ops.deep_gemm.*``, loaded
# with ``torch.ops.load_library``) where 0.1.x was a tvm-ffi one.
COMPANION_LIBRARIES = (("deep_gemm/_C.so", "deep_gemm", "deep_gemm._C"),)
PACKAGES = ("sgl_kernel/", "deep_gemm/")
_SIMPLE = "https://pypi.org/simple/{project}/"
# A printable C string that looks like ``name(args) -> returns``.
_STRINGS = re.compile(rb"[\x20-\x7e]{8,}")
_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?\(.*\)\s*->\s*\S.*")
_KERNEL_REQUIREMENT = re.compile(r"^Requires-Dist: (sgl[-_]kernel|sglang[-_]kernel)==([^\s;]+)", re.M)


class SglKernelError(RuntimeError):
    pass


def record_path(project: str, version: str, companions: Sequence[str] = ()) -> pathlib.Path:
    """The record of ``project==version`` with ``companions`` (``project==version`` each):
    ``<project>-<version>.json``, the first generated; where that one carries other companions
    (releases sharing an sgl-kernel with another sgl-deep-gemm: sglang 0.5.14 / 0.5.15),
    ``<project>-<version>+<companion>-<version>.json``."""
    base = DATA / f"{project.replace('_', '-')}-{version}.json"
    if not companions or not base.is_file() or _companions_of(base) == sorted(companions):
        return base
    keyed = "+".join(sorted(c.replace("==", "-") for c in companions))
    return DATA / f"{base.stem}+{keyed}.json"


def _companions_of(path: pathlib.Path) -> list[str]:
    record = json.loads(path.read_text())
    return sorted(f"{c['project']}=={c['version']}" for c in record.get("companions", []))


def kernel_requirement(sglang_tree: pathlib.Path) -> tuple[str, str]:
    """(project, version) of the sgl-kernel an unpacked sglang wheel pins."""
    metadata = next(sglang_tree.glob("sglang-*.dist-info/METADATA"))
    found = _KERNEL_REQUIREMENT.search(metadata.read_text())
    if not found:
        raise SglKernelError(f"{metadata}: no sgl-kernel / sglang-kernel == pin")
    return found.group(1).replace("_", "-"), found.group(2)


# Wheels sglang pins beside sgl-kernel whose Python a record carries (``--with``).
_COMPANION_REQUIREMENT = re.compile(r"^Requires-Dist: (sgl[-_]deep[-_]gemm)==([^\s;]+)", re.M)


def companion_requirements(sglang_tree: pathlib.Path) -> list[str]:
    """The ``project==version`` companions an unpacked sglang wheel pins (sgl-deep-gemm,
    sglang 0.5.12+); its sgl-kernel record must carry each (:func:`check_companions`)."""
    metadata = next(sglang_tree.glob("sglang-*.dist-info/METADATA"))
    return [f"{m.group(1).replace('_', '-')}=={m.group(2)}" for m in _COMPANION_REQUIREMENT.finditer(metadata.read_text())]


def check_companions(project: str, version: str, sglang_tree: pathlib.Path) -> None:
    """The record of ``project==version`` carries exactly the companions sglang pins."""
    wanted = sorted(companion_requirements(sglang_tree))
    path = record_path(project, version, wanted)
    record = load_record(project, version, wanted)
    have = sorted(f"{c['project']}=={c['version']}" for c in record.get("companions", []))
    if have != wanted:
        raise SglKernelError(
            f"{path.relative_to(REPO)} carries {have or 'no companions'}, "
            f"the sglang of {sglang_tree.name} pins {wanted}: regenerate it with "
            f"`{GENERATE} {project}=={version}" + "".join(f" --with {c}" for c in wanted) + "`"
        )


def load_record(project: str, version: str, companions: Sequence[str] = ()) -> dict[str, Any]:
    path = record_path(project, version, companions)
    if not path.is_file():
        raise SglKernelError(
            f"{path.relative_to(REPO)} does not exist: sglang pins {project}=={version}; "
            f"generate it with `{GENERATE} {project}=={version}" + "".join(f" --with {c}" for c in companions) + "`"
        )
    record: dict[str, Any] = json.loads(path.read_text())
    return record


# --- generating a record --------------------------------------------------------------


def _pypi_wheel(project: str, version: str) -> dict[str, Any]:
    """The manylinux x86_64 wheel of ``project==version`` on PyPI (name, url, sha256, size)."""
    request = urllib.request.Request(
        _SIMPLE.format(project=project), headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    for f in files:
        name = f["filename"]
        if f"-{version}-" in name and name.endswith("x86_64.whl"):
            return {"filename": name, "url": f["url"], "sha256": f["hashes"]["sha256"], "size": f["size"]}
    raise SglKernelError(f"PyPI has no manylinux x86_64 wheel of {project}=={version}")


def _download(wheel: dict[str, Any], cache: pathlib.Path) -> pathlib.Path:
    path = cache / wheel["filename"]
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache, delete=False) as tmp:
            with urllib.request.urlopen(wheel["url"], timeout=600) as response:
                while block := response.read(1 << 20):
                    tmp.write(block)
        os.replace(tmp.name, path)
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != wheel["sha256"]:
        raise SglKernelError(f"{path}: sha256 {digest.hexdigest()}, PyPI says {wheel['sha256']}")
    return path


def schemas_of(library: bytes) -> list[str]:
    """Every op schema string (``name(args) -> returns``) in a library's data, parsed by torch."""
    import torch

    found: dict[str, str] = {}
    for raw in _STRINGS.findall(library):
        text = raw.decode()
        if "->" not in text or not _SCHEMA.fullmatch(text):
            continue
        try:
            schema = torch._C.parse_schema(text)
        except RuntimeError:
            continue
        name = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        found.setdefault(name, text)
    return [found[name] for name in sorted(found)]


def _python_entries(z: zipfile.ZipFile) -> list[dict[str, Any]]:
    """Every Python file of :data:`PACKAGES` in an open wheel: its place in the wheel, its sha256."""
    out = []
    for info in z.infolist():
        if info.filename.startswith(PACKAGES) and info.filename.endswith(".py"):
            data = z.read(info)
            out.append(
                {
                    "name": info.filename,
                    "offset": info.header_offset,
                    "compressed_size": info.compress_size,
                    "method": info.compress_type,
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
    return out


def _companion(requirement: str, cache: pathlib.Path) -> dict[str, Any]:
    """A wheel sglang pins beside sgl-kernel whose Python the record also carries
    (sgl-deep-gemm: DeepGEMM as a tvm-ffi module, from sglang 0.5.12)."""
    project, _, version = requirement.partition("==")
    wheel = _pypi_wheel(project, version)
    with zipfile.ZipFile(_download(wheel, cache)) as z:
        companion = {"project": project, "version": version, "wheel": wheel, "python": _python_entries(z)}
        present = set(z.namelist())
        # A library that registers its ops with torch (torch::Library's symbols).
        libraries = [(name, namespace, module, z.read(name)) for name, namespace, module in COMPANION_LIBRARIES
                     if name in present]
        torch_libraries = [
            {"library": name, "namespace": namespace, "module": module, "schemas": schemas_of(data)}
            for name, namespace, module, data in libraries if b"_ZN5torch7Library" in data
        ]
        if torch_libraries:
            companion["torch_libraries"] = torch_libraries
        return companion


def generate(requirement: str, cache: pathlib.Path, companions: Sequence[str] = ()) -> pathlib.Path:
    project, _, version = requirement.partition("==")
    wheel = _pypi_wheel(project, version)
    path = _download(wheel, cache)
    with zipfile.ZipFile(path) as z:
        library = z.read(LIBRARY)
        # sglang-kernel 0.4.2.post2+ no longer bundles DeepGEMM (sglang pins sgl-deep-gemm, a
        # tvm-ffi module, instead): a library the wheel lacks is not recorded.
        present = set(z.namelist())
        extra = [
            {"library": name, "namespace": namespace, "module": module, "schemas": schemas_of(z.read(name))}
            for name, namespace, module in EXTRA_LIBRARIES
            if name in present
        ]
        python = _python_entries(z)
    schemas = schemas_of(library)
    record = {
        "generated_by": f"{GENERATE} {project}=={version}",
        "project": project,
        "version": version,
        "wheel": wheel,
        "library": LIBRARY,
        "namespace": "sgl_kernel",
        "schemas": schemas,
        "extra_libraries": extra,
        "python": python,
    }
    if companions:
        record["companions"] = [_companion(c, cache) for c in companions]
        record["generated_by"] += "".join(f" --with {c}" for c in companions)
    out = record_path(project, version, companions)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    return out


# --- the Python package at test time --------------------------------------------------


def _ranges(url: str, spans: list[tuple[int, int]]) -> list[bytes]:
    """Bytes [start, end) of ``url`` for each span, over one HTTPS connection."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPSConnection(parts.netloc, timeout=120)
    out = []
    try:
        for start, end in spans:
            conn.request("GET", parts.path, headers={"Range": f"bytes={start}-{end - 1}"})
            response = conn.getresponse()
            body = response.read()
            if response.status in (301, 302, 303, 307, 308):
                return _ranges(response.headers["Location"], spans)
            if response.status != 206:
                raise SglKernelError(f"{url}: range request answered {response.status}")
            out.append(body)
    finally:
        conn.close()
    return out


def _member(blob: bytes, entry: dict[str, Any]) -> bytes:
    signature, *_, name_len, extra_len = struct.unpack("<IHHHHHIIIHH", blob[:30])
    if signature != 0x04034B50:
        raise SglKernelError(f"{entry['name']}: no zip local header at offset {entry['offset']}")
    start = 30 + name_len + extra_len
    raw = blob[start : start + entry["compressed_size"]]
    if entry["method"] == zipfile.ZIP_DEFLATED:
        return zlib.decompress(raw, -15)
    if entry["method"] == zipfile.ZIP_STORED:
        return raw
    raise SglKernelError(f"{entry['name']}: zip method {entry['method']} not supported")


def _extract_python(wheel: dict[str, Any], tmp: pathlib.Path, cache: pathlib.Path, record_name: str) -> None:
    """The Python files a record lists of one wheel (``wheel``: the record or one of its
    companions), read from the wheel ``generate`` downloaded or by range requests."""
    local = cache / "sgl-kernel" / wheel["wheel"]["filename"]
    entries = wheel["python"]
    if local.is_file():  # a wheel downloaded by `generate`
        with local.open("rb") as f:
            blobs = []
            for e in entries:
                f.seek(e["offset"])
                blobs.append(f.read(30 + 1024 + e["compressed_size"]))
    else:
        spans = [(e["offset"], e["offset"] + 30 + 1024 + e["compressed_size"]) for e in entries]
        blobs = _ranges(wheel["wheel"]["url"], spans)
    for entry, blob in zip(entries, blobs, strict=True):
        data = _member(blob, entry)
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise SglKernelError(
                f"{wheel['wheel']['filename']}: {entry['name']} does not match the sha256 in {record_name}"
            )
        target = tmp / entry["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def python_tree(project: str, version: str, cache: pathlib.Path, companions: Sequence[str] = ()) -> pathlib.Path:
    """A directory holding the pinned wheel's ``sgl_kernel`` and ``deep_gemm`` Python
    files (no libraries)."""
    record = load_record(project, version, companions)
    wheels = [record, *record.get("companions", [])]
    files = hashlib.sha256(json.dumps([w["python"] for w in wheels], sort_keys=True).encode()).hexdigest()
    if "companions" not in record:  # the key trees had before companions existed
        files = hashlib.sha256(json.dumps(record["python"], sort_keys=True).encode()).hexdigest()
    root = cache / "sgl-kernel-python" / f"{project}-{version}-{record['wheel']['sha256'][:16]}-{files[:8]}"
    if (root / ".complete").is_file():
        return root
    tmp = pathlib.Path(tempfile.mkdtemp(dir=cache, prefix="sgl-kernel-python-"))
    for wheel in wheels:
        _extract_python(wheel, tmp, cache, record_path(project, version, companions).name)
    (tmp / ".complete").write_text(record["wheel"]["sha256"] + "\n")
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, root)
    except OSError:  # another process finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write data/<project>-<version>.json from the PyPI wheel")
    gen.add_argument("requirement", help="e.g. sgl-kernel==0.3.21 or sglang-kernel==0.4.2")
    gen.add_argument("--with", dest="companions", action="append", default=[],
                     help="a wheel sglang pins beside it whose Python is needed too, e.g. sgl-deep-gemm==0.1.0")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from fp4graph.model.config import default_cache_dir

    out = generate(args.requirement, default_cache_dir() / "sgl-kernel", args.companions)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
