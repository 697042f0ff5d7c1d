"""What a kernels build accepts (archs, kinds, stacks) and the version its wheel carries."""

from __future__ import annotations

import pathlib

import pytest
from packaging.version import Version

from fp4graph import cli
from fp4graph.model import config
from fp4graph.model.stacks import load
from fp4graph.wheels import kernels
from fp4graph.wheels.kernels import targets, toolchain
from fp4graph.wheels.kernels.targets import Arch, KernelsError

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "expected"), [("12.0a", Arch(12, 0)), (" 12.1a", Arch(12, 1))])
def test_sm12x_archs_parse(text: str, expected: Arch) -> None:
    assert Arch.parse(text) == expected
    assert str(expected) in ("12.0a", "12.1a") and expected.sm in ("sm120a", "sm121a")


@pytest.mark.parametrize("text", ["9.0a", "10.0a", "12.0", "12.0f", "sm_120a", "120a", "12.2a", ""])
def test_other_archs_are_refused_naming_the_supported_ones(text: str) -> None:
    with pytest.raises(KernelsError, match=r"not an SM12x target .* 12\.0a or 12\.1a"):
        Arch.parse(text)


def test_arch_lists_are_sorted_without_repeats() -> None:
    assert targets.parse_archs(["12.1a,12.0a", "12.0a"]) == (Arch(12, 0), Arch(12, 1))
    with pytest.raises(KernelsError, match="no arch given"):
        targets.parse_archs([","])


def test_kinds_keep_the_warmup_order_and_refuse_unknown_ones() -> None:
    assert targets.parse_kinds(["moe_cutlass,quantization", "probe"]) == ("quantization", "moe_cutlass", "probe")
    with pytest.raises(KernelsError, match=r"unknown module kind\(s\) 'fused_moe'.*quantization, gemm_cutlass"):
        targets.parse_kinds(["quantization,fused_moe"])


def test_the_wheel_version_names_the_release_toolkit_revision_and_arch() -> None:
    version = targets.wheel_version(Version("0.6.3"), 4, "13.0", Arch(12, 1), ["quantization", "gemm_cutlass"])
    assert str(version) == "0.6.3+cu130.fp4graph.4.sm121a"
    assert str(targets.wheel_version(Version("0.6.3"), 4, "13.0", Arch(12, 0), ["probe"])) == \
        "0.6.3+cu130.fp4graph.4.sm120a.probe"
    # The series' kernel-package-version check compares the release (public) versions.
    assert version.public == Version("0.6.3+fp4graph.4").public


def test_every_sglang_stack_has_default_kinds_and_the_074_stack_is_refused() -> None:
    settings = config.Settings.from_env(REPO)
    catalog = load(settings.stacks_file)
    with_sglang = catalog.sglang_stacks()
    for stack in with_sglang:
        assert targets.default_kinds(catalog.versions(stack)["sglang"], stack.name), stack.name
        assert kernels.requirements(settings, stack.name, ("probe",))[0].startswith("apache-tvm-ffi==")
    refused = []
    for stack in [s for s in catalog.stacks if s not in with_sglang]:
        if Version(catalog.versions(stack)["flashinfer-python"]) >= Version("0.7"):
            with pytest.raises(KernelsError, match="provider packages"):
                kernels.requirements(settings, stack.name)
            refused.append(stack.name)
        else:  # a flashinfer-only 0.6.x stack: builds, with the modules the user names (no sglang defaults)
            assert kernels.requirements(settings, stack.name, ("probe",))[0].startswith("apache-tvm-ffi==")
    assert "flashinfer-0.7.4" in refused, refused


def test_a_stack_without_defaults_asks_for_modules() -> None:
    with pytest.raises(KernelsError, match="name the modules with --modules"):
        targets.default_kinds("0.5.99", "sglang-0.5.99")


def test_no_nvcc_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", tmp_path / "no-toolkit")
    with pytest.raises(KernelsError, match=r"no nvcc: not on PATH, no CUDA_HOME.*nvcc >= 12\.8"):
        toolchain.find_cuda_home({"PATH": str(tmp_path)})
    with pytest.raises(KernelsError, match=r"CUDA_HOME=.*: no bin/nvcc there"):
        toolchain.find_cuda_home({"CUDA_HOME": str(tmp_path)})


def test_an_nvcc_older_than_sm12x_needs_is_refused(tmp_path: pathlib.Path) -> None:
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    nvcc.chmod(0o755)
    assert toolchain.find_cuda_home({"CUDA_HOME": str(tmp_path)}) == tmp_path
    with pytest.raises(KernelsError, match=r"is CUDA 12\.4; SM12x kernels need nvcc >= 12\.8"):
        toolchain.nvcc_version(tmp_path)


@pytest.mark.parametrize(("argv", "error"), [
    (["--arch", "9.0a"], "KernelsError: arch '9.0a' is not an SM12x target"),
    (["--modules", "quantization,fused_moe"], "KernelsError: unknown module kind(s) 'fused_moe'"),
    (["flashinfer-0.7.4"], "KernelsError: stack 'flashinfer-0.7.4': flashinfer-python 0.7.4 loads prebuilt"),
])
def test_the_command_says_what_is_wrong(argv: list[str], error: str, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    assert cli.main(["kernels", *argv]) == 2
    assert capsys.readouterr().err.startswith(error)
