"""Fixture upstream releases and a PEP 691 index serving them on 127.0.0.1.

``make_release`` writes a wheel (with METADATA, WHEEL and RECORD, as ``wheel`` makes them)
and an sdist of a tiny release of a project fp4graph knows, from upstream-repo paths; the
``Index`` serves ``/simple/<project>/`` as PEP 691 JSON (PEP 503 HTML when asked) with each
file's sha256, and the files.  Versions 9.x are used so nothing collides with real
releases in a shared cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.server
import io
import json
import pathlib
import tarfile
import threading
from collections.abc import Iterator, Mapping, Sequence

from packaging.utils import canonicalize_name
from wheel.wheelfile import WheelFile

from fp4graph.model import projects


@dataclasses.dataclass(frozen=True)
class Release:
    project: str
    version: str
    wheels: tuple[pathlib.Path, ...]
    sdist: pathlib.Path | None

    @property
    def wheel(self) -> pathlib.Path:
        return self.wheels[0]


def _dist(project: str) -> str:
    return canonicalize_name(project).replace("-", "_")


def make_release(
    root: pathlib.Path,
    project: str,
    version: str,
    files: Mapping[str, str],
    *,
    requires: Sequence[str] = (),
    tags: Sequence[str] = ("py3-none-any",),
    sdist: bool = True,
) -> Release:
    """A wheel and an sdist of ``project`` ``version`` holding ``files`` (upstream-repo paths:
    the wheel takes those under the project's source prefix, the sdist all of them)."""
    root.mkdir(parents=True, exist_ok=True)
    dist = _dist(project)
    layout = projects.get(project).layout
    metadata = "".join([
        "Metadata-Version: 2.1\n", f"Name: {project}\n", f"Version: {version}\n",
        *(f"Requires-Dist: {r}\n" for r in requires),
    ])
    wheels = []
    for tag in tags:
        wheel = root / f"{dist}-{version}-{tag}.whl"
        with WheelFile(wheel, "w") as wf:
            for path, text in sorted(files.items()):
                inside = layout.wheel_path(path)
                if inside is not None and not inside.startswith(("test/", "tests/")):
                    wf.writestr(inside, text)
            info = f"{dist}-{version}.dist-info"
            wf.writestr(f"{info}/METADATA", metadata)
            wf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: fp4graph-tests\n"
                        f"Root-Is-Purelib: {str(tag.endswith('-any')).lower()}\nTag: {tag}\n")
        wheels.append(wheel)
    if not sdist:
        return Release(project=project, version=version, wheels=tuple(wheels), sdist=None)
    archive = root / f"{dist}-{version}.tar.gz"
    top = f"{dist}-{version}"
    with tarfile.open(archive, "w:gz") as tar:
        members = {f"{top}/PKG-INFO": metadata}
        for path, text in files.items():
            # sglang's sdist roots at its python/ directory, as upstream's does.
            inside = layout.wheel_path(path) if layout.source_prefix else path
            if inside is not None:
                members[f"{top}/{inside}"] = text
        for name, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return Release(project=project, version=version, wheels=tuple(wheels), sdist=archive)


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Index:
    """The releases served at ``url`` (``.../simple/``), JSON by content negotiation."""

    def __init__(self, releases: Sequence[Release], *, json_pages: bool = True,
                 yanked: Mapping[str, str] | None = None) -> None:
        self.json_pages = json_pages
        self.yanked = dict(yanked or {})
        self.files: dict[str, pathlib.Path] = {}
        self.by_project: dict[str, list[pathlib.Path]] = {}
        for r in releases:
            for path in (*r.wheels, *([r.sdist] if r.sdist else [])):
                self.files[path.name] = path
                self.by_project.setdefault(canonicalize_name(r.project), []).append(path)
        self.requests: list[tuple[str, str]] = []  # (path, Accept)
        self.url = ""

    def _page(self, project: str, json_wanted: bool) -> tuple[bytes, str]:
        paths = self.by_project.get(project, [])
        if json_wanted:
            body = {"meta": {"api-version": "1.1"}, "name": project, "files": [
                {"filename": p.name, "url": f"../../files/{p.name}",
                 "hashes": {"sha256": sha256(p)}, "yanked": self.yanked.get(p.name, False)}
                for p in paths
            ]}
            return json.dumps(body).encode(), "application/vnd.pypi.simple.v1+json"
        links = "".join(f'<a href="../../files/{p.name}#sha256={sha256(p)}">{p.name}</a>\n'
                        for p in paths)
        return f"<html><body>\n{links}</body></html>\n".encode(), "text/html"

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                accept = self.headers.get("Accept", "")
                index.requests.append((self.path, accept))
                parts = [p for p in self.path.split("/") if p]
                if len(parts) == 2 and parts[0] == "simple" and parts[1] in index.by_project:
                    body, kind = index._page(parts[1], index.json_pages and "json" in accept)
                elif len(parts) == 2 and parts[0] == "files" and parts[1] in index.files:
                    body, kind = index.files[parts[1]].read_bytes(), "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            self.url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
            yield self.url
        finally:
            server.shutdown()
            server.server_close()
