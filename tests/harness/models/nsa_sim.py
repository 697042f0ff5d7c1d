"""Child-side harness: sglang's NSA indexer + attention split op on a simulated SM120.

Imported (``from harness.models import nsa_sim``) in the child interpreter that
``tests/models/test_nsa.py`` starts, with the sglang and flashinfer trees first on
``sys.path`` and ``tests/`` (this package) and ``tests/harness`` (sgsim) after them.  The block traced is the NSA part of a GLM-5 / DeepSeek-V3.2 attention layer,
built from sglang's own classes: ``Indexer`` (wq_b / wk as ModelOpt NVFP4 linears,
k_norm, rotary embedding, Hadamard rotation, fp8 act_quant, head gate, k-cache store,
top-k) feeding ``RadixAttention`` with ``topk_indices``, as ``DeepseekV2AttentionMLA``
does, traced with sglang's ``install_torch_compiled`` under piecewise mode and split
with sglang's ``split_graph``.

Stand-ins (only what cannot exist on a CPU):
- the device: sgsim / fp4graph.simulate (an SM120 GPU, fake CUDA tensors); Python
  indexing and ``Tensor.copy_`` of fake CUDA tensors as the aten ops they are
  (``stand_ins.install_fake_cuda_indexing``: torch 2.9's CUDA build takes a device
  guard in those bindings, which a machine without a driver refuses);
- sgl_kernel and torchvision: sgsim's inert modules (the rotary embedding's sgl_kernel
  call traces as an inert call: it is not what this block tests);
- ``deep_gemm``: a module answering ``get_num_sms`` (the SM count of the simulated GPU)
  and nothing else: its fp8 MQA-logits kernels run only inside the split op, which
  never runs its body on fake tensors;
- ``aten::mm.dtype`` on CPU (``cpu_kernels_too``, for the eager comparison only): the
  fp32 product of the upcast operands (the kernel exists for CUDA alone);
- the global ServerArgs: the dataclass defaults without ``__post_init__`` (which reads
  a model from disk), device "cuda";
- the ForwardBatch: sglang's own dataclass with the fields a piecewise extend batch has
  (PiecewiseCudaGraphRunner.capture_one_batch_size), on fake CUDA tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Iterator
from typing import Any

import sgsim

SPLIT_OP = "sglang.k_cache_and_topk_result"
ATTN_OP = "sglang.unified_attention_with_output"

# GLM-5 / DeepSeek-V3.2 indexer dimensions the kernels fix (index_head_dim 128 with one
# fp8 scale per 128, top-k 2048, rope 64); heads and hidden size are tiny.
SHAPES = {
    "hidden_size": 256,
    "q_lora_rank": 256,
    "index_n_heads": 4,
    "index_head_dim": 128,
    "qk_rope_head_dim": 64,
    "index_topk": 2048,
    "num_heads": 4,
    "kv_lora_rank": 512,
}


def prepare(gpu: str = "sm120") -> None:
    sgsim.prepare(gpu)
    from harness.models import stand_ins

    stand_ins.install_fake_cuda_indexing()
    import torch.utils._triton

    # Dynamo wraps Triton kernels (the indexer's act_quant) as a Triton HOP only when a
    # device reports Triton support; the simulated GPU is reported unavailable while
    # Dynamo compiles (fp4graph.simulate.compiling), so answer as an SM120 GPU would.
    torch.utils._triton.has_triton = lambda: True

    from sglang.srt import server_args

    args = server_args.ServerArgs.__new__(server_args.ServerArgs)
    for field in dataclasses.fields(server_args.ServerArgs):
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:
            value = field.default_factory()
        else:
            value = None
        setattr(args, field.name, value)
    args.device = "cuda"
    server_args.set_global_server_args_for_scheduler(args)
    with sgsim.fake_mode():  # the groups allocate device buffers
        _single_process_group()

    import torch
    from sglang.srt.layers.attention.nsa import nsa_indexer
    from sglang.srt.layers.quantization import modelopt_quant

    from fp4graph.verify import simulate

    if hasattr(modelopt_quant, "copy_or_rebind_param"):  # sglang >= 0.5.10
        # Fake tensors hold no data, and a CUDA build of torch without a driver cannot
        # run the in-place device copy: rebind the prepared weight instead.
        def rebind(module: Any, name: str, value: Any) -> None:
            setattr(module, name, torch.nn.Parameter(value.detach(), requires_grad=False))

        modelopt_quant.copy_or_rebind_param = rebind

    # deep_gemm is not importable on a CPU; the indexer reads the SM count at init.
    nsa_indexer.deep_gemm = types.SimpleNamespace(
        get_num_sms=lambda: simulate.GPUS[gpu].multi_processor_count
    )



def hf_config(arch: str = "GlmMoeDsaForCausalLM") -> Any:
    """The DSA fields sglang reads from a GLM-5 / DeepSeek-V3.2 config, tiny."""
    from transformers import PretrainedConfig

    s = SHAPES
    return PretrainedConfig(
        architectures=[arch],
        hidden_size=s["hidden_size"],
        num_attention_heads=s["num_heads"],
        q_lora_rank=s["q_lora_rank"],
        kv_lora_rank=s["kv_lora_rank"],
        qk_nope_head_dim=128,
        qk_rope_head_dim=s["qk_rope_head_dim"],
        v_head_dim=128,
        index_topk=s["index_topk"],
        index_head_dim=s["index_head_dim"],
        index_n_heads=s["index_n_heads"],
        num_hidden_layers=1,
        max_position_embeddings=4096,
    )


def model_runner(arch: str = "GlmMoeDsaForCausalLM") -> Any:
    """The parts of a ModelRunner the NSA backend reads, and sglang's NSA backend with
    its KV pools built from them, as ModelRunner builds them on SM120.

    Server defaults sglang sets for NSA models on SM120 (server_args
    _set_default_nsa_kv_cache_dtype / _set_default_nsa_backends): page size 64,
    fp8_e4m3 KV cache, prefill "flashmla_auto", decode "flashmla_kv".
    """
    import inspect

    import torch
    from sglang.srt.layers.attention.nsa_backend import NativeSparseAttnBackend
    from sglang.srt.mem_cache.memory_pool import NSATokenToKVPool, ReqToTokenPool
    from sglang.srt.model_executor.model_runner_kv_cache_mixin import (
        ModelRunnerKVCacheMixin,
    )
    from sglang.srt.server_args import get_global_server_args

    s = SHAPES
    args = get_global_server_args()
    args.kv_cache_dtype = "fp8_e4m3"
    args.page_size = 64
    args.nsa_prefill_backend = "flashmla_auto"
    args.nsa_decode_backend = "flashmla_kv"
    config = hf_config(arch)
    model_config = types.SimpleNamespace(
        hf_config=config,
        hf_text_config=config,
        context_len=4096,
        num_attention_heads=s["num_heads"],
        qk_nope_head_dim=config.qk_nope_head_dim,
        kv_lora_rank=s["kv_lora_rank"],
        qk_rope_head_dim=s["qk_rope_head_dim"],
    )
    runner = types.SimpleNamespace(
        device="cuda",
        page_size=64,
        server_args=args,
        model_config=model_config,
        kv_cache_dtype=torch.float8_e4m3fn,
    )
    pool_kwargs = dict(
        size=4096,
        page_size=64,
        dtype=torch.float8_e4m3fn,
        kv_lora_rank=s["kv_lora_rank"],
        qk_rope_head_dim=s["qk_rope_head_dim"],
        layer_num=1,
        device="cuda",
        kv_cache_dim=ModelRunnerKVCacheMixin.calculate_mla_kv_cache_dim(runner),
        enable_memory_saver=False,
        start_layer=0,
        end_layer=1,
        index_head_dim=s["index_head_dim"],
    )
    accepted = inspect.signature(NSATokenToKVPool.__init__).parameters
    with _host_to_device_as_empty():
        runner.token_to_kv_pool = NSATokenToKVPool(
            **{k: v for k, v in pool_kwargs.items() if k in accepted}
        )
    runner.req_to_token_pool = ReqToTokenPool(
        size=4, max_context_len=4096, device="cuda", enable_memory_saver=False
    )
    backend = NativeSparseAttnBackend(runner)
    # init_forward_metadata runs eagerly before each replay (outside the traced region)
    # and indexes device tensors with device tensors, which a GPU-less torch cannot do
    # even on fake tensors; the traced code reads only this field of its result.
    backend.forward_metadata = types.SimpleNamespace(paged_mqa_schedule_metadata=None)
    runner.attn_backend = backend
    return runner


def forward_batch(num_tokens: int, runner: Any, real_tokens: int | None = None) -> Any:
    """A piecewise extend batch as PiecewiseCudaGraphRunner builds it, on fake tensors.

    ``real_tokens`` < ``num_tokens`` gives a replay batch: the static (padded) buffers,
    the real batch's lengths.  Host-side lengths are CPU tensors, as in sglang.
    """
    import torch
    from sglang.srt.model_executor.forward_batch_info import (
        CaptureHiddenMode,
        ForwardBatch,
        ForwardMode,
    )

    real = real_tokens or num_tokens
    fields = {f.name for f in dataclasses.fields(ForwardBatch)}
    cuda = "cuda"
    # Made under the fake mode from Python data, the host tensors keep their values
    # (FakeTensor constants), so the backend's eager metadata code can read them.
    seq_lens_cpu = torch.tensor([real])
    extend_prefix_lens_cpu = torch.tensor([0])
    extend_seq_lens_cpu = torch.tensor([real])
    values = dict(
        forward_mode=ForwardMode.EXTEND,
        batch_size=1,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64, device=cuda),
        req_pool_indices=torch.zeros(1, dtype=torch.int64, device=cuda),
        seq_lens=torch.full((1,), real, dtype=torch.int64, device=cuda),
        orig_seq_lens=torch.full((1,), real, dtype=torch.int64, device=cuda),
        seq_lens_cpu=seq_lens_cpu,
        req_to_token_pool=runner.req_to_token_pool,
        token_to_kv_pool=runner.token_to_kv_pool,
        attn_backend=runner.attn_backend,
        out_cache_loc=torch.zeros(num_tokens, dtype=torch.int64, device=cuda),
        seq_lens_sum=real,
        extend_num_tokens=real,
        extend_seq_lens=torch.full((1,), real, dtype=torch.int64, device=cuda),
        extend_prefix_lens=torch.full((1,), 0, dtype=torch.int64, device=cuda),
        extend_start_loc=torch.full((1,), 0, dtype=torch.int64, device=cuda),
        extend_prefix_lens_cpu=extend_prefix_lens_cpu,
        extend_seq_lens_cpu=extend_seq_lens_cpu,
        positions=torch.zeros(num_tokens, dtype=torch.int64, device=cuda),
        capture_hidden_mode=CaptureHiddenMode.NULL,
        global_forward_mode=ForwardMode.EXTEND,
        return_logprob=False,
    )
    return ForwardBatch(**{k: v for k, v in values.items() if k in fields})


def _single_process_group() -> None:
    """sglang's parallel state for one rank (gloo, world size 1), as a TP1 server has."""
    import socket

    from sglang.srt.distributed import parallel_state

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    parallel_state.init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
    )
    parallel_state.initialize_model_parallel(backend="gloo")


