"""The memory pools of a model runner (child side; stand-in 6 of :mod:`modelsim`):
stand-in pools of the real shapes, or for DSA (NSA) models sglang's own pools with only
the allocator stood in."""

from __future__ import annotations

from typing import Any

from harness.models.fake_device import fake_mode


class _Pool:
    """A memory pool stand-in: its size and fake buffers of the real shapes."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


class _KVPool(_Pool):
    """``token_to_kv_pool``: per-layer K/V (or MLA latent) buffers, preallocated
    like sglang's pools, returned by the same accessors."""

    def get_key_buffer(self, layer_id: int) -> Any:
        return self.k_buffer[layer_id - self.start_layer]

    def get_value_buffer(self, layer_id: int) -> Any:
        return self.v_buffer[layer_id - self.start_layer]

    def get_kv_buffer(self, layer_id: int) -> tuple[Any, Any]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def set_kv_buffer(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_mla_kv_buffer(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_swa_loc(self, loc: Any) -> None:
        pass

    def get_kv_size_bytes(self) -> tuple[int, int]:
        return (0, 0)


def memory_pools(server_args: Any, model_config: Any, dtype: Any) -> tuple[Any, Any, Any]:
    import torch

    size, tokens, context = 64, 256, 4096
    layers = model_config.num_hidden_layers
    if getattr(model_config, "kv_lora_rank", None):
        k_shape = v_shape = (tokens + 1, 1, model_config.kv_lora_rank + model_config.qk_rope_head_dim)
    else:
        heads = model_config.get_num_kv_heads(1)
        k_shape = (tokens + 1, heads, model_config.head_dim)
        v_shape = (tokens + 1, heads, getattr(model_config, "v_head_dim", model_config.head_dim))
    with fake_mode():
        req_to_token = _Pool(
            size=size,
            max_context_len=context,
            device="cuda",
            req_to_token=torch.zeros(size, context, dtype=torch.int32, device="cuda"),
        )
        kv = _KVPool(
            size=tokens,
            page_size=1,
            dtype=dtype,
            store_dtype=dtype,
            device="cuda",
            layer_num=layers,
            start_layer=0,
            end_layer=layers,
            k_buffer=[torch.empty(k_shape, dtype=dtype, device="cuda") for _ in range(layers)],
            v_buffer=[torch.empty(v_shape, dtype=dtype, device="cuda") for _ in range(layers)],
        )
    allocator = _Pool(size=tokens, page_size=1, device="cuda", get_kvcache=lambda: kv)
    return req_to_token, kv, allocator


def dsa_name(module: Any, nsa: str, dsa: str) -> Any:
    """``module.<nsa>``, or its 0.5.13+ name ``<dsa>`` (NSA became DSA in sglang's names)."""
    return getattr(module, nsa) if hasattr(module, nsa) else getattr(module, dsa)


def nsa_memory_pools(runner: Any) -> None:
    """The pools of an NSA (DSA) model, built by sglang's own classes with the arguments
    ``ModelRunnerKVCacheMixin.init_memory_pool`` passes (its sizes: :func:`memory_pools`):
    ``ReqToTokenPool`` and ``NSATokenToKVPool`` (paged latent cache + the indexer's fp8
    k cache with scales); the KV cache dtype from ``ModelRunner.configure_kv_cache_dtype``."""
    from sglang.srt.configs import model_config
    from sglang.srt.mem_cache import memory_pool
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    # sglang 0.5.13 renamed NSA to DSA (PR #23351's release).
    index_head_dim = dsa_name(model_config, "get_nsa_index_head_dim", "get_dsa_index_head_dim")
    token_to_kv_pool = dsa_name(memory_pool, "NSATokenToKVPool", "DSATokenToKVPool")

    size, tokens, context = 64, 4096, 4096
    config = runner.model_config
    runner.configure_kv_cache_dtype()
    runner.start_layer, runner.end_layer = 0, config.num_hidden_layers
    runner.num_effective_layers = config.num_hidden_layers
    with fake_mode():
        runner.req_to_token_pool = ReqToTokenPool(
            size=size, max_context_len=context + 4, device="cuda", enable_memory_saver=False
        )
        runner.token_to_kv_pool = token_to_kv_pool(
            size=tokens,
            page_size=runner.page_size,
            dtype=runner.kv_cache_dtype,
            kv_lora_rank=config.kv_lora_rank,
            qk_rope_head_dim=config.qk_rope_head_dim,
            layer_num=runner.num_effective_layers,
            device="cuda",
            kv_cache_dim=mla_kv_cache_dim(runner),
            enable_memory_saver=False,
            start_layer=runner.start_layer,
            end_layer=runner.end_layer,
            index_head_dim=index_head_dim(config.hf_config),
        )
    runner.max_total_num_tokens = tokens
    kv = runner.token_to_kv_pool
    runner.token_to_kv_pool_allocator = _Pool(size=tokens, page_size=runner.page_size, device="cuda",
                                              get_kvcache=lambda: kv)


def mla_kv_cache_dim(runner: Any) -> int:
    """The MLA KV cache row width sglang computes for the runner's model: the runner's
    method up to 0.5.15 (``model_runner_kv_cache_mixin.py``), from 0.5.16 a function of
    ``mem_cache/kv_cache_configurator.py`` (0.5.16 :1816, keyword-only; 0.5.19 :2379 drops
    ``server_args``), called as the release's ``_build_dsa_kv_pool`` calls it."""
    if hasattr(runner, "calculate_mla_kv_cache_dim"):
        return int(runner.calculate_mla_kv_cache_dim())
    import inspect

    from sglang.srt.mem_cache import kv_cache_configurator

    function = kv_cache_configurator.calculate_mla_kv_cache_dim
    kwargs = {"model_config": runner.model_config, "kv_cache_dtype": runner.kv_cache_dtype}
    if "server_args" in inspect.signature(function).parameters:
        kwargs["server_args"] = runner.server_args
    return int(function(**kwargs))
