"""The model tables of the whole-model harness agree with fp4graph.model.families:
``families`` (the test-size rows and their variants) and ``full_size`` (the published
configs); what reads ``expected``'s per-version tables names the table a release lacks."""

from __future__ import annotations

import types

import pytest

from fp4graph.model.families import FAMILIES, MOE_ROWS_ALIGNMENT, by_architecture
from harness import tables
from harness.models import expected, families, full_size


def test_every_integration_family_is_a_row_of_its_architecture_and_kind() -> None:
    for name, family in FAMILIES.items():
        row = families.row(name)
        assert row["name"] == name
        assert row["architecture"] == family.architecture, name
        assert row["kind"] == ("moe" if family.moe else "dense"), name
        assert row["config"]["architectures"] == [family.architecture], name


def test_variant_rows_are_of_a_known_family() -> None:
    for name in families.names():
        assert by_architecture(families.ROWS[name]["architecture"]) is not None, name
    assert set(families.names("moe")) | set(families.names("dense")) == set(families.names())


def test_nsa_rows_are_the_nsa_families_and_enforce_piecewise() -> None:
    assert set(families.NSA_FAMILIES) == {n for n, f in FAMILIES.items() if f.nsa}
    for name in families.NSA_FAMILIES:
        assert families.ROWS[name]["server_args"] == {"enforce_piecewise_cuda_graph": True}, name


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_tensor_parallel_row_shards_its_experts_in_whole_rows(tp: int) -> None:
    """Each rank's w13 (2 x its share of moe_intermediate_size) fills the alignment."""
    for name in families.names("moe"):
        config = families.row(name, tp=tp)["config"]
        if "moe_intermediate_size" in config:
            assert 2 * config["moe_intermediate_size"] // tp >= MOE_ROWS_ALIGNMENT, (name, config)


def test_row_is_a_copy() -> None:
    row = families.row("llama")
    row["config"]["hidden_size"] = -1
    assert families.ROWS["llama"]["config"]["hidden_size"] != -1
    assert families.row("deepseek-v3", tp=1)["config"] == families.ROWS["deepseek-v3"]["config"]


@pytest.mark.parametrize("name", sorted(full_size.PUBLISHED))
def test_published_config_is_its_family(name: str) -> None:
    published = full_size.PUBLISHED[name]
    family = FAMILIES[published.family]
    assert published.family == name
    assert published.config["architectures"] == [family.architecture]
    assert published.config["model_type"] == family.model_type
    row = full_size.row(name)
    assert (row["name"], row["architecture"]) == (f"{name}-full", family.architecture)
    assert row["kind"] == ("moe" if family.moe else "dense")


@pytest.mark.parametrize("name", sorted(full_size.PUBLISHED))
def test_full_size_cut_keeps_every_published_dimension(name: str) -> None:
    """The cut replaces layer counts only; every other field is the model card's."""
    published = full_size.PUBLISHED[name]
    config = full_size.config(name)
    assert set(published.cut) <= set(published.config), published.cut
    for key, value in published.config.items():
        assert config[key] == published.cut.get(key, value), key
    assert config["quantization_config"]["quant_algo"] == "NVFP4"


@pytest.mark.parametrize("name", sorted(full_size.PUBLISHED))
def test_full_size_shards_evenly_at_its_tp(name: str) -> None:
    """What ``per_rank`` divides splits ``full_size.TP`` ways without a remainder."""
    c = full_size.PUBLISHED[name].config
    for key in ("num_attention_heads", "intermediate_size", "moe_intermediate_size"):
        if key in c:
            assert c[key] % full_size.TP == 0, key
    shares = full_size.per_rank(name)
    assert shares["attention_heads"] * full_size.TP == c["num_attention_heads"]


def test_nsa_table_has_a_row_for_every_stack_and_none_only_where_nsa_does_not_run() -> None:
    for version, backends in expected.NSA_BACKENDS_ON_SM120.items():
        assert (backends is None) == (version not in families.NSA_PIECEWISE), version


def test_the_lookups_of_expected_fail_on_a_new_release_by_name() -> None:
    """What reads each table of ``expected`` (tests/harness/test_release_tables.py holds the
    tables themselves to the catalog and to a fake stack) names the table it lacks a row in."""
    fake = tables.FAKE_SGLANG
    stack = types.SimpleNamespace(sglang=fake)
    report = {"nsa": {"backend": "NativeSparseAttnBackend", "kv_pool": "NSATokenToKVPool",
                      "kv_cache_dtype": "fp8_e4m3", "page_size": 64}}
    with pytest.raises(tables.MissingRow, match=f"{expected.NSA_TABLE.name} has no row for sglang {fake}"):
        expected.assert_nsa(stack, report)  # type: ignore[arg-type]
    with pytest.raises(tables.MissingRow, match=f"{expected.EXPECT_TABLE.name} has no row for sglang {fake}"):
        expected.expect(fake, "llama", families.ROWS["llama"])
    with pytest.raises(tables.MissingRow, match=f"{expected.PRISTINE_TABLE.name} has no row for sglang {fake}.*measure it"):
        expected.pristine_release(fake)
    assert expected.expect("0.5.12.post1", "deepseek-v3.2", {"expect": {"a": 1}}) == {
        "a": 1, "num_fused_shared_experts": 0}


def test_every_target_simulates_the_cuda_of_the_torch_it_pins() -> None:
    """The simulated torch.version.cuda of a target follows its torch (the stack's pin in
    stacks.toml, the pristine release's row): 13.0 for 2.11.0+ and on SM121, 12.8 before;
    a target without a pin is simulated only when told which CUDA."""
    from harness.models import simulation

    targets = simulation.sglang_stacks() + simulation.pristine_releases()
    assert all(t.torch for t in targets), [t.name for t in targets if not t.torch]
    by_name = {t.name: t for t in targets}
    assert by_name["sglang-0.5.10.post1"].torch == "2.9.1" and by_name["sglang-0.5.12"].torch == "2.11.0"
    for name, sm120 in (("sglang-0.5.9", "12.8"), ("sglang-0.5.11", "13.0"), ("sglang-0.5.12.post1", "13.0"),
                        ("sglang-0.5.5", "12.8"), ("sglang-0.5.16", "13.0"), ("sglang-0.5.18", "13.0")):
        assert simulation.simulated_cuda(by_name[name], "sm120") == sm120, name
        assert simulation.simulated_cuda(by_name[name], "sm121") == "13.0", name
    assert simulation.simulated_cuda(by_name["sglang-0.5.9"], "sm120", "13.0") == "13.0"
    bare = simulation.SglangStack("pristine-beside-ours", "0.5.16", "0.6.14")
    assert simulation.simulated_cuda(bare, "sm120", "13.0") == "13.0"
    with pytest.raises(ValueError, match="pristine-beside-ours: no torch pin"):
        simulation.simulated_cuda(bare, "sm120")
