"""The lock maker's parts that need no resolver: which Pythons a stack serves, the header,
leaving our pins out, and the drift comparison (what a fresh resolution changes)."""

from __future__ import annotations

import datetime
import pathlib

import pytest

from fp4graph.install import deps, lock
from fp4graph.install import stack as installing
from fp4graph.model import locks

PINS = ["sglang==0.5.11+fp4graph.4", "flashinfer-python==0.6.8.post1+fp4graph.3"]


def test_pythons_of_the_stack_wheels() -> None:
    assert lock.pythons_of([f"sglang-0.5.11+fp4graph.4-cp3{n}-cp3{n}-manylinux_2_34_x86_64.whl" for n in (12, 10, 11)]
                           + ["flashinfer_python-0.6.8.post1+fp4graph.3-py3-none-any.whl"]) == ["3.10", "3.11", "3.12"]
    assert lock.pythons_of(["sglang-0.5.9+fp4graph.4-py3-none-any.whl"]) == []


def test_header_says_what_the_lock_is_for() -> None:
    hold = locks.Hold(stacks=("sglang-0.5.11",), requirement="kernels<0.13", why="transformers' range")
    text = "\n".join(lock.header("sglang-0.5.11", PINS, pythons=["3.10", "3.12"], uv_version="0.13.9", holds=[hold],
                                 today=datetime.date(2026, 12, 1)))
    assert "For: CPython 3.10, 3.12 (the Pythons its sglang wheels serve), any platform" in text
    assert "`python -m fp4graph pins sglang-0.5.11` gives them" in text
    assert "Made by `python -m fp4graph lock sglang-0.5.11` (uv 0.13.9) on 2026-12-01" in text
    assert "Held (patches/locks/holds.toml): kernels<0.13: transformers' range" in text
    assert "CPython >= 3.10" in "\n".join(lock.header("s", PINS, pythons=[], uv_version="x"))


def test_make_lock_leaves_our_pins_out_and_needs_them_resolved() -> None:
    resolved = [locks.LockedPin(name="sglang", version="0.5.11+fp4graph.4"),
                locks.LockedPin(name="flashinfer-python", version="0.6.8.post1+fp4graph.3"),
                locks.LockedPin(name="kernels", version="0.12.3")]
    made = lock.make_lock("s", PINS, resolved, ["h"])
    assert [p.line for p in made.pins] == ["kernels==0.12.3"]
    with pytest.raises(lock.LockError, match="the resolution lacks flashinfer-python"):
        lock.make_lock("s", PINS, resolved[::2], ["h"])


def test_compare_names_what_moves() -> None:
    locked = locks.make("s", [], [locks.LockedPin(name="kernels", version="0.12.3"),
                                  locks.LockedPin(name="kernels-data", version="0.12.3"),
                                  locks.LockedPin(name="six", version="1.0")])
    fresh = [locks.LockedPin(name="kernels", version="0.17.2"), locks.LockedPin(name="six", version="1.0"),
             locks.LockedPin(name="sigstore", version="4.5.1"),
             locks.LockedPin(name="sglang", version="0.5.11+fp4graph.4")]
    assert [c.text for c in deps.compare(locked, fresh)] == [
        "kernels: 0.12.3 -> 0.17.2", "kernels-data: dropped (locked 0.12.3)", "sigstore: added 4.5.1"]


def test_a_smoke_import_that_needs_the_cuda_driver_is_skipped(tmp_path: pathlib.Path) -> None:
    options = installing.InstallOptions(
        stack="s", pins=(), repo=tmp_path, wheels_dir=tmp_path, venv=tmp_path / "v", base_python="python3",
        lock=None, lock_file=None)
    report = installing.InstallReport(stack="s", venv="v", command="")
    no_driver = "raise ImportError('libcuda.so.1: cannot open shared object file: No such file or directory')"
    step = installing._step(report, "smoke: import sgl_kernel", ["python3", "-c", no_driver], options,
                            driver_skips=True)
    assert step.ok and step.skipped and "needs the CUDA driver" in step.detail
    other = installing._step(report, "smoke: x", ["python3", "-c", "raise ImportError('other')"], options,
                             driver_skips=True)
    assert not other.ok and other.detail == "exit 1: ImportError: other"
    # A driver warning logged on the way does not hide the error that ended the import.
    masked = ("import sys; print('Ignore import error: libcuda.so.1: cannot open shared object file', file=sys.stderr);"
              " raise SystemExit('ImportError: the registry lacks LlamaForCausalLM')")
    registry = installing._step(report, "smoke: model classes", ["python3", "-c", masked], options, driver_skips=True)
    assert not registry.ok and not registry.skipped
    assert registry.detail == "exit 1: ImportError: the registry lacks LlamaForCausalLM"
    assert report.failed == [other, registry] and "skipped: needs what a CPU machine lacks" in "\n".join(
        installing.summary(report))


