"""A static PEP 503 index (with PEP 658/714 metadata files) any web server can serve."""

from __future__ import annotations

import collections
import hashlib
import html
import pathlib
import urllib.parse
import zipfile

from packaging.utils import canonicalize_name, parse_wheel_filename

from ..model.errors import BuildError
from ..model.files import sha256_of

_PAGE = """<!DOCTYPE html>
<html>
  <head>
    <meta name="pypi:repository-version" content="1.1">
    <title>{title}</title>
  </head>
  <body>
    <h1>{title}</h1>
{links}
  </body>
</html>
"""


def core_metadata(wheel: pathlib.Path) -> bytes:
    """The METADATA file inside ``wheel``."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise BuildError(
                f"{wheel}: expected one .dist-info/METADATA, found {names or 'none'}; "
                "not a wheel the index can list"
            )
        return zf.read(names[0])


def _requires_python(metadata: bytes) -> str | None:
    for line in metadata.decode("utf-8", "replace").splitlines():
        if not line:
            break
        if line.startswith("Requires-Python:"):
            return line.partition(":")[2].strip()
    return None


def write_metadata_files(wheels_dir: pathlib.Path) -> None:
    """Write ``<wheel>.metadata`` beside each wheel (PEP 658)."""
    for wheel in sorted(wheels_dir.glob("*.whl")):
        (wheels_dir / f"{wheel.name}.metadata").write_bytes(core_metadata(wheel))


def write_index(wheels_dir: pathlib.Path) -> None:
    """Write ``simple/`` for the wheels (and their .metadata files) in ``wheels_dir``."""
    projects: dict[str, list[pathlib.Path]] = collections.defaultdict(list)
    for wheel in sorted(wheels_dir.glob("*.whl")):
        projects[canonicalize_name(parse_wheel_filename(wheel.name)[0])].append(wheel)

    simple = wheels_dir / "simple"
    simple.mkdir()
    root_links = "\n".join(
        f'    <a href="{html.escape(p)}/">{html.escape(p)}</a><br>' for p in sorted(projects)
    )
    (simple / "index.html").write_text(_PAGE.format(title="Simple index", links=root_links))
    for name, wheels in sorted(projects.items()):
        links = []
        for wheel in wheels:
            metadata = (wheels_dir / f"{wheel.name}.metadata").read_bytes()
            meta_hash = hashlib.sha256(metadata).hexdigest()
            attrs = [
                f'href="../../{urllib.parse.quote(wheel.name)}#sha256={sha256_of(wheel)}"',
                f'data-core-metadata="sha256={meta_hash}"',
                f'data-dist-info-metadata="sha256={meta_hash}"',
            ]
            requires = _requires_python(metadata)
            if requires:
                attrs.append(f'data-requires-python="{html.escape(requires)}"')
            links.append(f"    <a {' '.join(attrs)}>{html.escape(wheel.name)}</a><br>")
        page = simple / name / "index.html"
        page.parent.mkdir()
        page.write_text(_PAGE.format(title=f"Links for {name}", links="\n".join(links)))
