"""A tiny upstream world for the suite runner: a package, its git repository, two series.

- ``demo-kernels 1.0``: a pure-Python wheel (built here, pinned by sha256 in a throw-away
  checkout's patches/stacks.toml) with an ``ops`` module and a data file;
- its upstream git repository: the package source, a ``tests/`` folder in FlashInfer's shape
  (pytest.ini with importlib mode, a ``tests.helpers`` module) and a ``test/unit/`` folder in
  sglang's (files marked ``register_cpu_ci(``), tagged ``v1.0``;
- two series for it: ``good`` fixes a bug, ``bad`` fixes the same bug, breaks ``scale(x, 3)``
  and removes ``legacy`` (a test file that imports it no longer collects);
- files that prove nothing about a wheel: ``test_crash.py`` kills its interpreter
  (SIGSEGV, as a CUDA fault does) in every install, ``test_crash_at_import.py`` while pytest
  collects it, and ``test_toolchain.py`` fails in every install unless ``$DEMO_TOOLCHAIN`` is set
  (a broken environment: pristine passes none of it).

Nothing is stood in for: the wheels are built and patched by the engine, installed by pip and
tested by upstream-style pytest files in child processes.  The one addition: the engine's
project registry (``model.projects``) knows ``demo-kernels`` while these tests run.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from wheel.wheelfile import WheelFile

from fp4graph.model import config, projects
from fp4graph.model.files import sha256_of
from fp4graph.verify import suites

PROJECT = "demo-kernels"
STACK = "demo-1.0"
# What the engine knows of it (model.projects): paths as in the wheel, no version file, no
# topics a series must carry (its one patch has none of flashinfer's).
DEMO = dataclasses.replace(
    projects.FLASHINFER, name=PROJECT, github="example/demo-kernels", version_file=None,
    editable_data=None, upstream_fixes=(), required_topics=(),
)


@pytest.fixture(scope="session", autouse=True)
def demo_project() -> Iterator[None]:
    """The engine's project registry knows demo-kernels while these tests run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(projects.PROJECTS, PROJECT, DEMO)  # type: ignore[arg-type]
        yield

OPS = '''\
def add(a, b):
    return a + b


def scale(x, k):
    return x * k


def neg(x):
    return x  # the bug both series fix


def legacy():
    return 1
'''

PACKAGE = {
    "demo_kernels/__init__.py": "from .ops import add, neg, scale\n",
    "demo_kernels/ops.py": OPS,
    "demo_kernels/data/kernel.cu": "// a kernel source a JIT build would read\n",
}

GOOD_OPS = OPS.replace("    return x  # the bug both series fix", "    return -x")
BAD_OPS = GOOD_OPS.replace(
    "    return x * k\n", "    return x * k + (1 if k == 3 else 0)\n"
).replace("\n\ndef legacy():\n    return 1\n", "\n")

UPSTREAM = {
    "pytest.ini": "[pytest]\naddopts = --import-mode=importlib\n",
    "demo_kernels/ops.py": OPS,  # upstream's source: never what a suite run imports
    "tests/__init__.py": "",
    "tests/conftest.py": "import demo_kernels  # noqa: F401  (as FlashInfer's conftest does)\n",
    "tests/helpers.py": "def expected_add(a, b):\n    return a + b\n",
    "tests/test_ops.py": '''\
        import pytest

        import demo_kernels
        from tests.helpers import expected_add


        @pytest.mark.parametrize("a,b", [(1, 2), (2.5, 0.5)])
        def test_add(a, b):
            assert demo_kernels.add(a, b) == expected_add(a, b)


        @pytest.mark.parametrize("k", [1, 2, 3])
        def test_scale(k):
            assert demo_kernels.scale(2, k) == 2 * k


        def test_neg():
            assert demo_kernels.neg(1) == -1


        @pytest.mark.skip(reason="needs SM100")
        def test_fp4_numerics():
            pass


        @pytest.mark.xfail(reason="a known upstream bug")
        def test_known_bug():
            assert False


        def test_the_wheel_is_imported_not_the_source():
            assert "/site" in demo_kernels.__file__.replace("\\\\", "/")
        ''',
    "tests/test_legacy.py": '''\
        from demo_kernels.ops import legacy


        def test_legacy():
            assert legacy() == 1
        ''',
    "tests/test_slow.py": '''\
        import time

        import pytest


        @pytest.mark.parametrize("i", range(40))
        def test_slow(i):
            time.sleep(0.1)
        ''',
    "tests/test_hang.py": '''\
        import time


        def test_hang():
            time.sleep(300)


        def test_never_reached():
            pass
        ''',
    "tests/test_crash.py": '''\
        import os
        import signal


        def test_before_the_crash():
            pass


        def test_crashes():
            print("CUDA error: an illegal memory access was encountered", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)


        def test_after_the_crash():
            pass
        ''',
    "tests/test_crash_at_import.py": '''\
        import os
        import signal

        print("loading the kernel library failed", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)


        def test_never_collected():
            pass
        ''',
    "tests/test_toolchain.py": '''\
        import os

        import pytest


        @pytest.mark.parametrize("i", range(3))
        def test_kernel_builds(i):
            assert os.environ.get("DEMO_TOOLCHAIN"), "no DEMO_TOOLCHAIN: the JIT build cannot run here"
        ''',
    "tests/test_jit.py": '''\
        import os

        import demo_kernels


        def test_records_the_install_and_cache():
            os.makedirs(os.environ["DEMO_JIT"], exist_ok=True)
            with open(os.path.join(os.environ["DEMO_JIT"], "seen.txt"), "a") as f:
                f.write(demo_kernels.__file__ + "\\n")
        ''',
    "test/unit/test_ops_unit.py": '''\
        # register_cpu_ci(est_time=1, suite="base-a-test-cpu")
        from demo_kernels.ops import scale


        def test_scale_three():
            assert scale(1, 3) == 3
        ''',
    "test/unit/test_unrelated.py": '''\
        # register_cpu_ci(est_time=1, suite="base-a-test-cpu")
        def test_nothing_of_ours():
            pass
        ''',
    "test/unit/test_gpu_only.py": '''\
        import demo_kernels.ops


        def test_needs_a_gpu():
            pass
        ''',
}

