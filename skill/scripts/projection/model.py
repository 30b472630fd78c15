"""What one GPU does for one micro-batch: the GEMMs, attention, elementwise traffic and messages of
each layer, its parameters, and its activations. Pure arithmetic on a ``Job``; no efficiencies
(those are in ``timing.py``).

Notation (per GPU, one micro-batch): ``T = mbs * seq / cp`` tokens of the local sequence chunk (the
M of every TP-split GEMM); ``n = T / tp`` rows of the norm/residual region with sequence parallelism
(``T`` without it); TP divides GEMM widths. Routed experts, balanced (published MoE benchmarks force
balance): each GPU holds ``E / ep`` experts and receives ``A = T * topk / tp`` token-expert pairs,
so each local expert GEMM has ``M = A * etp / (E / ep)`` rows and ``N / etp`` columns.

GEMM traffic (bytes) per GEMM (M, K, N) with input element size ``e`` (2 bf16, 1 fp8, 0.5625 fp4):
forward ``e(MK + KN) + 2MN``; data gradient ``e(MN + KN) + 2MK``; weight gradient ``e(MK + MN) + 8KN``
(fp32 main-grad read and write). FLOPs: 2MKN forward, 4MKN backward. Core attention (FlashAttention)
runs in bf16; its backward is counted as 2.5 forwards (it recomputes the scores: five matmuls to the
forward's two); its FLOPs use the causal average of seq/2 keys per query (``w(1 - w/2s)`` for a
sliding window ``w``). In FP8/FP4 runs every linear layer is low precision except the router and
the output layer (Transformer Engine's recipes keep those in bf16).

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models"), generalised to GQA/MLA, gated MLPs, MoE and no-dropout models; see ``layer_activations``.
In low-precision runs the saved inputs of linear layers are their FP8/FP4 casts (1 byte).
"""

from __future__ import annotations

import math

from .config import Job

ACT = 2  # bytes of a bf16 activation


def in_bytes(job: Job) -> float:
    return {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625}[job.precision]


def widths(job: Job) -> dict:
    """Attention widths over all heads: q, k, v (inputs of core attention), and the core-attention
    head dims (d_qk, d_v)."""
    if job.mla:
        m = job.mla
        dqk = m["qk_head_dim"] + m["qk_pos_emb_head_dim"]
        return {"q": job.heads * dqk, "k": job.heads * dqk, "v": job.heads * m["v_head_dim"], "dqk": dqk,
                "dv": m["v_head_dim"]}
    kv = job.groups * job.kv_channels
    return {"q": job.heads * job.kv_channels, "k": kv, "v": kv, "dqk": job.kv_channels, "dv": job.kv_channels}


# ---------------------------------------------------------------------------------------------- GEMMs
def attention_gemms(job: Job, T: float) -> dict:
    """Forward GEMMs of one attention block, (M, K, N, count) by module."""
    h, t = job.hidden, job.tp
    if job.mla:
        m, w = job.mla, widths(job)
        qk = m["qk_head_dim"] + m["qk_pos_emb_head_dim"]
        if m["q_lora_rank"]:
            q = [(T, h, m["q_lora_rank"], 1)]  # down projections are duplicated on every TP rank
            up = [(T, m["q_lora_rank"], job.heads * qk / t, 1)]
        else:
            q, up = [(T, h, job.heads * qk / t, 1)], []
        kv_down = [(T, h, m["kv_lora_rank"] + m["qk_pos_emb_head_dim"], 1)]
        up.append((T, m["kv_lora_rank"], job.heads * (m["qk_head_dim"] + m["v_head_dim"]) / t, 1))
        return {"attn": q + kv_down + [(T, w["v"] / t, h, 1)], "mla_up": up}
    w = widths(job)
    kv_local = w["k"] / t if job.groups >= t else job.kv_channels  # groups < TP: replicated
    return {"attn": [(T, h, w["q"] / t + 2 * kv_local, 1), (T, w["q"] / t, h, 1)]}


def mlp_gemms(job: Job, T: float, ffn: int, split: int, count: float = 1) -> list:
    fc1 = 2 * ffn if job.gated else ffn
    return [(T, job.hidden, fc1 / split, count), (T, ffn / split, job.hidden, count)]


def routed(job: Job) -> float:
    """Token-expert pairs per token that reach the experts: ``topk``, times the capacity factor when the
    experts' inputs are padded to capacity (each expert computes exactly capacity rows), or times a capacity
    factor below 1 that drops the balanced load's excess (Megatron-LM's ``get_capacity``)."""
    if not job.capacity:
        return float(job.topk)
    return job.topk * (job.capacity if job.pad_to_capacity else min(job.capacity, 1.0))


