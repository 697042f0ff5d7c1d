"""Matrix selection: every cell by default, filters from the command line, clear errors."""

from __future__ import annotations

import pytest

from fp4graph.integration import matrix
from fp4graph.integration.matrix import Fusion, Selection, StartOrder
from fp4graph.model.errors import ConfigError
from fp4graph.model.families import FAMILIES, GLM5, LLAMA


def test_default_is_everything() -> None:
    cells = Selection().cells()
    per_family = {name: [c for c in cells if c.family.name == name] for name in FAMILIES}
    assert len(per_family["llama"]) == len(per_family["qwen3"]) == 2  # start orders
    assert len(per_family["qwen3-moe"]) == 4  # x MoE backends
    for name in ("deepseek-v3", "glm4-moe", "glm5", "deepseek-v3.2"):
        assert len(per_family[name]) == 8, name  # x shared-experts fusion
    assert len({c.id for c in cells}) == len(cells) == 40
    glm5 = [c.id for c in per_family["glm5"]]
    assert glm5[0] == "glm5/default/moe-auto/fusion-on"
    assert "glm5/no-cuda-graph/moe-flashinfer_cutlass/fusion-off" in glm5


def test_filters() -> None:
    cells = Selection(families=["glm5", "llama"], start_orders=[StartOrder.NO_CUDA_GRAPH],
                      fusions=[Fusion.OFF]).cells()
    # a filter restricts its own axis; llama has no fusion axis and keeps its cell
    assert [c.id for c in cells] == [
        "glm5/no-cuda-graph/moe-auto/fusion-off", "glm5/no-cuda-graph/moe-flashinfer_cutlass/fusion-off",
        "llama/no-cuda-graph",
    ]
    dense = Selection(families=["qwen3"], moe_backends=["flashinfer_cutlass"]).cells()
    assert [c.id for c in dense] == ["qwen3/default", "qwen3/no-cuda-graph"]
    assert [c.id for c in Selection(families=["llama"]).cells()] == ["llama/default", "llama/no-cuda-graph"]
    only = Selection(moe_backends=["flashinfer_cutlass"]).cells(only=GLM5)
    assert {c.moe_backend for c in only} == {"flashinfer_cutlass"} and len(only) == 4


@pytest.mark.parametrize(
    ("selection", "match"),
    [
        pytest.param(Selection(families=["gpt2"]), "unknown --family gpt2", id="family"),
        pytest.param(Selection(moe_backends=["triton"]), "unknown --moe-runner-backend triton", id="backend"),
    ],
)
def test_bad_selection(selection: Selection, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        selection.cells()


def test_primary_cells() -> None:
    primary = [c.id for c in Selection(families=["glm5", "llama"]).cells() if c.primary]
    assert primary == ["glm5/default/moe-auto/fusion-on", "glm5/no-cuda-graph/moe-auto/fusion-on",
                       "llama/default", "llama/no-cuda-graph"]
    cell = matrix.Cell(family=LLAMA, start_order=StartOrder.DEFAULT)
    assert cell.slug == "llama_default"


def test_a_release_without_the_model_class_leaves_the_family_out() -> None:
    """sglang 0.5.8.x has no GLM-5 model class: its matrix runs without GLM-5, says so,
    and refuses GLM-5 asked for by name (naming the release and the architecture)."""
    old = Selection(sglang_version="0.5.8.post1")
    assert GLM5 not in {c.family for c in old.cells()} and old.left_out() == [GLM5]
    assert {c.family for c in Selection(sglang_version="0.5.9").cells()} == set(FAMILIES.values())
    with pytest.raises(ConfigError, match=r"sglang 0\.5\.8 has no model class for glm5 \(GlmMoeDsaForCausalLM"):
        Selection(families=["glm5"], sglang_version="0.5.8").cells()
    with pytest.raises(ConfigError, match="glm5"):
        Selection(sglang_version="0.5.8").cells(only=GLM5)
