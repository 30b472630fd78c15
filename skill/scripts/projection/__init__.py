"""Analytic throughput and memory projection for Megatron-LM training (dense and MoE).

``projection.api.project(args, gpus, hardware)`` answers in milliseconds; ``python -m
projection.calibrate`` refits its efficiencies on published measurements. See README.md.
"""