def test_a_served_release_gets_its_own_lock_and_header() -> None:
    """``lock flashinfer-X`` makes one lock per sglang release the stack serves (sglang-V),
    resolved with PyPI's sglang beside our flashinfer; the header says whose it is."""
    from fp4graph.model import stacks

    sha = "0" * 64
    catalog = stacks.parse({"artifact": [
        {"project": "flashinfer-python", "version": "0.6.14", "revision": 1,
         "files": [{"filename": "flashinfer_python-0.6.14-py3-none-any.whl", "sha256": sha}]},
        {"project": "flashinfer-python", "version": "0.7.4", "revision": 1,
         "files": [{"filename": "flashinfer_python-0.7.4-py3-none-any.whl", "sha256": sha}]}],
        "stack": [{"name": "flashinfer-0.6.14", "artifacts": ["flashinfer-python==0.6.14"],
                   "serves": ["0.5.16", "0.5.16.post1"]},
                  {"name": "flashinfer-0.7.4", "artifacts": ["flashinfer-python==0.7.4"]}]})
    assert lock.lock_names(catalog, ["sglang-0.5.11", "flashinfer-0.6.14", "sglang-0.5.16", "flashinfer-0.7.4"]) == [
        "sglang-0.5.11", "sglang-0.5.16", "sglang-0.5.16.post1", "sglang-0.5.16", "flashinfer-0.7.4"]
    pins = ["sglang==0.5.16", "flashinfer-python==0.6.14+fp4graph.1"]
    text = "\n".join(lock.header("sglang-0.5.16", pins, pythons=["3.10"], uv_version="0.13.9",
                                 served_by="flashinfer-0.6.14"))
    assert text.startswith("fp4graph lock of sglang 0.5.16 (PyPI's, pristine) beside stack flashinfer-0.6.14")
    assert "  sglang==0.5.16 flashinfer-python==0.6.14+fp4graph.1" in text
    assert "`python -m fp4graph pins sglang-0.5.16` gives them" in text
    assert "by `nox -s install -- sglang-0.5.16`" in text and "Made by `python -m fp4graph lock flashinfer-0.6.14`" in text
    # Our index serves sglang in other versions (our sglang stacks'): first-index would stop there.
    served = lock.Resolver(uv=("uv",), index_url="http://ours/simple/", pypi_sglang=True).command()
    assert served[served.index("--index-strategy") + 1] == "unsafe-first-match"
    assert "--index-strategy" not in lock.Resolver(uv=("uv",), index_url="http://ours/simple/").command()
    made = lock.make_lock("sglang-0.5.16", pins, [locks.LockedPin(name="sglang", version="0.5.16"),
                                                  locks.LockedPin(name="flashinfer-python", version="0.6.14+fp4graph.1"),
                                                  locks.LockedPin(name="torch", version="2.11.0")], ["h"])
    assert [p.line for p in made.pins] == ["torch==2.11.0"]


def test_compare_leaves_the_stacks_own_pins_out() -> None:
    """A served release's lock leaves PyPI's sglang out (a pin of the stack): not drift."""
    locked = locks.make("sglang-0.5.16", [], [locks.LockedPin(name="torch", version="2.11.0")])
    fresh = [locks.LockedPin(name="torch", version="2.11.0"), locks.LockedPin(name="sglang", version="0.5.16"),
             locks.LockedPin(name="flashinfer-python", version="0.6.14+fp4graph.1")]
    assert [c.text for c in deps.compare(locked, fresh)] == ["sglang: added 0.5.16"]
    assert deps.compare(locked, fresh, ["sglang==0.5.16", "flashinfer-python==0.6.14+fp4graph.1"]) == []
