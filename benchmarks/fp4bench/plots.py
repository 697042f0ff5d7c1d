"""PNG figures of a results JSON (matplotlib, Agg)."""

from __future__ import annotations

import pathlib
from typing import Any

from .common import log


def _note(fig: Any, meta: dict[str, Any], bottom: float) -> None:
    fig.subplots_adjust(bottom=bottom)
    if meta.get("sm_note"):
        fig.text(0.01, 0.01, meta["sm_note"], fontsize=6.5, wrap=True)


def plot_block(result: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["block"]["rows"] if r["variants"]]
    meta = result["meta"]
    ms = [r["M"] for r in rows]

    def val(r: dict[str, Any], v: str, what: str = "time") -> float:
        vr = r["variants"].get(v, {})
        if what == "time":
            return vr.get("time", {}).get("median_us", float("nan"))
        return vr.get("kernels", {}).get("sum_us", float("nan"))

    series = [
        ("eager", [val(r, "eager") for r in rows]),
        ("piecewise CUDA graphs", [val(r, "piecewise") for r in rows]),
        ("reduce-overhead, weights closed over (1st run)", [val(r, "ro_closure") for r in rows]),
        ("reduce-overhead, weights = module params", [val(r, "ro") for r in rows]),
        ("backend='eager' + CUDA graph", [val(r, "eager_graph") for r in rows]),
        ("summed kernels, eager", [val(r, "eager", "kernels") for r in rows]),
        ("probe's block, eager", [val(r, "probe_eager") for r in rows]),
        ("probe's block, reduce-overhead, params", [val(r, "probe_ro") for r in rows]),
    ]
    fig, ax = plt.subplots(figsize=(10, 6))
    width = 0.84 / len(series)
    for i, (label, vals) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(ms))]
        bars = ax.bar(xs, vals, width, label=label)
        for b, v in zip(bars, vals, strict=True):
            if v == v:
                ax.annotate(
                    f"{v:.0f}",
                    (b.get_x() + b.get_width() / 2, v),
                    ha="center",
                    va="bottom",
                    fontsize=6.5,
                )
    ax.set_yscale("log")
    ax.set_xticks(range(len(ms)), [f"M={m}" for m in ms])
    ax.set_ylabel("time per block call (us, log)")
    r0 = rows[0]
    ax.set_title(
        f"{r0['layers']} x [RMSNorm -> fp4_quantize -> GEMM -> add], K={r0['K']}\n"
        f"{meta['gpu']} (SM{meta['capability']}), flashinfer {meta['flashinfer']}, "
        f"torch {meta['torch']}",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=3)
    _note(fig, meta, bottom=0.3)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_eager(result: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["eager"]["rows"] if "ratios" in r]
    meta = result["meta"]
    ops = list(dict.fromkeys(r["op"] for r in rows))
    ms = list(dict.fromkeys(r["M"] for r in rows))
    keys = [
        ("patched/pristine", "C0"),
        ("pristine/pristine", "C2"),
        ("patched/patched", "C1"),
        ("installed/pristine_copy", "C3"),
    ]
    fig, ax = plt.subplots(figsize=(12, 6.5))
    xt, xl = [], []
    for oi, op in enumerate(ops):
        for mi, m in enumerate(ms):
            r = next((r for r in rows if r["op"] == op and r["M"] == m), None)
            if r is None:
                continue
            x0 = oi * (len(ms) + 1) + mi
            xt.append(x0)
            short = op.replace("_quantize", "_q").replace("scaled_", "").replace("_experts", "")
            xl.append(f"{short[:26]} M={m}")
            for ki, (key, color) in enumerate(keys):
                s = r["ratios"][key]
                xx = x0 + (ki - 1.5) * 0.18
                ax.errorbar(
                    [xx],
                    [s["median"]],
                    yerr=[[s["median"] - s["ci95"][0]], [s["ci95"][1] - s["median"]]],
                    fmt="o",
                    ms=3,
                    color=color,
                    label=key if (oi, mi) == (0, 0) else None,
                )
    ax.axhline(1.0, color="k", lw=0.6)
    ax.axhline(1.02, color="r", lw=0.8, ls="--", label="goal 1.02")
    ax.set_xticks(xt, xl, fontsize=6, rotation=70, ha="right")
    ax.set_ylabel("ratio of per-call time (median, 95% CI)")
    ax.set_title(
        f"Eager per-call time, one process, 5 interleaved arms; {meta['gpu']} "
        f"(SM{meta['capability']}), flashinfer {meta['flashinfer']}",
        fontsize=9,
    )
    ax.legend(fontsize=7, loc="upper left", ncol=5)
    _note(fig, meta, bottom=0.33)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_peers(result: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peers = result["peers"]
    meta = result["meta"]
    names = list(peers["designs"])
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [3, 1]})
    for mi, row in enumerate(peers["rows"]):
        xs, meds, lo, hi = [], [], [], []
        for ni, name in enumerate(names):
            if name == "pristine":
                continue
            s = row["ratio_to_pristine"][name]
            xs.append(ni + (mi - 1) * 0.25)
            meds.append(s["median"])
            lo.append(s["median"] - s["ci95"][0])
            hi.append(s["ci95"][1] - s["median"])
        ax.errorbar(xs, meds, yerr=[lo, hi], fmt="o", ms=3, label=f"M={row['M']}")
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=7)
    ax.set_ylabel("eager time per call / pristine (median, 95% CI)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    trace = peers["trace_32_layers"]
    ok = [n for n in names if "seconds" in trace.get(n, {})]
    ax2.barh(ok, [trace[n]["seconds"] for n in ok])
    ax2.set_xlabel("Dynamo trace, 32 layers (s)")
    ax2.tick_params(labelsize=7)
    fig.suptitle(
        f"One fp4_quantize kernel, every design: {meta['gpu']} (SM{meta['capability']}), "
        f"flashinfer {meta['pristine']}, torch {meta['torch']}",
        fontsize=9,
    )
    _note(fig, meta, bottom=0.28)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_all(result: dict[str, Any], out: pathlib.Path, stem: str) -> None:
    for name, fn in (("block", plot_block), ("eager", plot_eager), ("peers", plot_peers)):
        if "rows" in result.get(name, {}):
            try:
                fn(result, out / f"{stem}-{name}.png")
                log(f"wrote {out / (stem + '-' + name + '.png')}")
            except Exception as e:  # a plot must not lose the JSON
                log(f"plot {name} FAILED: {type(e).__name__}: {e}")
