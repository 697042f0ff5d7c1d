from __future__ import annotations

import dataclasses
import functools
import http.server
import pathlib
import shutil
import threading
from collections.abc import Iterator

import pytest

from fp4graph.model import files, stacks
from fp4graph.model.config import Settings
from fp4graph.model.errors import FetchError, HashMismatchError
from fp4graph.wheels import build, fetch

from .conftest import STACK, snapshot


def pinned(settings: Settings) -> stacks.ArtifactFile:
    return stacks.load(settings.stacks_file).artifact("flashinfer-python", "0.6.3").files[0]


@pytest.fixture
def upstream_wheel(checkout: Settings) -> pathlib.Path:
    """The genuine pinned wheel, from the shared cache."""
    return fetch.fetch(checkout, "flashinfer-python", pinned(checkout))


@pytest.fixture
def local_index(tmp_path: pathlib.Path, upstream_wheel: pathlib.Path) -> Iterator[str]:
    """A PEP 503 index on 127.0.0.1 serving the pinned wheel."""
    root = tmp_path / "index"
    (root / "simple" / "flashinfer-python").mkdir(parents=True)
    shutil.copy(upstream_wheel, root / upstream_wheel.name)
    (root / "simple" / "flashinfer-python" / "index.html").write_text(
        f'<html><body><a href="../../{upstream_wheel.name}#sha256=x">{upstream_wheel.name}</a></body></html>'
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()


def test_fetch_from_index_verifies_and_caches(isolated: Settings, local_index: str) -> None:
    settings = dataclasses.replace(isolated, index_url=local_index)
    path = fetch.fetch(settings, "flashinfer-python", pinned(settings))
    assert path.parent == settings.cache_dir / "artifacts"
    assert files.sha256_of(path) == pinned(settings).sha256
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no staging file left


def test_missing_file_on_index_is_named(isolated: Settings, local_index: str) -> None:
    settings = dataclasses.replace(isolated, index_url=local_index)
    other = stacks.ArtifactFile(filename="flashinfer_python-0.6.3-py3-none-any.whl.bak", sha256="0" * 64)
    with pytest.raises(FetchError, match=r"has no file flashinfer_python-0.6.3-py3-none-any.whl.bak"):
        fetch.fetch(settings, "flashinfer-python", other)


@pytest.fixture
def tampered_links(tmp_path: pathlib.Path, upstream_wheel: pathlib.Path) -> pathlib.Path:
    links = tmp_path / "links"
    links.mkdir()
    data = bytearray(upstream_wheel.read_bytes())
    data[-100] ^= 0xFF
    (links / upstream_wheel.name).write_bytes(bytes(data))
    return links


def test_tampered_download_is_refused_and_not_cached(isolated: Settings, tampered_links: pathlib.Path) -> None:
    settings = dataclasses.replace(isolated, find_links=(tampered_links,))
    expected = pinned(settings).sha256
    with pytest.raises(HashMismatchError) as info:
        fetch.fetch(settings, "flashinfer-python", pinned(settings))
    message = str(info.value)
    assert "flashinfer_python-0.6.3-py3-none-any.whl" in message
    assert f"expected {expected}" in message
    assert f"got {files.sha256_of(tampered_links / 'flashinfer_python-0.6.3-py3-none-any.whl')}" in message
    assert not (settings.cache_dir / "artifacts" / "flashinfer_python-0.6.3-py3-none-any.whl").exists()


def test_tampered_cache_is_detected_on_every_use(isolated: Settings, tampered_links: pathlib.Path) -> None:
    cache = isolated.cache_dir / "artifacts"
    cache.mkdir(parents=True)
    shutil.copy(tampered_links / "flashinfer_python-0.6.3-py3-none-any.whl", cache)
    with pytest.raises(HashMismatchError, match="sha256 mismatch"):
        fetch.fetch(isolated, "flashinfer-python", pinned(isolated))


def test_tampered_artifact_leaves_wheels_dir_as_it_was(
    checkout: Settings, isolated: Settings, tampered_links: pathlib.Path
) -> None:
    # sglang comes from the genuine file, flashinfer from the tampered one.
    sglang = stacks.load(checkout.stacks_file).artifact("sglang", "0.5.9").files[0]
    shutil.copy(fetch.fetch(checkout, "sglang", sglang), tampered_links)
    settings = dataclasses.replace(isolated, find_links=(tampered_links,))
    (settings.wheels_dir / "previous.whl").write_bytes(b"from an earlier build")
    before = snapshot(settings.wheels_dir)
    with pytest.raises(HashMismatchError, match="flashinfer_python-0.6.3-py3-none-any.whl"):
        build.build(settings, [STACK])
    assert snapshot(settings.wheels_dir) == before
    assert sorted(p.name for p in settings.repo.iterdir()) == ["patches", "wheels"]
