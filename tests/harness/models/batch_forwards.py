"""Forwards of a captured runner (child side): the extend batch the scheduler hands
``ModelRunner.forward``, a padded piecewise replay, the EAGLE target prefill, and the
eager forwards of a rank."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
from typing import Any

from harness.models import collectives, stand_ins
from harness.models.fake_device import fake_mode
from harness.models.model_build import Built


def prefill_graph_runner(runner: Any) -> Any:
    """The runner replaying the torch.compile piecewise graphs, None if there is none:
    ``piecewise_cuda_graph_runner`` up to 0.5.13, from 0.5.14 ``prefill_cuda_graph_runner``
    with a tc_piecewise backend (the eager runner stands there when prefill graphs are off)."""
    if not hasattr(runner, "init_prefill_cuda_graph"):
        return runner.piecewise_cuda_graph_runner
    pcg = getattr(runner, "prefill_cuda_graph_runner", None)
    return pcg if pcg is not None and hasattr(pcg, "backend") else None


def can_replay(pcg: Any, batch: Any) -> bool:
    return bool(pcg.can_run_graph(batch) if hasattr(pcg, "can_run_graph") else pcg.can_run(batch))


def replay_graphs(pcg: Any, batch: Any) -> Any:
    return pcg.execute(batch) if hasattr(pcg, "execute") else pcg.replay(batch)


def extend_batch(runner: Any, num_tokens: int, hidden: str = "NULL") -> Any:
    """A prefill (extend) batch of one new request of ``num_tokens`` tokens, as the
    scheduler hands it to ``ModelRunner.forward``: the fields the piecewise runner
    reads (its warm-up batch's), host lengths made from Python data (so the NSA
    backend's metadata code can read them), device tensors fake."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import (
        CaptureHiddenMode,
        ForwardBatch,
        ForwardMode,
    )

    fields = {f.name for f in dataclasses.fields(ForwardBatch)}
    values: dict[str, Any] = dict(
        forward_mode=ForwardMode.EXTEND,
        global_forward_mode=ForwardMode.EXTEND,
        batch_size=1,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device="cuda"),
        positions=torch.arange(num_tokens, dtype=torch.int64, device="cuda"),
        req_pool_indices=torch.zeros(1, dtype=torch.int64, device="cuda"),
        seq_lens=torch.tensor([num_tokens], device="cuda"),
        orig_seq_lens=torch.tensor([num_tokens], device="cuda"),
        seq_lens_cpu=torch.tensor([num_tokens]),
        seq_lens_sum=num_tokens,
        req_to_token_pool=runner.req_to_token_pool,
        token_to_kv_pool=runner.token_to_kv_pool,
        attn_backend=runner.attn_backend,
        out_cache_loc=torch.arange(num_tokens, dtype=torch.int64, device="cuda"),
        extend_num_tokens=num_tokens,
        extend_seq_lens=torch.tensor([num_tokens], device="cuda"),
        extend_prefix_lens=torch.tensor([0], device="cuda"),
        extend_start_loc=torch.tensor([0], device="cuda"),
        extend_seq_lens_cpu=[num_tokens],
        extend_prefix_lens_cpu=[0],
        extend_logprob_start_lens_cpu=[num_tokens],
        return_logprob=False,
        capture_hidden_mode=getattr(CaptureHiddenMode, hidden),
    )
    return ForwardBatch(**{k: v for k, v in values.items() if k in fields})


def speculative_prefill(built: Built, num_tokens: int) -> dict[str, Any]:
    """The target model's prefill under speculative decoding (EAGLE / MTP): the EAGLE
    worker asks for every hidden state (``CaptureHiddenMode.FULL``, its
    ``forward_target_extend``).  Whether the piecewise runner takes such a batch, and
    where it does, one padded replay of it (the draft model reads its hidden states)."""
    import torch

    pcg = prefill_graph_runner(built.runner)
    with fake_mode(), torch.no_grad():
        batch = extend_batch(built.runner, num_tokens, hidden="FULL")
        out: dict[str, Any] = {"can_run": can_replay(pcg, batch),
                               "spec_algorithm": str(built.runner.spec_algorithm)}
        if out["can_run"]:
            output = replay_graphs(pcg, batch)
            hidden = output.hidden_states
            out["logits"] = list(map(int, output.next_token_logits.shape))
            out["hidden_states"] = None if hidden is None else list(map(int, hidden.shape))
    return out


def runner_forward_context(runner: Any) -> Any:
    """The context ``ModelRunner._forward_raw`` publishes around every forward (sglang
    0.5.13+: ``forward_context(ForwardContext(attn_backend=...))``, which the model's DSA
    attention reads); nothing on releases without one."""
    try:
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
    except ImportError:
        return contextlib.nullcontext()
    return forward_context(ForwardContext(attn_backend=runner.attn_backend))


def replay(built: Built, num_tokens: int) -> dict[str, Any]:
    """One replay of the captured piecewise graphs for a batch of ``num_tokens`` (not a
    capture size: the runner pads it to the next one), as ``ModelRunner.forward_extend``
    replays them.  Returns the padded size, the output rows, and the kernel calls made
    in the replay with the rows of their first tensor argument."""
    import torch

    pcg = prefill_graph_runner(built.runner)
    first = len(stand_ins.KERNEL_SHAPES)
    calls = len(stand_ins.SPLIT_OP_CALLS)
    with fake_mode(), torch.no_grad(), runner_forward_context(built.runner):
        batch = extend_batch(built.runner, num_tokens)
        assert can_replay(pcg, batch), f"the piecewise runner refuses a {num_tokens}-token extend batch"
        output = replay_graphs(pcg, batch)
    kernels: dict[str, list[int]] = {}
    for name, rows in stand_ins.KERNEL_SHAPES[first:]:
        kernels.setdefault(name, []).append(rows)
    return {
        "tokens": num_tokens,
        "static_tokens": min(n for n in pcg.capture_num_tokens if n >= num_tokens),
        "logits_rows": int(output.next_token_logits.shape[0]),
        "logits": [list(map(int, output.next_token_logits.shape)), str(output.next_token_logits.dtype),
                   str(output.next_token_logits.device)],
        "split_op_calls": dict(collections.Counter(stand_ins.SPLIT_OP_CALLS[calls:])),
        "kernel_rows": {k: sorted(set(v)) for k, v in kernels.items()},
    }


def eager_forwards(built: Built, tokens: int, static_tokens: int) -> dict[str, Any]:
    """What an eager forward (``ModelRunner.forward_extend`` with no piecewise runner, the
    server with piecewise off) of this rank gives: for the replay's real batch, the
    logits' shape; for a batch of the padded size, the collectives it runs, in order (the
    replay runs its graphs captured at that size)."""
    import torch

    runner = built.runner
    pcg, runner.piecewise_cuda_graph_runner = runner.piecewise_cuda_graph_runner, None
    out: dict[str, Any] = {}
    try:
        for name, n in (("real", tokens), ("padded", static_tokens)):
            mark = len(collectives.LOG)
            with fake_mode(), torch.no_grad():
                result = runner.forward_extend(extend_batch(runner, n))
            output = result[0] if isinstance(result, tuple) else result
            logits = output.next_token_logits
            out[name] = {
                "tokens": n,
                "logits": [list(map(int, logits.shape)), str(logits.dtype), str(logits.device)],
                "collectives": [c.key() for c in collectives.LOG[mark:]],
            }
    finally:
        runner.piecewise_cuda_graph_runner = pcg
    return out
