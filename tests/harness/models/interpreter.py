"""The prepared child interpreter (child side): :func:`prepare` installs every stand-in
:mod:`modelsim` lists, in order, and imports sglang's model registry; :data:`STATE` keeps
what it made (the simulated GPU, the temporary directory, the JIT modules built)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import sys
import tempfile
from typing import Any

from harness.models import collectives, stand_ins

# What prepare made: the simulated GPU, the temporary directory, the JIT modules built.
STATE: dict[str, Any] = {}


def prepare(
    record_path: str | None = None,
    gpu_name: str = "sm120",
    *,
    installed: bool = False,
    cuda_version: str | None = None,
    cuda_home: str | None = None,
) -> None:
    """Simulate the device (``gpu_name``: a key of ``fp4graph.verify.simulate.GPUS``) and
    install every stand-in; import sglang's model registry. ``installed``: sglang and its
    dependencies are this venv's (see the docstring). ``cuda_version``: what
    ``torch.version.cuda`` answers (the parent's ``simulation.simulated_cuda``); where not
    given, that of this venv's torch when ``installed``, else the GPU's.  ``cuda_home``: a
    toolkit FlashInfer asks (its ``bin/nvcc`` on CUDA_HOME and first on PATH), as a user's
    system toolkit."""
    import importlib.metadata

    from fp4graph.verify import simulate

    gpu = simulate.GPUS[gpu_name]
    if cuda_version is None and installed:  # the venv's torch is the one its users install
        cuda_version = simulate.torch_cuda(gpu, importlib.metadata.version("torch"))
    STATE["gpu"] = gpu
    simulate.install(gpu, cuda_version=cuda_version)
    import torch

    if cuda_home is not None:
        STATE["cuda_home"] = cuda_home
        os.environ["CUDA_HOME"] = cuda_home
        os.environ["PATH"] = os.pathsep.join([os.path.join(cuda_home, "bin"), os.environ.get("PATH", "")])

    stand_ins.install_cuda_visible_to_traced_code()

    tmp = tempfile.mkdtemp(prefix="fp4graph-models-")
    STATE["tmp"] = tmp
    os.environ.setdefault("SGLANG_CACHE_DIR", os.path.join(tmp, "sglang-cache"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tmp, "inductor"))
    os.environ.setdefault("SGLANG_JIT_CACHE_DIR", os.path.join(tmp, "sglang-jit"))  # 0.5.18+
    stand_ins.install_cuda_runtime(gpu.total_memory)
    stand_ins.install_host_collectives()
    collectives.install_nvml()
    stand_ins.install_nvidia_smi(tmp, gpu)
    record = json.loads(pathlib.Path(record_path or os.environ["FP4GRAPH_SGL_KERNEL_RECORD"]).read_text())
    stand_ins.install_sgl_kernel_ops(record)
    stand_ins.import_deep_gemm(tmp)
    import sgsim

    sys.meta_path.insert(0, sgsim._StubFinder("flashinfer.comm"))
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, sgsim._StubFinder("torchvision"))
        import importlib

        # transformers 5.12+ parse the stand-in's version (is_torchvision_greater_or_equal,
        # at import): older than any it compares with.
        importlib.import_module("torchvision").__version__ = "0.0.0"

        auto = importlib.import_module("transformers.models.auto.image_processing_auto")
        sys.modules["transformers"].AutoImageProcessor = auto.AutoImageProcessor
    try:
        import cutlass  # noqa: F401
    except ImportError:  # no nvidia-cutlass-dsl: its CuTe DSL kernel module is inert (modelsim 9)
        sys.meta_path.insert(0, sgsim._StubFinder("sglang.jit_kernel.dsa.cutedsl_paged_mqa_logits"))
    with stand_ins.no_compiled_sgl_kernel() if installed else contextlib.nullcontext():
        import sgl_kernel  # noqa: F401  (the real Python package over the stand-in library)

    STATE["jit_built"] = stand_ins.install_flashinfer_jit(
        os.path.join(tmp, "flashinfer"), toolkit=cuda_home is not None
    )
    stand_ins.install_cute_dsl_compiler()
    stand_ins.install_tvm_ffi_compiler()
    stand_ins.install_triton_launcher()
    stand_ins.record_cuda_bodies()
    stand_ins.install_inductor_codegen()
    stand_ins.install_fake_cuda_indexing()
    # Whether the device runs Triton is asked once and cached: ask while the simulated
    # GPU is visible (it is hidden while Dynamo compiles, see simulate.compiling).
    import torch.utils._triton

    torch.utils._triton.has_triton.cache_clear()
    torch.utils._triton.has_triton()
    torch.set_num_threads(1)
    # What the scheduler imports before a model runner exists.
    import sglang.srt.model_executor.model_runner  # noqa: F401

    collectives.install_libraries()
    collectives.install_process_group_collectives()
    from sglang.srt.models.registry import ModelRegistry

    ModelRegistry.get_supported_archs()
