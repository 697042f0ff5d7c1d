"""``nox -s integration``: run a real NVFP4 model under sglang with piecewise CUDA graphs on SM120.

The steps, one module each:

- :mod:`.plan`: which stack, which pinned versions (``==X+fp4graph.N``), the venv and its installs;
- :mod:`.device`: is there an SM120 GPU (else the run is skipped with the reason);
- :mod:`.checkpoint`: a tiny Llama quantized to the ModelOpt NVFP4 format (no hub download);
- :mod:`.flags`: the sglang command lines per version (piecewise on / off, bench_serving);
- :mod:`.server`: launch sglang, wait for health, greedy generation, on-vs-off comparison;
- :mod:`.benchmark`: bench_serving at the seed's concurrency levels, parsed into a report;
- :mod:`.sglang_suite`: sglang's own piecewise test file from a checkout at the pinned tag;
- :mod:`.command`: ``python -m fp4graph integration`` (``add_arguments`` / ``run``).

Only :mod:`.checkpoint` needs torch; everything else is the standard library, so the
orchestration runs from the nox venv while sglang runs in the venv the plan creates.
"""
