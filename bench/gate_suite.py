#!/usr/bin/env python3
"""SYNTHETIC benchmark data for ATTUNE's correctness gate (``attune gate``), from a loss-noise model
fitted to real Megatron-LM golden curves.

Usage (from the repository root)::

    .venv/bin/python bench/gate_suite.py --fit-only            # print the fitted noise model
    .venv/bin/python bench/gate_suite.py [--out DIR] [--seed N] # write the cases (default bench/out/gate_suite)
    .venv/bin/python bench/gate_suite.py --evaluate             # write, then run `attune gate` on every case

Corpus: ``$ATTUNE_CORPUS_DIR/megatron_golden`` (default ``../shared/data`` next to the repository), read
in place (Megatron-LM functional-test goldens, flavor dev_dgx_gb200; see its SOURCE.md). Steps 1..20.

1. Noise model (``fit``; every number is printed by ``--fit-only`` and written to noise_model.json)
   (a) Trajectory: the largest group of index.json (same model and data; 54 cases, 47 distinct
       curves after dropping the all-zero distillation curve). Each curve is normalised by its step-1
       loss; s(t) is the mean, r_i(t) = y_i(t)/(y_i(1) s(t)) - 1 each curve's residual, L1 the range
       of step-1 losses. The data texture D(t) = s(t) - quadratic fit of s(t) (the per-step bumps
       every curve shares: all cases read the same rows in the same order). A synthetic baseline is
       b(t) = L1 s(t) (1 + r_i(t)) with L1 ~ U(range) and i drawn at random.
   (b) Rerun noise between runs with the same math: in-group pairs at the same world size whose
       flag diff lies in SAME_MATH_FIT_FLAGS (parallel sizes, overlap, recompute, checkpoint flags,
       determinism env). d(t) = (b(t) - a(t)) / a(t). Duplicated curve pairs count once.
       * kernel class (no INIT_LAYOUT_FLAGS in the diff; same golden commit, or equal step-1 loss):
         different kernels / reduction order. d = 0 before step t0, then rms(t) = A_k (t-t0+1)^p_k,
         lag-1 correlation rho_k (generated as AR(1)).
       * layout class (TP/PP/VP/EP/uneven-PP change; same golden commit only): the weights are
         initialised differently (Megatron seeds per TP/PP/EP rank), so d(1) != 0. d(t) = e0 + e(t),
         e0 ~ N(0, sigma_init) clipped to the largest |d(1)| seen, e(1) = 0,
         rms e(t) = A_L (t-1)^p_L, AR(1) rho_L.
       The same fits over steps 1..50 are printed too (growth with t).
       * dp class (reported, used for the topology fault): pairs with no flag diff and a different
         CI world size (DP changes at fixed global batch); their goldens come from different commits.
   (c) Bitwise reruns: the number of same-math pairs whose curves are identical (Megatron's CI checks
       exact equality for deterministic tests). Deterministic setups here rerun bit-identically.
2. Cases (CASES below, >= 24 faulty, >= 24 legitimate). Per case: baseline/, candidate/, repeat1/,
   repeat2/ (each recipe.yaml + log.txt) and case.json; cases.json lists them all. Repeats are two more
   runs of the baseline recipe: the same curve when the setup is deterministic (timestamps and
   iteration times differ), else b(t)(1 + kernel noise). World size 8 (2 workers x 4 GPUs).
   Legitimate candidates: "same" = scheduling only (bitwise in a deterministic setup, rerun noise
   otherwise); "kernel" = class R (b (1 + kernel noise)); "layout" = layout change (b (1 + layout + kernel
   noise)). Faulty candidates, with P(t) = b(1) - b(t) the learning progress (1.3% of the loss by step
   20 in these warm-up curves) and kernel noise on top of each:
     lr x2 ............. b + d P, d = -0.8 (first order: progress ~ cumulative LR, -1; discounted)
     warmup x2 ......... d = +0.4 (LR halved at every step in warm-up; first order +0.5)
     seq-length x2 ..... d = -0.1;  global batch x2: d = -0.1 (less gradient noise, same LR)
     capacity drop ..... d = +0.1, level +0.03% (tokens dropped while routing is unbalanced)
     fp8 hybrid ........ d = +0.05, level +0.02%, extra iid noise 5e-5 (quantisation)
     router dtype ...... d = +0.01, extra noise 2e-5 (bf16 logits flip top-k ties)
     init std /2 ....... level from the logit variance: step-1 excess over ln V scales with std^2; d = +0.1
     untie / swiglu / qk-layernorm: the relative difference of the real same-commit pair in
                         TRANSFER_PAIRS, applied to b (the nearest real evidence)
     dropout 0.1 ....... hidden d = +0.15, level +0.02%, noise 1e-4; attention d = +0.08, noise 5e-5
     grad reduce bf16 .. d = +0.01, noise 1e-5;  fp16: d = +0.02, noise 3e-5
     Adam beta2, clip .. d = +0.05 / +0.03;  weight decay x10: d = +0.002 (lr*wd < 1e-6 a step)
     tokenizer ......... b - ln(50257) + ln(32000) (same excess over the uniform loss, new vocab)
     seed .............. layout-like init offset + data texture reshuffled; data rows: texture reshuffled
     kernel bug ........ b + d P with d ~ U(5%, 15%) (a legal-looking flag, a drifting curve)
     topology x2 GPUs .. b (1 + N(0, sigma_dp)) per step;  swap outside the pairs: extra noise 1e-5
     per-token loss, decay style, misspelled flag: identical curve (real pairs with only
                         --calculate-per-token-loss are bitwise identical; 20 steps is deep in warm-up)
   (progress faults: c = (b + d P)(1 + level) (1 + noise); "level" is a relative shift from step 1)
     NaN: from step 14 the loss field is absent (Megatron drops an avg that is NaN) and grad norm is
     nan; skipped: steps 9-10 print lm loss 0 (HEAD), no grad norm, loss scale halves, 2 updates lost
     (d(t) = (9+10) / (t(t+1)/2): the share of cumulative warm-up LR lost); early stop: ends at 13.
   Grad norms (1 + 3 exp(-(t-1)/6), 2% noise) and iteration times are invented for the format only.
3. Seeded (--seed, default 20261102; each case draws from its own stream): same code, same bytes.
   Every log starts with a SYNTHETIC comment line; case.json says synthetic: true.
4. --evaluate runs ``attune.py gate --baseline B --candidate C --repeat R1 --repeat R2 --json`` per
   case and prints ours vs the Bridge-only gate (config.passed and bridge.passed). Exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gate_common as gc  # noqa: E402
from gate_fit import STEPS, fit, print_fit  # noqa: E402

DEFAULT_SEED = 20261102
SYNTHETIC = "SYNTHETIC: generated by bench/gate_suite.py from a noise model fitted to Megatron-LM golden curves"
def kernel_noise(rng, m: dict) -> np.ndarray:
    k = m["noise"]["kernel"]
    d = np.zeros(STEPS)
    n = STEPS - k["t0"] + 1
    z = gc.ar1(rng, n, k["rho"])
    for i in range(n):
        d[k["t0"] - 1 + i] = k["A"] * (i + 1) ** k["p"] * z[i]
    return d


def layout_noise(rng, m: dict) -> np.ndarray:
    lay = m["noise"]["layout"]
    z = gc.ar1(rng, STEPS - 1, lay["rho"])
    e = np.concatenate([[0.0], [lay["A"] * (i + 1) ** lay["p"] * z[i] for i in range(STEPS - 1)]])
    e0 = float(np.clip(rng.normal(0.0, lay["sigma_init"]), -lay["max_abs_d1"], lay["max_abs_d1"]))
    return e0 + e


def baseline_curve(rng, m: dict) -> np.ndarray:
    l1 = rng.uniform(*m["L1_range"])
    resid = np.array(m["residuals"][int(rng.integers(len(m["residuals"])))])
    return l1 * np.array(m["shape"]) * (1 + resid)


def texture_swap(rng, m: dict, b: np.ndarray) -> np.ndarray:
    tex = np.array(m["texture"])
    perm = np.concatenate([[0], 1 + rng.permutation(STEPS - 1)])
    return b + b[0] * (tex[perm] - tex)


def candidate_curve(spec: dict, b: np.ndarray, rng, m: dict, det: bool) -> tuple:
    """(curve, info): the candidate's loss per step for a curve spec (see the module docstring)."""
    kind, info = spec["kind"], {}
    if kind == "same":
        return (b.copy() if det else b * (1 + kernel_noise(rng, m))), info
    if kind == "kernel":
        return b * (1 + kernel_noise(rng, m)), info
    if kind == "layout":
        return b * (1 + layout_noise(rng, m) + kernel_noise(rng, m)), info
    c = b.copy()
    if kind == "dp":
        c = b * (1 + rng.normal(0.0, m["noise"]["dp"]["sigma"], STEPS))
    elif kind == "transfer":
        c = b * (1 + np.array(m["transfer"][spec["key"]]["d"]))
    elif kind == "texture":
        c = texture_swap(rng, m, b)
        if spec.get("init"):
            c = c * (1 + layout_noise(rng, m)[0])
    elif kind == "tokenizer":
        c = b - math.log(spec["old_vocab"]) + math.log(spec["new_vocab"])
    elif kind == "skip":
        steps = np.arange(1, STEPS + 1)
        lost = sum(spec["steps"]) / (steps * (steps + 1) / 2.0)
        c = b + np.where(steps > max(spec["steps"]), lost, 0.0) * (b[0] - b)
    else:  # progress, bug, init_std
        delta = spec.get("delta", 0.0)
        if kind == "bug":
            delta = float(rng.uniform(*spec["delta_range"]))
        level = spec.get("level", 0.0)
        if kind == "init_std":
            ln_v = math.log(spec["vocab"])
            level = (ln_v + (b[0] - ln_v) * spec["ratio"] ** 2) / b[0] - 1
        info = {"delta": round(delta, 6), "level": round(level, 6)}
        c = (b + delta * (b[0] - b)) * (1 + level)
        if spec.get("noise"):
            start = spec.get("noise_from", 1)
            c = c * (1 + np.where(np.arange(1, STEPS + 1) >= start, rng.normal(0, spec["noise"], STEPS), 0.0))
    return c * (1 + kernel_noise(rng, m)), info


