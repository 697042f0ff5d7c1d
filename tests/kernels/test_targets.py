"""What a kernels build accepts (archs, kinds, stacks) and the version its wheel carries."""

from __future__ import annotations

import ast
import pathlib

import pytest
from packaging.version import Version

from fp4graph.model import config
from fp4graph.model.stacks import load
from fp4graph.wheels import kernels
from fp4graph.wheels.kernels import targets
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


def _warmup_table() -> dict[str, list[str]]:
    """LINEAR of tests/models/test_fp4_warmup_models.py: the kinds sglang's own code requests
    (checked there on a simulated SM120, for the stacks it lists)."""
    source = (REPO / "tests" / "models" / "test_fp4_warmup_models.py").read_text()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LINEAR" for t in node.targets):
            table: dict[str, list[str]] = ast.literal_eval(node.value)
            return table
    raise AssertionError("tests/models/test_fp4_warmup_models.py has no LINEAR table")


def test_default_kinds_are_what_the_warmup_requests() -> None:
    for sglang, kinds in _warmup_table().items():
        assert sorted(targets.DEFAULT_KINDS[sglang]) == sorted(kinds), sglang


def test_every_sglang_stack_has_default_kinds_and_the_074_stack_is_refused() -> None:
    settings = config.Settings.from_env(REPO)
    catalog = load(settings.stacks_file)
    for stack in catalog.stacks:
        projects = {catalog.artifacts[k].project: catalog.artifacts[k].version for k in stack.artifacts}
        if "sglang" in projects:
            assert targets.default_kinds(projects["sglang"], stack.name), stack.name
            assert kernels.requirements(settings, stack.name, ("probe",))[0].startswith("apache-tvm-ffi==")
        else:
            with pytest.raises(KernelsError, match="provider packages"):
                kernels.requirements(settings, stack.name)


def test_a_stack_without_defaults_asks_for_modules() -> None:
    with pytest.raises(KernelsError, match="name the modules with --modules"):
        targets.default_kinds("0.5.99", "sglang-0.5.99")
