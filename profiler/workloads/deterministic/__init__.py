"""Deterministic fused-upcast FP32 GEMMs: the CPU reference of their order (reference.py), the GPU
kernels (kernels.py), the baselines they are measured against (baselines.py), the benchmark
(bench.py, with the batch-invariant generation of generate.py) and the NVTX workload (workload.py)."""