# ======================================================================================== recipes
DENSE = {
    "--tensor-model-parallel-size": 2, "--pipeline-model-parallel-size": 2, "--sequence-parallel": True,
    "--use-distributed-optimizer": True, "--num-layers": 12, "--hidden-size": 512, "--num-attention-heads": 8,
    "--seq-length": 1024, "--max-position-embeddings": 1024, "--micro-batch-size": 4, "--global-batch-size": 32,
    "--train-iters": STEPS, "--log-interval": 1, "--eval-interval": 1000, "--eval-iters": 10,
    "--lr": "1.5e-4", "--min-lr": "1.0e-5", "--lr-decay-style": "cosine", "--lr-decay-iters": 320000,
    "--lr-warmup-fraction": 0.01, "--weight-decay": "1e-2", "--clip-grad": 1.0, "--adam-beta1": 0.9,
    "--adam-beta2": 0.95, "--init-method-std": 0.02, "--hidden-dropout": 0.0, "--attention-dropout": 0.0,
    "--bf16": True, "--attention-softmax-in-fp32": True, "--no-gradient-accumulation-fusion": True,
    "--transformer-impl": "transformer_engine", "--use-mcore-models": True, "--attention-backend": "fused",
    "--data-path": "/mnt/data/common_pile/my-gpt3_00_text_document", "--split": "949,50,1",
    "--tokenizer-type": "GPT2BPETokenizer", "--vocab-file": "/mnt/data/bpe/vocab.json",
    "--merge-file": "/mnt/data/bpe/merges.txt", "--seed": 1234, "--distributed-backend": "nccl",
}
MOE = {"--pipeline-model-parallel-size": 1, "--expert-model-parallel-size": 2, "--expert-tensor-parallel-size": 1,
       "--num-experts": 8, "--moe-router-topk": 2, "--moe-router-load-balancing-type": "aux_loss",
       "--moe-aux-loss-coeff": "1e-2", "--moe-router-dtype": "fp32", "--moe-token-dispatcher-type": "alltoall",
       "--moe-grouped-gemm": True}


