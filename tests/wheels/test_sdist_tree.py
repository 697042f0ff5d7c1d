"""trees.materialize of a release pinned as an sdist only (flashinfer-python 0.4.1: PyPI has
no wheel): the tree is the wheel pip builds from the sha256-checked sdist.

The fixture sdist is a tiny flashinfer-python 9.7.0 with an in-tree PEP 517 backend (as
flashinfer's own ``build_backend.py``), written per case: one that builds a pure wheel, one
that fails, one that builds a compiled-tagged wheel.  It is served from a find-links
directory, so no index is needed.
"""

from __future__ import annotations

import hashlib
import io
import pathlib
import tarfile

import pytest

from fp4graph.model.config import Settings
from fp4graph.model.errors import BuildError, ConfigError, HashMismatchError
from fp4graph.wheels import trees

VERSION = "9.7.0"
SDIST = f"flashinfer_python-{VERSION}.tar.gz"
INIT = '__version__ = "9.7.0"\n'
# The in-tree backend: build_wheel writes flashinfer/__init__.py, METADATA, WHEEL and RECORD
# under TAG; FAIL makes it raise.
BACKEND = '''
import base64, hashlib, os, zipfile

TAG, FAIL = {tag!r}, {fail!r}
DIST = "flashinfer_python-9.7.0"


def _digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if FAIL:
        raise RuntimeError("fixture backend: cannot build " + DIST)
    with open("flashinfer/__init__.py", "rb") as f:
        files = {{"flashinfer/__init__.py": f.read()}}
    info = DIST + ".dist-info"
    files[info + "/METADATA"] = b"Metadata-Version: 2.1\\nName: flashinfer-python\\nVersion: 9.7.0\\n"
    files[info + "/WHEEL"] = ("Wheel-Version: 1.0\\nGenerator: fixture\\nRoot-Is-Purelib: true\\nTag: "
                              + TAG + "\\n").encode()
    record = "".join(f"{{name}},{{_digest(data)}},{{len(data)}}\\n" for name, data in files.items())
    files[info + "/RECORD"] = (record + info + "/RECORD,,\\n").encode()
    name = DIST + "-" + TAG + ".whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return name


def build_sdist(sdist_directory, config_settings=None):
    raise NotImplementedError
'''
PYPROJECT = """[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]
"""


def _sdist(root: pathlib.Path, *, tag: str = "py3-none-any", fail: bool = False) -> pathlib.Path:
    members = {"pyproject.toml": PYPROJECT, "backend.py": BACKEND.format(tag=tag, fail=fail),
               "flashinfer/__init__.py": INIT,
               "PKG-INFO": f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {VERSION}\n"}
    root.mkdir(parents=True, exist_ok=True)
    path = root / SDIST
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"flashinfer_python-{VERSION}/{name}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


def _settings(tmp_path: pathlib.Path, sdist: pathlib.Path, sha256: str | None = None) -> Settings:
    """A checkout whose stacks.toml pins only ``sdist`` (``sha256``: default its own)."""
    digest = sha256 or hashlib.sha256(sdist.read_bytes()).hexdigest()
    repo = tmp_path / "repo"
    (repo / "patches").mkdir(parents=True)
    (repo / "patches" / "stacks.toml").write_text(
        f'[[artifact]]\nproject = "flashinfer-python"\nversion = "{VERSION}"\nrevision = 1\nfiles = []\n'
        f'sdist = {{ filename = "{SDIST}", sha256 = "{digest}" }}\n'
    )
    return Settings(repo=repo, cache_dir=tmp_path / "cache", find_links=(sdist.parent,))


def _trees(settings: Settings) -> list[pathlib.Path]:
    return sorted((settings.cache_dir / "trees").glob("*")) if (settings.cache_dir / "trees").exists() else []


def test_the_tree_is_the_wheel_built_from_the_sdist(tmp_path: pathlib.Path) -> None:
    settings = _settings(tmp_path, _sdist(tmp_path / "dist"))
    tree = trees.materialize(settings, "flashinfer-python", VERSION, patched=False)
    assert (tree / "flashinfer" / "__init__.py").read_text() == INIT
    assert sorted(p.name for p in tree.iterdir()) == ["flashinfer", f"flashinfer_python-{VERSION}.dist-info"]
    assert tree.name.startswith(f"{SDIST}-") and tree.name.endswith("-built-pristine")
    # cached by the sdist's hash: the second call builds nothing
    (tmp_path / "dist" / SDIST).unlink()
    assert trees.materialize(settings, "flashinfer-python", VERSION, patched=False) == tree
    with pytest.raises(ConfigError, match=rf"flashinfer-python=={VERSION} pins only an sdist \({SDIST}\): "
                       "there is no patched tree"):
        trees.materialize(settings, "flashinfer-python", VERSION, patched=True)


def test_an_sdist_whose_hash_is_not_the_pin_is_refused(tmp_path: pathlib.Path) -> None:
    settings = _settings(tmp_path, _sdist(tmp_path / "dist"), sha256="0" * 64)
    with pytest.raises(HashMismatchError, match=rf"sha256 mismatch for {SDIST}: expected 0{{64}}, got [0-9a-f]{{64}}"):
        trees.materialize(settings, "flashinfer-python", VERSION, patched=False)
    assert _trees(settings) == []


@pytest.mark.parametrize(
    ("backend", "match"),
    [
        pytest.param({"fail": True}, rf"(?s){SDIST}: pip could not build a wheel of flashinfer-python=={VERSION} "
                     r"from its sdist \(exit 1; .*fixture backend: cannot build flashinfer_python-9.7.0",
                     id="backend-fails"),
        pytest.param({"tag": "cp311-cp311-linux_x86_64"},
                     rf"built flashinfer_python-{VERSION}-cp311-cp311-linux_x86_64.whl, not a pure "
                     r"\(py3-none-any\) wheel", id="compiled-wheel"),
    ],
)
def test_a_failed_build_names_the_sdist_and_leaves_no_tree(tmp_path: pathlib.Path, backend: dict[str, object],
                                                           match: str) -> None:
    settings = _settings(tmp_path, _sdist(tmp_path / "dist", **backend))  # type: ignore[arg-type]
    with pytest.raises(BuildError, match=match):
        trees.materialize(settings, "flashinfer-python", VERSION, patched=False)
    assert _trees(settings) == []

