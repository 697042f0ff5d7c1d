"""A case's server (child side): its model directory (only ``config.json``: dummy
weights) and the release's own ``ServerArgs`` for it."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from typing import Any


def write_checkpoint_dir(family: dict[str, Any], root: str) -> str:
    """A model directory holding only the family's config.json (dummy weights)."""
    path = pathlib.Path(root) / family["name"]
    path.mkdir(parents=True, exist_ok=True)
    # Atomically: the ranks of a tensor-parallel case read it at once.
    tmp = path / f"config.json.{os.getpid()}"
    tmp.write_text(json.dumps(family["config"], indent=1))
    os.replace(tmp, path / "config.json")
    return str(path)


def server_args_for(case: dict[str, Any], model_path: str) -> Any:
    from sglang.srt.server_args import ServerArgs

    kwargs: dict[str, Any] = {
        "model_path": model_path,
        "quantization": "modelopt_fp4",
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "moe_runner_backend": case.get("moe_runner_backend", "auto"),
        "disable_cuda_graph": not case.get("cuda_graph", True),
        # Few capture sizes keep a case short; the runner's code path is the same.
        "piecewise_cuda_graph_max_tokens": 16,
        "cuda_graph_max_bs": 2,
        "mem_fraction_static": 0.8,
        "tp_size": case.get("tp_size", 1),
    }
    fields = field_names(ServerArgs)
    # 0.5.9 has piecewise CUDA graph opt-in, 0.5.10+ on by default.
    if "enable_piecewise_cuda_graph" in fields:
        kwargs["enable_piecewise_cuda_graph"] = True
    if RUNNER_BACKENDS in fields:
        kwargs.update(runner_backend_args(case))
    kwargs.update(case["family"].get("server_args", {}))
    kwargs.update(case.get("server_args", {}))
    chosen = {k: v for k, v in kwargs.items() if k in fields}
    if dataclasses.is_dataclass(ServerArgs):
        return ServerArgs(**chosen)
    # 0.5.20+: the record is built from the command line (server_args.py:690
    # prepare_server_args) and resolved later, by publish (runtime_context.py:1593).
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args(command_line(chosen, declared_defaults(ServerArgs)))


def field_names(server_args_type: Any) -> set[str]:
    """The fields of the release's ``ServerArgs``: a dataclass up to 0.5.19, a
    ``msgspec.Struct`` from 0.5.20 (``server_args.py:551``, ``msgspec.defstruct``)."""
    if dataclasses.is_dataclass(server_args_type):
        return {f.name for f in dataclasses.fields(server_args_type)}
    import msgspec

    return {f.name for f in msgspec.structs.fields(server_args_type)}


def declared_defaults(server_args_type: Any) -> dict[str, Any]:
    import msgspec

    return {f.name: f.default for f in msgspec.structs.fields(server_args_type)}


# 0.5.20+: fields without a flag of their own, and the flag the release keeps for them
# (0.5.20 server_args.py:406, ``--disable-cuda-graph``, deprecated).
NO_CLI_FLAGS = {"disable_cuda_graph": "--disable-cuda-graph"}


def command_line(chosen: dict[str, Any], defaults: dict[str, Any]) -> list[str]:
    """The ``sglang serve`` arguments asking for ``chosen``: a flag per value that is
    not the field's declared default (a bool as its store-true flag)."""
    argv: list[str] = []
    for name, value in chosen.items():
        if value is None or value == defaults.get(name):
            continue
        flag = NO_CLI_FLAGS.get(name, "--" + name.replace("_", "-"))
        if isinstance(value, bool):
            if not value:
                raise ValueError(f"ServerArgs.{name}=False: no flag turns off a field whose default is True")
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def publish_for_scheduler(server_args: Any, tp_rank: int) -> None:
    """Publish ``server_args`` as the scheduler process of ``tp_rank`` does: up to 0.5.20
    ``set_global_server_args_for_scheduler``; 0.5.21+ publish its rank bundle with it
    (``managers/scheduler.py:6047``: the parallel context's ranks come from it)."""
    import inspect

    from sglang.srt.server_args import set_global_server_args_for_scheduler

    try:
        from sglang.srt import runtime_context
    except ImportError:  # before 0.5.14
        runtime_context = None
    publish = getattr(runtime_context, "publish", None)
    if publish is None or "ranks" not in inspect.signature(publish).parameters:
        set_global_server_args_for_scheduler(server_args)
        return
    import torch

    world_rank = runtime_context.spawn_world_rank(server_args, tp_rank=tp_rank, pp_rank=0)
    ranks = runtime_context.SpawnRanks(world_rank=world_rank, dp_rank=None, gpu_id=torch.cuda.current_device())
    publish(server_args, role="scheduler", ranks=ranks)


