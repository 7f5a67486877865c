"""Deterministic fused-upcast FP32 GEMMs: the kernels and baselines (kernels.py) and their benchmark (bench.py)."""
