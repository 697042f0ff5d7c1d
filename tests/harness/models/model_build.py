"""A case's model and ``ModelRunner``, built the way a 1-GPU sglang server builds them
(child side): sglang's loader on the host, every tensor swapped for a fake CUDA tensor,
the runner's ``__init__`` state set from the real objects (stand-ins 5 and 7 of
:mod:`modelsim`)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from harness.models import case_server_args, interpreter
from harness.models.fake_device import device_tensors_fake, fake_mode, host_is_device, to_fake_cuda
from harness.models.memory_pools import dsa_name, memory_pools, nsa_memory_pools
from harness.models.parallel_world import WORLD, init_parallel_state


@dataclasses.dataclass
class Built:
    model: Any
    runner: Any
    # What the release decided: its ServerArgs, or from 0.5.19 its resolving view
    # (case_server_args.resolved); the runner holds the record itself.
    server_args: Any
    model_config: Any
    quant_methods: dict[str, str]
    moe_runner_backend: str
    case: dict[str, Any]
    nsa: bool = False
    piecewise_by_default: bool | None = None
    default_prefill_backend: str | None = None


def nsa_attention_backend(runner: Any) -> Any:
    """sglang's own attention backend for the server arguments (``--attention-backend nsa``,
    with the NSA prefill / decode implementations ServerArgs chose for SM120), built by
    ``ModelRunner._get_attention_backend``; its kernels are the stand-ins'."""
    with fake_mode():
        return runner._get_attention_backend()


def attention_backend(req_to_token_pool: Any = None, token_to_kv_pool: Any = None) -> Any:
    """An AttentionBackend subclass standing in for the attention kernels; it holds the
    runner's pools, as sglang's backends do (0.5.13+ models read the KV pool through the
    forward context's attention backend)."""
    import torch
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    class SimulatedAttentionBackend(AttentionBackend):
        """Outputs of the real shape; no kernels, no metadata."""

        def __init__(self) -> None:
            self.calls: list[str] = []
            self.req_to_token_pool = req_to_token_pool
            self.token_to_kv_pool = token_to_kv_pool

        def init_forward_metadata(self, forward_batch: Any) -> None:
            pass

        def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int) -> None:
            pass

        def init_forward_metadata_capture_cuda_graph(self, *args: Any, **kwargs: Any) -> None:
            pass

        def init_forward_metadata_replay_cuda_graph(self, *args: Any, **kwargs: Any) -> None:
            pass

        def get_cuda_graph_seq_len_fill_value(self) -> int:
            return 1

        def _out(self, q: Any, layer: Any) -> Any:
            self.calls.append(type(layer).__name__)
            rows = q.shape[0]
            return torch.empty(rows, layer.tp_q_head_num * layer.v_head_dim, dtype=q.dtype, device=q.device)

        def forward_decode(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, save_kv_cache: bool = True, **kw: Any) -> Any:
            return self._out(q, layer)

        def forward_extend(self, q: Any, k: Any, v: Any, layer: Any, forward_batch: Any, save_kv_cache: bool = True, **kw: Any) -> Any:
            return self._out(q, layer)

    return SimulatedAttentionBackend()


def quant_methods(model: Any) -> dict[str, str]:
    out = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is not None:
            out[name] = type(method).__name__
    return out


