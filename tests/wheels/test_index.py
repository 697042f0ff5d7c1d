from __future__ import annotations

import pathlib
import zipfile

import pytest

from fp4graph.model.errors import BuildError
from fp4graph.wheels import index


def test_a_wheel_without_metadata_is_named(tmp_path: pathlib.Path) -> None:
    wheel = tmp_path / "broken-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("broken/__init__.py", "")
    with pytest.raises(BuildError, match=r"broken-1\.0-py3-none-any\.whl: expected one "
                       r"\.dist-info/METADATA, found none"):
        index.write_metadata_files(tmp_path)
