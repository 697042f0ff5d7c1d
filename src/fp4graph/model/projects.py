"""What fp4graph knows about each upstream project it patches: one :class:`Project` each.

Every job reads its per-project facts here: how upstream-repo paths map into the wheel and
where the runtime version lives (wheels), the topics every series must carry (lint and the
build refuse a series without them), the GitHub repository, linked issues, PR template,
pre-commit hooks, test-file locations and drift's start and detectors (forward).  A third
upstream project is one more entry in :data:`PROJECTS` (and its pins in
patches/stacks.toml).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from .errors import ConfigError


@dataclasses.dataclass(frozen=True, slots=True)
class Layout:
    """How upstream-repo paths map to paths inside the wheel."""

    source_prefix: str = ""

    @property
    def strip(self) -> int:
        """The ``-p`` value for git apply: ``a/`` plus the prefix's components."""
        return 1 + self.source_prefix.count("/")

    def wheel_path(self, repo_path: str) -> str | None:
        if not repo_path.startswith(self.source_prefix):
            return None
        return repo_path[len(self.source_prefix) :]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RequiredTopic:
    """A topic (a patch's ``Topic:`` field) every series of ``versions`` must carry."""

    name: str
    why: str
    versions: SpecifierSet = SpecifierSet()  # empty: every version


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Evidence:
    """One fact about a release's own code: ``pattern`` is found in one of ``members``
    (inside the top-level function ``within`` when given), or with ``absent``, in none."""

    says: str
    members: tuple[str, ...]  # upstream-repo paths; the first that exists is read
    pattern: re.Pattern[str]
    within: str | None = None
    absent: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UpstreamFix:
    """Upstream doing, its own way, what the patches of ``topics`` do.  Drift calls such a
    patch superseded in a release only when every piece of ``evidence`` holds there: a
    fix that covers part of a patch (one op of several) leaves the patch needed."""

    what: str
    topics: tuple[str, ...]
    evidence: tuple[Evidence, ...]

    @property
    def members(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for e in self.evidence for m in e.members))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EditableData:
    """Links an editable install makes inside the source tree (the JIT reads them)."""

    directory: str  # repo path, git-ignored upstream
    links: Mapping[str, str]  # name inside ``directory`` -> repo path it points at


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Project:
    """One upstream project (its canonical PyPI name) and what the engine knows of it."""

    name: str
    github: str  # owner/repo
    stack_prefix: str  # `pin` names a stack of this project's release <prefix>-<version>
    # wheels
    layout: Layout
    version_file: str | None  # the wheel path of the runtime ``__version__``
    # Where a wheel records the git commit it was built from (wheel path, pattern with the
    # commit as group 1): `pin` writes it as the artifact's source pin, tag v<version>.
    source_commit: tuple[str, re.Pattern[str]] | None = None
    required_topics: tuple[RequiredTopic, ...] = ()
    # upstream pull requests
    linked_issues: tuple[str, ...]  # issues every PR links (besides the patch's Bug: lines)
    pr_template: str  # used when the tree has no .github/pull_request_template.md
    hooks: tuple[str, ...]  # the pre-commit hook ids we run as checks
    fallback_checks: Mapping[str, Any]  # used when the tree has no .pre-commit-config.yaml
    # the tests the patches add
    test_file: re.Pattern[str]
    tests_run_as: Literal["pytest", "script"]
    test_pythonpath: str  # repo path put on PYTHONPATH for them
    # What they import besides the tree: these, each at the release's own pin where its
    # wheel's Requires-Dist names it, and with ``tests_import_release`` every runtime
    # requirement of the release besides (Requires-Dist, torch left out).
    test_requirements: tuple[str, ...] = ()
    tests_import_release: bool = False
    editable_data: EditableData | None = None
    # drift
    first_drift_release: str
    upstream_fixes: tuple[UpstreamFix, ...] = ()

    def topics_required_for(self, version: str) -> tuple[RequiredTopic, ...]:
        """The topics a series of ``version`` must carry."""
        return tuple(t for t in self.required_topics if Version(version) in t.versions)


# A public flashinfer function that traces as an op: it calls one (``torch.ops.flashinfer.X``)
# or is one (decorated ``torch.library.custom_op("flashinfer::X")``).
_USES_AN_OP = re.compile(r"torch\.ops\.flashinfer\.\w+|custom_op\(\s*[\"']flashinfer::")
_FP4_QUANTIZATION = ("flashinfer/quantization/fp4_quantization.py", "flashinfer/fp4_quantization.py")


