"""Memory per GPU: weights, gradients, optimizer states, activations and a fixed overhead, for the
most loaded pipeline rank, and the verdict against HBM.

* Weights: 2 bytes per parameter (bf16; 1 with ``--fp8-param-gather``), plus 1 byte per parameter
  of FP8/FP4 weight casts kept by Transformer Engine across micro-batches when the run is low
  precision and the bf16 weights are kept.
* Gradients: the main-grad buffer, 4 bytes per parameter (2 with ``--grad-reduce-in-bf16``).
* Optimizer: fp32 master weights and Adam's two moments, 12 bytes per parameter (fewer with
  ``--use-precision-aware-optimizer`` and 16-bit moment dtypes), divided by the
  data-parallel size with ``--use-distributed-optimizer`` (dense parameters over DP x CP, expert
  parameters over the expert-data-parallel size ``gpus / (ETP x EP x PP)``); Megatron's own
  ``theoretical_memory_usage.py`` counts ``6 + 12 / dp`` bytes the same way.
* Activations: ``model.layer_activations`` per layer and micro-batch, times the micro-batches in
  flight on the rank. 1F1B: rank r holds ``min(m, pp - r)`` micro-batches (the first stage ``pp``).
  Interleaved 1F1B: rank r holds ``min(m * vp, 2 (pp - r - 1) + (vp - 1) pp + 1)`` model chunks of
  ``layers / vp`` layers; for rank 0 that is Megatron's ``pp (1 + (pp - 1) / (pp vp))`` factor.
  Full recompute adds the transient of one recomputed chunk (its activations less the stored
  input). The last rank adds the output layer's input and the logits of one micro-batch
  (``6 T V / tp`` bytes: bf16 logits plus the fp32 copy Megatron's cross-entropy makes; ``2 T V / tp`` with
  Transformer Engine's cross-entropy, ``logits_bytes``).
* Overhead: ``OVERHEAD_GIB`` fixed per GPU (CUDA context, NCCL and cuBLAS workspaces, allocator
  caching), not fitted.
* Verdict: usable = HBM x (1 - ``SAFETY``); the job fits when the total is at most usable.
"""

from __future__ import annotations

from typing import Optional

from . import model
from .config import Job
from .hardware import GPU

GIB = float(2 ** 30)
OVERHEAD_GIB = 3.0  # CUDA context (~0.5), NCCL buffers (~1-2), cuBLAS/TE workspaces and allocator slack
SAFETY = 0.05  # share of HBM kept free for fragmentation and transient peaks


def in_flight(job: Job, rank: int) -> float:
    """Micro-batches' worth of this rank's layers whose activations are alive at its peak."""
    m = job.microbatches
    if job.vp > 1:
        chunks = min(m * job.vp, 2 * (job.pp - rank - 1) + (job.vp - 1) * job.pp + 1)
        return chunks / job.vp
    return float(min(m, job.pp - rank))


def _layer(job: Job, moe: bool, full: bool, cache: Optional[dict]) -> float:
    """``model.layer_activations``, once per kind of layer and job where ``cache`` (one dict per job) is given."""
    if cache is None:
        return model.layer_activations(job, moe, full)
    if (moe, full) not in cache:
        cache[moe, full] = model.layer_activations(job, moe, full)
    return cache[moe, full]


def decoder_activations(job: Job, rank: int, cache: Optional[dict] = None) -> float:
    """Activation bytes of the rank's decoder (and MTP) layers at its peak: per micro-batch times
    the micro-batches in flight, plus the transient of a full-recompute chunk being rebuilt."""
    indices, _, _, mtp = job.stages[rank]
    kinds = [bool(job.moe_pattern[i]) for i in indices] + [bool(job.moe_pattern[-1])] * mtp
    if not kinds:
        return 0.0
    full = job.recompute == "full"
    per_chunk = max(1, len(indices) // job.vp)
    if full and job.recompute_method == "uniform":
        # every chunk of --recompute-num-layers layers keeps only its input
        groups = -(-per_chunk // job.recompute_layers) * job.vp + mtp
        per_mb = groups * _layer(job, False, True, cache)
    else:
        recomputed = min(job.recompute_layers, per_chunk) if full else 0
        keys = [(moe, position % per_chunk < recomputed) for position, moe in enumerate(kinds)]
        per_key = {key: _layer(job, key[0], key[1], cache) for key in set(keys)}  # one value per kind of layer
        per_mb = sum(per_key[key] for key in keys)
    activations = per_mb * in_flight(job, rank)
    if full:  # backward rebuilds one recomputed chunk's activations beside its stored input
        span = job.recompute_layers if job.recompute_method == "uniform" else 1
        rebuilt = max(_layer(job, moe, False, cache) for moe in set(kinds)) * min(span, len(kinds))
        activations += rebuilt - _layer(job, False, True, cache)
    return activations


def rank_memory(job: Job, rank: int, cache: Optional[dict] = None) -> dict:
    """Bytes per GPU of pipeline rank ``rank``, by kind."""
    dense, expert = model.rank_params(job, rank)
    params = dense + expert
    weights = params * job.param_bytes + (params if job.precision != "bf16" and job.param_bytes == 2 else 0)
    grads = params * job.grad_bytes
    if job.dist_opt:
        edp = job.gpus // (job.etp * job.ep * job.pp)
        optimizer = job.optimizer_bytes * (dense / (job.dp * job.cp) + expert / edp)
    else:
        optimizer = job.optimizer_bytes * params
    _, embedding, loss, _ = job.stages[rank]
    activations = decoder_activations(job, rank, cache)
    T = job.mbs * job.seq / job.cp
    n = T / job.tp if job.sp else T
    if embedding:  # embedding output (and its dropout mask) for each micro-batch in flight
        activations += (model.ACT * n * job.hidden + (n * job.hidden if job.hidden_dropout > 0 else 0)) \
            * in_flight(job, rank)
    if loss:
        activations += model.ACT * T * job.hidden + logits_bytes(job) * T * job.vocab / job.tp
    return {"weights": weights, "grads": grads, "optimizer": optimizer, "activations": activations,
            "overhead": OVERHEAD_GIB * GIB}


def logits_bytes(job: Job) -> float:
    """Bytes per logit held at the loss: Megatron's own cross-entropy (``vocab_parallel_cross_entropy``, and the
    native fused one) casts the bf16 logits to fp32 and keeps the fp32 softmax for the backward pass, 2 + 4 bytes
    at the cast; Transformer Engine's (``--cross-entropy-fusion-impl te`` with ``--cross-entropy-loss-fusion``)
    computes the gradient into the bf16 logits in the forward pass and keeps only them (its
    ``CrossEntropyFunction`` saves the input and per-row statistics), 2 bytes (until its #3193 of 2026-07, which keeps
    the gradient in a new fp32 tensor)."""
    return 2.0 if job.cross_entropy == "te" else 6.0


def memory(job: Job, gpu: GPU) -> dict:
    """The most loaded rank's memory in GiB and the verdict."""
    best = None
    cache = {}  # per-layer activations: the same for every rank of this job
    for rank in range(job.pp):
        parts = rank_memory(job, rank, cache)
        total = sum(parts.values())
        if best is None or total > best[0]:
            best = (total, rank, parts)
    total, rank, parts = best
    usable = gpu.hbm_gib * (1 - SAFETY)
    total_gib = total / GIB
    return {"total_gib": total_gib, "hbm_gib": gpu.hbm_gib, "usable_gib": usable, "fits": total_gib <= usable,
            "margin_gib": usable - total_gib, "rank": rank,
            "breakdown_gib": {key: value / GIB for key, value in parts.items()}}
