"""The parallel state of a case (child side): sglang's group coordinators over a gloo
world (or torch's FakeProcessGroup for ranks that are not run), set up as
``ModelRunner.init_torch_distributed`` does; where the ranks meet (:data:`WORLD`)."""

from __future__ import annotations

import inspect
import os
import socket
from typing import Any

from harness.models.fake_device import device_tensors_fake


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# Where the ranks of a tensor-parallel case meet (set by run_ranks before it forks them).
WORLD = {"rank": 0, "port": 0}
# A rank waits this long for the others in a collective (a rank that failed is killed).
DIST_TIMEOUT_S = 900


def _fake_peers(tp: int) -> str:
    """Rank 0 of ``tp`` in one process: torch's FakeProcessGroup (its collectives do
    nothing) stands in for the other ranks, for every group sglang makes (device and CPU
    groups alike).  Returns the backend name."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    # The TP group's shared-memory message queue carries the scheduler's requests to the
    # other ranks' processes and waits for them to attach: there are none (sglang's switch).
    os.environ["SGLANG_USE_MESSAGE_QUEUE_BROADCASTER"] = "false"
    new_group = getattr(dist.new_group, "__wrapped__", dist.new_group)

    def new_fake_group(*args: Any, **kwargs: Any) -> Any:
        kwargs["backend"] = "fake"
        return new_group(*args, **kwargs)

    new_fake_group.__wrapped__ = new_group  # type: ignore[attr-defined]
    dist.new_group = new_fake_group
    return "fake"


def init_parallel_state(server_args: Any, model_config: Any) -> None:
    """The parallel state of a server of ``tp_size`` GPUs, over gloo, as
    ``ModelRunner.init_torch_distributed`` sets it up (custom all-reduce on unless
    ``--disable-custom-all-reduce``; the P2P check skipped unless ``--enable-p2p-check``):
    sglang's own group coordinators, whose NCCL and custom all-reduce communicators run
    on the stand-in libraries of :mod:`collectives`."""
    from sglang.srt.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
        parallel_state,
    )
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.utils import common

    tp = server_args.tp_size
    rank = WORLD["rank"] if tp > 1 else 0
    port = WORLD["port"] if tp > 1 else free_port()
    backend = "gloo"
    if WORLD.get("fake_peers"):
        backend = _fake_peers(tp)
    parallel_state.set_custom_all_reduce(not server_args.disable_custom_all_reduce)
    if not getattr(server_args, "enable_p2p_check", False):
        common.monkey_patch_p2p_access_check()
    # Host tensors stay real (the unique ids, device ids and IPC handles the ranks
    # exchange over gloo), device allocations are fakes.
    with device_tensors_fake():
        init_distributed_environment(
            backend=backend,
            world_size=tp,
            rank=rank,
            local_rank=rank,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            timeout=DIST_TIMEOUT_S,
        )
        # 0.5.21+ read the widths from the published configuration (distributed/bootstrap.py:317,
        # :327), no longer from their arguments.
        if "tensor_model_parallel_size" in inspect.signature(initialize_model_parallel).parameters:
            initialize_model_parallel(tensor_model_parallel_size=tp)
        else:
            initialize_model_parallel()
        if "model_config" in inspect.signature(initialize_dp_attention).parameters:
            initialize_dp_attention(server_args=server_args, model_config=model_config)
        else:
            initialize_dp_attention(server_args=server_args)
    try:
        from sglang.srt.layers.moe import initialize_moe_config
    except ImportError:  # pragma: no cover - every supported release has it
        return
    if inspect.signature(initialize_moe_config).parameters:
        initialize_moe_config(server_args)
    else:  # 0.5.20+: it reads the published configuration (layers/moe/utils.py:421)
        initialize_moe_config()
