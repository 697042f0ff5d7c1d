"""The whole-model simulation's harness (tests/models), tested in tests/harness/models.

Parent side (the pytest process, or a venv's interpreter for ``simulate_installed``):

- ``simulation``: a stack's trees and one child per run (``run``, ``run_code``,
  ``run_installed``); the cases (``case``) and the stacks (``sglang_stacks``, ``tp_stacks``).
- ``reports``: a test module's reports, one child per group of the cases a session selected.
- ``expected``: what a report must show (the ops of the pieces, the replay, ``assert_nsa``),
  shared by the tests of tests/models.
- ``families``: the model rows, test size (``fp4graph.model.families``) plus variants.
- ``full_size``: the published ``config.json`` of each family, cut to one layer of each kind.
- ``sgl_kernel_ops``: sgl-kernel's op schemas (``data/*.json``) and its Python from PyPI,
  in place of the compiled wheel; ``generate`` writes a record.
- ``simulate_installed``: the command line of ``run_installed`` (``nox -s install``).

Child side (imported only in the interpreter ``simulation`` starts, with ``tests/`` and
``tests/harness`` after the upstream trees on its path):

- ``modelsim``: sglang's own server start and runners, end to end; lists every stand-in.
  Its parts: ``interpreter`` (``prepare``), ``fake_device``, ``case_server_args``,
  ``parallel_world``, ``memory_pools``, ``model_build``, ``graph_capture``,
  ``batch_forwards``, ``case_runs``, ``case_errors`` (one line each in its docstring).
- ``stand_ins``: what a CPU lacks: the CUDA runtime, compiled kernels and their loaders.
- ``collectives``: the collective kernels of tensor parallel (NVML, NCCL, custom
  all-reduce), run through gloo.
- ``capturing``: whether a stand-in CUDA graph is capturing (set by ``stand_ins``, read by
  ``collectives``).
- ``nsa_sim``: sglang's NSA indexer and attention split op alone (tests/models/test_nsa.py).
- ``warmup_hooks``: observes the fp4 warm-up of each model (test_fp4_warmup_models.py).

This package imports nothing at import: its children put the upstream trees first.
Its own tests: test_stand_ins (records, fake CUDA indexing, the collectives through gloo),
test_tables (families and full_size against fp4graph.model.families),
test_sgl_kernel_ops, test_simulate_installed, test_package (how children import it),
test_reports.
"""
