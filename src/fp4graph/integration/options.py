"""What an integration run is asked to do (:class:`IntegrationOptions`) and what follows from
it: where it keeps its things (:class:`Layout`), the install plan and the matrix cells
(:func:`resolve`), which cells are benchmarked and with what settings."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

from ..model.config import default_cache_dir, find_checkout
from ..model.errors import ConfigError
from ..model.families import FAMILIES, MOE_ROWS_ALIGNMENT, Family, by_architecture
from . import benchmark, flags, plan
from .matrix import Cell, Fusion, Selection, StartOrder

SRC = pathlib.Path(__file__).resolve().parents[2]  # .../src, put on the venv's PYTHONPATH
BENCH_CHOICES = ("primary", "all", "none")


@dataclasses.dataclass(frozen=True, kw_only=True)
class IntegrationOptions:
    """One run of the matrix; empty selections mean every value of their axis."""

    stack: str
    families: tuple[str, ...] = ()
    start_orders: tuple[StartOrder, ...] = ()
    moe_backends: tuple[str, ...] = ()
    fusions: tuple[Fusion, ...] = ()
    model_path: pathlib.Path | None = None  # a user checkpoint instead of the generated ones
    wheels_dir: pathlib.Path | None = None  # default <repo>/wheels
    index_url: str | None = None  # an index serving the patched wheels
    tp: int = 1
    concurrency: tuple[int, ...] = benchmark.CONCURRENCY
    bench: str = "primary"  # one of BENCH_CHOICES
    input_len: int = 1024
    output_len: int = 256
    prompts_per_level: int = 2
    output: pathlib.Path | None = None  # default <repo>/wheels/reports/integration
    work_dir: pathlib.Path | None = None  # default <cache>/integration/<stack>
    python: str = sys.executable  # the interpreter the venvs are made from
    sglang_checkout: pathlib.Path | None = None
    server_timeout: float = 1800.0
    server_args: tuple[str, ...] = ()
    installer: str = "pip"  # what installs the stack (fp4graph.install.stack.INSTALLERS)
    # (name, script and arguments) run by the venv's python after the import smoke.
    checks: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.bench not in BENCH_CHOICES:
            raise ConfigError(f"bench {self.bench!r}: expected one of {', '.join(BENCH_CHOICES)}")
        if self.tp < 1 or not self.concurrency or min(self.concurrency) < 1:
            raise ConfigError(f"tp {self.tp}, concurrency {self.concurrency}: each must be >= 1")

    def selection(self, sglang_version: str | None = None) -> Selection:
        return Selection(families=self.families, start_orders=self.start_orders,
                         moe_backends=self.moe_backends, fusions=self.fusions,
                         sglang_version=sglang_version)

    def benched(self, cell: Cell) -> bool:
        return self.bench == "all" or (self.bench == "primary" and cell.primary)

    def bench_levels(self, cell: Cell) -> tuple[int, ...]:
        return self.concurrency if self.benched(cell) else ()

    def bench_settings(self, level: int) -> flags.BenchSettings:
        return flags.BenchSettings(
            concurrency=level, num_prompts=max(8, self.prompts_per_level * level),
            input_len=self.input_len, output_len=self.output_len,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """Where a run keeps its things."""

    repo: pathlib.Path
    work_dir: pathlib.Path
    output: pathlib.Path

    @classmethod
    def of(cls, options: IntegrationOptions) -> Layout:
        repo = find_checkout()
        work = options.work_dir or default_cache_dir() / "integration" / options.stack
        return cls(repo=repo, work_dir=work, output=options.output or repo / "wheels" / "reports" / "integration")

    def checkpoint(self, family: Family) -> pathlib.Path:
        return self.work_dir / "checkpoints" / f"tiny-nvfp4-{family.name}"

    @property
    def logs(self) -> pathlib.Path:
        return self.output / "logs"

    def cell_logs(self, cell: Cell) -> pathlib.Path:
        return self.logs / cell.slug

    def bench_file(self, cell: Cell, mode: flags.Piecewise, level: int) -> pathlib.Path:
        return self.output / "bench" / cell.slug / f"{mode.value}-c{level}.jsonl"

    def model_path(self, options: IntegrationOptions, family: Family) -> pathlib.Path:
        """The checkpoint a cell of ``family`` serves: the user's, or the generated one."""
        return options.model_path if options.model_path is not None else self.checkpoint(family)


def user_family(model_path: pathlib.Path) -> Family:
    """The family of a user checkpoint, from its config.json."""
    config_path = model_path / "config.json"
    try:
        architectures = json.loads(config_path.read_text()).get("architectures") or []
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{config_path}: cannot read the model's architecture ({exc})") from None
    family = by_architecture(architectures[0]) if architectures else None
    if family is None:
        known = ", ".join(f.architecture for f in FAMILIES.values())
        raise ConfigError(f"{config_path}: architectures {architectures!r} is none of {known}")
    return family


# The seed's deployment: GLM-5-NVFP4 on 8 RTX PRO 6000 over PCIe, --tp 8, --disable-cuda-graph
# with piecewise on.  A run at this TP selecting neither families nor start orders runs it.
SEED_TP = 8
SEED_FAMILY = "glm5"


def selected_cells(options: IntegrationOptions, sglang_version: str | None = None) -> list[Cell]:
    chosen = options.selection(sglang_version)
    if options.model_path is not None:
        if options.families:
            raise ConfigError("--family selects generated checkpoints; --model-path brings its own")
        return chosen.cells(only=user_family(options.model_path))
    if options.tp >= SEED_TP and not (options.families or options.start_orders) and (
        FAMILIES[SEED_FAMILY] in chosen.available()
    ):
        chosen = dataclasses.replace(chosen, families=(SEED_FAMILY,), start_orders=(StartOrder.NO_CUDA_GRAPH,))
    cells = chosen.cells()
    if too_wide := sorted({c.family.name for c in cells if not c.family.shards_at(options.tp)}):
        raise ConfigError(
            f"--tp {options.tp}: the generated checkpoints of {', '.join(too_wide)} do not split "
            f"{options.tp} ways (attention heads, or each rank's NVFP4 experts in rows of "
            f"{MOE_ROWS_ALIGNMENT}); largest --tp for each: "
            + ", ".join(f"{n} {FAMILIES[n].max_tp()}" for n in too_wide)
            + "; or bring a checkpoint with --model-path"
        )
    return cells


def checkpoint_command(python: pathlib.Path | str, out: pathlib.Path, family: Family) -> list[str]:
    """The checkpoint writer's entry point, run in the sglang venv (:mod:`.checkpoint`)."""
    return [str(python), "-m", "fp4graph.integration.checkpoint", str(out), "--family", family.name]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Resolved:
    """What the options come to on this checkout: where, what to install, which cells."""

    options: IntegrationOptions
    layout: Layout
    install: plan.InstallPlan
    cells: tuple[Cell, ...]

    @property
    def families(self) -> list[Family]:
        return list(dict.fromkeys(c.family for c in self.cells))


def resolve(options: IntegrationOptions) -> Resolved:
    """The layout, the install plan (the stack's pins) and the selected cells; raises a
    ConfigError for a stack, family or checkpoint that does not fit, before anything runs."""
    layout = Layout.of(options)
    install = plan.make_plan(
        repo=layout.repo, stack=options.stack, work_dir=layout.work_dir, base_python=options.python,
        wheels_dir=options.wheels_dir, index_url=options.index_url,
    )
    cells = selected_cells(options, install.pins.sglang_version)
    return Resolved(options=options, layout=layout, install=install, cells=tuple(cells))
