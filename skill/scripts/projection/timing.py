"""Step time from a ``Job``'s work (``features``) and a handful of fitted efficiencies (``step_time``).

``features`` turns a job into efficiency-free numbers per pipeline rank (FLOPs, bytes, seconds of
each message kind at the datasheet bandwidth). ``step_time`` is vectorised with numpy over many
jobs at once (the calibration fits ~150 published runs in one call) and is the only place where
efficiencies enter. Per pipeline rank and micro-batch (forward + backward + recompute)::

    gemm    = FLOPs_lowp / peak_lowp * th_gemm_lp + FLOPs_bf16 / peak_bf16 * th_gemm_bf16
              + expert FLOPs / peak_run * th_gemm_run * th_expert  (grouped GEMMs vs dense ones)
              + GEMM bytes / HBM * th_gemm_bytes                  (additive roofline per GEMM)
    attn    = core-attention FLOPs * (1 + th_attn_s0 / span) / peak_bf16 * th_attn
              (span: the keys one kernel call sees, seq / CP or the window; th_attn_s0 in tokens)
              * th_sink for attention with a sink (--softmax-type off-by-one/learnable) on Blackwell, whose
              window layers are then costed as full ones
    elem    = elementwise bytes / HBM * th_elem                   (norms, RoPE, residuals, dense activations, casts,
                                                                   the loss: LOSS_BYTES a logit by implementation)
              + MoE elementwise bytes / HBM * th_moe_elem          (router, token permute/unpermute, expert
                                                                   activation: a few large fused kernels)
    gemm, attn, elem *= th_trend ** age (age: years the run's software predates the calibration's newest
                                         release; 0 for a projection, which is for that release's kernels)
    compute = max(gemm + attn + elem, layers * th_launch)          (host-bound floor per layer)
              + MoE layers * th_moe      (per-layer router/permute synchronisation, not overlapped)
    tp  = TP bytes / link * th_comm;  exposed: all of it, or with --tp-comm-overlap
          max(0, tp - gemm) + 0.1 tp (the first of ~10 pipelined chunks cannot hide)
    cp  = ring K/V bytes / link * th_comm; exposed max(0, cp - attn) (Megatron overlaps the ring with
          the attention blocks)
    ep  = max(NVLink bytes / NVLink * th_a2a_nvl, NIC bytes / NIC * th_a2a), the two halves of the expert
          all-to-alls running in parallel; th_a2a_nvl is th_a2a for the flex dispatcher (DeepEP/HybridEP,
          which fuse the permutation into the transfer) and th_a2a_nccl for alltoall/allgather (NCCL's
          collective with the permutation, the host sync for the split sizes and the unpermutation around
          it: measured, the dispatch of these runs inside a node costs an order of magnitude more than its
          bytes at NVLink speed). The alltoall dispatcher with --moe-pad-expert-input-to-capacity has static
          split sizes and no host sync (Megatron-LM core_v0.16.1 MoEAlltoAllTokenDispatcher: drop_and_pad
          skips _maybe_dtoh_and_synchronize), so it gets th_a2a; exposed: all, or with --overlap-moe-expert-parallel-comm
          max(0, ep - compute) + 0.1 ep (hidden under another micro-batch's compute)
    pp  = send/recv bytes / link * th_comm, exposed
    t_mb = compute + exposed tp + exposed cp + exposed ep + pp

The slowest rank sets the pace: ``crit = max over ranks of t_mb``, and with ``m`` micro-batches and
``vp`` virtual stages (1F1B / interleaved 1F1B)::

    step = m * crit + (pp - 1) / vp * crit                         (the second term is the bubble)
           + exposed DP reduce-scatter with --overlap-grad-reduce (else rs; all-reduce without the distributed
             optimizer): max(0, (rs - 2/3 crit) / vp, rs - 2/3 crit / vp * (1 + (vp - 1) min(pp, m))), which is
             max(0, rs - 2/3 crit) without virtual stages (hidden under the last micro-batch's backward). With
             them each chunk's gradients are reduced as soon as its last micro-batch's backward is done, and the
             last group of min(pp, m) micro-batches runs its backward chunk by chunk, so all but the last chunk's
             reduce-scatter hide under the chunk-backwards that follow (Megatron-LM core_v0.16.1
             pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving: grad_sync_func at
             is_last_microbatch_for_model_chunk)
           + exposed DP all-gather with --overlap-param-gather (else ag): the same with 1/3 crit, the forwards
             (param_sync_func launches chunk k + 1's all-gather at chunk k's first micro-batch)
           + optimizer: bytes of the local optimizer shard / HBM * th_elem
           + th_step0: the iteration's fixed cost outside the micro-batches (the optimizer's kernel launches,
             the grad-norm and found-inf all-reduces, the batch broadcast, the loss reduction for the log)

A link is NVLink/xGMI when the communicator's ranks span at most ``gpus_per_node`` GPUs (Megatron's
rank order: TP fastest, then CP, DP, PP; experts ETP, EP, expert-DP, PP), else the NIC. Collectives
use the ring cost ``bytes * (n - 1) / n`` at ``ring_bw``; point-to-point (CP ring, PP) at one link;
expert all-to-alls as in ``a2a_seconds``.
"""

