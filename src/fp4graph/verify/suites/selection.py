"""Which of upstream's test files run: the data table, and the choosing at a tag.

:data:`SELECTIONS` holds one :class:`Selection` per project: named files (the fp4 files, the
modules every user hits) with an area and a time budget each, and for sglang a rule that finds
the CPU unit tests of the modules the series patch.  :func:`select` applies one to the file
list of upstream's tree at the pinned commit.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import pathlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...model import projects
from ...model.series import load_series
from ...model.stacks import Artifact


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SuiteFile:
    """One entry of a selection: an upstream test file (or an fnmatch pattern of them)."""

    pattern: str  # upstream-repository path; fnmatch pattern where it has * ? [
    area: str
    budget_s: int  # wall-clock seconds for one run of the file, JIT builds included
    args: tuple[str, ...] = ()  # extra pytest arguments, e.g. ("-k", "fp4")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SeriesTests:
    """Upstream's tests of the modules a series touches, found at the tag.

    A test file is selected when it lies under ``roots``, contains ``marker`` (upstream's own
    sign that it runs on a CPU) and imports one of the modules the series patches.
    """

    roots: tuple[str, ...]
    marker: str
    area: str
    budget_s: int


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """What runs of one project's tests, and what their interpreter needs besides the wheels."""

    project: str
    files: tuple[SuiteFile, ...] = ()
    series_tests: SeriesTests | None = None
    export: tuple[str, ...] = ()  # support paths the files need (conftest, helpers, config)
    companions: tuple[str, ...] = ()  # other projects of the stack installed beside it
    needs_cuda: bool = False
    jit_env: str | None = None  # the variable that moves the project's JIT cache
    requirements: tuple[str, ...] = ()  # test-time requirements besides the wheels' own
    wheel_requirements: bool = True  # install the wheel's Requires-Dist for the tests
    pytest_args: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Selected:
    """A file chosen at the tag: one pytest process per install runs it."""

    path: str
    area: str
    budget_s: int
    args: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "args": list(self.args)}