def expert_gemms(job: Job, T: float) -> list:
    local = job.experts / job.ep
    rows = T * routed(job) / job.tp * job.etp / local
    return mlp_gemms(job, rows, job.moe_ffn, job.etp, local)


def gemm_cost(gemms, e: float, recompute: bool = False):
    """(flops, bytes) of GEMMs forward + backward (+ one more forward when recomputed)."""
    flops = traffic = 0.0
    for M, K, N, count in gemms:
        f = 2.0 * M * K * N
        fwd = e * (M * K + K * N) + ACT * M * N
        bwd = e * (M * N + K * N) + ACT * M * K + e * (M * K + M * N) + 8.0 * K * N
        flops += count * f * (3 + recompute)
        traffic += count * (fwd * (1 + recompute) + bwd)
    return flops, traffic


def cast_bytes(gemms, recompute: bool = False) -> float:
    """Quantisation traffic of low-precision GEMMs: read bf16, write the cast of X (fwd) and dY (bwd)."""
    return sum(count * 3.0 * (M * K * (1 + recompute) + M * N) for M, K, N, count in gemms)


def attention_keys(job: Job, window_layer: bool) -> float:
    s = job.seq
    if window_layer and job.window and job.window < s:
        return job.window * (1 - job.window / (2.0 * s))
    return s / 2.0


# ---------------------------------------------------------------------------------------- one layer
def layer_work(job: Job, moe: bool, window_layer: bool, full_recompute: bool) -> dict:
    """Per GPU, one micro-batch, forward + backward (+ recompute) of one decoder layer."""
    T = job.mbs * job.seq / job.cp
    h, t = job.hidden, job.tp
    n = T / t if job.sp else T
    mods = set(job.recompute_modules)
    lp = job.precision != "bf16"
    e = in_bytes(job)
    w = widths(job)
    out = dict.fromkeys(("flops_lp", "flops_hp", "flops_expert", "gemm_bytes", "attn_flops", "attn_short",
                         "elem_bytes", "moe_elem_bytes", "tp_bytes", "cp_bytes", "ep_count"), 0.0)

    def gemms(group, again, key=None):
        flops, traffic = gemm_cost(group, e, again)
        out[key or ("flops_lp" if lp else "flops_hp")] += flops
        out["gemm_bytes"] += traffic
        if lp:
            out["elem_bytes"] += cast_bytes(group, again)

    blocks = attention_gemms(job, T)
    gemms(blocks["attn"], full_recompute)
    if "mla_up" in blocks:
        gemms(blocks["mla_up"], full_recompute or "mla_up_proj" in mods)
    keys = attention_keys(job, window_layer)
    core = 2.0 * T * keys * job.heads / t * (w["dqk"] + w["dv"])
    out["attn_flops"] = core * (3.5 + (full_recompute or "core_attn" in mods))
    # FlashAttention's fixed work per query tile (load Q, rescale, write O, the diagonal tile of a causal mask) is
    # spread over the keys one kernel call sees: the local sequence (seq / CP) or the window, whichever is
    # shorter. timing.py charges attn_s0 / span more per FLOP: kernels reach their throughput only at long spans
    # (FlashAttention-3, arXiv:2407.08608, forward at head dim 128 on H100: 467 TFLOP/s at 512 tokens, 625 at
    # 2k, 648 at 16k, about 200 tokens of overhead without a causal mask)
    span = min(job.window, job.seq / job.cp) if (window_layer and job.window) else job.seq / job.cp
    out["attn_short"] = out["attn_flops"] / span
    elem = 16 * n * h + 4 * T * (w["q"] + w["k"]) / t
    if job.hidden_dropout > 0:
        elem += 6 * n * h
    if not job.flash:
        elem += 7 * 2 * job.heads / t * T * job.seq
    tp_blocks = 1

    act_passes = 8 if job.gated else 5
    if moe:
        A = T * routed(job) / t
        expert = expert_gemms(job, T)
        gemms(expert, full_recompute or "moe" in mods, "flops_expert")  # grouped GEMMs, run precision
        router = [(n, h, job.experts, 1)]
        flops, traffic = gemm_cost(router, 2.0, full_recompute)
        out["flops_hp"] += flops
        out["gemm_bytes"] += traffic
        # the routed experts' own traffic (router scores, token permute/unpermute, expert activation): a few large
        # fused kernels, apart from the norm/RoPE/residual traffic in elem (its own efficiency in timing.py)
        moe_elem = act_passes * A * job.moe_ffn + 8 * A * h + 8 * n * job.experts
        out["moe_elem_bytes"] = ACT * moe_elem * (1 + full_recompute / 3.0)
        if job.shared_ffn:
            gemms(mlp_gemms(job, T, job.shared_ffn, t), full_recompute or "shared_experts" in mods)
            elem += act_passes * T * job.shared_ffn / t
            tp_blocks += 1
        out["ep_count"] = 4 + 2 * (full_recompute or "moe" in mods)  # dispatch + combine, fwd + bwd
        if job.etp > 1:
            out["tp_bytes"] += 5 * A * h * ACT * (job.etp - 1) / job.etp
    else:
        gemms(mlp_gemms(job, T, job.ffn, t), full_recompute or "mlp" in mods)
        elem += act_passes * T * job.ffn / t
        tp_blocks += 1
    out["elem_bytes"] += ACT * elem * (1 + full_recompute / 3.0)
    if t > 1:
        units = (5 if job.sp else 4) + 2 * full_recompute
        out["tp_bytes"] += tp_blocks * units * T * h * ACT * (t - 1) / t
    if job.cp > 1:
        steps = job.cp - 1
        if window_layer and job.window:
            steps = min(steps, math.ceil(job.window / (job.seq / job.cp)))
        kv_bytes = T * (w["k"] + w["v"]) / t * ACT
        out["cp_bytes"] = steps * kv_bytes * (3 + full_recompute)
    return out


