"""sgl_kernel_ops without the network: the pin read from an sglang tree, the committed
records and the error that names a missing one."""

from __future__ import annotations

import json
import pathlib

import pytest

from harness.models import sgl_kernel_ops


def _tree(root: pathlib.Path, requires: str) -> pathlib.Path:
    info = root / "sglang-9.9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n{requires}")
    return root


@pytest.mark.parametrize(("requires", "pin"), [
    ("Requires-Dist: sgl_kernel==0.3.21\n", ("sgl-kernel", "0.3.21")),
    ('Requires-Dist: sglang-kernel==0.4.2; extra == "srt"\n', ("sglang-kernel", "0.4.2")),
], ids=["sgl_kernel", "sglang-kernel-with-marker"])
def test_kernel_requirement_reads_the_pin(tmp_path: pathlib.Path, requires: str, pin: tuple[str, str]) -> None:
    assert sgl_kernel_ops.kernel_requirement(_tree(tmp_path, requires)) == pin


def test_kernel_requirement_without_a_pin_names_the_metadata(tmp_path: pathlib.Path) -> None:
    tree = _tree(tmp_path, "Requires-Dist: sgl-kernel>=0.3\n")
    with pytest.raises(sgl_kernel_ops.SglKernelError, match=r"sglang-9\.9\.9\.dist-info/METADATA: no sgl-kernel"):
        sgl_kernel_ops.kernel_requirement(tree)


def test_missing_record_names_the_file_and_a_command_that_exists() -> None:
    with pytest.raises(sgl_kernel_ops.SglKernelError) as raised:
        sgl_kernel_ops.load_record("sgl_kernel", "0.0.0")
    message = str(raised.value)
    assert message.startswith("tests/harness/models/data/sgl-kernel-0.0.0.json does not exist"), message
    assert f"`{sgl_kernel_ops.GENERATE} sgl_kernel==0.0.0`" in message, message
    script = sgl_kernel_ops.GENERATE.split()[1]
    assert (sgl_kernel_ops.REPO / script).is_file(), script


def test_each_committed_record_is_named_for_its_wheel_and_says_how_to_regenerate_it() -> None:
    records = sorted(sgl_kernel_ops.DATA.glob("*.json"))
    assert records
    for path in records:
        record = json.loads(path.read_text())
        pins = [f"{c['project']}=={c['version']}" for c in record.get("companions", [])]
        assert sgl_kernel_ops.record_path(record["project"], record["version"], pins) == path
        companions = "".join(f" --with {c}" for c in pins)
        assert record["generated_by"] == (
            f"{sgl_kernel_ops.GENERATE} {record['project']}=={record['version']}{companions}")
        assert sgl_kernel_ops.load_record(record["project"], record["version"], pins) == record


def test_a_record_without_the_companion_sglang_pins_says_how_to_regenerate_it(tmp_path: pathlib.Path) -> None:
    """sglang 0.5.12+ pin DeepGEMM as its own wheel: a record without it is refused by name."""
    tree = _tree(tmp_path, "Requires-Dist: sglang-kernel==0.4.2\nRequires-Dist: sgl-deep-gemm==0.1.0\n")
    assert sgl_kernel_ops.companion_requirements(tree) == ["sgl-deep-gemm==0.1.0"]
    with pytest.raises(sgl_kernel_ops.SglKernelError,
                       match=r"sglang-kernel-0\.4\.2\+sgl-deep-gemm-0\.1\.0\.json does not exist.*"
                             r"--with sgl-deep-gemm==0\.1\.0`"):
        sgl_kernel_ops.check_companions("sglang-kernel", "0.4.2", tree)
    sgl_kernel_ops.check_companions("sglang-kernel", "0.4.2.post2", tree)


def test_a_release_sharing_the_kernel_with_another_companion_gets_its_own_record(tmp_path: pathlib.Path) -> None:
    """sglang 0.5.14 and 0.5.15 pin sglang-kernel 0.4.4 with sgl-deep-gemm 0.1.3 and 0.1.4: the
    record is keyed by the companion too, and the missing one is named with its command."""
    base = sgl_kernel_ops.record_path("sglang-kernel", "0.4.4", ["sgl-deep-gemm==0.1.3"])
    assert base.name == "sglang-kernel-0.4.4.json"
    other = sgl_kernel_ops.record_path("sglang-kernel", "0.4.4", ["sgl-deep-gemm==0.0.1"])
    assert other.name == "sglang-kernel-0.4.4+sgl-deep-gemm-0.0.1.json"
    tree = _tree(tmp_path, "Requires-Dist: sglang-kernel==0.4.4\nRequires-Dist: sgl-deep-gemm==0.0.1\n")
    with pytest.raises(sgl_kernel_ops.SglKernelError,
                       match=r"sglang-kernel-0\.4\.4\+sgl-deep-gemm-0\.0\.1\.json does not exist.*"
                             r"generate sglang-kernel==0\.4\.4 --with sgl-deep-gemm==0\.0\.1`"):
        sgl_kernel_ops.check_companions("sglang-kernel", "0.4.4", tree)