from __future__ import annotations

import collections

import numpy as np

from . import model
from .config import Job
from .hardware import GPU

KAPPA = 0.1  # share of an overlapped TP / EP transfer that stays exposed (first pipelined chunk)
# Bytes of HBM traffic per logit (T x V / TP of them, fp32 4 and bf16 2 bytes an element) of the loss, forward and
# backward, by implementation (config.Job.cross_entropy), counted from Megatron-LM core_v0.16.1 and Transformer Engine:
# - unfused (tensor_parallel/cross_entropy.py): the fp32 cast of the bf16 logits 2 + 4, max 4, subtract the max 4 + 4,
#   exp 4 + 4, sum 4, divide by the sum 4 + 4 (38); backward: scale by the loss's gradient 4 + 4, cast to bf16 4 + 2 (14)
# - native (fusions/fused_cross_entropy.py: the same steps in four jit-fused functions): cast and max 2 + 4, subtract,
#   exp and sum in place 4 + 4, divide in place 4 + 4, the backward's scale and bf16 cast 4 + 4 + 2
# - te (pytorch/triton/cross_entropy.py): an online-softmax pass reads the bf16 logits 2, a second pass reads them and
#   writes the gradient into them 2 + 2; backward: scale the gradient in place 2 + 2 (Transformer Engine until its
#   #3193 of 2026-07, which writes the gradient to a new fp32 tensor instead: about 22)
LOSS_BYTES = {"unfused": 52.0, "native": 32.0, "te": 10.0}
OPT_BYTES = 34.0  # per parameter of the local optimizer shard: fp32 master, Adam m and v, grad read
THETA = ("gemm_bf16", "gemm_lp", "expert", "gemm_bytes", "attn", "elem", "launch", "moe", "comm", "a2a", "a2a_nccl",
         "moe_elem", "attn_s0", "step0", "sink", "trend")
RANK_KEYS = ("flops_lp", "flops_hp", "flops_expert", "gemm_bytes", "attn_flops", "attn_short", "elem_bytes",
             "moe_elem_bytes", "layers", "moe_layers", "tp_s", "cp_s", "ep_nvl_s", "ep_nic_s", "pp_s", "dp_rs_s",
             "dp_ag_s", "opt_bytes")
ROW_KEYS = ("peak_lp", "peak_hp", "lowp", "hbm", "m", "pp", "vp", "tp_overlap", "ep_overlap", "overlap_grad",
            "overlap_param", "nccl_a2a", "slow_sink", "age")


def p2p_bw(gpu: GPU, gpus_per_node: int, span: int) -> float:
    """Bytes/s of point-to-point traffic between ranks ``span`` GPUs apart (inclusive span)."""
    return (gpu.intra_gbs if span <= gpus_per_node else gpu.inter_gbs) * 1e9


