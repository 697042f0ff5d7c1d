"""``nox -s integration``: NVFP4 models of every family under sglang with piecewise CUDA graphs on SM120.

The steps, one module each:

- :mod:`.plan`: which stack, which pinned versions (``==X+fp4graph.N``), the venvs and their installs;
- :mod:`.device`: is there an SM120 GPU (else the run is skipped with the reason);
- :mod:`.families`: the model families, their tiny configs and the tensors ModelOpt exports;
- :mod:`.checkpoint`: a family's tiny model written as a ModelOpt NVFP4 checkpoint (no download;
  its entry point ``python -m fp4graph.integration.checkpoint`` runs in the sglang venv);
- :mod:`.matrix`: the cells (family x start order x MoE backend x shared-experts fusion);
- :mod:`.flags`: the sglang command lines per release and cell (piecewise on / off, bench_serving);
- :mod:`.server`: launch sglang, wait for health, greedy generation, on-vs-off comparison;
- :mod:`.benchmark`: bench_serving at the seed's concurrency levels, parsed;
- :mod:`.report`: every cell's outcome, as markdown and JSON;
- :mod:`.sglang_suite`: sglang's own piecewise test file from a checkout at the pinned tag;
- :mod:`.options`: what a run is asked to do (``IntegrationOptions``), where it keeps its
  things, the install plan and cells it comes to;
- :mod:`.dry_run`: every command a run would make, as text;
- :mod:`.runner`: the run itself, device check to report, with its outcome
  (``python -m fp4graph integration`` is :mod:`fp4graph.commands.integration`).

Only :mod:`.checkpoint` needs torch; everything else is the standard library and
``packaging``, so the orchestration runs from the nox venv while sglang runs in the venvs
the plan creates.
"""