def model_runner(server_args: Any, model_config: Any, model: Any) -> Any:
    """``ModelRunner.__new__`` with the attributes its ``__init__`` sets for this rank."""
    import torch
    from sglang.srt.distributed.parallel_state import get_pp_group, get_tp_group
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = ModelRunner.__new__(ModelRunner)
    record, server_args = server_args, case_server_args.resolved(server_args)
    req_to_token, kv, allocator = memory_pools(server_args, model_config, model_config.dtype)
    attrs = dict(
        server_args=record,
        model_config=model_config,
        model=model,
        device="cuda",
        gpu_id=torch.cuda.current_device(),
        tp_rank=get_tp_group().rank_in_group,
        tp_size=server_args.tp_size,
        pp_rank=0,
        pp_size=1,
        moe_ep_rank=0,
        moe_ep_size=1,
        dp_size=1,
        dp_rank=None,
        attn_cp_size=1,
        attn_cp_rank=0,
        moe_dp_size=1,
        moe_dp_rank=0,
        page_size=server_args.page_size,
        dtype=model_config.dtype,
        is_draft_worker=False,
        is_generation=model_config.is_generation,
        is_multimodal=model_config.is_multimodal,
        is_hybrid_swa=getattr(model_config, "is_hybrid_swa", False),
        is_hybrid_swa_compress=getattr(model_config, "is_hybrid_swa_compress", False),
        use_mla_backend=getattr(model_config, "attention_arch", None) is not None
        and model_config.attention_arch.name == "MLA",
        spec_algorithm=SpeculativeAlgorithm.from_string(server_args.speculative_algorithm),
        req_to_token_pool=req_to_token,
        token_to_kv_pool=kv,
        token_to_kv_pool_allocator=allocator,
        max_total_num_tokens=kv.size,
        attn_backend=attention_backend(req_to_token, kv),
        decode_attn_backend_group=[],
        tp_group=get_tp_group(),
        pp_group=get_pp_group(),
        lora_manager=None,
        forward_pass_id=0,
        eagle_use_aux_hidden_state=False,
        model_is_mrope=False,
        # 0.5.10+
        enable_hisparse=getattr(server_args, "enable_hisparse", False),
        hisparse_coordinator=None,
        token_table=None,
        # 0.5.11
        device_timer=None,
        enable_elastic_ep=False,
        msprobe_debugger=None,
        # 0.5.13: install_canary's answer with the KV canary off (its default)
        canary_manager=None,
        # 0.5.14+: the eager runner sizes its buffers by it (the req-to-token pool's size)
        max_running_requests=req_to_token.size,
        # 0.5.14+: the eager runner's kernel warm-up (FlashInfer's autotuner timing real
        # kernels) counts as done, as the harness skips ModelRunner.kernel_warmup before.
        _kernel_warmed_up=True,
        # 0.5.16+: the graph runners' shared logits buffer, allocated by the first of them
        graph_shared_output=None,
        # 0.5.18+: no speculative draft model
        draft_attention_backend=None,
        # 0.5.16+ (model_runner.py:276 ...): no capture hooks, not a multi-layer draft
        capture_tail_hooks=[],
        draft_model_idx=None,
        init_new_workspace=False,
        war_fastpath_read_done_event=None,
        attention_chunk_size=getattr(model_config, "attention_chunk_size", None),
        # 0.5.20+ (model_runner.py:374, :381): no MTP draft pools, no elastic-EP rescale
        mtp_draft_device_pools=(),
        _pending_elastic_scale_update=None,
    )
    import sglang.srt.model_executor.model_runner as model_runner_module

    if hasattr(model_runner_module, "_UNSET"):  # 0.5.13: resolved on first use
        attrs["_linear_attn_registry_cache"] = model_runner_module._UNSET
    attrs["support_pp"] = "pp_proxy_tensors" in inspect.signature(model.forward).parameters
    runner.__dict__.update(attrs)
    # State ModelRunner.__init__ / initialize() derive on the way (release methods).
    if hasattr(runner, "init_startup_observability"):  # 0.5.18+ model_runner.py:458 (graph_memory_usage)
        runner.init_startup_observability()
    if hasattr(runner, "maybe_init_ngram_embedding"):
        with fake_mode():
            runner.maybe_init_ngram_embedding()
    if hasattr(model_runner_module, "resolve_layer_indices"):  # 0.5.16+
        parallel_state_and_layers(runner, "ps" in inspect.signature(ModelRunner.__init__).parameters)
    if hasattr(runner, "init_ngram_embedding_manager"):  # 0.5.16+ model_runner.py:503, from initialize() :764
        with fake_mode():
            runner.init_ngram_embedding_manager()
    return runner