def _public_functions_use_ops(members: tuple[str, ...], *functions: str) -> tuple[Evidence, ...]:
    return tuple(
        Evidence(says=f"{name}() traces as a torch.ops.flashinfer op", members=members,
                 within=name, pattern=_USES_AN_OP)
        for name in functions
    )


# The flashinfer series that make the fp4 entry points traceable: all but the CUDA-version
# ones (0.6.11.post1 ... 0.6.18).
_TRACING_SERIES = SpecifierSet(
    "!=0.6.11.post1,!=0.6.12,!=0.6.14,!=0.6.15.post1,!=0.6.17,!=0.6.18"
)

FLASHINFER = Project(
    name="flashinfer-python",
    github="flashinfer-ai/flashinfer",
    stack_prefix="flashinfer",
    layout=Layout(""),
    version_file="flashinfer/_build_meta.py",
    source_commit=("flashinfer/_build_meta.py", re.compile(r'^__git_version__ = "([0-9a-f]{40})"$', re.M)),
    # What docs/coverage.md promises for every flashinfer series.  0.6.11.post1's serves
    # only sglang 0.5.12.post1, which wraps fp4_quantize in its own op and traces every
    # NVFP4 family on pristine flashinfer: its series is the CUDA-version fix alone, as are
    # 0.6.12's, 0.6.14's, 0.6.15.post1's, 0.6.17's and 0.6.18's (sglang 0.5.13 ... 0.5.21,
    # served unpatched).
    required_topics=(
        RequiredTopic(name="cuda-version", why="runtime checks read torch.version.cuda, not nvcc"),
        # Upstream's "SM 12.x requires CUDA >= 12.9" rule (pristine 0.6.7.post2 ... 0.6.11.post1;
        # 0.6.1 and 0.6.3 ask no nvcc; flashinfer #3633 from 0.7.1): no SM12x target with nvcc 12.8.
        RequiredTopic(name="sm120-nvcc-12-8", why="SM120 builds for compute_120a with nvcc 12.8",
                      versions=SpecifierSet(">=0.6.7,<0.7.1")),
        RequiredTopic(name="fp4-quantize-ops", why="the fp4 quantize entry points trace as ops",
                      versions=_TRACING_SERIES),
        RequiredTopic(name="mm-fp4-op", why="mm_fp4 traces as an op", versions=_TRACING_SERIES),
        RequiredTopic(name="api-logging", why="@flashinfer_api logging does not break tracing",
                      versions=_TRACING_SERIES),
        RequiredTopic(name="fp4-warmup", why="flashinfer.fp4_warmup and the JIT-while-tracing error",
                      versions=_TRACING_SERIES),
        RequiredTopic(name="cutlass-moe-op", why="cutlass_fused_moe traces as an op",
                      versions=_TRACING_SERIES),
        RequiredTopic(name="trtllm-moe-ops", why="trtllm_fp4_block_scale_(routed_)moe trace as ops",
                      versions=_TRACING_SERIES),
        # Without it a +fp4graph build does not import beside flashinfer-cubin of its release
        # (0.6.x raises; 0.7.x ignores the cubin and jit-cache packages), which sglang pins.
        RequiredTopic(name="kernel-package-version",
                      why="flashinfer-cubin and flashinfer-jit-cache of the same release are "
                          "accepted beside the +fp4graph local version"),
    ),
    linked_issues=(
        "https://github.com/flashinfer-ai/flashinfer/issues/2999",
        "https://github.com/flashinfer-ai/flashinfer/issues/2733",
    ),
    # The section headings of upstream's template (sdists do not ship it).
    pr_template=(
        "## 📌 Description\n\n## 🔍 Related Issues\n\n## 🚀 Pull Request Checklist\n\n"
        "### ✅ Pre-commit Checks\n\n"
        "- [ ] I have installed `pre-commit` by running `pip install pre-commit`.\n"
        "- [ ] I have installed the hooks with `pre-commit install`.\n"
        "- [ ] I have run the hooks manually with `pre-commit run --all-files` and fixed any "
        "reported issues.\n\n"
        "## 🧪 Tests\n\n- [ ] Tests have been added or updated as needed.\n"
        "- [ ] All tests are passing (`unittest`, etc.).\n\n## Reviewer Notes\n"
    ),
    hooks=("ruff-check", "ruff", "ruff-format", "mypy"),
    fallback_checks={
        "source": "flashinfer-ai/flashinfer main @ 0006e88 .pre-commit-config.yaml",
        "repos": [
            {"repo": "https://github.com/pre-commit/mirrors-mypy", "rev": "v1.17.1", "hooks": [
                {"id": "mypy", "args": ["--config-file", "pyproject.toml", "--exclude", "flashinfer-cubin/"],
                 "files": "^flashinfer/"},
            ]},
            {"repo": "https://github.com/astral-sh/ruff-pre-commit", "rev": "v0.12.8", "hooks": [
                {"id": "ruff-check"}, {"id": "ruff-format", "types_or": ["python", "pyi"]},
            ]},
        ],
    },
    test_file=re.compile(r"^tests/(?:.+/)?test_[^/]+\.py$"),
    tests_run_as="pytest",
    test_pythonpath="",
    test_requirements=("pytest",),
    tests_import_release=True,  # `import flashinfer` from the tree needs its runtime deps
    # What flashinfer's build_backend.py links into flashinfer/data/ for an editable install.
    editable_data=EditableData(
        directory="flashinfer/data",
        links={
            "cutlass": "3rdparty/cutlass",
            "spdlog": "3rdparty/spdlog",
            "cccl": "3rdparty/cccl",
            "csrc": "csrc",
            "include": "include",
        },
    ),
    first_drift_release="0.6.0",
    upstream_fixes=(
        # 0.6.12 added torch.ops.flashinfer.fp4_quantize, but the public functions do not
        # call it (0.7.4 still fails fullgraph): only every entry point using an op counts.
        UpstreamFix(
            what="flashinfer's public fp4 quantize functions trace as torch.ops.flashinfer ops",
            topics=("fp4-quantize-ops",),
            evidence=(
                *_public_functions_use_ops(
                    _FP4_QUANTIZATION, "fp4_quantize", "nvfp4_quantize", "mxfp4_quantize",
                    "block_scale_interleave", "nvfp4_batched_quantize",
                    "scaled_fp4_grouped_quantize",
                ),
                *_public_functions_use_ops(
                    ("flashinfer/activation.py",), "silu_and_mul_scaled_nvfp4_experts_quantize"
                ),
            ),
        ),
    ),
)

