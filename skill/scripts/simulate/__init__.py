"""A simulated Megatron-LM workload for the local backend: ``sim_megatron.py`` prints real-format output,
from the throughput projection and noise and loss models fitted to Megatron-LM's golden curves
(README.md in this folder)."""
