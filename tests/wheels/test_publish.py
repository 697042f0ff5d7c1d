"""Publish to a real pypiserver on 127.0.0.1, then install into a clean venv."""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from fp4graph.model.config import Settings
from fp4graph.model.errors import Fp4graphError, PublishError
from fp4graph.wheels import build, publish

from .conftest import STACK, make_checkout

pytestmark = pytest.mark.slow
USER, PASSWORD = "fleet", "s3cret-for-tests"
# The fixture catalog (fixtures/patches/stacks.toml) pins both artifacts at revision 1.
FI = "flashinfer_python-0.6.3+fp4graph.1-py3-none-any.whl"
# pip must see nothing but the index under test.
ISOLATED_PIP = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_cache: pathlib.Path) -> Settings:
    settings = make_checkout(tmp_path_factory.mktemp("publish") / "repo", shared_cache)
    build.build(settings, [STACK])
    return settings


@pytest.fixture
def pypiserver(tmp_path: pathlib.Path) -> Iterator[str]:
    """pypiserver with auth on every action and no fallback to PyPI."""
    from passlib.apache import HtpasswdFile

    htpasswd = HtpasswdFile(str(tmp_path / "htpasswd"), new=True)
    htpasswd.set_password(USER, PASSWORD)
    htpasswd.save()
    packages = tmp_path / "packages"
    packages.mkdir()
    port = free_port()
    cmd = [
        sys.executable, "-m", "pypiserver", "run", "-i", "127.0.0.1", "-p", str(port),
        "-a", "update,download,list", "-P", str(tmp_path / "htpasswd"),
        "--disable-fallback", str(packages),
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("pypiserver did not start")
        yield url
    finally:
        server.terminate()
        server.wait(10)


def venv_python(root: pathlib.Path) -> pathlib.Path:
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    return root / "bin" / "python"


def test_publish_then_install_into_clean_venv(
    built: Settings, pypiserver: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TWINE_USERNAME", USER)
    monkeypatch.setenv("TWINE_PASSWORD", PASSWORD)
    uploaded = publish.publish(built.wheels_dir, pypiserver)
    assert FI in uploaded

    python = venv_python(tmp_path / "venv")
    index = pypiserver.replace("http://", f"http://{USER}:{PASSWORD}@") + "simple/"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--index-url", index,
         "flashinfer-python==0.6.3+fp4graph.1"],
        check=True, env={**os.environ, **ISOLATED_PIP}, capture_output=True,
    )
    probe = (
        "import importlib.metadata as m, importlib.util as u, pathlib;"
        "print(m.version('flashinfer-python'));"
        "print(pathlib.Path(u.find_spec('flashinfer').origin).read_text())"
    )
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True).stdout
    assert out.splitlines()[0] == "0.6.3+fp4graph.1"
    assert 'FP4GRAPH_FIXTURE = "applied"' in out


def test_republish_is_refused(
    built: Settings, pypiserver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TWINE_USERNAME", USER)
    monkeypatch.setenv("TWINE_PASSWORD", PASSWORD)
    publish.publish(built.wheels_dir, pypiserver)
    with pytest.raises(PublishError, match=rf"already has .*{FI.replace('+', '[+]')}.*never overwritten"):
        publish.publish(built.wheels_dir, pypiserver)


def test_wrong_credentials_fail_clearly(built: Settings, pypiserver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_USERNAME", USER)
    monkeypatch.setenv("TWINE_PASSWORD", "wrong")
    with pytest.raises(Fp4graphError, match="401|403|Unauthorized|Forbidden"):
        publish.publish(built.wheels_dir, pypiserver)


def test_static_index_serves_pip(built: Settings, tmp_path: pathlib.Path) -> None:
    """wheels/ itself, served by any web server, is a working PEP 503 index."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(built.wheels_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--index-url", index,
             "-d", str(tmp_path / "dl"), "flashinfer-python==0.6.3+fp4graph.1", "sglang==0.5.9+fp4graph.1"],
            check=True, env={**os.environ, **ISOLATED_PIP}, capture_output=True,
        )
    finally:
        server.shutdown()
    got = sorted(p.name for p in (tmp_path / "dl").iterdir())
    assert got == [FI, "sglang-0.5.9+fp4graph.1-py3-none-any.whl"]
    assert (tmp_path / "dl" / FI).read_bytes() == (built.wheels_dir / FI).read_bytes()


def test_nothing_to_publish(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PublishError, match="no wheels to publish; run `nox -s wheels` first"):
        publish.publish(tmp_path, "http://127.0.0.1:9/")
