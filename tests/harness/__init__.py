"""The test harness, tested like pip's tests/lib (tests/harness/test_*.py).

- ``child``: run code in a fresh interpreter with upstream trees first on the path;
  ``run_child_main`` runs a child module's ``main(json)`` and returns its ``RESULT:`` line;
  ``run_forked`` runs a ``case(request)`` per request, each in a fork of one child that
  imported torch once, and returns a ``CaseReport`` per case (``describe()`` for messages).
- The child modules, imported only inside those interpreters (this directory on their path):
  ``fi_child`` (FlashInfer's fp4 quantize / GEMM entry points: trace, export, eager, opcheck,
  warm-up and JIT-error checks), ``moe_child`` and ``moe074_child`` (the fused-MoE entry points,
  0.6.x and 0.7.x), ``sgsim`` (sglang's NVFP4 layers under its piecewise entry). Each lists the
  stand-ins it installs in its docstring.
- ``targets``: what the simulation tests run on, read from patches/stacks.toml and the series.
- ``tables``: per-version tables (``Table``, keyed by sglang release) that fail loudly on a
  release they lack, naming the table; ``with_fake_stack`` / ``with_fake_pin`` (one more
  sglang release, with or without a stack) to test that (test_release_tables: every table).
- ``kernel_packages``: flashinfer-cubin (the real wheel, a ``companions`` pin, unpacked
  without its blobs) and the flashinfer-jit-cache stand-in, as trees beside flashinfer.
- ``checkout``: a throw-away fp4graph checkout with the engine's fixture series;
  ``releases``: fixture upstream releases and a PEP 691 index serving them;
  ``install_world``: a checkout with a built fixture stack and its index (tests/install).
- ``models``: the whole-model simulation's harness (tests/models: ``simulation``,
  ``modelsim``, ``stand_ins``, ...; its docstring lists them), built on ``sgsim`` and
  ``moe_child``; a child imports it as ``harness.models`` (``tests/`` on its path).

Importing the package imports nothing: children put upstream trees first on their path.
"""
