"""The fixture releases and the PEP 691 index the pin and rebase tests read."""

from __future__ import annotations

import json
import pathlib
import tarfile
import urllib.parse
import urllib.request

from packaging.utils import parse_wheel_filename
from wheel.wheelfile import WheelFile

from harness.releases import Index, make_release, sha256


def test_release_files_follow_the_projects_layout(tmp_path: pathlib.Path) -> None:
    files = {"python/sglang/srt/x.py": "X = 1\n", "test/registered/test_x.py": "", "docs/a.md": ""}
    release = make_release(tmp_path, "sglang", "9.1.0", files, requires=["flashinfer-python==9.0"],
                           tags=("cp311-cp311-linux_x86_64", "cp312-cp312-linux_x86_64"))
    assert [parse_wheel_filename(w.name)[3] for w in release.wheels] == [
        frozenset(parse_wheel_filename("a-1-cp311-cp311-linux_x86_64.whl")[3]),
        frozenset(parse_wheel_filename("a-1-cp312-cp312-linux_x86_64.whl")[3]),
    ]
    with WheelFile(release.wheel) as wf:  # a valid RECORD: WheelFile checks each member's hash
        names = set(wf.namelist())
        metadata = wf.read("sglang-9.1.0.dist-info/METADATA").decode()
    assert "sglang/srt/x.py" in names and not any(n.startswith(("test", "python/", "docs")) for n in names)
    assert "Requires-Dist: flashinfer-python==9.0" in metadata
    assert "Root-Is-Purelib: false" in WheelFile(release.wheel).read("sglang-9.1.0.dist-info/WHEEL").decode()
    assert release.sdist is not None
    with tarfile.open(release.sdist) as tar:  # sglang's sdist roots at python/, as upstream's
        assert sorted(tar.getnames()) == ["sglang-9.1.0/PKG-INFO", "sglang-9.1.0/sglang/srt/x.py"]


def _get(url: str, accept: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept})) as response:
        return response.headers["Content-Type"], response.read()


def test_index_serves_json_html_and_files(tmp_path: pathlib.Path) -> None:
    release = make_release(tmp_path, "flashinfer-python", "9.0.0", {"flashinfer/a.py": ""})
    assert release.sdist is not None
    index = Index([release], yanked={release.sdist.name: "broken"})
    with index.serve() as url:
        kind, body = _get(url + "flashinfer-python/", "application/vnd.pypi.simple.v1+json")
        page = json.loads(body)
        assert kind == "application/vnd.pypi.simple.v1+json"
        assert [(f["filename"], f["hashes"]["sha256"], f["yanked"]) for f in page["files"]] == [
            (release.wheel.name, sha256(release.wheel), False), (release.sdist.name, sha256(release.sdist), "broken"),
        ]
        kind, body = _get(url + "flashinfer-python/", "text/html")
        assert kind == "text/html" and f"#sha256={sha256(release.wheel)}" in body.decode()
        _, data = _get(urllib.parse.urljoin(url + "flashinfer-python/", page["files"][0]["url"]), "*/*")
        assert data == release.wheel.read_bytes()
    assert [path for path, _ in index.requests] == [
        "/simple/flashinfer-python/", "/simple/flashinfer-python/", f"/files/{release.wheel.name}",
    ]