SELECTION = suites.Selection(
    project=PROJECT,
    files=(
        suites.SuiteFile(pattern="tests/test_ops.py", area="core", budget_s=120),
        suites.SuiteFile(pattern="tests/test_legacy.py", area="legacy", budget_s=120),
        suites.SuiteFile(pattern="tests/test_not_at_this_tag.py", area="later", budget_s=120),
        suites.SuiteFile(pattern="tests/test_jit.py", area="jit", budget_s=120),
    ),
    series_tests=suites.SeriesTests(
        roots=("test/unit",), marker="register_cpu_ci(", area="series modules", budget_s=120,
    ),
    export=("pytest.ini", "tests/helpers.py"),
    jit_env="DEMO_JIT",
)


def _git(cwd: pathlib.Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
         "-c", "tag.gpgsign=false", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout.strip()


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def make_wheel(dest: pathlib.Path) -> pathlib.Path:
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "demo_kernels-1.0-py3-none-any.whl"
    with WheelFile(path, "w") as wf:
        for rel, text in PACKAGE.items():
            wf.writestr(rel, text)
        wf.writestr("demo_kernels-1.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: demo-kernels\nVersion: 1.0\n")
        wf.writestr("demo_kernels-1.0.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    return path


def make_series(dest: pathlib.Path, new_ops: str, subject: str) -> None:
    """patches/demo-kernels/1.0/: one git format-patch file changing ops.py."""
    work = dest.parent / f"series-src-{dest.name}"
    _write(work, {"demo_kernels/ops.py": OPS})
    _git(work, "init", "-q")
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "upstream")
    (work / "demo_kernels/ops.py").write_text(new_ops)
    _git(work, "commit", "-q", "-am", f"{subject}\n\nDescription: {subject}\nOrigin: test")
    name = _git(work, "format-patch", "-1", "-o", str(dest), "HEAD")
    (dest / "series").write_text(pathlib.Path(name).name + "\n")


def make_upstream(root: pathlib.Path) -> dict[str, str]:
    """The upstream repository; returns the commits of its tag and of a later commit."""
    _write(root, UPSTREAM)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "release 1.0")
    _git(root, "tag", "-a", "v1.0", "-m", "v1.0")
    tagged = _git(root, "rev-parse", "HEAD")
    (root / "tests/test_later.py").write_text("def test_later():\n    pass\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "after the release")
    return {"tag": tagged, "later": _git(root, "rev-parse", "HEAD")}


@dataclasses.dataclass
class World:
    settings: config.Settings
    upstream: pathlib.Path
    commits: dict[str, str]
    wheel: pathlib.Path

    def pin(self, commit: str) -> None:
        """Rewrite stacks.toml with ``commit`` as the pinned commit of tag v1.0."""
        text = f'''\
            [[artifact]]
            project = "{PROJECT}"
            version = "1.0"
            revision = 1
            files = [{{ filename = "{self.wheel.name}", sha256 = "{sha256_of(self.wheel)}" }}]
            source = {{ repo = "example/demo-kernels", tag = "v1.0", commit = "{commit}" }}

            [[stack]]
            name = "{STACK}"
            artifacts = ["{PROJECT}==1.0"]
            '''
        self.settings.stacks_file.write_text(textwrap.dedent(text))


def make_world(tmp_path: pathlib.Path, new_ops: str, subject: str) -> World:
    wheel = make_wheel(tmp_path / "index")
    checkout = tmp_path / "checkout"
    make_series(checkout / "patches" / PROJECT / "1.0", new_ops, subject)
    upstream = tmp_path / "upstream"
    commits = make_upstream(upstream)
    settings = config.Settings(repo=checkout, cache_dir=tmp_path / "cache", find_links=(wheel.parent,))
    world = World(settings=settings, upstream=upstream, commits=commits, wheel=wheel)
    world.pin(commits["tag"])
    return world


@pytest.fixture
def bad_world(tmp_path: pathlib.Path) -> World:
    """A world of one's own, free to change (pins, tags)."""
    return make_world(tmp_path, BAD_OPS, "ops: faster scale")


@pytest.fixture
def good_world(tmp_path: pathlib.Path) -> World:
    return make_world(tmp_path, GOOD_OPS, "ops: fix neg")


@dataclasses.dataclass
class Run:
    world: World
    bundle: suites.Bundle
    work: pathlib.Path
    report: dict[str, Any]


def _run(tmp: pathlib.Path, new_ops: str, subject: str) -> Run:
    world = make_world(tmp, new_ops, subject)
    bundle = suites.prepare_bundle(world.settings, STACK, PROJECT, tmp / "bundle", repo=world.upstream,
                            selection=SELECTION)
    report = suites.run_bundle(bundle, tmp / "run", suites.RunOptions(grace_s=5.0))
    return Run(world, bundle, tmp / "run", report)


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The bad series' bundle and its full run (shared: do not change it)."""
    return _run(tmp_path_factory.mktemp("bad"), BAD_OPS, "ops: faster scale")


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(tmp_path_factory.mktemp("good"), GOOD_OPS, "ops: fix neg")
