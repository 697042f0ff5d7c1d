"""Compare one upstream suite run against two installs, test by test, and render the report.

Input: the events :mod:`.plugin` wrote for each file and install.  A test *regresses*
when it passes pristine and fails (or errors, or crashes its process) patched; a file that
collects pristine and fails to collect patched regresses as a whole.  Tests a time budget or a
kill left unrun are not compared: a file that runs out of time is reported as such, never as a
failure of the wheel.

A file proves nothing, and the report is *inconclusive*, when it crashes in both installs,
collects in neither, or pristine passes none of the tests that ran: then the environment, not
the wheel, is what the run measured.  So is a report in which no test passed pristine and ran
patched at all (``checked`` is 0).  The verdict is ``regression``, ``inconclusive``, ``ok``, or
``skipped`` (nothing could run here, e.g. no GPU).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from typing import Any

PASSED = frozenset({"passed", "xpassed"})
FAILED = frozenset({"failed", "error", "crashed"})
SKIPPED = frozenset({"skipped", "xfailed"})
# FlashInfer's fp4 kernels are compiled out below SM100 (#if __CUDA_ARCH__ >= 1000).
FP4_MIN_CAPABILITY = (10, 0)


def outcomes(run: dict[str, Any]) -> dict[str, str]:
    """nodeid -> outcome; the test a crash interrupted is ``crashed`` (a kill: not counted)."""
    result: dict[str, str] = {}
    begun: str | None = None
    finished = False
    for event in run["events"]:
        kind = event.get("event")
        if kind == "begin":
            begun = event["nodeid"]
        elif kind == "test":
            result[event["nodeid"]] = event["outcome"]
            begun = None
        elif kind == "finish":
            finished = True
    if begun is not None and not finished and not run["killed"]:
        result[begun] = "crashed"
    return result


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """Counts and how the run ended; a crashed run keeps its log's tail and the test it was in."""
    tests = outcomes(run)
    events = run["events"]
    collected = next((e["count"] for e in events if e.get("event") == "collected"), None)
    collect_errors = [e for e in events if e.get("event") == "collect_error"]
    finished = any(e.get("event") == "finish" for e in events)
    budget_spent = any(e.get("event") == "budget_spent" for e in events)
    if run["killed"]:
        ended = "killed"
    elif collect_errors:
        ended = "collection error"
    elif budget_spent:
        ended = "budget"
    elif not finished:
        ended = "crashed"
    elif collected == 0:
        ended = "no tests"
    else:
        ended = "completed"
    counts = {
        "passed": sum(o in PASSED for o in tests.values()),
        "failed": sum(o in FAILED for o in tests.values()),
        "skipped": sum(o in SKIPPED for o in tests.values()),
    }
    return {
        **counts,
        "collected": collected,
        "not_run": max(0, (collected or 0) - len(tests)),
        "ended": ended,
        "returncode": run["returncode"],
        "wall_s": run["wall_s"],
        "budget_s": run["budget_s"],
        "collect_errors": [
            {"nodeid": e["nodeid"], "message": e["message"][-1500:]} for e in collect_errors
        ],
        "log_tail": run["log_tail"] if ended in ("collection error", "crashed") else "",
        "crashed_in": next((n for n, o in tests.items() if o == "crashed"), None),
        "started": any(e.get("event") == "start" for e in events),
    }


def inconclusive(patched: dict[str, Any], pristine: dict[str, Any]) -> list[str]:
    """Why a file proves nothing about the wheel (summaries of both installs); [] if it does."""
    if patched["ended"] == pristine["ended"] == "crashed":
        return ["crashed in both installs"]
    if patched["ended"] == pristine["ended"] == "collection error":
        return ["collects in neither install"]
    if pristine["passed"] == 0 and pristine["failed"]:
        return [f"pristine passes none of the {pristine['failed']} test(s) that ran"]
    return []


