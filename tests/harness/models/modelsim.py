"""Whole NVFP4 models under sglang's piecewise CUDA graph runner, on a simulated SM12x GPU.

Child side: imported inside the interpreter :mod:`simulation` starts, with the
stack's sglang, flashinfer and sgl_kernel (Python only) trees first on the path.

What runs is sglang's own code, end to end, for the release on the path:

* ``ServerArgs`` (its SM120 defaults: attention backend, MoE runner backend,
  piecewise capture sizes), ``ModelConfig``, the quantization config read from the
  family's ``config.json`` (ModelOpt NVFP4);
* the parallel state (``init_distributed_environment``, ``initialize_model_parallel``,
  ``initialize_dp_attention``) over gloo, as ``ModelRunner.init_torch_distributed``
  sets it up (``set_custom_all_reduce``, the P2P check as ``--enable-p2p-check``
  says): a world of size 1, or for a tensor-parallel case (``tp_size``) one process per
  rank (:func:`case_runs.run_ranks`, forks of the case) joined by a real gloo world, sglang's
  ``GroupCoordinator`` s choosing every collective path (custom all-reduce, pynccl,
  torch.distributed); its host collectives run outside FakeTensorMode; and the MoE
  config (``initialize_moe_config``);
* the model class, built by sglang's loader for ``--load-format dummy``
  (``DummyModelLoader``: create_weights, ``process_weights_after_loading``, dummy
  weights) on the host, then every tensor swapped for a fake CUDA tensor of the same
  shape, stride and dtype (aliases kept);
* ``ModelRunner.init_device_graphs`` (the decode ``CudaGraphRunner``: eager decode
  forwards and captures) when the start order has CUDA graphs on, then
  ``ModelRunner.init_piecewise_cuda_graphs``: the release's own
  ``PiecewiseCudaGraphRunner`` (its module, ``install_torch_compiled`` arguments,
  ForwardBatch, forward context, capture sizes largest first, warm-up and capture
  runs) with sglang's ``SGLangBackend`` (``split_graph``, per-piece compile,
  ``CUDAPiecewiseBackend``).  ``split_graph`` is observed (called through).  Up to
  0.5.5.post3 ``ModelRunner.__init__`` builds the piecewise runner in its last statement:
  that block of the release's source runs instead (compiled from its file at its
  lines; ``graph_capture.init_piecewise_cuda_graphs``).  From 0.5.14
  (the runner-backend refactor) ``ModelRunner.init_cuda_graphs``' steps instead: the
  ``EagerRunner``, ``init_prefill_cuda_graph`` (``PrefillCudaGraphRunner`` with the
  ``tc_piecewise`` backend, selected with ``--cuda-graph-backend-prefill tc_piecewise``),
  then ``init_decode_cuda_graph`` when decode graphs are on.

Stand-ins, and only these (tests/harness/models/stand_ins.py):

1. the device: CPU torch answers as the CUDA build of the stack's torch on RTX PRO 6000s
   (SM120: PyPI's, CUDA 12.8 for torch 2.8.0 / 2.9.1, 13.0 for 2.11.0+), or as the CUDA
   13.0 build a DGX Spark installs on its GB10 (SM121: 48 SMs, unified memory,
   ``is_integrated``) (``fp4graph.verify.simulate``; ``simulation.simulated_cuda``, each
   report's ``torch_cuda``), one GPU per rank of the case, the rank's current; an
   ``nvidia-smi`` on PATH answering the same (a GB10's answers ``[N/A]`` for its memory,
   which it shares with the CPU); whether the device runs Triton is asked once while it
   is visible;
2. the CUDA runtime: streams, events, ``torch.cuda.graph`` / ``CUDAGraph`` (the
   captured body runs once on fake tensors), synchronize, memory queries, the
   device RNG state Dynamo saves; ``torch.tensor(..., device="cuda")``, Python
   indexing, ``Tensor.copy_``, ``Tensor.contiguous`` and ``~`` of fake CUDA tensors as
   the aten ops they are (a CPU build refuses their CUDA device guards); ``Tensor.cuda()`` is the
   identity while the model is built on the host;
3. the compiled libraries of the pinned sgl-kernel wheel: ``common_ops``, FA3's
   ``flash_ops``, FlashMLA's ``flashmla_ops`` and DeepGEMM's ``deep_gemm_cpp``: the
   schemas of the release (tests/harness/models/data/*.json) defined with torch.library and
   Meta kernels (no-op for ops writing into ``Tensor!`` outputs, shapes from the C++
   source for ops returning tensors, the device's answer for ops without tensor
   arguments; a fake sglang registers itself replaces the Meta kernel); the Python
   packages ``sgl_kernel`` and ``deep_gemm`` are the pinned wheel's own; from sglang
   0.5.12 DeepGEMM is its own wheel (sgl-deep-gemm, a tvm-ffi module): its Python is
   the pinned wheel's, its compiled ``_C`` a module of functions recorded like the ops
   above (``stand_ins.TvmFfiDeepGemm``: same shapes, untraceable as a tvm-ffi function is);
   sgl-deep-gemm 0.2+ is a TORCH_LIBRARY module: the schemas of its ``_C.so`` (recorded
   with the companion) are defined like sgl-kernel's, the library's load is a no-op;
4. JIT-compiled kernels: FlashInfer's JIT build/load and cubin downloads
   (tests/flashinfer stand-ins: no-op kernels, the fused-MoE runner object; the toolkit
   version its builds read: the machine's ``nvcc`` for pristine FlashInfer, 12.9 for our
   series, or where a run names a system toolkit (``prepare(cuda_home=...)``), the
   ``nvcc`` of ``harness.toolkits.fake_cuda_home``, which only reports its release),
   sglang.jit_kernel's ``tvm_ffi.cpp.load_inline`` / ``load`` and (0.5.18+) its own
   loader's ninja build and ``tvm_ffi.load_module`` (no-op kernels; 0.5.21+'s cluster
   occupancy probe, ``kernels/jit/utils/occupancy.py``, answers for the simulated device:
   ``stand_ins.ClusterProbe``), Triton
   kernels launched eagerly on fake tensors (recorded, not run; traced launches are
   Triton HOPs), the CuTe DSL's ``cute.compile`` (nvidia-cutlass-dsl, where installed:
   FlashInfer 0.6.8's norm kernels; for FlashInfer 0.6.17, whose MLA decode imports it,
   the release's pin on the child's path, ``harness.pinned_python.cute_dsl_path``;
   no-op kernels), and Inductor's code generation for the ``torch.compile`` regions
   sglang runs eagerly (their captured graph runs as traced);
5. the attention kernels: for GQA / MLA families an ``AttentionBackend`` subclass
   returning outputs of the real shape (its metadata and CUDA-graph hooks do
   nothing); DSA (NSA) families run sglang's own ``NativeSparseAttnBackend`` as
   ``ModelRunner._get_attention_backend`` builds it for the server arguments (its
   kernels are those of 3 and 4);
6. the memory pools: ``req_to_token_pool``, ``token_to_kv_pool`` and its allocator
   (sizes, fake KV buffers); DSA (NSA) families get sglang's ``ReqToTokenPool`` and
   ``NSATokenToKVPool`` (built with ``init_memory_pool``'s arguments), only the
   allocator is a stand-in;
7. the parts of ``ModelRunner.__init__`` that need a GPU (distributed init over
   NCCL, memory profiling): the runner is ``ModelRunner.__new__`` with the
   attributes ``__init__`` would set, from the real objects above (0.5.14+: kernel
   warm-up counted as done, so the eager runner does not run FlashInfer's autotuner);
8. device memory has no data: every device tensor is a fake (FakeTensorMode with a
   ShapeEnv), so a host read of a device value (``.item()``) is an unbacked symbol;
   host tensors stay real in that mode: an op whose tensors are all real host tensors
   runs for real, and the prefill runner's dummy batch (``capture_prepare``) makes its
   ``device="cpu"`` tensors real (:func:`fake_device.host_tensors_real`), as on a GPU server;
   Dynamo ignores that mode's own logger (torch 2.9 inlines the mode and would break
   the graph at its ``log.debug``: :func:`fake_device._ignore_fake_mode_logging`);
   a split op or one of sglang's collective ops (``outplace_all_reduce`` & co.) called
   eagerly (between captured pieces, in a piece's warm-up or capture run, in an eager
   forward) runs the CUDA body sglang registered for it, as on a GPU, instead of the
   fake FakeTensorMode would answer;
   the collective kernels (tests/harness/models/collectives.py): NVML's topology (a PCIe box,
   no NVLink), libcudart's allocations and IPC handles, libnccl under sglang's
   ``PyNcclCommunicator``, sgl_kernel's custom all-reduce ops and ``torch.distributed``
   on the device group; each collective they run goes through the gloo world on
   placeholders of its size (the ranks check they agree first), and a CUDA graph
   replays the collectives it captured; a rank of a world whose other ranks are not
   run (``processes: 1``, the full-size cases at ``--tp 8``) has torch's
   FakeProcessGroup for them (their collectives do nothing) and sglang's message-queue
   broadcaster off (``SGLANG_USE_MESSAGE_QUEUE_BROADCASTER=false``: no reader process);
9. import-only: torchvision (no CPU build for this torch) and ``flashinfer.comm``
   (loads libcudart at import; multi-GPU all-reduce only), inert modules; without
   nvidia-cutlass-dsl (the test venv), sglang's CuTe DSL paged-MQA-logits kernel module
   (``jit_kernel/dsa/cutedsl_paged_mqa_logits.py``, which 0.5.15 imports for every
   DeepSeek-style model at ``jit_kernel/dsa/__init__.py:12``; 0.5.16 imports it lazily);
   the stand-ins above also answer ``torch.cuda.is_available()`` True to model code
   Dynamo traces (item 1 hides the GPU from Dynamo's own RNG bookkeeping only).

Installed packages (``prepare(record, installed=True)``: ``nox -s install``'s simulation
step, :func:`simulation.run_installed`): the child is the interpreter of a venv where the
stack was installed as users install it, with nothing of ours on its path but the harness
(``tests/`` and ``tests/harness``: :data:`simulation.CHILD_PATH`) and fp4graph's ``src/``; sglang, FlashInfer (with the real flashinfer-cubin),
sgl-kernel's Python, transformers, torch are the venv's.  The same stand-ins, plus one:
sgl-kernel's loader does not load the wheel's compiled ``common_ops`` (CUDA kernels; 3
above takes its place, as it does beside the Python-only tree).

Nothing of sglang's model, layer, quantization, MoE, compilation or runner code is
replaced, nor FlashInfer's Python.

API (for other tests, e.g. which FlashInfer modules a model kind requests)::

    from harness.models import modelsim
    modelsim.prepare()                       # before sglang is imported
    built = modelsim.build(case)             # in a forked process: see run_cases
    built.model, built.runner, built.server_args
    built.quant_methods                       # {module name: quant method class name}
    built.moe_runner_backend                  # sglang's resolved MoE runner backend
    modelsim.capture(built)                  # the runner(s); returns the trace report

``case`` is a dict: ``family`` (a row of tests/harness/models/families.py, as JSON),
``moe_runner_backend`` ("auto" or "flashinfer_cutlass"), ``cuda_graph`` (True: the
default server, decode CUDA graphs captured before piecewise compile; False:
``--disable-cuda-graph``) and optional ``server_args`` overrides; ``replay_tokens``
(a padded replay after capture), ``tp_size`` and ``processes`` (1: rank 0 only),
``report_shapes`` (parameter name suffixes whose per-rank shapes to report),
``speculative_prefill`` (hand the runner the EAGLE target prefill) and ``probe``
(``"all_reduce_paths"``: only the parallel state, probed).
:func:`run_cases` runs each case in a fork of the prepared interpreter, so no case
sees another's warm caches.

Where each part lives (this module re-exports what callers use):

- ``interpreter``: :func:`prepare`, every stand-in installed in order; ``STATE``.
- ``fake_device``: the FakeTensorMode of a case, fake device factories, the tensor swap.
- ``case_server_args``: the model directory and the release's ``ServerArgs`` of a case.
- ``parallel_world``: sglang's parallel state over gloo; where the ranks meet.
- ``memory_pools``: the runner's pools (stand-ins, or sglang's own for DSA models).
- ``model_build``: :func:`build` (model, ``ModelRunner``, attention backend): ``Built``.
- ``graph_capture``: :func:`capture`, the trace report of the graph start-up.
- ``batch_forwards``: extend batches, the padded replay, speculative prefill, eager forwards.
- ``case_runs``: a fork per case (:func:`run_cases`), a fork per rank, the all-reduce probe.
- ``case_errors``: a failed case's error in its report.
"""

from __future__ import annotations

import json

from harness.models import stand_ins
from harness.models.case_runs import run_case, run_cases, run_rank, run_ranks
from harness.models.fake_device import fake_mode
from harness.models.graph_capture import capture
from harness.models.interpreter import STATE, prepare
from harness.models.model_build import Built, build

__all__ = ["STATE", "Built", "build", "capture", "fake_mode", "main", "prepare", "run_case", "run_cases",
           "run_rank", "run_ranks"]


def main(request_json: str) -> None:
    """The child's entry (:mod:`simulation`): prepare, run every case, report them."""
    request = json.loads(request_json)
    prepare(request.get("record"), request.get("gpu", "sm120"), installed=request.get("installed", False),
            cuda_version=request.get("cuda_version"), cuda_home=request.get("cuda_home"))
    import torch

    results = [report | {"torch_cuda": torch.version.cuda} for report in run_cases(request["cases"])]
    stand_ins.report("MODELS", results)
