"""The gate suite's loss-noise model, fitted to real Megatron-LM golden curves (``gate_suite.py``'s docstring
says what it measures): the run-to-run noise of a same-math rerun, the growth of a layout change, and the
transfer between setups that share a golden commit."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import gate_common as gc

STEPS = 20
GROWTH_STEPS = 50

SAME_MATH_FIT_FLAGS = frozenset("""
--tensor-model-parallel-size --pipeline-model-parallel-size --num-layers-per-virtual-pipeline-stage
--context-parallel-size --expert-model-parallel-size --expert-tensor-parallel-size --use-tp-pp-dp-mapping
--sequence-parallel --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers
--microbatch-group-size-per-virtual-pipeline-stage --num-distributed-optimizer-instances --use-distributed-optimizer
--overlap-grad-reduce --overlap-param-gather --overlap-param-gather-with-optimizer-step
--overlap-p2p-communication-warmup-flush --ddp-average-in-collective
--recompute-granularity --recompute-method --recompute-num-layers
--ckpt-format --ckpt-fully-parallel-load --ckpt-fully-parallel-save --no-ckpt-fully-parallel-save
--dist-ckpt-strictness --dist-ckpt-optim-fully-reshardable --async-save --async-strategy --use-persistent-ckpt-worker
--verify-integrity --auto-detect-ckpt-format --ckpt-assume-constant-structure --async-ckpt-use-cpu-shm
--use-checkpoint-opt_param-scheduler --deterministic-mode
NVTE_ALLOW_NONDETERMINISTIC_ALGO NCCL_ALGO CUBLAS_WORKSPACE_CONFIG NON_DETERMINSTIC_RESULTS
""".split())
INIT_LAYOUT_FLAGS = frozenset("""--tensor-model-parallel-size --pipeline-model-parallel-size
--num-layers-per-virtual-pipeline-stage --expert-model-parallel-size --decoder-first-pipeline-num-layers
--decoder-last-pipeline-num-layers""".split())
TRANSFER_PAIRS = {  # same golden commit, same world size (4), same TP/PP layout
    "untie": ("gpt3_mcore_te_tp1_pp4_resume_torch_dist_disable_bias_linear_1node",
              "gpt3_mcore_te_tp1_pp4_resume_torch_dist_untie_embeddings_and_outputs_1node"),
    "swiglu": ("gpt3_mcore_te_tp1_pp4_resume_torch_dist_disable_bias_linear_1node",
               "gpt3_mcore_te_tp1_pp4_resume_torch_dist_swiglu_1node"),
    "qk_layernorm": ("gpt3_mcore_te_tp4_pp1_resume_torch_dist_dist_optimizer_overlap_grad_reduce_1node",
                     "gpt3_mcore_te_tp4_pp1_resume_torch_dist_qk_layernorm_test_mode_1node"),
}


# ============================================================================================ fit
def _noise_fit(corpus: Path, index: dict, steps: int) -> dict:
    curves = {}

    def curve(name):
        if name not in curves:
            curves[name] = np.array(gc.metric_values(gc.load_case(corpus, name), "lm loss", steps))
        return curves[name]

    classes = {"kernel": {}, "layout": {}, "dp": {}}
    identical = {}
    for group in sorted(index["groups"], key=lambda g: g["group_id"]):
        for pair in group["pairs"]:
            a, b = curve(pair["a"]), curve(pair["b"])
            if not (np.isfinite(a).all() and np.isfinite(b).all()) or not a.all() or not b.all():
                continue
            args, env = gc.diff_keys(pair)
            keys = args | env
            key = (tuple(np.round(a, 5)), tuple(np.round(b, 5)))
            if "ci_world_size" in (pair.get("other_diff") or {}):
                if not keys:
                    classes["dp"][key] = (b - a) / a
                continue
            if not keys <= SAME_MATH_FIT_FLAGS:
                continue
            if np.array_equal(a, b):
                identical[key] = sorted(keys)
                continue
            same_commit = bool(pair.get("lm_loss_goldens_same_commit"))
            if keys & INIT_LAYOUT_FLAGS:
                if same_commit:
                    classes["layout"][key] = (b - a) / a
            elif same_commit or a[0] == b[0]:
                classes["kernel"][key] = (b - a) / a
    t = np.arange(1, steps + 1, dtype=float)
    out = {"steps": steps, "identical_pairs": len(identical),
           "identical_pair_flags": sorted({f for flags in identical.values() for f in flags})}
    d = np.array(list(classes["kernel"].values()))
    nz = np.flatnonzero(np.abs(d).max(0) > 0)
    t0 = int(nz[0]) + 1 if nz.size else steps
    rms = np.sqrt((d ** 2).mean(0))
    a_k, p_k = gc.power_fit(t[t0 - 1:] - t0 + 1, rms[t0 - 1:])
    out["kernel"] = {"pairs": len(d), "t0": t0, "A": a_k, "p": p_k, "rho": gc.lag1(d[:, t0 - 1:] / rms[t0 - 1:]),
                     "rms": [float(x) for x in rms], "max_abs": float(np.abs(d).max())}
    d = np.array(list(classes["layout"].values()))
    e = d - d[:, :1]
    rms_e = np.sqrt((e ** 2).mean(0))
    a_l, p_l = gc.power_fit(t[1:] - 1, rms_e[1:])
    out["layout"] = {"pairs": len(d), "sigma_init": float(np.sqrt((d[:, 0] ** 2).mean())),
                     "max_abs_d1": float(np.abs(d[:, 0]).max()),
                     "median_abs_d1": float(np.median(np.abs(d[:, 0]))), "A": a_l, "p": p_l,
                     "rho": gc.lag1(e[:, 1:] / rms_e[1:]), "rms_e": [float(x) for x in rms_e],
                     "max_abs": float(np.abs(d).max())}
    d = np.array(list(classes["dp"].values()))
    out["dp"] = {"pairs": len(d), "sigma": float(np.sqrt((d ** 2).mean())) if len(d) else 0.0,
                 "note": "world-size-only pairs; every one compares goldens of different commits"}
    return out


def fit(corpus: Path) -> dict:
    index = gc.load_index(corpus)
    big = max(index["groups"], key=lambda g: g["size"])
    seen, ys = set(), []
    for name in sorted(big["cases"]):
        y = np.array(gc.metric_values(gc.load_case(corpus, name), "lm loss", STEPS))
        key = tuple(np.round(y, 5))
        if np.isfinite(y).all() and y.all() and key not in seen:
            seen.add(key)
            ys.append(y)
    y = np.array(ys)
    norm = y / y[:, :1]
    shape = norm.mean(0)
    t = np.arange(1, STEPS + 1, dtype=float)
    smooth = np.polyval(np.polyfit(t, shape, 2), t)
    model = {"corpus": str(corpus), "group": big["group_id"], "group_cases": len(big["cases"]),
             "distinct_curves": len(ys), "shape": [float(x) for x in shape],
             "shape_sd": [float(x) for x in norm.std(0)], "texture": [float(x) for x in shape - smooth],
             "L1_range": [float(y[:, 0].min()), float(y[:, 0].max())],
             "residuals": [[float(x) for x in row] for row in norm / shape - 1]}
    model["noise"] = _noise_fit(corpus, index, STEPS)
    model["growth"] = _noise_fit(corpus, index, GROWTH_STEPS)
    model["transfer"] = {}
    for key, (a, b) in TRANSFER_PAIRS.items():
        ya = np.array(gc.metric_values(gc.load_case(corpus, a), "lm loss", STEPS))
        yb = np.array(gc.metric_values(gc.load_case(corpus, b), "lm loss", STEPS))
        model["transfer"][key] = {"a": a, "b": b, "d": [float(x) for x in (yb - ya) / ya]}
    return model


def print_fit(m: dict) -> None:
    print("corpus: %s" % m["corpus"])
    print("(a) trajectory: group %s (%d cases, %d distinct curves), steps 1..%d" % (
        m["group"], m["group_cases"], m["distinct_curves"], STEPS))
    print("    L1 (step-1 loss) range: %.5f .. %.5f" % tuple(m["L1_range"]))
    print("    s(t) = loss(t)/loss(1), mean: " + " ".join("%.5f" % x for x in m["shape"]))
    print("    sd across curves:            " + " ".join("%.5f" % x for x in m["shape_sd"]))
    print("    data texture D(t):           " + " ".join("%+.5f" % x for x in m["texture"]))
    for label, block in (("steps 1..%d" % STEPS, m["noise"]), ("growth, steps 1..%d" % GROWTH_STEPS, m["growth"])):
        k, lay, dp = block["kernel"], block["layout"], block["dp"]
        print("(b) rerun noise, %s:" % label)
        print("    kernel: %d pairs; d = 0 for t < %d; rms(t) = %.3e (t-%d+1)^%.3f; rho %.2f; max |d| %.2e" % (
            k["pairs"], k["t0"], k["A"], k["t0"], k["p"], k["rho"], k["max_abs"]))
        print("    layout: %d pairs; sigma_init %.3e (median |d(1)| %.2e, max %.2e); rms e(t) = %.3e (t-1)^%.3f; "
              "rho %.2f; max |d| %.2e" % (lay["pairs"], lay["sigma_init"], lay["median_abs_d1"], lay["max_abs_d1"],
                                          lay["A"], lay["p"], lay["rho"], lay["max_abs"]))
        print("    dp (world size only, different commits): %d pairs; sigma %.2e" % (dp["pairs"], dp["sigma"]))
        print("    (c) bitwise-identical same-math pairs: %d (flags: %s)" % (
            block["identical_pairs"], " ".join(block["identical_pair_flags"])))
    for key, tr in m["transfer"].items():
        print("transfer %-12s %s -> %s: d(1) %+.2e, d(%d) %+.2e" % (key, tr["a"], tr["b"], tr["d"][0], STEPS,
                                                                  tr["d"][-1]))


# ========================================================================================= curves