def compare(patched: dict[str, Any], pristine: dict[str, Any]) -> dict[str, Any]:
    a, b = outcomes(patched), outcomes(pristine)
    sa, sb = summarize(patched), summarize(pristine)
    regressions = sorted(n for n, o in b.items() if o in PASSED and a.get(n) in FAILED)
    fixed = sorted(n for n, o in a.items() if o in PASSED and b.get(n) in FAILED)
    collection_regression = bool(sa["collect_errors"]) and not sb["collect_errors"] and bool(
        sb["collected"]
    )
    notes = []
    for name, s in (("patched", sa), ("pristine", sb)):
        if s["ended"] == "budget":
            notes.append(f"{name}: budget of {s['budget_s']} s spent, {s['not_run']} not run")
        elif s["ended"] == "killed":
            notes.append(f"{name}: killed after {s['wall_s']:.0f} s (budget {s['budget_s']} s), "
                         f"{s['not_run']} not run")
        elif s["ended"] in ("collection error", "crashed", "no tests"):
            notes.append(f"{name}: {s['ended']}")
    if sa["passed"] == sa["failed"] == sb["passed"] == sb["failed"] == 0 and sa["skipped"]:
        notes.append("every test skips itself here, in both installs (upstream's own gate)")
    if collection_regression:
        notes.append("collects pristine, not patched")
    why = inconclusive(sa, sb)
    notes += [f"INCONCLUSIVE: {w}" for w in why]
    status = "regression" if regressions or collection_regression else ("inconclusive" if why else "ok")
    return {
        "status": status,
        "inconclusive": why,
        "patched": sa,
        "pristine": sb,
        "compared": len(set(a) & set(b)),
        # The tests this file actually checks: they pass pristine and ran patched.
        "checked": sum(1 for n, o in b.items() if o in PASSED and n in a),
        "regressions": [{"nodeid": n, "patched": a[n]} for n in regressions],
        "fixed": fixed,
        "only_patched": len(set(a) - set(b)),
        "only_pristine": len(set(b) - set(a)),
        "notes": notes,
    }


def _device_notes(device: dict[str, Any], areas: Iterable[str]) -> list[str]:
    notes = []
    capability = tuple(device.get("capability") or ())
    if capability and capability < FP4_MIN_CAPABILITY and any(a.startswith("fp4") for a in areas):
        notes.append(
            f"SM{capability[0]}{capability[1]}: FlashInfer's fp4 kernels are compiled out below "
            "SM100 (#if __CUDA_ARCH__ >= 1000) and upstream's fp4 tests skip themselves here; "
            "the fp4 rows prove that those files import and collect with the patched wheel, "
            "not fp4 numerics (those need SM100 or SM120)."
        )
    return notes


def _verdict(*, regressions: int, collection: int, inconclusive: int, checked: int,
             ran: bool, skip_reason: str | None) -> str:
    if regressions or collection:
        return "regression"
    if not ran and skip_reason:
        return "skipped"
    if inconclusive or checked == 0:
        return "inconclusive"
    return "ok"


def build(
    *,
    manifest: dict[str, Any],
    device: dict[str, Any],
    runs: dict[str, dict[str, dict[str, Any]]],
    skipped: dict[str, str],
    jit_shared: bool,
    selected: list[dict[str, Any]],
    skip_reason: str | None = None,
) -> dict[str, Any]:
    """The report of one bundle's run; ``skip_reason``: why no file could run here."""
    files = []
    for entry in selected:
        path = entry["path"]
        row: dict[str, Any] = {"path": path, "area": entry["area"], "args": entry["args"]}
        if path in runs:
            row.update(compare(runs[path]["patched"], runs[path]["pristine"]))
        else:
            row.update(status="not run", notes=[skipped.get(path, "not run")])
        files.append(row)
    regressions = sum(len(f.get("regressions", [])) for f in files)
    collection = sum(1 for f in files if "collects pristine, not patched" in f.get("notes", []))
    undecided = [{"path": f["path"], "why": f["inconclusive"]} for f in files if f.get("inconclusive")]
    checked = sum(f.get("checked", 0) for f in files)
    verdict = _verdict(regressions=regressions, collection=collection, inconclusive=len(undecided),
                       checked=checked, ran=bool(runs), skip_reason=skip_reason)
    return {
        "stack": manifest["stack"],
        "project": manifest["project"],
        "version": manifest["version"],
        "source": manifest["source"],
        "series_modules": manifest.get("series_modules", []),
        "wheels": manifest["wheels"],
        "device": device,
        "jit_cache": "shared" if jit_shared else "separate",
        "absent": manifest.get("absent", []),
        "files": files,
        "regressions": regressions,
        "collection_regressions": collection,
        "inconclusive": undecided,
        "checked": checked,
        "files_compared": sum(1 for f in files if f["status"] != "not run"),
        "verdict": verdict,
        "skip_reason": skip_reason if verdict == "skipped" else None,
        "ok": verdict == "ok",
        "notes": _device_notes(device, [f["area"] for f in files]),
    }


def _counts(s: dict[str, Any]) -> str:
    cell = f"{s['passed']} / {s['failed']} / {s['skipped']}"
    if s["not_run"]:
        cell += f" (+{s['not_run']} not run)"
    return cell


def undecided_files(report: dict[str, Any]) -> str:
    """``path (why); ...`` of the files that prove nothing."""
    return "; ".join(f"{u['path']} ({', '.join(u['why'])})" for u in report["inconclusive"])


