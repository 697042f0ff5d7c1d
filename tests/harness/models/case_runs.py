"""How the cases run (child side): each in a fork of the prepared interpreter
(:func:`run_cases`), a tensor-parallel case as one fork per rank (:func:`run_ranks`) or
rank 0 alone, and the all-reduce probe."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from typing import Any

from harness.child import fork_writing, read_fork
from harness.models import (
    case_server_args,
    collectives,
    graph_capture,
    interpreter,
    model_build,
    stand_ins,
)
from harness.models.case_errors import error_report
from harness.models.fake_device import fake_mode
from harness.models.graph_capture import COLLECTIVE_OP_CALLS, COLLECTIVE_OPS
from harness.models.parallel_world import WORLD, free_port, init_parallel_state


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    tp = case.get("tp_size", 1)
    if tp > 1 and case.get("processes", tp) == 1:  # one rank, the others stood in for
        from fp4graph.verify import simulate

        WORLD["fake_peers"] = True
        simulate.set_device_count(tp)
        return run_rank(case)
    if tp > 1:
        return run_ranks(case)
    return run_rank(case)


def all_reduce_paths(case: dict[str, Any]) -> dict[str, Any]:
    """Which collective sglang's TP group runs for an all-reduce on this machine (a PCIe
    box of ``tp_size`` GPUs): for a small and a large (above the custom all-reduce's
    ``max_size``) activation, eagerly and inside piecewise CUDA graph mode, as
    ``GroupCoordinator.all_reduce`` decides; nothing else of the model is built."""
    import torch
    from sglang.srt.compilation.piecewise_context_manager import enable_piecewise_cuda_graph
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.distributed.parallel_state import get_tp_group

    path = case_server_args.write_checkpoint_dir(case["family"], interpreter.STATE["tmp"])
    server_args = case_server_args.server_args_for(case, path)
    case_server_args.publish_for_scheduler(server_args, WORLD["rank"] if server_args.tp_size > 1 else 0)
    model_config = ModelConfig.from_server_args(server_args)
    init_parallel_state(case_server_args.resolved(server_args), model_config)
    stand_ins.run_split_op_bodies([*COLLECTIVE_OPS, "sglang.inplace_all_reduce"], COLLECTIVE_OP_CALLS)
    group = get_tp_group()
    ca = group.ca_comm
    hidden = model_config.hidden_size
    large_rows = (getattr(ca, "max_size", 8 << 20) // (hidden * 2)) + 16
    out: dict[str, Any] = {"ok": True, "stage": None, "parallel": collectives.report()}
    for size, rows in (("small", 16), ("large", large_rows)):
        for mode in ("eager", "piecewise"):
            mark = len(collectives.LOG)
            with fake_mode():
                x = torch.empty(rows, hidden, dtype=torch.bfloat16, device="cuda")
                with enable_piecewise_cuda_graph() if mode == "piecewise" else contextlib.nullcontext():
                    group.all_reduce(x)
            out[f"{size}/{mode}"] = sorted({c.via for c in collectives.LOG[mark:]})
    return out


def run_rank(case: dict[str, Any]) -> dict[str, Any]:
    if case.get("probe") == "all_reduce_paths":
        try:
            return all_reduce_paths(case)
        except Exception as exc:
            return {"ok": False, "stage": "probe", **error_report(exc)}
    try:
        built = model_build.build(case)
    except Exception as exc:
        return {"case": {"family": case["family"]["name"]}, "ok": False, "stage": "build", **error_report(exc)}
    return graph_capture.capture(built)


def _crashed(case: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """The report of a case (or rank) process that raised."""
    return {"case": {"family": case["family"]["name"]}, "ok": False, "stage": "child", **error_report(exc)}


def _rank(case: dict[str, Any], rank: int) -> dict[str, Any]:
    """In the fork of ``rank``: its GPU current, its report once every rank is done."""
    from fp4graph.verify import simulate

    WORLD["rank"] = rank
    simulate.set_device(rank)
    out = run_rank(case)
    if out.get("ok"):  # no rank leaves the world while another still talks to it
        import torch.distributed as dist

        dist.barrier()
    return out


def run_ranks(case: dict[str, Any]) -> dict[str, Any]:
    """A tensor-parallel case: one process per rank (forks of this one), each with its GPU
    current, meeting in a gloo world on the host; returns each rank's report under
    ``ranks`` (rank order) and ``ok`` when every rank's is.  A rank that fails or dies
    ends the case: the others, blocked in a collective, are killed."""
    import selectors
    import signal
    import time

    from fp4graph.verify import simulate

    tp = case["tp_size"]
    WORLD["port"] = free_port()
    simulate.set_device_count(tp)
    case_server_args.write_checkpoint_dir(case["family"], interpreter.STATE["tmp"])  # before the ranks read it
    children: dict[int, tuple[int, int]] = {}  # fd -> (rank, pid)
    for rank in range(tp):
        pid, read = fork_writing(functools.partial(_rank, case, rank), functools.partial(_crashed, case))
        children[read] = (rank, pid)
    data: dict[int, list[bytes]] = {rank: [] for rank, _ in children.values()}
    done: dict[int, dict[str, Any]] = {}
    selector = selectors.DefaultSelector()
    for fd in children:
        selector.register(fd, selectors.EVENT_READ)
    deadline: float | None = None
    while len(done) < tp:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        events = selector.select(timeout)
        if not events:  # a rank failed and the others did not finish: kill them
            for fd, (rank, pid) in children.items():
                if rank not in done:
                    os.kill(pid, signal.SIGKILL)
                    done[rank] = {"ok": False, "stage": "killed",
                                  "error": f"rank {rank} killed: another rank failed and it did not finish"}
                    selector.unregister(fd)
            break
        for key, _ in events:
            rank, pid = children[key.fd]
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                data[rank].append(chunk)
                continue
            selector.unregister(key.fd)
            text = b"".join(data[rank]).decode()
            done[rank] = json.loads(text) if text else {"ok": False, "stage": "child",
                                                         "error": f"rank {rank} died without a report"}
            if not done[rank].get("ok") and deadline is None:
                deadline = time.monotonic() + 60
    for fd, (_, pid) in children.items():
        os.waitpid(pid, 0)
        os.close(fd)
    ranks = [done[r] for r in range(tp)]
    failed = next((r for r in ranks if not r.get("ok")), None)
    return {
        "case": {k: v for k, v in case.items() if k != "family"} | {"family": case["family"]["name"]},
        "ok": failed is None,
        "stage": None if failed is None else failed.get("stage"),
        "error": None if failed is None else failed.get("error"),
        "ranks": ranks,
    }


def run_cases(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case in a fork of this (prepared) interpreter; results in order, each with
    the wall time its case took (``seconds``)."""
    import time

    results = []
    if os.environ.get("FP4GRAPH_MODELS_NO_FORK"):  # debugging: one case, in-process
        return [run_case(case) for case in cases]
    for case in cases:
        start = time.monotonic()
        data, code = read_fork(*fork_writing(functools.partial(run_case, case), functools.partial(_crashed, case)))
        if not data:
            data = json.dumps({"case": {"family": case["family"]["name"]}, "ok": False, "stage": "child",
                               "error": f"case process died (exit code {code})"})
        results.append(json.loads(data) | {"seconds": round(time.monotonic() - start, 1)})
    return results
