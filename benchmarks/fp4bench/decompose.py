"""(a') Where an eager excess comes from: the public functions' code swapped between the
trees, and the guard written in its candidate forms, in one interleaved run."""

from __future__ import annotations

import inspect
import pathlib
import statistics
import textwrap
import types
from collections.abc import Callable
from typing import Any

import torch

from . import common
from .common import interleaved_arms, log, summary, sync
from .eager import smoke_eager_cases
from .trees import load

DECOMPOSE_OPS = ("fp4_quantize", "nvfp4_quantize", "block_scale_interleave")


# Q pristine; P patched (the series: substitute_in_graph + one is_exporting() test);
# Pu patched tree running the pristine bytecode (substitute_in_graph alone: no test at all);
# Qe / Qg / Qa pristine tree running the patched source with the test written as
# is_exporting() (the series), torch.compiler.is_compiling() (the first series) and an
# import-time alias of is_compiling; Q2 a second pristine copy (noise).
DECOMPOSE_ARMS = ("Q", "P", "Pu", "Qe", "Qg", "Qa", "Q2")
GUARDS = {
    "Qe": "is_exporting()",
    "Qg": "torch.compiler.is_compiling()",
    "Qa": "_fp4g_is_compiling()",
}


def _swap_code(mod: Any, src: Any, names: tuple[str, ...]) -> None:
    """Rebind ``mod.<name>`` to a function with ``src.<name>``'s code and ``mod``'s globals:
    the other tree's bytecode running against this tree's modules, JIT module and .so."""
    for name in names:
        f = getattr(src, name)
        g = types.FunctionType(f.__code__, mod.__dict__, name, f.__defaults__, f.__closure__)
        g.__kwdefaults__ = f.__kwdefaults__
        g.__doc__ = f.__doc__
        setattr(mod, name, g)


def _guard_as(mod: Any, patched: Any, names: tuple[str, ...], guard: str) -> None:
    """Rebind ``mod.<name>`` to the patched source with its ``is_exporting()`` test written
    as ``guard`` (the branch it guards is never taken eagerly)."""
    mod.__dict__["is_exporting"] = torch.compiler.is_exporting
    mod.__dict__["_fp4g_is_compiling"] = torch.compiler.is_compiling
    for name in names:
        src = textwrap.dedent(inspect.getsource(getattr(patched, name)))
        if "is_exporting()" not in src:
            raise RuntimeError(f"{name}: the patched source has no is_exporting() test")
        src = src.replace("is_exporting()", guard)
        exec(compile(src, f"<{guard} {name}>", "exec"), mod.__dict__)  # noqa: S102


def decompose_arms(
    trees: dict[str, pathlib.Path], wss: dict[str, pathlib.Path]
) -> dict[str, dict[str, Any]]:
    """The arms of DECOMPOSE_ARMS, each a private copy (``trees.load``)."""

    def ld(kind: str, name: str) -> Any:
        return load(trees[kind], wss[kind], "fp4_quantization", name)

    arms = {
        "Q": ld("pristine", "_fi_pristine_a"),
        "P": ld("patched", "_fi_patched_a"),
        "Pu": ld("patched", "_fi_patched_u"),
        "Qe": ld("pristine", "_fi_pristine_e"),
        "Qg": ld("pristine", "_fi_pristine_g"),
        "Qa": ld("pristine", "_fi_pristine_s"),
        "Q2": ld("pristine", "_fi_pristine_b"),
    }
    pristine_code = ld("pristine", "_fi_pristine_code")  # untouched sources of the swaps
    for arm, guard in GUARDS.items():
        _guard_as(arms[arm], arms["P"], DECOMPOSE_OPS, guard)
    _swap_code(arms["Pu"], pristine_code, DECOMPOSE_OPS)
    return {a: {"fp4_quantization": m} for a, m in arms.items()}


def bench_decompose(
    arms: dict[str, dict[str, Any]], tokens: list[int], k: int, rounds: int, calls: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for m in tokens:
        if common.SMOKE:
            cases = smoke_eager_cases(arms)
        else:
            dev = torch.device("cuda")
            x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
            gs = ((448 * 6) / x.float().abs().max()).reshape(1)
            sf_lin = torch.randint(0, 255, (m, k // 16), dtype=torch.uint8, device=dev)
            args = {
                "fp4_quantize": (x, gs),
                "nvfp4_quantize": (x, gs),
                "block_scale_interleave": (sf_lin,),
            }

            def bind(f: Callable[..., Any], a_: tuple[Any, ...]) -> Callable[[], Any]:
                return lambda: f(*a_)

            cases = {
                op: {a: bind(getattr(d["fp4_quantization"], op), args[op]) for a, d in arms.items()}
                for op in DECOMPOSE_OPS
            }
        for op, fns in cases.items():
            for fn in fns.values():
                fn()
            sync()
            t = interleaved_arms(fns, rounds, calls)
            n = rounds
            per = {
                f"{a}/Q": [t[a][r] / t["Q"][r] for r in range(n)]
                for a in DECOMPOSE_ARMS
                if a != "Q"
            }
            per["P/Pu"] = [t["P"][r] / t["Pu"][r] for r in range(n)]
            row: dict[str, Any] = {
                "op": op,
                "M": m,
                "K": k,
                "us": {a: statistics.median(t[a]) for a in DECOMPOSE_ARMS},
                "ratios": {key: summary(v) for key, v in per.items()},
                "rounds": rounds,
                "calls_per_batch": calls,
            }
            log(
                f"decompose {op:24s} M={m:5d}: "
                + ", ".join(f"{a} {row['us'][a]:.2f}" for a in DECOMPOSE_ARMS)
                + " us; "
                + ", ".join(
                    f"{key} {s['median']:.4f} [{s['ci95'][0]:.4f}, {s['ci95'][1]:.4f}]"
                    for key, s in row["ratios"].items()
                )
            )
            rows.append(row)
    return rows
