"""The projection model: memory against hand-worked literature examples, invariants (hypothesis),
the public ``project`` contract, and params.json against a refit of the copied CSV."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from attune.core.errors import InputError
from conftest import DATA
from attune.projection import api, calibrate, config, dataset, hardware, memory, model, timing
from attune.projection.api import ConfigError, project

CASES = yaml.safe_load((DATA / "projection" / "memory_cases.yaml").read_text())["cases"]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

LLAMA8B = {"--num-layers": "32", "--hidden-size": "4096", "--ffn-hidden-size": "14336", "--num-attention-heads": "32",
           "--group-query-attention": True, "--num-query-groups": "8", "--swiglu": True, "--vocab-size": "128256",
           "--untie-embeddings-and-output-weights": True, "--seq-length": "8192", "--micro-batch-size": "1",
           "--global-batch-size": "128", "--bf16": True, "--use-distributed-optimizer": True}
DSV3 = {"--num-layers": "61", "--hidden-size": "7168", "--ffn-hidden-size": "18432", "--num-attention-heads": "128",
        "--multi-latent-attention": True, "--q-lora-rank": "1536", "--kv-lora-rank": "512", "--qk-head-dim": "128",
        "--qk-pos-emb-head-dim": "64", "--v-head-dim": "128", "--num-experts": "256", "--moe-router-topk": "8",
        "--moe-ffn-hidden-size": "2048", "--moe-shared-expert-intermediate-size": "2048",
        "--moe-layer-freq": "[0]*3+[1]*58", "--mtp-num-layers": "1", "--position-embedding-type": "rope",
        "--disable-bias-linear": True,
        "--swiglu": True, "--vocab-size": "129280",
        "--untie-embeddings-and-output-weights": True, "--seq-length": "4096", "--micro-batch-size": "1",
        "--global-batch-size": "8192", "--pipeline-model-parallel-size": "8",
        "--pipeline-model-parallel-layout": "Et*8|(t*8|)*6t*5mL", "--expert-model-parallel-size": "64",
        "--moe-token-dispatcher-type": "flex", "--bf16": True, "--fp8-format": "e4m3", "--fp8-recipe": "mxfp8",
        "--use-distributed-optimizer": True, "--overlap-grad-reduce": True, "--overlap-param-gather": True}


def job_of(args, gpus, gpu="H100"):
    return config.parse(args, gpus, gpu, hardware.get(gpu).gpus_per_node)


# ------------------------------------------------------------------------------ memory, literature
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_memory_against_hand_worked_examples(case):
    job = job_of(case["args"], case["gpus"])
    kind, want = case["kind"], case["expected"]
    if kind == "layer_activations":
        got = model.layer_activations(job, False, False)
    elif kind == "layer_activations_full":
        got = model.layer_activations(job, False, True)
    elif kind == "first_stage_layers_in_flight":
        got = memory.in_flight(job, 0) * len(job.stages[0][0])
    elif kind == "first_stage_decoder_activations":
        got = memory.decoder_activations(job, 0)
    elif kind == "total_parameters":
        got = model.model_params(job)["total"]
    elif kind == "weight_grad_optimizer_bytes":
        parts = memory.rank_memory(job, 0)
        got, want = [parts[k] for k in sorted(want)], [want[k] for k in sorted(want)]
    elif kind == "rank_parameters":
        dense, expert = model.rank_params(job, 0)
        got, want = [model.model_params(job)["total"], dense, expert], [want["total"], want["dense"], want["expert"]]
    else:
        raise AssertionError("unknown kind %s" % kind)
    assert np.allclose(got, want, rtol=1e-12, atol=0), (got, want)


def test_megatrons_local_layers_materialise_the_attention_softmax():
    """``--transformer-impl local`` builds Megatron's own DotProductAttention, which keeps the softmax (as
    ``--attention-backend unfused`` does under Transformer Engine): the projection counts it there and only
    there (bench/bench_memory.py: Megatron-LM's own local-layer golden runs were under-predicted by 24-44%
    while it was taken as flash attention)."""
    def act(**extra):
        job = job_of(dict(LLAMA8B, **extra), 8)
        return memory.decoder_activations(job, 0), job.flash
    te, te_flash = act()
    local, local_flash = act(**{"--transformer-impl": "local"})
    unfused, _ = act(**{"--attention-backend": "unfused"})
    assert te_flash and not local_flash and local == unfused > te


@pytest.mark.parametrize("tp", [1, 4])
def test_the_loss_keeps_and_moves_what_its_implementation_does(tp):
    """The last rank keeps one micro-batch's logits for the loss: Megatron's own cross-entropy casts them to fp32 and
    keeps the fp32 softmax (2 + 4 bytes a logit, and the native fused one likewise); Transformer Engine's
    (``--cross-entropy-loss-fusion --cross-entropy-fusion-impl te``) writes the gradient into the bf16 logits and
    keeps only them (2 bytes). Their traffic differs too (``timing.LOSS_BYTES``: unfused 52, native 32, te 10 bytes
    a logit), so the step time orders them te, native, unfused, by exactly that traffic at the elementwise
    efficiency."""
    args = dict(LLAMA8B, **{"--tensor-model-parallel-size": str(tp)}, **({"--sequence-parallel": True} if tp > 1 else {}))
    te_args = dict(args, **{"--cross-entropy-loss-fusion": True, "--cross-entropy-fusion-impl": "te"})
    native = dict(args, **{"--cross-entropy-loss-fusion": True})  # Megatron's fused kernels: the fp32 copy too
    last = lambda a: memory.rank_memory(job_of(a, 8), 0)["activations"]  # noqa: E731  (PP 1: the last rank)
    job = job_of(args, 8)
    logits = 8192 * job.vocab / tp  # T x V / TP
    assert last(args) - last(te_args) == pytest.approx(4 * logits)
    assert last(native) == pytest.approx(last(args))
    assert (job.cross_entropy, job_of(native, 8).cross_entropy, job_of(te_args, 8).cross_entropy) == \
        ("unfused", "native", "te")
    step = {name: project(a, 8, "H100")["time"]["parts_s"]["elementwise"]
            for name, a in (("unfused", args), ("native", native), ("te", te_args))}
    gpu = hardware.get("H100")
    elem = api.theta_for(gpu, api.load_params())[0]["elem"] / (gpu.hbm_tbs * 1e12)
    for name in ("native", "te"):  # per logit: the difference in bytes at the elementwise efficiency
        saved = (timing.LOSS_BYTES["unfused"] - timing.LOSS_BYTES[name]) * logits * job.microbatches * elem
        assert step["unfused"] - step[name] == pytest.approx(saved, rel=1e-6)
    assert step["te"] < step["native"] < step["unfused"]
    with pytest.raises(ConfigError, match="cross-entropy-fusion-impl"):
        job_of(dict(native, **{"--cross-entropy-fusion-impl": "triton"}), 8)
    assert {"--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl"} <= config.READS


def test_memory_verdict_uses_the_safety_margin():
    out = project(dict(LLAMA8B, **{"--recompute-granularity": "full", "--recompute-method": "uniform",
                                   "--recompute-num-layers": "1"}), 8, "H100")
    mem = out["memory"]
    assert mem["usable_gib"] == pytest.approx(80 * (1 - memory.SAFETY))
    assert mem["total_gib"] == pytest.approx(sum(mem["breakdown_gib"].values()))
    assert mem["fits"] == (mem["total_gib"] <= mem["usable_gib"])
    assert mem["margin_gib"] == pytest.approx(mem["usable_gib"] - mem["total_gib"])


# ------------------------------------------------------------------------------------ properties
layouts = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4]), "cp": st.sampled_from([1, 2]),
    "dp": st.sampled_from([1, 2, 4]), "mbs": st.sampled_from([1, 2]), "layers_per_stage": st.integers(1, 4),
    "sp": st.booleans(), "moe": st.booleans(), "flash": st.booleans()})


def dense_args(d, **extra):
    args = {"--num-layers": str(d["layers_per_stage"] * d["pp"] * 2), "--hidden-size": "2048",
            "--num-attention-heads": "16", "--group-query-attention": True, "--num-query-groups": "8",
            "--swiglu": True, "--ffn-hidden-size": "5632", "--vocab-size": "32000", "--seq-length": "2048",
            "--micro-batch-size": str(d["mbs"]), "--global-batch-size": str(d["mbs"] * d["dp"] * 8),
            "--tensor-model-parallel-size": str(d["tp"]), "--pipeline-model-parallel-size": str(d["pp"]),
            "--context-parallel-size": str(d["cp"]), "--bf16": True, "--use-distributed-optimizer": True,
            "--disable-bias-linear": True, "--moe-grouped-gemm": True}
    if d["sp"] and d["tp"] > 1:
        args["--sequence-parallel"] = True
    if d["moe"]:
        args.update({"--num-experts": "8", "--moe-router-topk": "2", "--moe-ffn-hidden-size": "1408",
                     "--expert-model-parallel-size": "2" if d["dp"] * d["cp"] % 2 == 0 else "1"})
    if not d["flash"]:
        args["--attention-backend"] = "unfused"
    args.update(extra)
    return args


def activations(d, **extra):
    args = dense_args(d, **extra)
    job = job_of(args, d["tp"] * d["pp"] * d["cp"] * d["dp"])
    return max(memory.decoder_activations(job, rank) for rank in range(job.pp))


@FAST
@given(layouts, st.lists(st.sampled_from([m for m in config.SELECTIVE_MODULES if m != "mla_up_proj"]), min_size=1,
                         max_size=4))
def test_more_selective_recompute_never_raises_activation_memory(d, modules):
    none = activations(d)
    some = activations(d, **{"--recompute-granularity": "selective", "--recompute-modules": " ".join(modules[:1])})
    more = activations(d, **{"--recompute-granularity": "selective", "--recompute-modules": " ".join(modules)})
    assert none >= some >= more


@FAST
@given(layouts, st.integers(1, 4))
def test_more_full_recompute_never_raises_activation_memory(d, n):
    none = activations(d)
    block = lambda k: activations(d, **{"--recompute-granularity": "full", "--recompute-method": "block",  # noqa
                                        "--recompute-num-layers": str(k)})
    uniform = activations(d, **{"--recompute-granularity": "full", "--recompute-method": "uniform",
                                "--recompute-num-layers": "1"})
    assert none >= block(n) >= block(n + 1) - 1e-6
    assert none >= uniform


@FAST
@given(layouts, st.sampled_from([2, 4]), st.sampled_from(["none", "selective", "full"]), st.integers(1, 4))
def test_a_larger_micro_batch_never_lowers_the_most_loaded_ranks_memory(d, factor, recompute, vp):
    """The sweep's premise for leaving out larger micro-batches of a layout that did not fit: at a fixed global
    batch, memory never falls as the micro-batch grows (fewer micro-batches in flight, each larger)."""
    extra = {"none": {}, "selective": {"--recompute-granularity": "selective", "--recompute-modules": "core_attn"},
             "full": {"--recompute-granularity": "full", "--recompute-method": "uniform",
                      "--recompute-num-layers": "1"}}[recompute]
    if vp > 1 and d["pp"] > 2:
        extra = dict(extra, **{"--num-virtual-stages-per-pipeline-rank": str(vp)})
    gpus = d["tp"] * d["pp"] * d["cp"] * d["dp"]
    totals = []
    for mbs in (d["mbs"], d["mbs"] * factor):
        args = dense_args(dict(d, mbs=mbs), **extra)
        args["--global-batch-size"] = str(d["mbs"] * factor * d["dp"] * 4)  # one global batch for both
        try:
            totals.append(memory.memory(job_of(args, gpus), hardware.get("H100"))["total_gib"])
        except ConfigError:
            return  # a layout Megatron-LM refuses (e.g. layers per virtual stage)
    assert totals[1] >= totals[0] - 1e-9


@FAST
@given(layouts, st.sampled_from([2, 4, 8]))
def test_more_tp_never_raises_weight_memory(d, factor):
    assume(d["tp"] * factor <= 16)
    small = dict(d)
    large = dict(d, tp=d["tp"] * factor)
    weights = []
    for layout in (small, large):
        job = job_of(dense_args(layout), layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"])
        weights.append(max(memory.rank_memory(job, r)["weights"] for r in range(job.pp)))
    assert weights[1] <= weights[0]


@FAST
@given(st.sampled_from([2, 4, 8]), st.sampled_from([1, 2]), st.integers(1, 6), st.integers(1, 4))
def test_bubble_share_shrinks_as_microbatches_grow(pp, vp, m, more):
    assume(vp == 1 or pp > 2)
    args = dict(LLAMA8B, **{"--pipeline-model-parallel-size": str(pp), "--num-layers": str(8 * pp)})
    if vp > 1:
        args["--num-layers-per-virtual-pipeline-stage"] = str(8 // vp)
    shares = []
    for count in (m, m + more):
        out = project(dict(args, **{"--global-batch-size": str(count * 2)}), 2 * pp, "H100")
        assert out["layout"]["microbatches"] == count
        shares.append(out["time"]["bubble_s"] / out["time"]["step_s"])
    assert shares[1] < shares[0]
    assert out["time"]["bubble_s"] > 0


@pytest.mark.parametrize("layers_per_chunk", [20, 10, 5, 2])
def test_virtual_stages_leave_only_the_last_chunks_data_parallel_traffic_exposed(layers_per_chunk):
    """Megatron's interleaved schedule reduce-scatters a model chunk's gradients as soon as its last micro-batch's
    backward is done and runs the last micro-batches' backward chunk by chunk, so the chunks finished first hide
    their reduce-scatters under the backward passes still to come; the all-gathers likewise under the forwards.
    A 70B-like model on 128 H100s (TP 8, PP 4, DP 4, 8 micro-batches, fp32 gradients): the DP traffic is the same
    at every VP, its exposed share falls as VP grows, and never below the last chunk's share of it."""
    args = dict(LLAMA8B, **{"--num-layers": "80", "--hidden-size": "8192", "--ffn-hidden-size": "28672",
                            "--num-attention-heads": "64", "--seq-length": "4096", "--global-batch-size": "32",
                            "--tensor-model-parallel-size": "8", "--pipeline-model-parallel-size": "4",
                            "--sequence-parallel": True, "--overlap-grad-reduce": True, "--overlap-param-gather": True,
                            "--num-layers-per-virtual-pipeline-stage": str(layers_per_chunk)})
    if layers_per_chunk == 20:
        del args["--num-layers-per-virtual-pipeline-stage"]
    out = project(args, 128, "H100")
    vp, pp, m = out["layout"]["vp"], out["layout"]["pp"], out["layout"]["microbatches"]
    assert (vp, pp, m) == (20 // layers_per_chunk, 4, 8)
    comm, t = out["time"]["comm_s"], out["time"]
    rs, ag = comm["dp_reduce_scatter"], comm["dp_all_gather"]
    crit = t["bubble_s"] * vp / (pp - 1)  # the bubble is (PP - 1) / VP of a micro-batch's pass
    hidden = 1 + (vp - 1) * min(pp, m)  # chunk-passes after the first finished chunk's own
    expected = max(0.0, (rs - 2 / 3 * crit) / vp, rs - 2 / 3 * crit / vp * hidden) + \
        max(0.0, (ag - 1 / 3 * crit) / vp, ag - 1 / 3 * crit / vp * hidden)
    assert t["exposed_s"]["dp"] == pytest.approx(expected, rel=1e-9)
    assert rs > 2 / 3 * crit  # more than a micro-batch's backward: exposed without virtual stages
    if vp == 1:
        assert t["exposed_s"]["dp"] == pytest.approx(rs - 2 / 3 * crit + max(0.0, ag - 1 / 3 * crit), rel=1e-9)
    else:
        assert t["exposed_s"]["dp"] >= (rs - 2 / 3 * crit) / vp
        fewer = project(dict(args, **{"--num-layers-per-virtual-pipeline-stage": str(2 * layers_per_chunk)})
                        if 2 * layers_per_chunk < 20 else {k: v for k, v in args.items()
                                                           if k != "--num-layers-per-virtual-pipeline-stage"},
                        128, "H100")
        assert fewer["time"]["comm_s"]["dp_reduce_scatter"] == pytest.approx(rs)
        assert t["exposed_s"]["dp"] < fewer["time"]["exposed_s"]["dp"]


def broken_rules(tp, pp, cp, gpus, layers, heads, groups, mbs, gbs, sp):
    """An independent statement of Megatron's layout rules: the names of the rules a layout breaks."""
    out = set()
    if gpus % (tp * pp * cp):
        out.add("world-size")
    elif gbs % (mbs * gpus // (tp * pp * cp)):
        out.add("global-batch")
    if layers % pp:
        out.add("layers-per-stage")
    if sp and tp == 1:
        out.add("sequence-parallel")
    if heads % tp:
        out.add("heads-per-rank")
    if groups % tp and tp % groups:
        out.add("query-groups-per-rank")
    return out


@FAST
@given(st.sampled_from([1, 2, 3, 4, 8]), st.sampled_from([1, 2, 3, 4]), st.sampled_from([1, 2]),
       st.sampled_from([4, 6, 8, 12, 16, 24]), st.sampled_from([12, 16, 18, 24]), st.sampled_from([8, 12, 24]),
       st.sampled_from([4, 8]), st.sampled_from([1, 2, 3]), st.sampled_from([12, 16, 48]), st.booleans())
def test_illegal_layouts_are_refused_with_the_rule_named(tp, pp, cp, gpus, layers, heads, groups, mbs, gbs, sp):
    assume(heads % groups == 0)
    args = {"--num-layers": str(layers), "--hidden-size": str(64 * heads), "--num-attention-heads": str(heads),
            "--group-query-attention": True, "--num-query-groups": str(groups), "--seq-length": "1024",
            "--micro-batch-size": str(mbs), "--global-batch-size": str(gbs), "--vocab-size": "32000",
            "--tensor-model-parallel-size": str(tp), "--pipeline-model-parallel-size": str(pp),
            "--context-parallel-size": str(cp), "--bf16": True}
    if sp:
        args["--sequence-parallel"] = True
    expected = broken_rules(tp, pp, cp, gpus, layers, heads, groups, mbs, gbs, sp)
    if not expected:
        project(args, gpus, "H100")
        return
    with pytest.raises(ConfigError) as raised:
        project(args, gpus, "H100")
    assert any(rule in str(raised.value) for rule in expected), (expected, str(raised.value))


@pytest.mark.parametrize("change, rule", [
    ({"--tensor-model-parallel-size": "3", "gpus": 24}, "heads-per-rank: --num-attention-heads 32 is not divisible "
                                                        "by --tensor-model-parallel-size 3"),
    ({"--num-experts": "6", "--expert-model-parallel-size": "4"}, "experts-per-rank"),
    ({"--context-parallel-size": "2", "--seq-length": "8190"}, "seq-length-cp"),
    ({"--pipeline-model-parallel-size": "2", "--num-layers-per-virtual-pipeline-stage": "8",
      "--no-overlap-p2p-communication": True}, "interleaved-pp"),
    ({"--pipeline-model-parallel-size": "4", "--pipeline-model-parallel-layout": "tE|t*8|t*8|t*7L"},
     "pipeline-layout: the layout must begin with the embedding"),
    ({"--mtp-num-layers": "1"}, "mtp: Multi-Token Prediction"),
    ({"--recompute-granularity": "full", "--recompute-num-layers": "1"}, "recompute-method"),
    ({"--recompute-granularity": "full", "--recompute-method": "uniform"}, "recompute-num-layers"),
    ({"--pipeline-model-parallel-size": "4", "--pipeline-model-parallel-layout": "Et*8|t*8|t*8|t*7L"},
     "pipeline-layout"),
    ({"--expert-model-parallel-size": "2"}, "expert-parallel"),
])
def test_each_refusal_names_its_rule(change, rule):
    change = dict(change)
    gpus = change.pop("gpus", 8)
    with pytest.raises(ConfigError, match=re.escape(rule)):
        project(dict(LLAMA8B, **change), gpus, "H100")


# ------------------------------------------------------------------------------ public contract
def test_project_contract_and_identities():
    out = project(dict(LLAMA8B, **{"--fp8-format": "hybrid", "--fp8-recipe": "tensorwise",
                                   "--overlap-grad-reduce": True, "--overlap-param-gather": True}), 8, "H100")
    assert set(out) == {"hardware", "gpus", "gpus_per_node", "layout", "memory", "time", "tokens_per_s_per_gpu",
                        "model_tflops_per_gpu", "mfu", "params", "warnings"}
    assert set(out["layout"]) == {"tp", "pp", "vp", "cp", "ep", "etp", "dp", "sp", "microbatches"}
    assert set(out["memory"]) == {"total_gib", "hbm_gib", "usable_gib", "fits", "margin_gib", "breakdown_gib"}
    assert set(out["memory"]["breakdown_gib"]) == {"weights", "grads", "optimizer", "activations", "overhead"}
    assert {"step_s", "compute_s", "comm_s", "exposed_comm_s", "bubble_s", "iteration_s"} <= set(out["time"])
    t = out["time"]
    assert t["compute_s"] + t["exposed_comm_s"] + t["bubble_s"] + t["iteration_s"] == pytest.approx(t["step_s"])
    assert t["iteration_s"] == pytest.approx(out["params"]["iteration_overhead_s"]) and t["iteration_s"] > 0
    assert out["tokens_per_s_per_gpu"] == pytest.approx(128 * 8192 / (t["step_s"] * 8))
    job = job_of(LLAMA8B, 8)
    assert out["model_tflops_per_gpu"] == pytest.approx(model.model_flops(job) / t["step_s"] / 8 / 1e12)
    assert out["mfu"] == pytest.approx(out["model_tflops_per_gpu"] * 1e12 / hardware.get("H100").peak("fp8"))
    assert out["layout"] == {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "sp": False,
                             "microbatches": 16}
    assert out["params"]["calibrated"] is True and out["params"]["family"] == "H100"
    json.dumps(out)  # plain data


def test_attention_costs_more_per_flop_in_shorter_kernel_calls():
    """FlashAttention's fixed work per query tile is spread over the keys one kernel call sees: context
    parallelism shortens each call to seq / CP, a sliding window to the window, and both raise the cost per
    attention FLOP by (1 + attn_s0 / L) against the long-sequence cost."""
    from attune.projection import timing
    gpu = hardware.get("H100")
    theta = api.theta_for(gpu, api.load_params())[0]
    s0 = theta["attn_s0"]
    assert 100 < s0 < 5000

    def seconds_per_flop(args, gpus):
        job = job_of(args, gpus)
        F = timing.stack([timing.features(job, gpu, gpu.gpus_per_node)])
        out = timing.step_time(F, {name: np.array([theta[name]]) for name in timing.THETA})
        return out["parts"]["attention"][0] / (F["m"][0] * F["attn_flops"][0, 0])

    full = seconds_per_flop(LLAMA8B, 8)
    cp4 = seconds_per_flop(dict(LLAMA8B, **{"--context-parallel-size": "4"}), 32)
    assert cp4 / full == pytest.approx((1 + s0 / 2048) / (1 + s0 / 8192))
    window = seconds_per_flop(dict(LLAMA8B, **{"--window-size": "(512, 0)"}), 8)
    assert window / full == pytest.approx((1 + s0 / 512) / (1 + s0 / 8192))


MIXTRAL = dict(LLAMA8B, **{"--num-experts": "8", "--moe-router-topk": "2", "--expert-model-parallel-size": "8",
                            "--moe-token-dispatcher-type": "alltoall", "--moe-grouped-gemm": True,
                            "--disable-bias-linear": True, "--global-batch-size": "64"})


@pytest.mark.parametrize("capacity, pad, share", [(None, False, 1.0), ("1.5", True, 1.5), ("1.5", False, 1.0),
                                                  ("0.5", False, 0.5), ("0.5", True, 0.5), ("-1", False, 1.0)])
def test_the_capacity_factor_sets_the_rows_each_expert_computes(capacity, pad, share):
    """Padded to capacity, each expert computes capacity x its balanced share of token copies; without padding a
    factor below 1 drops the excess and one above it changes nothing (the published runs are balanced); a negative
    factor is none (Megatron-LM's TransformerConfig)."""
    from attune.projection import timing
    args = dict(MIXTRAL)
    if capacity is not None:
        args["--moe-expert-capacity-factor"] = capacity
    if pad:
        args["--moe-pad-expert-input-to-capacity"] = True
    gpu = hardware.get("B200")
    base = timing.features(job_of(MIXTRAL, 8, "B200"), gpu, 8)["ranks"]
    got = timing.features(job_of(args, 8, "B200"), gpu, 8)["ranks"]
    assert got["flops_expert"][0] == pytest.approx(share * base["flops_expert"][0])
    assert got["ep_nvl_s"][0] == pytest.approx(share * base["ep_nvl_s"][0])


def test_only_the_syncing_dispatchers_pay_the_host_sync():
    """The alltoall dispatcher copies its split sizes to the host each MoE layer unless the experts are padded to
    capacity (static splits: Megatron-LM's drop_and_pad skips the sync), and the allgather one always does; the
    projection charges their NVLink transfer at the fitted NCCL efficiency, the others at the all-to-all one."""
    from attune.projection import timing
    gpu = hardware.get("B200")

    def nccl(**extra):
        return timing.features(job_of(dict(MIXTRAL, **extra), 8, "B200"), gpu, 8)["row"]["nccl_a2a"]
    padded = {"--moe-expert-capacity-factor": "1.0", "--moe-pad-expert-input-to-capacity": True}
    assert nccl() == 1 and nccl(**padded) == 0
    assert nccl(**{"--moe-token-dispatcher-type": "allgather"}) == 1
    assert nccl(**dict(padded, **{"--moe-token-dispatcher-type": "allgather"})) == 1
    assert nccl(**{"--moe-token-dispatcher-type": "flex"}) == 0
    theta = api.theta_for(gpu, api.load_params())[0]
    assert theta["a2a_nccl"] > theta["a2a"]
    fast = project(dict(MIXTRAL, **padded), 8, "B200")["time"]["exposed_s"]["ep"]
    slow = project(MIXTRAL, 8, "B200")["time"]["exposed_s"]["ep"]
    assert fast < slow


def test_warnings_name_defaults_and_uncalibrated_hardware():
    args = {k: v for k, v in LLAMA8B.items() if k != "--vocab-size"}
    out = project(args, 8, "MI300X")
    text = " ".join(out["warnings"])
    assert "--vocab-size" in text and str(config.DEFAULT_VOCAB) in text
    assert "uncalibrated" in text and out["params"]["calibrated"] is False
    assert project(LLAMA8B, 8, "h200")["params"]["family"] == "H100"  # same compute die as H100


def test_errors_are_input_errors():
    assert issubclass(ConfigError, InputError)
    with pytest.raises(InputError, match="unknown hardware"):
        project(LLAMA8B, 8, "TPUv5")
    with pytest.raises(ConfigError, match="precision"):
        project(dict(LLAMA8B, **{"--fp8-format": "hybrid"}), 8, "A100")


def test_moe_mla_projection_and_flops_match_the_published_convention():
    out = project(DSV3, 1024, "GB200")
    assert out["layout"]["dp"] == 128 and out["layout"]["ep"] == 64
    assert out["time"]["comm_s"]["ep"] > 0 and out["tokens_per_s_per_gpu"] > 0
    # Megatron-Bridge prints tokens/s and TFLOP/s; its FLOPs per token equal model.model_flops's
    # (DeepSeek-V3 with MTP, Llama 3.1 405B, Qwen3-235B) to 0.5%.
    rows = {row.row_id: row for row in dataset.load()[0]}
    for row_id, tokens, tflops in (("dc4abfe5b1", 6288, 1635), ("392259fc41", 1048, 2646),
                                   ("0f10b2ec98", 8816, 1306)):
        row = rows[row_id]
        job = job_of(row.args, row.gpus, row.gpu)
        assert model.model_flops(job) / (job.gbs * job.seq) * tokens / 1e12 == pytest.approx(tflops, rel=0.005)


def test_hardware_table_is_complete_and_sourced():
    for name in ("A100", "H100", "H200", "B200", "B300", "GB200", "GB300", "MI300X", "MI325X", "MI355X"):
        gpu = hardware.get(name)
        assert gpu.peak_tflops["bf16"] > 0 and gpu.hbm_gib > 0 and gpu.hbm_tbs > 0
        assert gpu.intra_gbs > gpu.inter_gbs > 0 and gpu.source
    assert hardware.get("GB200").gpus_per_node == 72 and hardware.get("H100").gpus_per_node == 8
    assert hardware.get("H100").peak("fp8") == pytest.approx(2 * hardware.get("H100").peak("bf16"))


# ---------------------------------------------------------------------------------- calibration
@pytest.fixture(scope="module")
def refit():
    rows, excluded = dataset.load()
    problem = calibrate.Problem(rows)
    return problem, calibrate.fit(problem), excluded


def test_params_json_is_what_calibrate_produces(refit):
    problem, p, excluded = refit
    stored = json.loads(api.PARAMS.read_text())
    assert stored["rows_used"] == len(problem.rows)
    assert stored["row_ids"] == [row.row_id for row in problem.rows]
    u, families = calibrate.params_dict(problem, p)
    assert calibrate.same_fit(stored, {"row_ids": stored["row_ids"], "global": u, "families": families},
                              rtol=1e-5) == []
    assert stored["data"]["sha256"] == __import__("hashlib").sha256(dataset.CSV.read_bytes()).hexdigest()
    assert stored["data"]["settings_sha256"] == __import__("hashlib").sha256(dataset.SETTINGS.read_bytes()).hexdigest()
    assert sum(stored["rows_excluded"].values()) == len(excluded)


def test_recorded_leave_one_out_matches_a_recomputation_on_a_subset(refit):
    problem, p, _ = refit
    stored = json.loads(api.PARAMS.read_text())["loo"]
    table = {row["row_id"]: row for row in stored["table"]}
    errors = np.abs([row["error_pct"] for row in stored["table"]])
    assert stored["median_abs_pct"] == pytest.approx(float(np.median(errors)), abs=0.01)
    assert stored["p90_abs_pct"] == pytest.approx(float(np.percentile(errors, 90)), abs=0.01)
    assert stored["median_abs_pct"] <= 10.0
    picks = [0, len(problem.rows) // 2, len(problem.rows) - 1]
    again = calibrate.leave_out(problem, p, np.arange(len(problem.rows)), only=picks)
    for i in picks:
        assert again[i] == pytest.approx(table[problem.rows[i].row_id]["predicted"], rel=1e-3)


def test_exclusion_rules_are_stated_and_applied():
    _, excluded = dataset.load()
    reasons = {reason for reason, *_ in excluded.values()}
    assert reasons <= {"stack", "workload", "hybrid", "shape", "nvfp4", "precision", "layout", "fsdp",
                       "optimizer", "batch", "measurement", "superseded"}
    for reason in reasons:
        assert "``%s``" % reason in dataset.__doc__
    assert all(not math.isnan(row.tokens_per_s_per_gpu) for row in dataset.load()[0])


def test_every_usable_row_runs_the_parallel_layout_its_table_lists():
    """Each row's arguments, after its recipe's settings (``published_settings.csv``) are applied, parse to the
    TP, PP, CP, EP and virtual stages its table lists: a recipe that counts the embedding and the loss in the
    pipeline split replaces the table's layout, which must not take the table's virtual stages with it. Only a
    size the recipe's settings name themselves replaces the table's (GPT-OSS-120B's 25.11 B200 preset: EP 64)."""
    import csv
    table = {raw["row_id"]: raw for raw in csv.DictReader(open(dataset.CSV, encoding="utf-8", newline=""))}
    recipes = dataset.settings()
    flag = {"tp": "--tensor-model-parallel-size", "pp": "--pipeline-model-parallel-size",
            "cp": "--context-parallel-size", "ep": "--expert-model-parallel-size",
            "vp": "--virtual-pipeline-model-parallel-size"}
    checked = {"vp": 0}
    for row in dataset.load()[0]:
        raw, gpu = table[row.row_id], hardware.get(row.gpu)
        job = config.parse(row.args, row.gpus, gpu.name, gpu.gpus_per_node)
        named = recipes.get(row.row_id, ({},))[0]
        for key in ("tp", "pp", "cp", "ep", "vp"):
            listed = raw[key].strip()
            if flag[key] in named:
                assert getattr(job, key) == int(named[flag[key]]), (row.row_id, key)
            elif listed.isdigit():
                assert getattr(job, key) == int(listed), (row.row_id, row.source_id, key, listed, getattr(job, key))
                checked[key] = checked.get(key, 0) + 1
    assert checked["vp"] >= 30 and checked["pp"] >= 80


def test_the_embedding_and_the_loss_counted_in_the_split_take_a_layer_from_their_stage():
    """Megatron-LM core_v0.16.1 ``transformer_block.get_num_layers_to_build``: with the embedding and the loss each
    counted as a layer, every virtual stage holds (layers + 2) / (PP x VP) decoder layers but the first, which
    builds one fewer (the embedding), and the last, one fewer (the loss): Llama-3.1-405B, PP 8, VP 8."""
    from attune.projection import config
    args = {"--num-layers": "126", "--hidden-size": "16384", "--ffn-hidden-size": "53248", "--num-attention-heads": "128",
            "--group-query-attention": True, "--num-query-groups": "8", "--seq-length": "8192", "--vocab-size": "128256",
            "--swiglu": True, "--tensor-model-parallel-size": "8", "--pipeline-model-parallel-size": "8",
            "--num-virtual-stages-per-pipeline-rank": "8", "--micro-batch-size": "1", "--global-batch-size": "512",
            "--bf16": True, "--account-for-embedding-in-pipeline-split": True,
            "--account-for-loss-in-pipeline-split": True}
    job = config.parse(args, 1024, "H100", 8)
    sizes = [len(stage[0]) for stage in job.stages]
    assert sum(sizes) == 126 and sizes[0] == 15 and sizes[-1] == 15 and set(sizes[1:-1]) == {16}
    with pytest.raises(InputError, match="layers-per-stage"):
        config.parse(dict(args, **{"--account-for-loss-in-pipeline-split": False}), 1024, "H100", 8)

def test_sink_attention_on_blackwell_is_costed_as_the_published_gpt_oss_runs_ran():
    """With a sink in the softmax (--softmax-type learnable or off-by-one), attention on Blackwell costs th_sink
    times the standard model's and a sliding window saves nothing (the fit's description of the published
    GPT-OSS-120B runs there); on H100 the standard model holds, window included."""
    from attune.projection import timing
    windowed = dict(LLAMA8B, **{"--window-size": "(128, 0)", "--window-attn-skip-freq": "2"})

    def attention(args, gpu_name):
        gpu = hardware.get(gpu_name)
        theta = api.theta_for(gpu, api.load_params())[0]
        job = job_of(args, 8, gpu_name)
        F = timing.stack([timing.features(job, gpu, gpu.gpus_per_node)])
        out = timing.step_time(F, {name: np.array([theta[name]]) for name in timing.THETA})
        return out["parts"]["attention"][0], theta["sink"]

    sink = {"--softmax-type": "learnable"}
    for gpu_name in ("B200", "GB300"):
        full, _ = attention(LLAMA8B, gpu_name)
        windows, _ = attention(windowed, gpu_name)
        assert windows < 0.7 * full  # half the layers see 128 keys
        sunk, factor = attention(dict(windowed, **sink), gpu_name)
        assert factor > 1 and sunk == pytest.approx(factor * full)
        assert attention(dict(LLAMA8B, **{"--softmax-type": "off-by-one"}), gpu_name)[0] == pytest.approx(factor * full)
    assert attention(dict(windowed, **sink), "H100")[0] == pytest.approx(attention(windowed, "H100")[0])


def test_older_software_takes_more_kernel_time_by_the_fitted_yearly_factor():
    """Rows are dated by their container (NeMo 25.11 is November 2025); the fit's reference is the newest release
    among them, and a run whose software is ``age`` years older takes th_trend ** age times the kernel time
    (GEMMs, attention, elementwise). A projection is for the reference release."""
    from attune.projection import timing
    rows = {row.row_id: row for row in dataset.load()[0]}
    assert {row.software for row in rows.values() if row.source_id == "mbridge_25_11"} == {2025 + 10 / 12}
    assert {row.software for row in rows.values() if row.source_id == "mlm_h100_weak_scaling"} == {2024.5}
    gpu = hardware.get("H100")
    theta = api.theta_for(gpu, api.load_params())[0]
    assert theta["trend"] > 1
    F = timing.stack([timing.features(job_of(LLAMA8B, 8), gpu, 8)])
    assert F["age"][0] == 0
    th = {name: np.array([theta[name]]) for name in timing.THETA}
    new = timing.step_time(F, th)["parts"]
    F["age"] = np.array([2.0])
    old = timing.step_time(F, th)["parts"]
    for part in ("gemm", "attention", "elementwise"):
        assert old[part][0] == pytest.approx(theta["trend"] ** 2 * new[part][0])
    out = project(LLAMA8B, 8, "H100")
    params = api.load_params()
    assert out["params"]["software_reference"] == params["software_reference"]
    newest = max(row.software for row in rows.values())
    assert params["software_reference"] == "%d-%02d" % (int(newest), round(newest % 1 * 12) + 1)
    assert "software: the newest calibrated release's (%s)" % params["software_reference"] in api.text(out, "r.yaml")