def parallel_state_and_layers(runner: Any, takes_parallel_state: bool) -> None:
    """sglang 0.5.16+: the ``ParallelState`` the scheduler hands ``ModelRunner`` (0.5.16
    ``managers/scheduler.py:379``, kept at ``model_runner.py:262``) for this rank (no DP
    attention, no context parallelism), and the ``layer_info`` ``load_model`` resolves
    (``model_runner.py:581``, the release's ``resolve_layer_indices``).  0.5.21 takes no
    ``ParallelState``: the runner reads the published parallel context."""
    from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices

    # 0.5.21 (model_runner.py:665) names the draft model instead of the speculative algorithm.
    taken = inspect.signature(resolve_layer_indices).parameters
    draft = ({"spec_algorithm": runner.spec_algorithm} if "spec_algorithm" in taken
             else {"draft_model_idx": runner.draft_model_idx})
    runner.layer_info = resolve_layer_indices(model=runner.model, model_config=runner.model_config,
                                              is_draft_worker=runner.is_draft_worker, **draft)
    if not takes_parallel_state:
        return
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState

    dcp_size = getattr(case_server_args.resolved(runner.server_args), "dcp_size", 1)
    # 0.5.18+ name it attn_dcp_size (0.5.20 managers/scheduler.py:536), with its rank.
    dcp = ({"dcp_size": dcp_size} if "dcp_size" in {f.name for f in dataclasses.fields(ParallelState)}
           else {"attn_dcp_size": dcp_size, "attn_dcp_rank": runner.tp_rank % dcp_size})
    runner.ps = ParallelState.trivial(
        tp_rank=runner.tp_rank, tp_size=runner.tp_size, attn_tp_rank=runner.tp_rank, attn_tp_size=runner.tp_size,
        gpu_id=runner.gpu_id, **dcp,
    )


def build(case: dict[str, Any]) -> Built:
    """The model of ``case`` built the way a 1-GPU sglang server builds it."""
    import torch
    from sglang.srt.configs.device_config import DeviceConfig
    from sglang.srt.configs.load_config import LoadConfig
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_loader import get_model_loader

    path = case_server_args.write_checkpoint_dir(case["family"], interpreter.STATE["tmp"])
    by_default = case_server_args.piecewise_by_default(case, path)
    default_prefill = case_server_args.prefill_backend_by_default(case, path)
    server_args = case_server_args.server_args_for(case, path)
    case_server_args.publish_for_scheduler(server_args, WORLD["rank"] if server_args.tp_size > 1 else 0)
    model_config = ModelConfig.from_server_args(server_args)
    init_parallel_state(case_server_args.resolved(server_args), model_config)
    load_config = LoadConfig(load_format=server_args.load_format)
    try:
        loader = get_model_loader(load_config, model_config)
    except TypeError:
        loader = get_model_loader(load_config)
    if type(loader).__name__ == "ModelOptModelLoader" and server_args.load_format == "dummy":
        # sglang 0.5.4 ... 0.5.4.post2 ask for a ModelOpt quantization before the dummy
        # format (0.5.4.post3 asks for dummy first, model_loader/loader.py:2052), and their
        # ModelOptModelLoader quantizes a checkpoint without hf_quant_config.json itself.  A
        # real NVFP4 checkpoint has that file and loads through DefaultModelLoader's
        # _initialize_model, as the dummy loader builds it: only the weights differ.
        from sglang.srt.model_loader.loader import DummyModelLoader

        loader = DummyModelLoader(load_config)
    # Built on the host; what the model allocates on the GPU by name (DeepSeek's YaRN
    # rotary cache: device="cuda") is a fake CUDA tensor, as it would be on the device.
    with host_is_device(), torch.device("cpu"), device_tensors_fake():
        model = loader.load_model(model_config=model_config, device_config=DeviceConfig("cpu"))
    to_fake_cuda(model)
    from sglang.srt.configs import model_config as model_configs
    from sglang.srt.layers.moe.utils import get_moe_runner_backend

    runner = model_runner(server_args, model_config, model)
    nsa = dsa_name(model_configs, "is_deepseek_nsa", "is_deepseek_dsa")(model_config.hf_config)
    if nsa:
        nsa_memory_pools(runner)
        runner.attn_backend = nsa_attention_backend(runner)
    return Built(
        nsa=nsa,
        piecewise_by_default=by_default,
        default_prefill_backend=default_prefill,
        model=model,
        runner=runner,
        server_args=case_server_args.resolved(server_args),
        model_config=model_config,
        quant_methods=quant_methods(model),
        moe_runner_backend=str(get_moe_runner_backend()),
        case=case,
    )
