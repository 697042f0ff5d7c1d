"""What fp4graph knows about each upstream project it patches: one :class:`Project` each.

Every job reads its per-project facts here: how upstream-repo paths map into the wheel and
where the runtime version lives (wheels), the GitHub repository, linked issues, PR template,
pre-commit hooks, test-file locations and drift's start and detectors (forward).  A third
upstream project is one more entry in :data:`PROJECTS` (and its pins in
patches/stacks.toml).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, Literal

from packaging.utils import canonicalize_name

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
class UpstreamFix:
    """A fix upstream made in its own way: when ``pattern`` matches one of ``members``
    in a release, the patches whose text matches ``covers`` are superseded there."""

    what: str
    members: tuple[str, ...]  # upstream-repo paths
    pattern: re.Pattern[str]
    covers: re.Pattern[str]


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
    # wheels
    layout: Layout
    version_file: str | None  # the wheel path of the runtime ``__version__``
    # upstream pull requests
    linked_issues: tuple[str, ...]  # issues every PR links (besides the patch's Bug: lines)
    pr_template: str  # used when the tree has no .github/pull_request_template.md
    hooks: tuple[str, ...]  # the pre-commit hook ids we run as checks
    fallback_checks: Mapping[str, Any]  # used when the tree has no .pre-commit-config.yaml
    # the tests the patches add
    test_file: re.Pattern[str]
    tests_run_as: Literal["pytest", "script"]
    test_pythonpath: str  # repo path put on PYTHONPATH for them
    editable_data: EditableData | None = None
    # drift
    first_drift_release: str
    upstream_fixes: tuple[UpstreamFix, ...] = ()


FLASHINFER = Project(
    name="flashinfer-python",
    github="flashinfer-ai/flashinfer",
    layout=Layout(""),
    version_file="flashinfer/_build_meta.py",
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
        UpstreamFix(
            what=(
                "flashinfer registers fp4_quantize as a real torch op "
                "(torch.library custom_op/define of \"flashinfer::fp4_quantize\"); "
                "check the patch's other entry points by hand"
            ),
            members=(
                "flashinfer/fp4_quantization.py",
                "flashinfer/quantization/fp4_quantization.py",
            ),
            pattern=re.compile(
                r"torch\.library\.(?:custom_op|define)\(\s*[\"']flashinfer::fp4_quantize[\"'(]"
            ),
            covers=re.compile(r"torch\.ops\.flashinfer\.fp4_quantize\b|fp4_quantize\(", re.I),
        ),
    ),
)

SGLANG = Project(
    name="sglang",
    github="sgl-project/sglang",
    layout=Layout("python/"),  # upstream keeps the package under python/
    version_file="sglang/_version.py",
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
    first_drift_release="0.5.8",
    upstream_fixes=(
        UpstreamFix(
            what=(
                "sglang wraps flashinfer.fp4_quantize in its own custom op "
                "(fp4_utils.py: register_custom_op_from_extern(..., op_name=\"flashinfer_fp4_quantize\", "
                "fake_impl=...))"
            ),
            members=("python/sglang/srt/layers/quantization/fp4_utils.py",),
            pattern=re.compile(
                r"register_custom_op_from_extern\(\s*_flashinfer_fp4_quantize_impl"
                r"|op_name=\"flashinfer_fp4_quantize\""
            ),
            covers=re.compile(r"fp4|quantiz", re.I),
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
