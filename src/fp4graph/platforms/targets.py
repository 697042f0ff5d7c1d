"""The target platforms: what a wheel's tag must say to install there, and how uv names it."""

from __future__ import annotations

import dataclasses
import platform as _platform

from packaging.utils import parse_wheel_filename

from ..model.errors import ConfigError


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Platform:
    """One linux platform: its name (``--platform``), machine, and installer spellings."""

    name: str  # "linux-x86_64", "linux-aarch64"
    machine: str  # platform.machine() there: "x86_64", "aarch64"
    manylinux: str  # the newest glibc our pinned wheels need: sglang 0.5.11's manylinux_2_34
    devices: str  # what runs there, for messages

    @property
    def uv_platform(self) -> str:
        """uv's ``--python-platform`` (a cross-platform resolve and install)."""
        return f"{self.machine}-{self.manylinux}"

    def accepts(self, filename: str) -> bool:
        """Whether the wheel ``filename`` installs here (a pure wheel everywhere; a linux
        wheel of this machine; never another machine's or OS's)."""
        _, _, _, tags = parse_wheel_filename(filename)
        return any(t.platform == "any" or (t.platform.endswith("_" + self.machine)
                   and t.platform.startswith(("manylinux", "linux"))) for t in tags)


LINUX_X86_64 = Platform(name="linux-x86_64", machine="x86_64", manylinux="manylinux_2_34",
                        devices="SM120 (RTX PRO 6000 Blackwell) workstations and servers")
LINUX_AARCH64 = Platform(name="linux-aarch64", machine="aarch64", manylinux="manylinux_2_34",
                         devices="DGX Spark (GB10, SM121; Grace CPU)")
PLATFORMS = {p.name: p for p in (LINUX_X86_64, LINUX_AARCH64)}

# Set for a check run by a platform's interpreter: that interpreter's argv prefix (shlex), for
# a check that starts a child of it (under emulation ``sys.executable`` alone does not run).
INTERPRETER_ENV = "FP4GRAPH_INTERPRETER"


def platform_named(name: str) -> Platform:
    """The platform ``name`` (``linux-x86_64`` or ``linux-aarch64``)."""
    if name not in PLATFORMS:
        raise ConfigError(f"unknown platform {name!r}: one of {', '.join(PLATFORMS)}")
    return PLATFORMS[name]


def host_platform() -> Platform:
    """The platform this interpreter runs on (linux-x86_64 when it is neither)."""
    machine = _platform.machine()
    return next((p for p in PLATFORMS.values() if p.machine == machine), LINUX_X86_64)
