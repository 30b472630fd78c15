"""Helpers of bench/search_bench.py: workloads (recipes), the simulated evaluator, the search methods."""
