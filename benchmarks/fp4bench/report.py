"""Markdown tables of a results JSON: (c), (a), (a') and (p), as benchmarks/README.md shows
them (``bench_fp4.py --report RESULTS.json``; every run also writes ``<stem>.md``).

Numbers come from the JSON only; nothing here measures.  Below SM100 every table's
caption says the figures are host overhead (the JSON's ``meta.sm_note``).
"""

from __future__ import annotations

import math
from typing import Any

# Issue 13's bar for every cell of (a): median <= 1.01 and the upper end of the 95 %
# interval <= 1.02.
MEDIAN_BAR = 1.01
UPPER_BAR = 1.02


def _ratio(s: dict[str, Any], digits: int = 3) -> str:
    lo, hi = s["ci95"]
    return f"{s['median']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _meets(s: dict[str, Any]) -> bool:
    return bool(s["median"] <= MEDIAN_BAR and s["ci95"][1] <= UPPER_BAR)


def _gmean(*values: float) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _us(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def _sm(meta: dict[str, Any]) -> str:
    return f"SM{meta.get('capability', '?')}"


def caption(result: dict[str, Any]) -> str:
    """One line: the machine and the wheels the figures come from."""
    m = result.get("meta", {})
    text = (
        f"{m.get('gpu', '?')} ({_sm(m)}), torch {m.get('torch', '?')}, Python "
        f"{m.get('python', '?')}; patched flashinfer {m.get('flashinfer', '?')}"
        f" (`{m.get('patched_wheel') or m.get('patched_tree', '?')}`), pristine "
        f"{m.get('pristine', '?')}; fp4graph {m.get('fp4graph_commit', '?')}; {m.get('date', '')}"
    )
    if m.get("sm_note"):
        text += f"\n\n**{m['sm_note']}**"
    return text


def eager_table(result: dict[str, Any]) -> str:
    """(a): per op and M, patched/pristine [95 % CI] (patched/pristine us per call; each the
    geometric mean of its two copies' medians); the same-tree controls."""
    rows = [r for r in result["eager"]["rows"] if "ratios" in r]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    ms = list(dict.fromkeys(r["M"] for r in rows))
    sm = _sm(result.get("meta", {}))
    out = [
        f"| op ({sm}) | " + " | ".join(f"M={m}" for m in ms) + " |",
        "|---|" + "---|" * len(ms),
    ]
    for op in ops:
        cells = []
        for m in ms:
            r = next((r for r in rows if r["op"] == op and r["M"] == m), None)
            if r is None:
                cells.append("")
                continue
            s, us = r["ratios"]["patched/pristine"], r["us"]
            p, q = _gmean(us["P1"], us["P2"]), _gmean(us["Q1"], us["Q2"])
            mark = "" if _meets(s) else "**"
            cells.append(
                f"{mark}{s['median']:.3f}{mark} [{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}] "
                f"({p:.1f}/{q:.1f}); Q/Q {r['ratios']['pristine/pristine']['median']:.3f}, "
                f"P/P {r['ratios']['patched/patched']['median']:.3f}"
            )
        out.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def eager_verdict(result: dict[str, Any]) -> str:
    """How many cells meet the bar, the range of the medians and upper bounds, the noise."""
    rows = [r for r in result["eager"]["rows"] if "ratios" in r]
    if not rows:  # a CPU smoke run measures nothing
        return "- No cell was measured (each row says why).\n"
    stats = [r["ratios"]["patched/pristine"] for r in rows]
    ok = sum(_meets(s) for s in stats)
    meds = [s["median"] for s in stats]
    highs = [s["ci95"][1] for s in stats]
    worst = max(rows, key=lambda r: r["ratios"]["patched/pristine"]["ci95"][1])
    lines = [
        f"- **{ok} of {len(stats)} cells meet the bar** (median <= {MEDIAN_BAR}, upper end of "
        f"the 95 % interval <= {UPPER_BAR}): medians {min(meds):.3f}-{max(meds):.3f}, upper "
        f"bounds {min(highs):.3f}-{max(highs):.3f} (highest: {worst['op']} M={worst['M']})."
    ]
    noise = result["eager"].get("noise") or {}
    over = [r for r in rows if not _meets(r["ratios"]["patched/pristine"])]
    if over and noise:
        lines.append(_over_the_bar(over, noise["max_abs_control_median_minus_1"]))
    if noise:
        lines.append(
            "- Method noise (the same-tree controls Q2/Q1, P2/P1): median |control - 1| = "
            f"{100 * noise['median_abs_control_median_minus_1']:.2f} %, largest "
            f"{100 * noise['max_abs_control_median_minus_1']:.2f} %; control intervals "
            f"+-{100 * noise['median_control_ci95_halfwidth']:.2f} % (median half-width), at most "
            f"+-{100 * noise['max_control_ci95_halfwidth']:.2f} %."
        )
    inst = [
        r["ratios"]["installed/patched_copy"]["median"]
        for r in rows
        if "installed/patched_copy" in r["ratios"]
    ]
    if inst:
        lines.append(
            f"- Installed package / private copy of the same patched files: "
            f"{min(inst):.3f}-{max(inst):.3f} (same files, two loaders)."
        )
    g = result["eager"].get("guard_cost_ns") or {}
    extra = {k.removesuffix(" - plain"): v for k, v in g.items() if k.endswith(" - plain")}
    if extra:
        lines.append(
            "- Hot loop on this host (`guard_cost_ns`, each minus the plain function): "
            + ", ".join(f"{GUARD_NAMES.get(k, k)} {v:.0f} ns" for k, v in extra.items())
            + (
                f"; an empty Python call {g['empty Python call']:.0f} ns."
                if "empty Python call" in g
                else "."
            )
        )
    return "\n".join(lines) + "\n"


def _over_the_bar(over: list[dict[str, Any]], control: float) -> str:
    """The cells over the bar, each against the run's own same-tree noise: a cell is within
    that noise when its interval reaches down into the controls' range (its lower end is
    <= 1 + the largest |control median - 1| of the run), beyond it otherwise."""
    cells = []
    for r in over:
        s = r["ratios"]["patched/pristine"]
        where = "within" if s["ci95"][0] <= 1 + control else "**beyond**"
        cells.append(f"{r['op']} M={r['M']} {_ratio(s)} ({where} the run's control noise)")
    return (
        f"- Over the bar: {'; '.join(cells)}. The run's same-tree controls reach "
        f"{1 + control:.3f} (largest |control median - 1| = {100 * control:.2f} %)."
    )


def imports_table(result: dict[str, Any]) -> str:
    """(i): `import flashinfer` alone (after `import torch`), patched beside pristine, and
    the flashinfer modules the -X importtime runs put the difference in."""
    fi = result["imports"]["flashinfer"]
    out = [
        "| tree | `import flashinfer` median (s) | runs | `import torch` before it (s) "
        "| `flashinfer::` ops registered | imports `torch._dynamo` |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ("patched", "pristine"):
        a = fi[arm]
        if a.get("import_s") is None:
            out.append(f"| {arm} | failed: `{(a.get('errors') or ['?'])[0][-200:]}` | | | | |")
            continue
        torch_s = "(once, forked)" if fi.get("mode", "").startswith("forked") else (
            f"{a['torch_s']:.2f}"
        )
        out.append(
            f"| {arm} | {a['import_s']:.3f} | {len(a['all_s'])} | {torch_s} "
            f"| {a['flashinfer_ops']} | {'yes' if a['imports_dynamo'] else 'no'} |"
        )
    lines = ["\n".join(out) + "\n"]
    if "ratio" in fi:
        d = fi["difference_ms"]
        lines.append(
            f"- patched/pristine, per ABBA pair ({fi['pairs']} pairs): **{_ratio(fi['ratio'])}**; "
            f"difference {d['median']:+.1f} ms [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]; "
            f"goal {fi['goal']}: {fi['verdict']}."
        )
    att = fi.get("attribution") or {}
    top = [t for t in att.get("top_self_ms_difference", []) if t["diff_ms"] >= 1.0]
    if top:
        self_ms = att["flashinfer_self_ms"]
        lines.append(
            f"- `-X importtime` ({att['runs_per_arm']} runs a tree; self time, the module's own "
            f"code): flashinfer's modules {self_ms['patched']:.0f} ms patched, "
            f"{self_ms['pristine']:.0f} ms pristine; the difference is in "
            + ", ".join(
                f"`{t['module']}` {t['diff_ms']:+.1f} ms ({t['patched_ms']:.1f} / "
                f"{t['pristine_ms']:.1f})"
                for t in top
            )
            + "."
        )
    return "\n".join(lines) + "\n"


GUARD_NAMES = {
    "guarded": "`is_compiling()` guard (revision 1)",
    "guarded_alias": "its alias",
    "guarded_flag": "a module flag",
    "guarded_exporting": "`is_exporting()` test (the series)",
}

DECOMPOSE_COLUMNS = (
    ("P/Q", "P / Q (the series)"),
    ("Pu/Q", "Pu / Q (no per-call test)"),
    ("P/Pu", "P / Pu (price of the test)"),
    ("Qe/Q", "Qe / Q (`is_exporting()`)"),
    ("Qg/Q", "Qg / Q (`is_compiling()`)"),
    ("Qa/Q", "Qa / Q (alias)"),
    ("Q2/Q", "Q2 / Q (noise)"),
)


def decompose_table(result: dict[str, Any]) -> str:
    rows = result["decompose"]["rows"]
    keys = [k for k, _ in DECOMPOSE_COLUMNS if k in rows[0]["ratios"]]
    heads = [h for k, h in DECOMPOSE_COLUMNS if k in keys]
    out = [
        f"| op ({_sm(result.get('meta', {}))}) | M | Q us | " + " | ".join(heads) + " |",
        "|---|---|---|" + "---|" * len(keys),
    ]
    for r in rows:
        cells = [_ratio(r["ratios"][k]) for k in keys]
        out.append(f"| {r['op']} | {r['M']} | {r['us']['Q']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def _trace_cell(t: dict[str, Any]) -> str:
    if "seconds" in t:
        lo, hi = min(t["all_s"]), max(t["all_s"])
        return (
            f"{t['seconds']:.2f} s ({lo:.2f}-{hi:.2f}; {t['graphs']} graph, "
            f"{t['fp4_op_calls']} op calls)"
        )
    return f"fails: `{t.get('error', '?')}`"


def peers_table(result: dict[str, Any]) -> str:
    """(p): per design eager us per call and the ratio to pristine at each M, replay time per
    call in a captured CUDA graph, Dynamo's trace of the 32-layer block."""
    peers = result["peers"]
    rows = peers["rows"]
    ms = " / ".join(str(r["M"]) for r in rows)
    out = [
        f"| design ({_sm(result.get('meta', {}))}) | eager us/call M={ms} "
        f"| / pristine [95 % CI] M={ms} | in a CUDA graph, us/call M={ms} "
        "| Dynamo trace, 32 layers |",
        "|---|---|---|---|---|",
    ]
    for name in peers["designs"]:
        us = " / ".join(f"{r['us'][name]:.1f}" for r in rows)
        ratio = (
            "1"
            if name == "pristine"
            else " / ".join(_ratio(r["ratio_to_pristine"][name]) for r in rows)
        )
        graph = " / ".join(_us(r["graph_replay_us"][name]) for r in rows)
        trace = _trace_cell(peers["trace_32_layers"].get(name, {}))
        out.append(f"| `{name}` | {us} | {ratio} | {graph} | {trace} |")
    return "\n".join(out) + "\n"


def warmup_table(result: dict[str, Any]) -> str:
    w = result["warmup"]
    out = ["| | time |", "|---|---|"]
    for key, what in (("cold_cache", "empty JIT cache"), ("warm_cache", "warm JIT cache")):
        r = w.get(key)
        if not r or "first_s" not in r:
            continue
        mods = ", ".join(f"`{m}`" for m in r.get("modules", []))
        first = r["first_s"]
        shown = f"{first:.1f} s" if first >= 1 else f"{first * 1e3:.1f} ms"
        out.append(f"| `{r['method']}`, fresh process, {what} ({mods}) | {shown} |")
        out.append(
            f"| the same again in that process ({what}) | {r['again_in_process_s'] * 1e6:.0f} us |"
        )
        out.append(f"| `import flashinfer` (patched), {what} | {r['import_flashinfer_s']:.2f} s |")
    if result.get("pristine_first_call_s") is not None:
        out.append(
            "| pristine first `fp4_quantize` call, empty JIT cache (same module) | "
            f"{result['pristine_first_call_s']:.1f} s |"
        )
    return "\n".join(out) + "\n"


def report(result: dict[str, Any]) -> str:
    """Every section the JSON has, as markdown."""
    parts = [f"Run: {caption(result)}\n"]
    if "warmup" in result and "error" not in result["warmup"]:
        parts.append("### (c) Warm-up cost\n\n" + warmup_table(result))
    if "rows" in result.get("eager", {}):
        parts.append(
            "### (a) Eager per-call latency, patched / pristine\n\n"
            "Cells: patched/pristine [95 % CI] (patched/pristine us per call); controls. "
            "Outside the bar in bold.\n\n" + eager_table(result) + "\n" + eager_verdict(result)
        )
    if "rows" in result.get("decompose", {}):
        parts.append("### (a') The per-call test in its forms\n\n" + decompose_table(result))
    if "flashinfer" in result.get("imports", {}):
        parts.append("### (i) `import flashinfer` after `import torch`\n\n" + imports_table(result))
    if "rows" in result.get("peers", {}):
        parts.append("### (p) Peers: one kernel, every design\n\n" + peers_table(result))
    return "\n".join(parts)