@contextlib.contextmanager
def _host_to_device_as_empty() -> Iterator[None]:
    """``torch.tensor(data, device="cuda")`` (the pools upload their buffers' data
    pointers) as an empty fake CUDA tensor of that shape: no device memory exists."""
    import torch

    tensor = torch.tensor

    def fake_upload(data: Any, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            host = tensor(data, dtype=kwargs.get("dtype"))
            return torch.empty(host.shape, dtype=host.dtype, device=device)
        return tensor(data, *args, **kwargs)

    torch.tensor = fake_upload
    try:
        yield
    finally:
        torch.tensor = tensor


class NsaBlock(__import__("torch").nn.Module):
    """The NSA half of DeepseekV2AttentionMLA's absorbed forward.

    fp4 q_a projection -> Indexer (top-k) -> RadixAttention(topk_indices=...) ->
    fp4 output projection.  The latent KV projection is a plain bf16 matmul.
    """

    def __init__(self) -> None:
        import torch
        from sglang.srt.layers.attention.nsa.nsa_indexer import Indexer
        from sglang.srt.layers.quantization.modelopt_quant import ModelOptFp4Config
        from sglang.srt.layers.radix_attention import RadixAttention

        super().__init__()
        s = SHAPES
        quant = ModelOptFp4Config(
            is_checkpoint_nvfp4_serialized=True,
            kv_cache_quant_algo=None,
            group_size=16,
            exclude_modules=[],
        )
        quant.packed_modules_mapping = {}
        self.q_a = sgsim.fp4_linear(s["hidden_size"], s["q_lora_rank"])
        with torch.device("cuda"):
            self.indexer = _indexer(Indexer, quant)
        for linear in (self.indexer.wq_b, self.indexer.wk):
            _load_nvfp4(linear)
        head_dim = s["kv_lora_rank"] + s["qk_rope_head_dim"]
        self.attn = RadixAttention(
            s["num_heads"],
            head_dim,
            head_dim**-0.5,
            num_kv_heads=1,
            layer_id=0,
            v_head_dim=s["kv_lora_rank"],
            prefix="model.layers.0.self_attn.attn_mqa",
        )
        self.o = sgsim.fp4_linear(s["num_heads"] * s["kv_lora_rank"], s["hidden_size"])
        self.latent = torch.nn.Parameter(
            torch.empty(s["hidden_size"], head_dim, dtype=torch.bfloat16, device="cuda"),
            requires_grad=False,
        )

    def forward(self, x: Any, positions: Any, forward_batch: Any) -> Any:
        import torch

        s = SHAPES
        q_lora = self.q_a.quant_method.apply(self.q_a, x)
        topk_indices = self.indexer(
            x=x,
            q_lora=q_lora,
            positions=positions,
            forward_batch=forward_batch,
            layer_id=0,
        )
        latent = torch.matmul(x, self.latent)
        k_nope = latent[..., : s["kv_lora_rank"]].unsqueeze(1)
        k_pe = latent[..., s["kv_lora_rank"] :].unsqueeze(1)
        q_nope = x.new_empty(x.shape[0], s["num_heads"], s["kv_lora_rank"])
        q_pe = x.new_empty(x.shape[0], s["num_heads"], s["qk_rope_head_dim"])
        out = self.attn(
            q_nope,
            k_nope,
            k_nope,
            forward_batch,
            q_rope=q_pe,
            k_rope=k_pe,
            topk_indices=topk_indices,
        )
        return self.o.quant_method.apply(self.o, out.view(x.shape[0], -1))


def _indexer(cls: Any, quant: Any) -> Any:
    s = SHAPES
    return cls(
        hidden_size=s["hidden_size"],
        index_n_heads=s["index_n_heads"],
        index_head_dim=s["index_head_dim"],
        rope_head_dim=s["qk_rope_head_dim"],
        index_topk=s["index_topk"],
        q_lora_rank=s["q_lora_rank"],
        max_position_embeddings=4096,
        rope_theta=10000.0,
        layer_id=0,
        scale_fmt="ue8m0",
        block_size=128,
        quant_config=quant,
        prefix="model.layers.0.self_attn.indexer",
    )


def _load_nvfp4(layer: Any) -> None:
    """Give a ModelOpt NVFP4 linear its checkpoint tensors and prepare them (sgsim.load_nvfp4)."""
    sgsim.load_nvfp4(layer, layer.quant_method, layer.output_size, layer.input_size)


def trace_block(num_tokens: int, real_tokens: int, arch: str) -> dict[str, Any]:
    """Trace NsaBlock as PiecewiseCudaGraphRunner compiles it: piecewise mode on, the
    forward context set (with the indexers where this sglang's context takes them)."""
    import torch
    from sglang.srt.compilation.piecewise_context_manager import set_forward_context

    with sgsim.fake_mode(), torch.no_grad():
        block = NsaBlock()
        runner = model_runner(arch)
        batch = forward_batch(num_tokens, runner, real_tokens)
        extra = {}
        if "nsa_indexers" in set_forward_context.__code__.co_varnames:
            extra["nsa_indexers"] = [block.indexer]
        x = torch.empty(num_tokens, SHAPES["hidden_size"], dtype=torch.bfloat16, device="cuda")
        with set_forward_context(batch, [block.attn], None, [None], [None], **extra):
            return sgsim.trace(
                block, x, batch.positions, batch, dynamic_arg_dims={"x": 0, "positions": 0}
            )


def cpu_kernels_too() -> None:
    """Register sglang's CUDA-only custom-op bodies for CPU as well (call before
    importing sglang's layers), so the ops' own Python runs on real CPU tensors."""
    import torch

    impl = torch.library.Library.impl

    def impl_also_cpu(self: Any, name: Any, fn: Any, dispatch_key: str = "", *a: Any, **k: Any) -> Any:
        out = impl(self, name, fn, dispatch_key, *a, **k)
        if dispatch_key == "CUDA" and self.ns == "sglang":
            impl(self, name, fn, "CPU", *a, **k)
        return out

    torch.library.Library.impl = impl_also_cpu  # type: ignore[method-assign]
    # torch.mm(out_dtype=...) (aten::mm.dtype, sglang 0.5.12+'s indexer head gate on CUDA)
    # has a CUDA kernel only: on CPU, the bf16 product accumulated in fp32.
    if not getattr(cpu_kernels_too, "mm_dtype", None):
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("mm.dtype", lambda a, b, out_dtype: torch.mm(a.to(out_dtype), b.to(out_dtype)), "CPU")
        cpu_kernels_too.mm_dtype = lib  # type: ignore[attr-defined]


def compare_split_op_with_eager() -> dict[str, Any]:
    """The split-op path against the eager path on real CPU tensors, where the math
    is plain torch (run after cpu_kernels_too() and prepare()).

    - head gate: sglang.logits_head_gate_pcg against Indexer._get_logits_head_gate's
      own (uncompiled) body, same weights and inputs;
    - top-k with padding: what k_cache_and_topk_result hands _get_topk_ragged (the real
      rows of q, a preallocated padded result) against the eager call on the real rows;
      deep_gemm.fp8_mqa_logits and the backend's topk_transform are CUDA kernels, here
      torch references (logits = sum_h relu(q_h . k) * w_h; top-k inside [ks, ke));
    - attention split op: unified_attention_with_output on a padded batch (the NSA path,
      topk_indices given) against the backend called on the real rows; the backend is a
      CPU function of (q, topk_indices) that checks the row counts it is given.
    """
    import torch
    from sglang.srt.layers.attention.nsa import nsa_indexer

    torch.manual_seed(0)
    indexer = _indexer(nsa_indexer.Indexer, None)
    return {
        "head_gate": _compare_head_gate(indexer),
        "topk": _compare_padded_topk(indexer),
        "attention": _compare_padded_attention(),
    }


def _compare_head_gate(indexer: Any) -> dict[str, Any]:
    """sglang.logits_head_gate_pcg against Indexer._get_logits_head_gate's own body."""
    import torch
    from sglang.srt.layers.attention.nsa import nsa_indexer

    s = SHAPES
    with torch.no_grad():
        indexer.weights_proj.weight.normal_()
        x = torch.randn(7, s["hidden_size"], dtype=torch.bfloat16)
        q_scale = torch.rand(7, s["index_n_heads"], 1)
        eager = nsa_indexer.Indexer._get_logits_head_gate._torchdynamo_orig_callable(
            indexer, x, q_scale
        )
        op = torch.ops.sglang.logits_head_gate_pcg(
            x, indexer.weights_proj.weight, s["index_n_heads"] ** -0.5, indexer.softmax_scale, q_scale
        )
    return {"shape": list(op.shape), "equal": bool(torch.equal(op, eager))}


def _compare_padded_topk(indexer: Any) -> dict[str, Any]:
    """_get_topk_ragged into a padded preallocated result against the eager call on the
    real rows: one request, ``real`` tokens, padded to ``static``."""
    import torch
    from sglang.srt.layers.attention.nsa import nsa_indexer

    s = SHAPES
    real, static, kv = 5, 8, 3000
    k = torch.randn(kv, s["index_head_dim"])
    ks = torch.zeros(real, dtype=torch.int32)
    ke = torch.arange(kv - real + 1, kv + 1, dtype=torch.int32)

    class Metadata(nsa_indexer.BaseIndexerMetadata):
        attn_metadata = types.SimpleNamespace(topk_indices_offset=None)

        def get_seqlens_int32(self): return torch.tensor([kv], dtype=torch.int32)
        def get_page_table_64(self): return torch.zeros(1, kv // 64 + 1, dtype=torch.int32)
        def get_page_table_1(self): return torch.zeros(1, kv, dtype=torch.int32)
        def get_seqlens_expanded(self): return ke
        def get_indexer_kvcache_range(self): return ks, ke
        def get_indexer_seq_len_cpu(self): return torch.tensor([kv])
        def get_indexer_seq_len(self): return torch.tensor([kv])
        def get_nsa_extend_len_cpu(self): return [real]
        def get_token_to_batch_idx(self): return torch.zeros(real, dtype=torch.int32)

        def topk_transform(self, logits, topk, ks=None, **kwargs):
            cols = torch.arange(logits.shape[1])
            masked = logits.masked_fill((cols < ks[:, None]) | (cols >= ke[: len(logits), None]), float("-inf"))
            values, idx = masked.topk(topk, dim=-1)
            return torch.where(values == float("-inf"), -1, idx).to(torch.int32)

    def mqa_logits(q, kv_fp8, weights, ks, ke, clean_logits=False):
        return (torch.relu(torch.einsum("thd,kd->thk", q.float(), kv_fp8[0].float())) * weights[..., None]).sum(1)

    def index_k(layer_id, *args):
        return k.to(torch.float8_e4m3fn).view(torch.uint8), torch.ones(kv, 4, dtype=torch.uint8)

    pool = types.SimpleNamespace(page_size=64, get_index_k_scale_buffer=index_k)
    batch = types.SimpleNamespace(
        forward_mode=types.SimpleNamespace(is_extend_without_speculative=lambda: True),
        token_to_kv_pool=pool,
        seq_lens_cpu=torch.tensor([kv]),
        extend_seq_lens_cpu=torch.tensor([real]),
        extend_num_tokens=real,
    )
    nsa_indexer.deep_gemm = types.SimpleNamespace(fp8_mqa_logits=mqa_logits)
    indexer.index_topk = 2048
    q = torch.randn(static, s["index_n_heads"], s["index_head_dim"]).to(torch.float8_e4m3fn)
    w = torch.rand(static, s["index_n_heads"], 1)
    ragged = nsa_indexer.Indexer._get_topk_ragged
    first = ["enable_dual_stream"] if "enable_dual_stream" in ragged.__code__.co_varnames else []
    lead = [False] if first else []
    eager_topk = ragged(indexer, *lead, batch, 0, q[:real], w[:real], Metadata())
    padded = torch.full((static, 2048), -1, dtype=torch.int32)
    ragged(indexer, *lead, batch, 0, q[:real], w, Metadata(), padded)
    return {
        "real_rows_equal": bool(torch.equal(padded[:real], eager_topk)),
        "padding_rows_minus_one": bool((padded[real:] == -1).all()),
        "some_selected": int((eager_topk >= 0).sum()),
    }


def _compare_padded_attention() -> dict[str, Any]:
    """unified_attention_with_output on a padded batch (topk_indices given) against the
    backend called on the real rows."""
    import torch
    from sglang.srt.compilation.piecewise_context_manager import set_forward_context
    from sglang.srt.layers.radix_attention import RadixAttention

    real, static = 5, 8
    seen = []

    def backend_forward(q, k, v, layer, fb, save_kv_cache, **kw):
        seen.append([q.shape[0], kw["topk_indices"].shape[0], fb.out_cache_loc.shape[0]])
        return (q.float() * 2 + kw["topk_indices"][:, :1].float()).to(q.dtype)

    heads, dim = 2, 8
    layer = RadixAttention(heads, dim, 1.0, num_kv_heads=1, layer_id=0, v_head_dim=dim)
    backend = types.SimpleNamespace(forward=backend_forward)
    loc = torch.arange(static)
    fb = types.SimpleNamespace(
        attn_backend=backend,
        out_cache_loc=loc,
        out_cache_loc_swa=None,
        token_to_kv_pool=types.SimpleNamespace(),
        extend_num_tokens=real,
        num_token_non_padded_cpu=real,
    )
    qa = torch.randn(static, heads * dim)
    topk = torch.randint(0, 100, (static, 2048), dtype=torch.int32)
    topk[real:] = -1
    out = torch.zeros(static, heads * dim)
    with set_forward_context(fb, [layer], None, [None], [None]):
        torch.ops.sglang.unified_attention_with_output(
            qa, qa, qa, out, True, 0, q_rope=qa, k_rope=qa, topk_indices=topk
        )
    expected = backend_forward(qa[:real], None, None, layer, types.SimpleNamespace(out_cache_loc=loc[:real]), True, topk_indices=topk[:real])
    return {
        "rows_seen": seen[0],
        "real_rows_equal": bool(torch.equal(out[:real], expected)),
        "out_cache_loc_restored": fb.out_cache_loc is loc,
    }
