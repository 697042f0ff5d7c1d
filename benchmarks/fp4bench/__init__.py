"""The sections of benchmarks/bench_fp4.py, one module each (see its docstring)."""