def layer_activations(job: Job, moe: bool, full_recompute: bool) -> float:
    """Bytes one decoder layer keeps for backward, per GPU and micro-batch (Korthikanti et al. 2022,
    Table 2 and section 4, generalised). For GPT-3-like layers (MHA, 4h GeLU MLP, dropout 0.1,
    unfused softmax) this is ``sbh(34 + 5as/h)``; with TP and SP all of it divided by t; TP without
    SP leaves ``10sbh`` undivided; selective recompute of core attention (or flash attention) drops
    ``5as^2b``; full recompute keeps only the layer input ``2sbh`` (/t with SP)."""
    T = job.mbs * job.seq / job.cp
    h, t = job.hidden, job.tp
    n = T / t if job.sp else T
    if full_recompute:
        return ACT * n * h
    mods = set(job.recompute_modules)
    w = widths(job)
    mask = 1.0 if job.hidden_dropout > 0 else 0.0
    g = in_bytes(job)  # Transformer Engine saves low-precision GEMM inputs in their cast form
    # Attention block: norm input, QKV input (norm output), Q, K, V, projection input, dropout mask.
    ln_out = 0.0 if "layernorm" in mods else g * n * h
    total = ACT * n * h + ln_out + mask * n * h
    if job.mla:
        m = job.mla
        latent = (m["q_lora_rank"] or 0) + m["kv_lora_rank"] + m["qk_pos_emb_head_dim"]
        total += ACT * T * latent  # latent q/kv (duplicated on TP ranks)
        if "mla_up_proj" not in mods:  # else the up-projections are recomputed in backward
            total += ACT * T * (w["q"] + w["k"] + w["v"]) / t
    else:
        total += ACT * T * (w["q"] + w["k"] + w["v"]) / t
    total += g * T * job.heads * w["dv"] / t  # projection input = attention output
    if not job.flash and "core_attn" not in mods:  # flash attention keeps only O (above) and fp32
        # row statistics (4ab bytes, not counted); unfused: softmax output (2 bytes), its dropout
        # mask (1) and dropout output (2): 5as^2b, with CP.
        total += (2 + 3 * (job.attention_dropout > 0)) * job.heads / t * T * job.seq
    # MLP block: norm input, fc1 input, fc1 output, activation output, dropout mask.
    total += ACT * n * h + ln_out + mask * n * h
    if moe:
        A = T * routed(job) / t
        total += 4.0 * n * job.experts * 2  # router logits and probabilities (fp32)
        if "moe" not in mods:
            fc1 = 2 * job.moe_ffn if job.gated else job.moe_ffn
            total += (g + ACT) * A * h  # dispatched expert input, expert output for the combine
            total += ACT * A * fc1
            if "moe_act" not in mods:
                total += g * A * job.moe_ffn
        if job.shared_ffn and "shared_experts" not in mods:
            fc1 = 2 * job.shared_ffn if job.gated else job.shared_ffn
            total += T * (ACT * fc1 + g * job.shared_ffn) / t
    elif "mlp" not in mods:
        fc1 = 2 * job.ffn if job.gated else job.ffn
        total += T * (ACT * fc1 + g * job.ffn) / t
    return total