def matches(path: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(path, pattern)


# FlashInfer: the fp4 files (quantize, mm_fp4, fused MoE fp4; they skip below SM100) and the
# modules every user of the wheel hits.  Budgets are for one SM120 card with an empty JIT
# cache; ``--budget`` / ``--budget-scale`` change them.
FLASHINFER = Selection(
    project="flashinfer-python",
    files=(
        SuiteFile(pattern="tests/utils/test_fp4_quantize.py", area="fp4 quantize", budget_s=600),
        SuiteFile(pattern="tests/gemm/test_mm_fp4.py", area="fp4 mm_fp4", budget_s=600),
        SuiteFile(
            pattern="tests/moe/test_trtllm_cutlass_fused_moe.py",
            area="fp4 fused MoE (cutlass)",
            budget_s=900,
            args=("-k", "fp4"),
        ),
        SuiteFile(
            pattern="tests/moe/test_trtllm_gen_fused_moe.py",
            area="fp4 fused MoE (trtllm-gen, SM100)",
            budget_s=600,
            args=("-k", "fp4"),
        ),
        SuiteFile(pattern="tests/utils/test_norm.py", area="norm", budget_s=600),
        SuiteFile(pattern="tests/utils/test_activation.py", area="activation", budget_s=300),
        SuiteFile(pattern="tests/attention/test_rope.py", area="rope", budget_s=600),
        SuiteFile(pattern="tests/utils/test_sampling.py", area="sampling", budget_s=600),
        SuiteFile(
            pattern="tests/attention/test_batch_decode_kernels.py",
            area="decode attention",
            budget_s=900,
        ),
        SuiteFile(
            pattern="tests/attention/test_batch_prefill_kernels.py",
            area="prefill attention",
            budget_s=900,
        ),
        SuiteFile(pattern="tests/attention/test_page.py", area="page", budget_s=120),
    ),
    export=("pytest.ini", "tests"),  # conftest.py, test_helpers/ and per-area helpers
    needs_cuda=True,
    jit_env="FLASHINFER_WORKSPACE_BASE",
    requirements=("pytest", "numpy", "cuda-python"),
)

# sglang: the CPU-registered unit tests (``register_cpu_ci``) of the modules the series patch.
SGLANG = Selection(
    project="sglang",
    series_tests=SeriesTests(
        roots=("test/registered/unit", "test/srt"),
        marker="register_cpu_ci(",
        area="series modules (CPU)",
        budget_s=300,
    ),
    export=("test/pytest.ini", "test/conftest.py", "test/registered/conftest.py",
            "test/registered/unit/conftest.py"),
    companions=("flashinfer-python",),
    # sglang's own dependencies are a GPU server's; its CPU unit tests import with these.
    wheel_requirements=False,
    requirements=(
        "pytest", "transformers==5.6.0", "pybase64", "requests", "ipython", "aiohttp", "triton",
        "orjson", "pyzmq", "pillow", "starlette", "openai", "partial-json-parser", "dill",
        "sentencepiece", "compressed-tensors", "loguru", "gguf", "msgspec", "regex", "fastapi",
        "uvicorn", "uvloop", "psutil", "setproctitle", "einops", "numpy", "safetensors",
        "tokenizers",
    ),
)

SELECTIONS: dict[str, Selection] = {s.project: s for s in (FLASHINFER, SGLANG)}


def touched_modules(patches_dir: pathlib.Path, artifact: Artifact) -> list[str]:
    """Dotted names of the Python modules the artifact's series patches."""
    series = load_series(patches_dir, artifact.project, artifact.version)
    if series is None:
        return []
    prefix = projects.get(artifact.project).layout.source_prefix  # "python/" for sglang
    modules = []
    for patch in series.patches:
        for path in patch.files:
            if path.startswith(prefix) and path.endswith(".py"):
                name = path[len(prefix): -3].replace("/", ".")
                modules.append(name.removesuffix(".__init__"))
    return sorted(set(modules))


def _imports(text: str, module: str) -> bool:
    parent, _, leaf = module.rpartition(".")
    return bool(
        re.search(rf"\b{re.escape(module)}\b", text)
        or (parent and re.search(rf"from\s+{re.escape(parent)}\s+import\s+[^\n]*\b{leaf}\b", text))
    )


def select(
    selection: Selection,
    tree: Sequence[str],
    read: Callable[[Sequence[str]], Mapping[str, str]],
    modules: Sequence[str],
) -> tuple[list[Selected], list[str]]:
    """The files of ``selection`` present in ``tree``, and the entries absent from it."""
    chosen: list[Selected] = []
    absent: list[str] = []
    for entry in selection.files:
        hits = [p for p in tree if matches(p, entry.pattern)]
        if not hits:
            absent.append(entry.pattern)
        chosen += [Selected(path=p, area=entry.area, budget_s=entry.budget_s, args=entry.args) for p in hits]
    rule = selection.series_tests
    if rule is not None and modules:
        candidates = [
            p for p in tree
            if p.endswith(".py") and pathlib.PurePosixPath(p).name.startswith("test_")
            and any(p.startswith(root.rstrip("/") + "/") for root in rule.roots)
        ]
        texts = read(candidates) if candidates else {}
        for path in candidates:
            text = texts[path]
            if rule.marker in text and any(_imports(text, m) for m in modules):
                chosen.append(Selected(path=path, area=rule.area, budget_s=rule.budget_s))
        if not any(s.area == rule.area for s in chosen):
            absent.append(f"{rule.marker} tests under {', '.join(rule.roots)} importing "
                          + ", ".join(modules))
    return chosen, absent


def support_paths(selection: Selection, tree: Sequence[str], chosen: Sequence[Selected]) -> list[str]:
    """The chosen files, the selection's support paths and every conftest / __init__ on the way."""
    wanted = {s.path for s in chosen}
    for path in tree:
        for pattern in selection.export:
            if matches(path, pattern) or path.startswith(pattern.rstrip("/") + "/"):
                wanted.add(path)
    # Every conftest.py and __init__.py on the way to a selected file.
    present = set(tree)
    for s in chosen:
        parts = pathlib.PurePosixPath(s.path).parts[:-1]
        for i in range(len(parts) + 1):
            for name in ("conftest.py", "__init__.py"):
                candidate = "/".join([*parts[:i], name])
                if candidate in present:
                    wanted.add(candidate)
    return sorted(wanted)
