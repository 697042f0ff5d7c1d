"""What a shared library asks of the system it loads on: its machine and the glibc symbol
versions it needs (ELF ``.gnu.version_r``), for the wheel's platform tag.

A tag ``manylinux_2_<Y>_<machine>`` with Y the newest ``GLIBC_2.Y`` any module needs: pip
installs it on glibc >= 2.Y only, where the modules load.  (The modules also need
libcudart and the driver, which torch's CUDA wheels and the GPU's driver bring, as
upstream's flashinfer-jit-cache wheels assume.)
"""

from __future__ import annotations

import pathlib
import re
import struct
from collections.abc import Iterable

_MACHINES = {62: "x86_64", 183: "aarch64"}
_SHT_GNU_VERNEED = 0x6FFFFFFE
_GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)")


class ElfError(ValueError):
    """Not a 64-bit little-endian ELF file, or a malformed one."""


def _read(data: bytes, fmt: str, offset: int) -> tuple[int, ...]:
    try:
        return struct.unpack_from(fmt, data, offset)
    except struct.error:
        raise ElfError(f"truncated at offset {offset}") from None


def needed_versions(data: bytes) -> tuple[str, set[str]]:
    """(machine, the version names of its needed symbols) of an ELF64 LE shared object."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    (machine,) = _read(data, "<H", 18)
    shoff, = _read(data, "<Q", 40)
    shentsize, shnum = _read(data, "<HH", 58)
    sections = [_read(data, "<IIQQQQIIQQ", shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for _name, kind, _flags, _addr, offset, _size, link, info, _align, _entsize in sections:
        if kind != _SHT_GNU_VERNEED:
            continue
        strtab_offset = sections[link][4]

        def string(at: int, base: int = strtab_offset) -> str:
            end = data.index(b"\0", base + at)
            return data[base + at:end].decode("ascii", "replace")

        entry = offset
        for _ in range(info):  # sh_info: the number of Verneed entries
            _version, count, _file, aux, next_entry = _read(data, "<HHIII", entry)
            at = entry + aux
            for _ in range(count):
                _hash, _vflags, _other, name, next_aux = _read(data, "<IHHII", at)
                names.add(string(name))
                at += next_aux
            if not next_entry:
                break
            entry += next_entry
    return _MACHINES.get(machine, f"machine-{machine}"), names


def platform_tag(libraries: Iterable[pathlib.Path]) -> str:
    """``manylinux_2_Y_<machine>`` that every library in ``libraries`` loads on."""
    machines: set[str] = set()
    newest = (2, 17)  # manylinux2014, the oldest tag pip still prefers
    for path in libraries:
        machine, versions = needed_versions(path.read_bytes())
        machines.add(machine)
        for name in versions:
            if m := _GLIBC.fullmatch(name):
                newest = max(newest, (int(m[1]), int(m[2])))
    if len(machines) != 1:
        raise ElfError(f"libraries of {sorted(machines) or 'no'} machines; one wheel holds one machine's")
    (machine,) = machines
    return f"manylinux_{newest[0]}_{newest[1]}_{machine}"