def resolved(server_args: Any) -> Any:
    """What the release decided for ``server_args``: the record itself up to 0.5.18
    (``__post_init__`` wrote its fields); from 0.5.19 the fields keep the input and the
    decisions are declarations (0.5.20 ``server_args.py:253`` ``resolve_once``), read
    through the release's own view (``arg_groups/model_override_base.py:137``)."""
    if not hasattr(server_args, "resolve_once"):
        return server_args
    from sglang.srt.arg_groups.model_override_base import resolving_view

    server_args.resolve_once()
    return resolving_view(server_args)


# sglang 0.5.14+ (the runner-backend refactor): a CUDA graph backend per phase
# (model_executor/cuda_graph_config.py), the prefill one chosen by the user with
# ``--cuda-graph-backend-prefill`` (or ``--cuda-graph-config``); torch.compile piecewise is
# ``tc_piecewise``.
RUNNER_BACKENDS = "cuda_graph_backend_prefill"
TC_PIECEWISE = "tc_piecewise"


def runner_backend_args(case: dict[str, Any]) -> dict[str, Any]:
    """The 0.5.14+ flags of ``case``: ``--cuda-graph-backend-prefill tc_piecewise`` (a user's
    selection: sglang then skips its auto-disable rules), decode graphs off with
    ``--disable-decode-cuda-graph`` (the legacy ``disable_cuda_graph`` turns prefill off
    too), the same few capture sizes as before."""
    return {RUNNER_BACKENDS: TC_PIECEWISE, "cuda_graph_max_bs_prefill": 16, "cuda_graph_max_bs_decode": 2,
            "disable_cuda_graph": False, "disable_decode_cuda_graph": not case.get("cuda_graph", True)}


def prefill_backend_by_default(case: dict[str, Any], model_path: str) -> str | None:
    """sglang 0.5.14+: the prefill CUDA graph backend ``ServerArgs`` resolves for the case's
    model when the user names none (its default, after its own auto-disable rules);
    None before 0.5.14."""
    from sglang.srt.server_args import ServerArgs

    if RUNNER_BACKENDS not in field_names(ServerArgs):
        return None
    plain = {**case, "server_args": {**case.get("server_args", {}), RUNNER_BACKENDS: None}}
    return str(resolved(server_args_for(plain, model_path)).cuda_graph_config.prefill.backend)


def piecewise_by_default(case: dict[str, Any], model_path: str) -> bool:
    """Whether the release's own ``ServerArgs`` keeps piecewise CUDA graph on for the case's
    model when the user does not enforce it (the family row's
    ``enforce_piecewise_cuda_graph`` dropped): sglang 0.5.10 ... 0.5.12 turn it off for
    NSA models (``is_piecewise_cuda_graph_disabled_model``), which the cases then trace as
    if it were on."""
    family = dict(case["family"])
    family["server_args"] = {k: v for k, v in family.get("server_args", {}).items()
                             if k != "enforce_piecewise_cuda_graph"}
    args = resolved(server_args_for({**case, "family": family}, model_path))
    if hasattr(args, RUNNER_BACKENDS):  # 0.5.14+: the prefill backend the selection resolves to
        return str(args.cuda_graph_config.prefill.backend) == TC_PIECEWISE
    if hasattr(args, "disable_piecewise_cuda_graph"):  # 0.5.10 ... 0.5.13: on unless turned off
        return not args.disable_piecewise_cuda_graph
    return bool(args.enable_piecewise_cuda_graph)  # 0.5.8 ... 0.5.9: opt-in (server_args_for opts in)
