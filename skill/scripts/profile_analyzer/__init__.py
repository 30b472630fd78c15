"""Profile analyzer: torch.profiler / Kineto traces into step times, the GPU-time breakdown, exposed
communication, bubbles, launch overhead, memory and stragglers, and a ranked diagnosis (README.md)."""