def ring_bw(gpu: GPU, gpus_per_node: int, size: int, stride: int) -> float:
    """Bus bandwidth of a ring collective over ``size`` ranks ``stride`` apart. Inside one node it is
    the NVLink speed; across nodes each of the ``k`` members per node drives its own NIC (NCCL runs
    one ring channel per rail), so the ring moves ``k x NIC`` per GPU, capped by NVLink."""
    if size * stride <= gpus_per_node:
        return gpu.intra_gbs * 1e9
    k = max(1, min(size, gpus_per_node // stride))
    return min(gpu.intra_gbs, k * gpu.inter_gbs) * 1e9


def a2a_seconds(job: Job, gpu: GPU, gpus_per_node: int, count: float, tokens: float) -> tuple:
    """Seconds of ``count`` expert all-to-alls (or all-gathers) of ``tokens`` local tokens at the datasheet
    bandwidths, as (over NVLink, over the NIC): the two run in parallel, ``step_time`` takes the longer once each
    has its efficiency.

    ``alltoall``: each GPU sends its ``tokens * topk`` token copies, ``(ep - 1)/ep`` of them away:
    NVLink to the ``n_in`` EP peers in its node, the NIC to the rest. ``flex`` (DeepEP /
    HybridEP) sends a token once per remote node however many experts it has there: the expected
    number of distinct remote nodes among ``topk`` balanced picks over ``G`` nodes is
    ``(G - 1)(1 - (1 - 1/G)^topk)``. ``allgather`` (Megatron's default) gathers every EP peer's tokens."""
    if job.ep <= 1 or count <= 0:
        return 0.0, 0.0
    token = job.hidden * model.ACT
    inside = max(1, min(job.ep, gpus_per_node // job.etp))
    nodes = -(-job.ep // inside)
    copies = tokens * model.routed(job)
    if job.dispatcher == "allgather":
        nvlink, nic = tokens * token * (inside - 1), tokens * token * (job.ep - inside)
    else:
        nvlink = copies * token * (inside - 1) / job.ep
        if job.dispatcher == "flex":
            nic = tokens * token * (nodes - 1) * (1 - (1 - 1.0 / nodes) ** job.topk)
        else:
            nic = copies * token * (job.ep - inside) / job.ep
    return count * nvlink / (gpu.intra_gbs * 1e9), count * nic / (gpu.inter_gbs * 1e9)


def features(job: Job, gpu: GPU, gpus_per_node: int) -> dict:
    """Efficiency-free work of every pipeline rank (lists, one entry per rank) and the job's scalars."""
    T = job.mbs * job.seq / job.cp
    h, t, V = job.hidden, job.tp, job.vocab
    lp = job.precision != "bf16"
    kinds = {}

    # Sink attention on Blackwell: the published GPT-OSS runs there take th_sink times the standard attention's
    # time in every layer, sliding-window layers included (as if the window's tiles were not skipped); on H100 they
    # fit the standard model. A fitted description of those runs, not a measured kernel property.
    slow_sink = job.sink and gpu.blackwell

    def work(moe, window, full):
        window = window and not slow_sink
        key = (moe, window, full)
        if key not in kinds:
            kinds[key] = model.layer_work(job, moe, window, full)
        return kinds[key]

    tp_link = ring_bw(gpu, gpus_per_node, t, 1)
    cp_link = p2p_bw(gpu, gpus_per_node, t * job.cp)  # the ring's slowest hop
    pp_link = p2p_bw(gpu, gpus_per_node, t * job.cp * job.dp + 1)
    edp = job.gpus // (job.etp * job.ep * job.pp)
    dense_bw = ring_bw(gpu, gpus_per_node, job.dp * job.cp, t)
    expert_bw = ring_bw(gpu, gpus_per_node, edp, job.etp * job.ep)
    ranks = {key: [] for key in RANK_KEYS}
    for rank in range(job.pp):
        indices, embedding, loss, mtp = job.stages[rank]
        layer_kinds = [(bool(job.moe_pattern[i]), bool(job.window_pattern[i])) for i in indices]
        layer_kinds += [(bool(job.moe_pattern[-1]), False)] * mtp
        n_layers = len(layer_kinds)
        full = 0.0
        if job.recompute == "full" and n_layers:
            per_chunk = max(1, len(indices) // job.vp)
            full = 1.0 if job.recompute_method == "uniform" else min(job.recompute_layers, per_chunk) / per_chunk
        acc = dict.fromkeys(("flops_lp", "flops_hp", "flops_expert", "gemm_bytes", "attn_flops", "attn_short",
                             "elem_bytes", "moe_elem_bytes", "tp_bytes", "cp_bytes", "ep_count"), 0.0)
        for (moe, window), count in collections.Counter(layer_kinds).items():  # the same work per kind of layer
            for share, recomputed in ((1 - full, False), (full, True)):
                if share:
                    for key, value in work(moe, window, recomputed).items():
                        acc[key] += count * share * value
        heads_out = []
        if loss:
            heads_out.append((T, h, V / t, 1 + mtp))  # output layer (+ one per MTP depth), bf16
            acc["elem_bytes"] += LOSS_BYTES[job.cross_entropy] * T * V / t * (1 + mtp)  # softmax, loss, gradient
            if mtp:
                flops, traffic = model.gemm_cost([(T, 2 * h, h / t, mtp)], model.in_bytes(job))
                acc["flops_lp" if lp else "flops_hp"] += flops
                acc["gemm_bytes"] += traffic
        if heads_out:
            flops, traffic = model.gemm_cost(heads_out, 2.0)
            acc["flops_hp"] += flops
            acc["gemm_bytes"] += traffic
        if embedding:
            acc["elem_bytes"] += 4.0 * T * h * model.ACT
        ep_nvl, ep_nic = a2a_seconds(job, gpu, gpus_per_node, acc["ep_count"], T / t)
        dense, expert = model.rank_params(job, rank)
        n_dense, n_exp = job.dp * job.cp, edp
        volume = dense * (n_dense - 1) / n_dense / dense_bw + expert * (n_exp - 1) / n_exp / expert_bw
        if job.dist_opt:  # reduce-scatter of gradients, all-gather of parameters
            rs, ag = volume * job.grad_bytes, volume * job.param_bytes
            shard = dense / n_dense + expert / n_exp
        else:  # all-reduce: twice the reduce-scatter's traffic
            rs, ag, shard = 2 * volume * job.grad_bytes, 0.0, dense + expert
        values = {"flops_lp": acc["flops_lp"], "flops_hp": acc["flops_hp"], "flops_expert": acc["flops_expert"],
                  "gemm_bytes": acc["gemm_bytes"], "attn_flops": acc["attn_flops"], "attn_short": acc["attn_short"],
                  "elem_bytes": acc["elem_bytes"],
                  "moe_elem_bytes": acc["moe_elem_bytes"], "layers": float(n_layers),
                  "moe_layers": float(sum(moe for moe, _ in layer_kinds)),
                  "tp_s": acc["tp_bytes"] / tp_link, "cp_s": acc["cp_bytes"] / cp_link,
                  "ep_nvl_s": ep_nvl, "ep_nic_s": ep_nic,
                  "pp_s": (2.0 * job.vp * T * h * model.ACT / (t if job.sp else 1) / pp_link) if job.pp > 1 else 0.0,
                  "dp_rs_s": rs, "dp_ag_s": ag, "opt_bytes": OPT_BYTES * shard}
        for key in RANK_KEYS:
            ranks[key].append(values[key])
    scalars = {"peak_lp": gpu.peak(job.precision) if lp else gpu.peak("bf16"), "peak_hp": gpu.peak("bf16"),
               "lowp": float(lp),
               "hbm": gpu.hbm_tbs * 1e12, "m": float(job.microbatches), "pp": float(job.pp), "vp": float(job.vp),
               "tp_overlap": float(job.tp_overlap), "ep_overlap": float(job.ep_overlap),
               "overlap_grad": float(job.overlap_grad), "overlap_param": float(job.overlap_param),
               "nccl_a2a": float(job.dispatcher == "allgather" or (job.dispatcher == "alltoall" and not job.pad_to_capacity)),
               "slow_sink": float(slow_sink),
               "age": 0.0}  # years the software predates the calibration's newest release: projected for that one
    return {"ranks": ranks, "row": scalars}


def stack(feats: list) -> dict:
    """Many jobs' features as arrays: rank keys (rows, max PP) zero-padded, row keys (rows,)."""
    width = max(len(f["ranks"]["layers"]) for f in feats)
    out = {}
    for key in RANK_KEYS:
        array = np.zeros((len(feats), width))
        for i, f in enumerate(feats):
            array[i, :len(f["ranks"][key])] = f["ranks"][key]
        out[key] = array
    for key in ROW_KEYS:
        out[key] = np.array([f["row"][key] for f in feats], dtype=float)
    return out


def step_time(F: dict, theta: dict) -> dict:
    """Step time and its parts for stacked features ``F``; ``theta[name]`` is an array with one value
    per row (1 / efficiency; seconds per layer for ``launch``)."""
    col = {name: np.asarray(theta[name], dtype=float)[:, None] for name in THETA}
    run = np.where(F["lowp"][:, None] > 0, col["gemm_lp"], col["gemm_bf16"])  # the run's GEMM precision
    gemm = F["flops_lp"] / F["peak_lp"][:, None] * col["gemm_lp"] + F["flops_hp"] / F["peak_hp"][:, None] * \
        col["gemm_bf16"] + F["flops_expert"] / F["peak_lp"][:, None] * run * col["expert"] + \
        F["gemm_bytes"] / F["hbm"][:, None] * col["gemm_bytes"]
    attn = (F["attn_flops"] + F["attn_short"] * col["attn_s0"]) / F["peak_hp"][:, None] * col["attn"] * \
        np.where(F["slow_sink"][:, None] > 0, col["sink"], 1.0)
    elem = (F["elem_bytes"] * col["elem"] + F["moe_elem_bytes"] * col["moe_elem"]) / F["hbm"][:, None]
    older = col["trend"] ** F["age"][:, None]  # kernels of older software: th_trend more time per year
    gemm, attn, elem = gemm * older, attn * older, elem * older
    compute = np.maximum(gemm + attn + elem, F["layers"] * col["launch"]) + F["moe_layers"] * col["moe"]
    tp, cp, pp = (F[key] * col["comm"] for key in ("tp_s", "cp_s", "pp_s"))
    nvl = F["ep_nvl_s"] * np.where(F["nccl_a2a"][:, None] > 0, col["a2a_nccl"], col["a2a"])
    ep = np.maximum(nvl, F["ep_nic_s"] * col["a2a"])
    tp_exposed = np.where(F["tp_overlap"][:, None] > 0, np.maximum(0.0, tp - gemm) + KAPPA * tp, tp)
    cp_exposed = np.maximum(0.0, cp - attn)
    ep_exposed = np.where(F["ep_overlap"][:, None] > 0, np.maximum(0.0, ep - compute) + KAPPA * ep, ep)
    t_mb = compute + tp_exposed + cp_exposed + ep_exposed + pp
    crit_rank = np.argmax(t_mb, axis=1)
    rows = np.arange(t_mb.shape[0])
    crit = t_mb[rows, crit_rank]
    m = F["m"]
    bubble = (F["pp"] - 1) / F["vp"] * crit
    rs = np.max(F["dp_rs_s"], axis=1) * col["comm"][:, 0]
    ag = np.max(F["dp_ag_s"], axis=1) * col["comm"][:, 0]
    # with virtual stages each model chunk's gradients are reduced once its last micro-batch's backward is done, and the
    # backward of the last group of min(pp, m) micro-batches runs chunk by chunk (chunk vp-1 first): a chunk-backward
    # (2/3 crit / vp) of the first finished chunk and (vp - 1) x group more follow to hide the reduce-scatters under,
    # but the last chunk's own (rs / vp) has only its last chunk-backward; likewise the parameter all-gathers, chunk
    # k + 1's launched at chunk k's first forward, over forwards (1/3 crit / vp). vp 1: the last micro-batch's backward
    hide = 1.0 + (F["vp"] - 1.0) * np.minimum(F["pp"], m)

    def exposed(traffic, overlapped, share):  # share of a micro-batch's pass it hides under: 2/3 backward, 1/3 forward
        under = share * crit / F["vp"]
        return np.where(overlapped > 0, np.maximum(0.0, np.maximum(traffic / F["vp"] - under, traffic - under * hide)),
                        traffic)

    rs_exposed = exposed(rs, F["overlap_grad"], 2.0 / 3.0)
    ag_exposed = exposed(ag, F["overlap_param"], 1.0 / 3.0)
    optimizer = np.max(F["opt_bytes"], axis=1) / F["hbm"] * col["elem"][:, 0]
    step = m * crit + bubble + rs_exposed + ag_exposed + optimizer + col["step0"][:, 0]
    pick = lambda a: a[rows, crit_rank]  # noqa: E731  the critical rank's value
    return {"step": step, "bubble": bubble, "compute": m * pick(compute) + optimizer, "iteration": col["step0"][:, 0],
            "exposed_mb": m * (pick(tp_exposed) + pick(cp_exposed) + pick(ep_exposed) + pick(pp)),
            "exposed_dp": rs_exposed + ag_exposed, "crit_rank": crit_rank,
            "comm": {"tp": m * pick(tp), "cp": m * pick(cp), "ep": m * pick(ep), "pp": m * pick(pp),
                     "dp_reduce_scatter" : rs, "dp_all_gather": ag},
            "exposed": {"tp": m * pick(tp_exposed), "cp": m * pick(cp_exposed), "ep": m * pick(ep_exposed),
                        "pp": m * pick(pp), "dp": rs_exposed + ag_exposed},
            "parts": {"gemm": m * pick(gemm), "attention": m * pick(attn), "elementwise": m * pick(elem),
                      "optimizer": optimizer}}
