"""Upload the built wheels to a package index with twine, never overwriting a file."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Sequence

from packaging.utils import canonicalize_name, parse_wheel_filename

from ..model.errors import PublishError
from ..model.log import log
from .fetch import list_files


def default_simple_url(repository_url: str) -> str:
    """pypiserver serves uploads at ``/`` and the simple index at ``/simple/``."""
    return repository_url.rstrip("/") + "/simple/"


def _credentials() -> tuple[str, str] | None:
    """twine's own environment variables, to read an index that requires auth."""
    user, password = os.environ.get("TWINE_USERNAME"), os.environ.get("TWINE_PASSWORD")
    return (user, password) if user and password else None


def published_already(wheels: list[pathlib.Path], simple_url: str) -> list[str]:
    """The names of ``wheels`` that the index already has."""
    present = []
    for wheel in wheels:
        name, *_ = parse_wheel_filename(wheel.name)
        if wheel.name in list_files(simple_url, str(name), _credentials()):
            present.append(wheel.name)
    return present


def publish(
    wheels_dir: pathlib.Path, repository_url: str, simple_url: str | None = None, projects: Sequence[str] = ()
) -> list[str]:
    """Upload every wheel in ``wheels_dir`` (only those of ``projects``, when given: e.g. the
    flashinfer-jit-cache wheels of a later ``nox -s kernels``); refuse if any is on the
    index already."""
    wanted = {canonicalize_name(p) for p in projects}
    wheels = [w for w in sorted(wheels_dir.glob("*.whl"))
              if not wanted or canonicalize_name(parse_wheel_filename(w.name)[0]) in wanted]
    if not wheels and wanted:
        raise PublishError(f"{wheels_dir}: no wheels of {', '.join(sorted(wanted))} to publish; build them "
                           "first (`nox -s wheels`; flashinfer-jit-cache: `nox -s kernels`)")
    if not wheels:
        raise PublishError(f"{wheels_dir}: no wheels to publish; run `nox -s wheels` first")
    simple = simple_url or default_simple_url(repository_url)
    present = published_already(wheels, simple)
    if present:
        raise PublishError(
            f"{simple} already has {', '.join(present)}; a published version is never "
            "overwritten: bump the artifact's revision in patches/stacks.toml and rebuild"
        )
    cmd = [
        sys.executable, "-m", "twine", "upload", "--non-interactive",
        "--repository-url", repository_url, *map(str, wheels),
    ]
    log(f"publish {subprocess.list2cmdline(cmd)}")
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise PublishError(
            f"twine upload to {repository_url} failed (exit {result.returncode}):\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return [w.name for w in wheels]