def setup_recipe(setup: str, det: bool) -> tuple:
    args = dict(DENSE)
    if setup == "moe":
        args.update(MOE)
    if setup == "fp16":
        del args["--bf16"]
        args.update({"--fp16": True, "--initial-loss-scale": 65536})
    env = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
    if det:
        args["--deterministic-mode"] = True
        env.update({"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0", "NCCL_ALGO": "Ring", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
    else:
        args["--attention-backend"] = "flash"
        env["NVTE_ALLOW_NONDETERMINISTIC_ALGO"] = "1"
    return args, env, {"replicas": 2, "gpus": 4}


def apply(ops, args: dict, env: dict, topo: dict) -> None:
    for op in ops:
        if op[0] == "arg":
            args.pop(op[1], None) if op[2] is None else args.__setitem__(op[1], op[2])
        elif op[0] == "env":
            env.pop(op[1], None) if op[2] is None else env.__setitem__(op[1], op[2])
        elif op[0] == "replicas":
            topo["replicas"] = op[1]


def A(flag, value=True):
    return ("arg", flag, value)


def U(flag):
    return ("arg", flag, None)


def E(name, value):
    return ("env", name, value)


# ========================================================================================== cases
def _describe(ops) -> str:
    words = []
    for op in ops:
        if op[0] == "replicas":
            words.append("RayJob workers -> %d" % op[1])
        elif op[2] is None:
            words.append("%s removed" % op[1])
        else:
            words.append(op[1] if op[2] is True else ("%s=%s" if op[0] == "env" else "%s %s") % (op[1], op[2]))
    return ", ".join(words)


def C(name, setup, change, curve, catch=None, text=None, pre=(), log=None):
    """A case; ``setup`` is "dense", "moe" or "fp16", then "/det" or "/nondet"; the label follows the name
    (f = faulty, l = legitimate); ``text`` defaults to the change itself."""
    kind, det = setup.split("/")
    return {"name": name, "label": "faulty" if name[0] == "f" else "legitimate", "setup": kind,
            "deterministic": det == "det", "change": list(change), "pre": list(pre), "curve": curve,
            "expected_catch": catch, "fault_or_change": text or _describe(change), "log": log or {}}


P = lambda delta=0.0, **kw: dict(kind="progress", delta=delta, **kw)  # noqa: E731
T = lambda key: dict(kind="transfer", key=key)  # noqa: E731
BUG = dict(kind="bug", delta_range=(0.05, 0.15))
SAME, KERNEL, LAYOUT = dict(kind="same"), dict(kind="kernel"), dict(kind="layout")
OGR = A("--overlap-grad-reduce")
SAVE = (A("--save", "/mnt/ckpt/gate"), A("--save-interval", 10), A("--ckpt-format", "torch_dist"))
D, N, MD, MN = "dense/det", "dense/nondet", "moe/det", "moe/nondet"
CASES = [
    C("f01_lr_doubled", D, [A("--lr", "3.0e-4")], P(-0.8), "config"),
    C("f02_warmup_longer", N, [A("--lr-warmup-fraction", 0.02)], P(0.4), "config",
      "--lr-warmup-fraction 0.01 -> 0.02 (LR halved through warm-up)"),
    C("f03_seq_length", D, [A("--seq-length", 2048), A("--max-position-embeddings", 2048)], P(-0.1), "config"),
    C("f04_global_batch", N, [A("--global-batch-size", 64)], P(-0.1), "config"),
    C("f05_moe_capacity_drop", MD, [A("--moe-expert-capacity-factor", 1.0), A("--moe-token-drop-policy", "probs")],
      P(0.1, level=3e-4), "config", "capacity factor 1.0 with --moe-token-drop-policy probs: tokens dropped"),
    C("f06_data_rows", D, [], dict(kind="texture"), "checks", "other data rows (rows_sha256), same flags",
      log={"rows": "other"}),
    C("f07_fp8_hybrid", N, [A("--fp8-format", "hybrid"), A("--fp8-recipe", "delayed")],
      P(0.05, level=2e-4, noise=5e-5), "config"),
    C("f08_router_dtype", MN, [U("--moe-router-dtype")], P(0.01, noise=2e-5), "config",
      "--moe-router-dtype fp32 removed (router in bf16)"),
    C("f09_init_std", D, [A("--init-method-std", 0.01)], dict(kind="init_std", ratio=0.5, vocab=50257, delta=0.1),
      "config"),
    C("f10_untie_embeddings", D, [A("--untie-embeddings-and-output-weights"), U("--disable-bias-linear")],
      T("untie"), "config", pre=[A("--disable-bias-linear")]),
    C("f11_hidden_dropout", N, [A("--hidden-dropout", 0.1)], P(0.15, level=2e-4, noise=1e-4), "config"),
    C("f12_grad_reduce_bf16", D, [A("--grad-reduce-in-bf16")], P(0.01, noise=1e-5, noise_from=2), "config"),
    C("f13_per_token_loss", D, [A("--calculate-per-token-loss")], SAME, "config",
      "--calculate-per-token-loss (loss definition; the same curve on unpadded data)"),
    C("f14_nan_loss", N, [OGR], KERNEL, "checks", "legal --overlap-grad-reduce, but the loss is NaN from step 14 "
      "(NaN checks off in both recipes)", pre=[A("--no-check-for-nan-in-loss-and-grad")], log={"nan_from": 14}),
    C("f15_skipped_iterations", "fp16/det", [OGR], dict(kind="skip", steps=(9, 10)), "checks",
      "legal --overlap-grad-reduce, but fp16 overflow skips iterations 9 and 10", log={"skipped": (9, 10)}),
    C("f16_misspelled_flag", D, [A("--tensor-model-paralel-size", 4)], SAME, "config",
      "--tensor-model-paralel-size 4 (misspelled; slime ignores it silently): TP stays 2, identical curve"),
    C("f17_kernel_bug_tp_comm_overlap", N, [A("--tp-comm-overlap")], BUG, "convergence",
      "only --tp-comm-overlap (legal), but a kernel bug loses learning progress"),
    C("f18_kernel_bug_param_gather", D, [A("--overlap-param-gather")], BUG, "convergence",
      "only --overlap-param-gather (legal), but a stale-parameter bug loses learning progress", pre=[OGR]),
    C("f19_kernel_bug_moe_permute", MD, [A("--moe-permute-fusion")], BUG, "convergence",
      "only --moe-permute-fusion (legal), but a fused-permute bug loses learning progress"),
    C("f20_early_stop", N, [A("--recompute-granularity", "selective")], KERNEL, "checks",
      "legal --recompute-granularity selective, but the candidate log stops after step 13", log={"stop_at": 13}),
    C("f21_topology_16_gpus", D, [("replicas", 4)], dict(kind="dp"), "config",
      "RayJob workers 2 -> 4 (8 -> 16 GPUs, DP 2 -> 4 at the same global batch)"),
    C("f22_swap_outside_pair", MN, [A("--moe-token-dispatcher-type", "alltoall_seq")], P(0.0, noise=1e-5), "config",
      "dispatcher alltoall -> alltoall_seq (an older release's value, outside the allowlisted pairs)"),
    C("f23_unlisted_qk_layernorm", D, [A("--qk-layernorm")], T("qk_layernorm"), "config"),
    C("f24_adam_beta2", N, [A("--adam-beta2", 0.999)], P(0.05), "config"),
    C("f25_weight_decay", D, [A("--weight-decay", 0.1)], P(0.002), "config"),
    C("f26_clip_grad", D, [A("--clip-grad", 0.3)], P(0.03), "config"),
    C("f27_tokenizer", N, [A("--tokenizer-type", "HuggingFaceTokenizer"), A("--tokenizer-model",
      "/mnt/models/llama2-tokenizer"), U("--vocab-file"), U("--merge-file")],
      dict(kind="tokenizer", old_vocab=50257, new_vocab=32000), "config",
      "GPT2BPETokenizer -> HuggingFaceTokenizer (32k vocab): the loss curve is offset"),
    C("f28_lr_decay_style", D, [A("--lr-decay-style", "linear")], SAME, "config",
      "--lr-decay-style cosine -> linear (invisible in 20 warm-up steps)"),
    C("f29_seed", D, [A("--seed", 42)], dict(kind="texture", init=True), "config"),
    C("f30_attention_dropout", N, [A("--attention-dropout", 0.1)], P(0.08, noise=5e-5), "config"),
    C("f31_swiglu", D, [A("--swiglu"), U("--disable-bias-linear")], T("swiglu"), "config",
      pre=[A("--disable-bias-linear")]),
    C("f32_fp16", D, [U("--bf16"), A("--fp16"), A("--initial-loss-scale", 65536)], P(0.02, noise=3e-5), "config",
      log={"loss_scale": 65536.0}),
    C("f33_moe_aux_loss_coeff", MN, [A("--moe-aux-loss-coeff", "1e-3")], P(0.01, noise=1e-5), "config"),
    C("l01_tp4_pp1", D, [A("--tensor-model-parallel-size", 4), A("--pipeline-model-parallel-size", 1)], LAYOUT),
    C("l02_tp1_pp4", N, [A("--tensor-model-parallel-size", 1), A("--pipeline-model-parallel-size", 4),
      U("--sequence-parallel")], LAYOUT),
    C("l03_virtual_pipeline", D, [A("--num-layers-per-virtual-pipeline-stage", 3)], LAYOUT),
    C("l04_context_parallel", N, [A("--context-parallel-size", 2)], KERNEL, None,
      "--context-parallel-size 2 (DP 2 -> 1; CP does not change the initialisation)"),
    C("l05_pp1", D, [A("--pipeline-model-parallel-size", 1)], LAYOUT),
    C("l06_moe_ep4", MN, [A("--expert-model-parallel-size", 4)], LAYOUT),
    C("l07_overlap_grad_reduce", D, [OGR], SAME),
    C("l08_overlap_grad_reduce_nondet", N, [OGR], SAME),
    C("l09_overlap_param_gather", D, [A("--overlap-param-gather")], SAME, pre=[OGR]),
    C("l10_recompute_full", D, [A("--recompute-granularity", "full"), A("--recompute-method", "uniform"),
      A("--recompute-num-layers", 1)], SAME),
    C("l11_recompute_selective", N, [A("--recompute-granularity", "selective")], SAME),
    C("l12_ddp_bucket_size", N, [A("--ddp-bucket-size", 10000000)], KERNEL, pre=[OGR]),
    C("l13_cuda_graph", D, [A("--cuda-graph-impl", "local")], SAME),
    C("l14_manual_gc", D, [A("--manual-gc"), A("--manual-gc-interval", 100)], SAME),
    C("l15_nccl_min_nchannels", N, [E("NCCL_MIN_NCHANNELS", "16")], KERNEL),
    C("l16_nccl_nvls", D, [E("NCCL_NVLS_ENABLE", "0")], SAME),
    C("l17_cuda_device_max_connections", D, [E("CUDA_DEVICE_MAX_CONNECTIONS", "32")], SAME,
      pre=[A("--tensor-model-parallel-size", 1), A("--pipeline-model-parallel-size", 4), U("--sequence-parallel")]),
    C("l18_distributed_optimizer", D, [A("--use-distributed-optimizer")], KERNEL,
      pre=[U("--use-distributed-optimizer")]),
    C("l19_sequence_parallel", D, [A("--sequence-parallel")], KERNEL, pre=[U("--sequence-parallel")]),
    C("l20_attention_backend", N, [A("--attention-backend", "fused")], KERNEL),
    C("l21_no_rope_fusion", D, [A("--no-rope-fusion")], KERNEL, pre=[A("--position-embedding-type", "rope")]),
    C("l22_micro_batch", D, [A("--micro-batch-size", 2)], KERNEL),
    C("l23_ckpt_format", D, [A("--ckpt-format", "torch")], SAME, pre=SAVE),
    C("l24_async_save", D, [A("--async-save")], SAME, pre=SAVE),
    C("l25_empty_unused_memory", D, [A("--empty-unused-memory-level", 1)], SAME),
    C("l26_grad_accum_fusion", D, [U("--no-gradient-accumulation-fusion")], KERNEL),
    C("l27_cross_entropy_fusion", N, [A("--cross-entropy-loss-fusion")], KERNEL),
    C("l28_tp_comm_overlap", N, [A("--tp-comm-overlap")], KERNEL),
    C("l29_alloc_conf", D, [E("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")], SAME),
    C("l30_log_throughput", D, [A("--log-throughput")], SAME),
    C("l31_moe_grouped_gemm_off", MN, [U("--moe-grouped-gemm")], KERNEL),
    C("l32_moe_dispatcher", MD, [A("--moe-token-dispatcher-type", "allgather")], KERNEL),
    C("l33_distributed_timeout", D, [A("--distributed-timeout-minutes", 30)], SAME),
    C("l34_tp_pp_dp_mapping", D, [A("--use-tp-pp-dp-mapping")], SAME),
]


# ====================================================================================== generation
ROWS = {"same": hashlib.sha256(b"gate-suite rows: shard 00").hexdigest(),
        "other": hashlib.sha256(b"gate-suite rows: shard 01").hexdigest()}
T0 = dt.datetime(2026, 11, 2, 9, 0, 0)


def grad_norms(rng) -> np.ndarray:
    t = np.arange(STEPS)
    return (1.0 + 3.0 * np.exp(-t / 6.0)) * (1 + rng.normal(0, 0.02, STEPS))


def log_lines(case: dict, run: str, idx: int, args: dict, world: int, loss, gnorm, rng, speed: float,
              log: dict) -> list:
    gbs = int(args["--global-batch-size"])
    start = T0 + dt.timedelta(minutes=30 * idx + {"baseline": 0, "candidate": 8, "repeat1": 16, "repeat2": 23}[run])
    lines = ["# %s (case %s, run %s)" % (SYNTHETIC, case["name"], run), gc.startup_line(args, world),
             "attune-rows: rows_sha256=%s" % ROWS[log.get("rows", "same")]]
    clock = 60.0
    scale = log.get("loss_scale", 65536.0 if "--fp16" in args else 1.0)
    skipped = set(log.get("skipped", ()))
    base_ms = (610.0 if "--num-experts" in args else 420.0) * speed
    for step in range(1, min(STEPS, log.get("stop_at", STEPS)) + 1):
        ms = (9000.0 if step == 1 else base_ms) * (1 + rng.normal(0, 0.005))
        clock += ms / 1000.0
        value, gn, skip = float(loss[step - 1]), float(gnorm[step - 1]), int(step in skipped)
        if skip:
            value, gn = 0.0, None
            if step - 1 in skipped:
                scale /= 2.0
        if step >= log.get("nan_from", STEPS + 1):
            value, gn = None, "nan"
        tput = 120.0 * 1000.0 / ms if "--log-throughput" in args else None
        updates = step - sum(1 for s in skipped if s <= step)  # the LR scheduler steps on successful updates only
        lines.append(gc.iteration_line(gc.timestamp(start, clock), step, int(args["--train-iters"]), step * gbs, ms,
                                       gc.learning_rate(args, max(updates, 1)), gbs, value, scale, gn, None, skip, 0,
                                       tput))
    return lines


def generate(out: Path, seed: int, m: dict) -> list:
    out.mkdir(parents=True, exist_ok=True)
    listing = []
    for idx, case in enumerate(CASES):
        rng = np.random.default_rng([seed, idx])
        det = case["deterministic"]
        args, env, topo = setup_recipe(case["setup"], det)
        apply(case["pre"], args, env, topo)
        cargs, cenv, ctopo = dict(args), dict(env), dict(topo)
        apply(case["change"], cargs, cenv, ctopo)
        runs = {"baseline": (args, env, topo), "candidate": (cargs, cenv, ctopo)}
        runs["repeat1"] = runs["repeat2"] = runs["baseline"]
        b, g = baseline_curve(rng, m), grad_norms(rng)
        cand, info = candidate_curve(case["curve"], b, rng, m, det)
        curves, gnorms = {"baseline": b, "candidate": cand}, {"baseline": g}
        for run in ("repeat1", "repeat2"):
            curves[run] = b if det else b * (1 + kernel_noise(rng, m))
            gnorms[run] = g if det else g * (1 + rng.normal(0, 1e-3, STEPS))
        gnorms["candidate"] = g if np.array_equal(cand, b) else g * (1 + rng.normal(0, 1e-3, STEPS))
        speed = {"baseline": 1.0, "repeat1": 1.0, "repeat2": 1.0, "candidate": float(rng.uniform(0.85, 1.0))}
        case_dir = out / case["name"]
        for run in ("baseline", "candidate", "repeat1", "repeat2"):
            r_args, r_env, r_topo = runs[run]
            world = r_topo["replicas"] * r_topo["gpus"]
            recipe = gc.recipe_yaml("gs-%s-%s" % (case["name"], run), r_args, r_env, r_topo["replicas"], r_topo["gpus"],
                                    "%s (case %s, run %s)" % (SYNTHETIC, case["name"], run), label="gate-suite")
            lines = log_lines(case, run, idx, r_args, world, curves[run], gnorms[run], rng, speed[run],
                              case["log"] if run == "candidate" else {})
            gc.write_run(case_dir / run, recipe, lines)
        meta = {"name": case["name"], "label": case["label"], "fault_or_change": case["fault_or_change"],
                "expected_catch": case["expected_catch"], "deterministic": det, "synthetic": True,
                "note": SYNTHETIC, "setup": case["setup"], "curve_model": dict(case["curve"], **info),
                "pre": [list(op) for op in case["pre"]], "change": [list(op) for op in case["change"]],
                "log_changes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in case["log"].items()},
                "max_rel_diff_curve_model": float(np.nanmax(np.abs(cand - b) / b)), "seed": seed}
        gc.write_json(case_dir / "case.json", json.loads(json.dumps(meta, default=list)))
        listing.append(dict(meta, dir=case["name"]))
    gc.write_json(out / "cases.json", {"synthetic": True, "note": SYNTHETIC, "seed": seed, "steps": STEPS,
                                       "cases": listing})
    model = {k: v for k, v in m.items() if k != "residuals"}
    gc.write_json(out / "noise_model.json", model)
    return listing


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(gc.REPO / "bench" / "out" / "gate_suite"))
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--fit-only", action="store_true", help="print the fitted noise model and stop")
    parser.add_argument("--evaluate", action="store_true", help="also run attune gate on every case")
    parser.add_argument("--python", default=sys.executable, help="interpreter that runs attune.py")
    parser.add_argument("--jobs", type=int, default=0)
    opts = parser.parse_args(argv)
    corpus = gc.corpus_dir()
    if not (corpus / "index.json").exists():
        print("no golden corpus at %s (set ATTUNE_CORPUS_DIR)" % corpus, file=sys.stderr)
        return 2
    model = fit(corpus)
    if opts.fit_only:
        print_fit(model)
        return 0
    out = Path(opts.out)
    listing = generate(out, opts.seed, model)
    n_f = sum(c["label"] == "faulty" for c in listing)
    print("wrote %d cases (%d faulty, %d legitimate) to %s" % (len(listing), n_f, len(listing) - n_f, out))
    if opts.evaluate:
        if not gc.gate_available(opts.python):
            print("attune.py has no `gate` verb yet: nothing evaluated")
            return 0
        rows = [{"name": c["name"], "dir": out / c["dir"], "label": c["label"], "catch": c["expected_catch"],
                 "repeats": ["repeat1", "repeat2"]} for c in listing]
        gc.evaluate(rows, opts.python, opts.jobs)
        tot = gc.print_table(rows, extra_col="catch", by="catch")
        gc.write_json(out / "evaluation.json", {"totals": tot, "rows": [
            {k: v for k, v in r.items() if k != "dir"} for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