# ------------------------------------------------------------------------------------------ params
def layer_params(job: Job, moe: bool) -> tuple:
    """(TP-sharded, replicated, expert) parameters of one decoder layer, whole model (unsharded)."""
    h = job.hidden
    w = widths(job)
    if job.mla:
        m = job.mla
        qk = m["qk_head_dim"] + m["qk_pos_emb_head_dim"]
        q = m["q_lora_rank"] * (h + job.heads * qk) if m["q_lora_rank"] else h * job.heads * qk
        attn = q + m["kv_lora_rank"] * (h + job.heads * (m["qk_head_dim"] + m["v_head_dim"])) \
            + h * m["qk_pos_emb_head_dim"] + job.heads * m["v_head_dim"] * h
    else:
        attn = h * (w["q"] + 2 * w["k"]) + w["q"] * h
    mult = 3 if job.gated else 2
    replicated = 2 * h
    if not moe:
        return attn + mult * h * job.ffn, replicated, 0.0
    return attn + mult * h * job.shared_ffn, replicated + h * job.experts, job.experts * mult * h * job.moe_ffn


def model_params(job: Job) -> dict:
    """Total and active parameters (embeddings included, output layer counted when untied)."""
    total = active = 0.0
    for i in range(job.layers):
        moe = bool(job.moe_pattern[i])
        sharded, replicated, expert = layer_params(job, moe)
        total += sharded + replicated + expert
        active += sharded + replicated + (expert * job.topk / job.experts if moe else 0)
    embed = job.vocab * job.hidden * (2 if job.untied else 1) + job.hidden  # + final norm
    return {"total": total + embed, "active": active + embed}


def rank_params(job: Job, rank: int) -> tuple:
    """(dense params, expert params) held by one GPU of pipeline rank ``rank`` (after TP/EP/ETP)."""
    indices, embedding, loss, mtp = job.stages[rank]
    dense = expert = 0.0
    layers = [bool(job.moe_pattern[i]) for i in indices] + [bool(job.moe_pattern[-1])] * mtp
    kv = 0.0
    if not job.mla and job.groups < job.tp:  # each rank keeps one whole KV group (replicated K/V weights)
        kv = 2.0 * job.hidden * job.kv_channels * job.groups * (1.0 / job.groups - 1.0 / job.tp)
    per_kind = {moe: layer_params(job, moe) for moe in set(layers)}  # a layer's count depends only on its kind
    for moe in layers:
        sharded, replicated, experts = per_kind[moe]
        dense += sharded / job.tp + replicated + kv
        expert += experts / (job.ep * job.etp)
    dense += mtp * 2 * job.hidden * job.hidden / job.tp
    table = job.vocab * job.hidden / job.tp
    if embedding:
        dense += table
    if loss and (job.untied or job.pp > 1 or not embedding):
        dense += table  # output layer (a tied copy on the last stage when PP > 1)
    if loss:
        dense += job.hidden
    return dense, expert


# ---------------------------------------------------------------------------------- model FLOPs
def model_flops(job: Job, causal: bool = True) -> float:
    """Megatron-LM's ``num_floating_point_operations`` (training.py at HEAD d98e8a64, causal
    attention) for one global batch: the conventional 'model FLOPs' behind TFLOP/s/GPU and MFU.
    Sliding windows are not discounted (Megatron's formula does not). ``causal=False`` gives the
    older convention (Megatron-LM up to 2024, NeMo 2.0) that counts the full score matrix."""
    h, s = job.hidden, job.seq
    fmul = 3 if job.gated else 2
    moe_layers = sum(job.moe_pattern) if job.experts else 0
    dense_layers = job.layers - moe_layers
    if job.mtp_layers:
        last_moe = job.moe_pattern[-1] if job.experts else 0
        moe_layers += last_moe * job.mtp_layers
        dense_layers += (1 - last_moe) * job.mtp_layers
    layers = job.layers + job.mtp_layers
    if job.mla:
        m = job.mla
        qk = m["qk_head_dim"] + m["qk_pos_emb_head_dim"]
        q_term = m["q_lora_rank"] * (h + job.heads * qk + 1) if m["q_lora_rank"] else h * job.heads * qk
        attn = 6 * (q_term + m["kv_lora_rank"] * (h + job.heads * (m["qk_head_dim"] + m["v_head_dim"]) + 1)
                    + h * m["qk_pos_emb_head_dim"] + job.heads * m["v_head_dim"] * h)
        core = 6 * (job.heads * qk / 2 + job.heads * m["v_head_dim"] / 2)
    else:
        q = job.kv_channels * job.heads
        kv = job.kv_channels * job.groups
        attn = 6 * (h * (q + 2 * kv) + q * h)
        core = 6 * q / 2 * 2
    mlp = 6 * h * (job.ffn * fmul * dense_layers
                   + (job.moe_ffn * job.topk * fmul + job.shared_ffn * fmul) * moe_layers)
    mtp = 6 * job.mtp_layers * (3 * h + 2 * h * h)
    logits = 6 * h * job.vocab * (job.mtp_layers + 1)
    tokens = job.gbs * s
    return tokens * (mlp + attn * layers + mtp + logits) + job.gbs * s * s * core * layers * (1 if causal else 2)