SGLANG = Project(
    name="sglang",
    github="sgl-project/sglang",
    stack_prefix="sglang",
    layout=Layout("python/"),  # upstream keeps the package under python/
    version_file="sglang/_version.py",
    required_topics=(
        # 0.5.12 wraps flashinfer.fp4_quantize in its own op (fp4_utils.py) and traces every
        # NVFP4 family pristine (tests/models/test_releases.py): no series of its own.
        RequiredTopic(name="fp4-quantize-op",
                      why="every SM120 flashinfer fp4_quantize call site goes through one op",
                      versions=SpecifierSet("<0.5.12")),
        RequiredTopic(name="fp4-warmup", why="the fp4 modules are built before piecewise capture",
                      versions=SpecifierSet("<0.5.12")),
        # Replaces 0.5.9's nsa-piecewise-off (piecewise turned off for NSA models).  From
        # 0.5.9: older series may still turn piecewise off for NSA models instead.
        RequiredTopic(name="nsa-piecewise-cuda-graph",
                      why="NSA (DSA) models such as GLM-5 trace under piecewise CUDA graph "
                          "(backport of sglang PR #23351)",
                      versions=SpecifierSet(">=0.5.9,<0.5.13")),
        # 0.5.10 made the NSA indexer's weights projection a DeepGEMM call inside
        # torch.compile (#19041); its first call pre-compiles, which a trace cannot
        # hold.  Main replaced the call with torch.mm (#23856).
        RequiredTopic(name="deep-gemm-precompile-eager",
                      why="the DeepGEMM JIT pre-compile stays out of torch.compile traces "
                          "(GLM-5 and DeepSeek-V3.2 start on GB10 with CUDA graphs on)",
                      versions=SpecifierSet(">=0.5.10,<=0.5.11")),
    ),
    linked_issues=(),
    pr_template=(
        "## Motivation\n\n## Modifications\n\n## Benchmark & Profiling\n\n## Checklist\n\n"
        "- [ ] Format your code according to the Code Formatting with Pre-Commit guide.\n"
        "- [ ] Add unit tests as outlined in Running Unit Tests.\n"
        "- [ ] Update documentation / docstrings / example tutorials as needed.\n"
        "- [ ] Provide throughput / latency benchmark results and accuracy evaluation results "
        "as needed.\n"
    ),
    hooks=("isort", "black", "black-jupyter", "codespell"),
    fallback_checks={
        "source": "sgl-project/sglang main @ 00e8a8c .pre-commit-config.yaml",
        "exclude": "^python/sglang/srt/grpc/",
        "repos": [
            # args: the repo root's .isort.cfg, which sdists do not ship either.
            {"repo": "https://github.com/PyCQA/isort", "rev": "5.13.2", "hooks": [
                {"id": "isort", "args": ["--profile", "black", "--project", "sglang"]},
            ]},
            {"repo": "https://github.com/psf/black", "rev": "24.10.0", "hooks": [{"id": "black-jupyter"}]},
            {"repo": "https://github.com/codespell-project/codespell", "rev": "v2.4.1", "hooks": [
                {"id": "codespell", "additional_dependencies": ["tomli"],
                 "args": ["--toml", "python/pyproject.toml", "-L", "cann,thi,makro,wil,rouge,PRIS"]},
            ]},
        ],
    },
    test_file=re.compile(r"^test/(?:.+/)?test_[^/]+\.py$"),
    tests_run_as="script",  # unittest files with a __main__
    test_pythonpath="python",
    # Its tests import sglang's runtime from the tree; on a CPU (sglang's register_cpu_ci
    # tests) these are what test/registered/quant/test_flashinfer_fp4_warmup.py needs, at
    # the release's pins.  torch is the release's own (2.11.0 for 0.5.11): sglang.srt.utils
    # imports torchvision, and PyPI's torchvision imports only beside PyPI's torch of its
    # release (a CUDA build, which installs and imports on a CPU machine too).  Without
    # flashinfer-python its fp4 tests skip themselves.
    test_requirements=(
        "torch", "torchvision", "transformers", "flashinfer-python", "aiohttp", "compressed-tensors",
        "datasets", "dill", "gguf", "ipython", "openai", "orjson", "packaging", "partial-json-parser",
        "psutil", "pybase64", "pydantic", "pyzmq", "requests", "sentencepiece", "starlette", "tqdm",
    ),
    first_drift_release="0.5.8",
    upstream_fixes=(
        UpstreamFix(
            what=(
                "sglang wraps flashinfer.fp4_quantize in its own custom op "
                "(fp4_utils.py: register_custom_op_from_extern(..., op_name=\"flashinfer_fp4_quantize\", "
                "fake_impl=...)) and its ModelOpt layers import that one"
            ),
            topics=("fp4-quantize-op",),
            evidence=(
                Evidence(
                    says="fp4_utils.py registers flashinfer_fp4_quantize as an op",
                    members=("python/sglang/srt/layers/quantization/fp4_utils.py",),
                    pattern=re.compile(
                        r"register_custom_op_from_extern\(\s*_flashinfer_fp4_quantize_impl"
                        r"|op_name=\"flashinfer_fp4_quantize\""
                    ),
                ),
                Evidence(
                    says="modelopt_quant.py takes fp4_quantize from fp4_utils",
                    members=("python/sglang/srt/layers/quantization/modelopt_quant.py",),
                    pattern=re.compile(r"from sglang\.srt\.layers\.quantization\.fp4_utils import "
                                       r"(?:\([^)]*|[^\n(]*)\bfp4_quantize\b"),
                ),
                Evidence(
                    says="modelopt_quant.py no longer imports flashinfer's fp4_quantize itself",
                    members=("python/sglang/srt/layers/quantization/modelopt_quant.py",),
                    pattern=re.compile(r"from flashinfer import[^\n]*\bfp4_quantize\b"),
                    absent=True,
                ),
            ),
        ),
        UpstreamFix(
            what=(
                "sglang runs the NSA (0.5.13+: DSA) indexer's k-cache store and top-k in the "
                "split op k_cache_and_topk_result and passes topk_indices through the attention "
                "split op (PR #23351)"
            ),
            topics=("nsa-piecewise-cuda-graph",),
            evidence=(
                Evidence(
                    says="the indexer registers k_cache_and_topk_result as a split op",
                    members=("python/sglang/srt/layers/attention/dsa/dsa_indexer.py",
                             "python/sglang/srt/layers/attention/nsa/nsa_indexer.py"),
                    pattern=re.compile(r"@register_split_op\(\)\s*def k_cache_and_topk_result\("),
                ),
                Evidence(
                    says="unified_attention_with_output takes topk_indices",
                    members=("python/sglang/srt/layers/radix_attention.py",),
                    within="unified_attention_with_output",
                    pattern=re.compile(r"topk_indices"),
                ),
            ),
        ),
    ),
)

PROJECTS: Mapping[str, Project] = {p.name: p for p in (FLASHINFER, SGLANG)}
NAMES = tuple(PROJECTS)


def get(name: str) -> Project:
    """The project called ``name`` (any spelling PyPI accepts)."""
    try:
        return PROJECTS[canonicalize_name(name)]
    except KeyError:
        raise ConfigError(
            f"fp4graph knows no upstream project {name!r}; known: {', '.join(NAMES)} "
            "(add one in fp4graph/model/projects.py)"
        ) from None