def verdict_line(report: dict[str, Any]) -> str:
    """The report's verdict in one line of Markdown."""
    verdict = report["verdict"]
    if verdict == "skipped":
        return f"skipped: {report['skip_reason']}"
    if verdict == "ok":
        return f"**no regression** ({report['checked']} test(s) pass pristine and ran patched)"
    if verdict == "inconclusive":
        if not report["inconclusive"]:
            return "**INCONCLUSIVE**: nothing compared (no test passed pristine and ran patched)"
        return (f"**INCONCLUSIVE**: {len(report['inconclusive'])} file(s) prove nothing: "
                + undecided_files(report))
    line = f"**{report['regressions']} regression(s)**"
    if report["collection_regressions"]:
        line += f", {report['collection_regressions']} file(s) that collect only pristine"
    if report["inconclusive"]:
        line += f"; also INCONCLUSIVE: {undecided_files(report)}"
    return line


def _exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


# faulthandler's frames of pytest itself: the frames that say where a crash was come before.
_RUNNER_FRAME = re.compile(r'^\s+File "(?:[^"]*/(?:_pytest|pluggy)/[^"]*|[^"]*/pytest/__main__\.py|<frozen runpy>)"')


def _tail(log: str, lines_each: int) -> str:
    lines = log.strip().splitlines()
    kept = [line for line in lines if not _RUNNER_FRAME.match(line)]
    if len(kept) < len(lines):
        kept.append(f"  ({len(lines) - len(kept)} frames of pytest and pluggy left out)")
    return "\n".join(kept[-lines_each:])


def crash_tails(report: dict[str, Any], lines_each: int = 40) -> list[str]:
    """Markdown: the last lines of each crashed run's output (stdout and stderr), both installs."""
    out: list[str] = []
    for f in report["files"]:
        for variant in ("patched", "pristine"):
            s = f.get(variant)
            if not s or s["ended"] != "crashed":
                continue
            if s.get("crashed_in"):
                where = f"in `{s['crashed_in']}`"
            elif not s.get("started"):
                where = "before its test session began"
            else:
                where = "while collecting" if s["collected"] is None else "between tests"
            out += ["", f"{f['path']}: crashed ({variant}), {_exit(s['returncode'])}, {where}; "
                    "its output ends:", "", "```", _tail(s["log_tail"], lines_each), "```"]
    return out


def markdown(report: dict[str, Any]) -> str:
    src = report["source"]
    dev = report["device"]
    lines = [
        f"# Upstream tests: {report['project']} {report['version']} (stack {report['stack']})",
        "",
        f"- upstream files: {src['repo']} tag {src['tag']}, commit {src['commit']} ({src['origin']})",
    ]
    for variant in ("patched", "pristine"):
        wheels = ", ".join(f"{w['filename']} (sha256 {w['sha256'][:16]})" for w in report["wheels"][variant])
        lines.append(f"- {variant}: {wheels}")
    gpu = f"{dev['gpu']} (SM{''.join(map(str, dev['capability']))})" if dev.get("gpu") else "no GPU"
    lines.append(
        f"- device: {gpu}; torch {dev.get('torch', '?')}, CUDA {dev.get('cuda') or '-'}, "
        f"Python {dev.get('python', '?')}; JIT cache {report['jit_cache']}"
    )
    if report["series_modules"]:
        lines.append("- modules the series patch: " + ", ".join(report["series_modules"]))
    meaning = " (a regression: passes pristine, fails patched)" if report["verdict"] != "inconclusive" else ""
    lines += [f"- result: {verdict_line(report)}{meaning}", ""]
    lines += [
        "| file | area | patched passed / failed / skipped | pristine passed / failed / skipped "
        "| compared | regressions | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in report["files"]:
        name = f["path"] + (f" `{' '.join(f['args'])}`" if f["args"] else "")
        if f["status"] == "not run":
            lines.append(f"| {name} | {f['area']} | - | - | - | - | {'; '.join(f['notes'])} |")
            continue
        lines.append(
            f"| {name} | {f['area']} | {_counts(f['patched'])} | {_counts(f['pristine'])} "
            f"| {f['compared']} | {len(f['regressions'])} | {'; '.join(f['notes'])} |"
        )
    for pattern in report["absent"]:
        lines.append(f"| {pattern} | - | - | - | - | - | absent at {src['tag']} |")
    regressed = [(f["path"], r) for f in report["files"] for r in f.get("regressions", [])]
    if regressed:
        lines += ["", "Regressions (pass pristine, fail patched):", ""]
        lines += [f"- `{r['nodeid']}`: {r['patched']}" for _, r in regressed]
    for f in report["files"]:
        for variant in ("patched", "pristine"):
            s = f.get(variant)
            if s and s["collect_errors"]:
                lines += ["", f"{f['path']}: collection error ({variant}):", "", "```",
                          s["collect_errors"][0]["message"][-1200:].strip(), "```"]
    lines += crash_tails(report)
    fixed = [(f["path"], n) for f in report["files"] for n in f.get("fixed", [])]
    if fixed:
        lines += ["", f"Fail pristine, pass patched: {len(fixed)}", ""]
        lines += [f"- `{n}`" for _, n in fixed[:20]]
    if report["notes"]:
        lines += [""] + [f"Note: {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"
