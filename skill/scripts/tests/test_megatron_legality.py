"""Our legality rules and pipeline split against Megatron-LM's own. Generated configurations go through our
``legality.check`` / ``projection.config.parse`` and through Megatron-LM core_v0.16.1's ``parse_args``,
``validate_args``, ``core_transformer_config_from_args``, ``get_transformer_layer_offset`` and
``get_num_layers_to_build`` (``megatron_verdict.py``, in a subprocess with Megatron's source on PYTHONPATH). Both
must refuse the same configurations and place the same decoder layers, the embedding and the loss on the same
pipeline ranks.

Differences on purpose, each checked as such: we refuse uneven first/last stages without pipeline parallelism
(Megatron-LM accepts some and builds a model of another depth), ``--sequence-parallel`` at TP 1 (Megatron-LM
turns it off: a run of it would be spent on nothing), query groups that do not divide the heads and expert
parallel sizes that do not divide the world, and a global batch that micro-batches times data-parallel ranks
do not divide (Megatron-LM's argument checks pass them; its model, process groups or micro-batch calculator
refuse them at start-up). We accept the EP all-to-all overlap at PP > 1 without virtual stages, which
core_v0.16.1 refuses and later releases ran (``legality._ep_overlap``).

Megatron-LM's source comes from ATTUNE_MEGATRON_DIR, ATTUNE_MEGATRON_ARCHIVE or the corpus's archive
(ATTUNE_CORPUS_DIR, default ../shared/data), as for the real-Megatron tests; without one these tests skip and say so.
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from attune.core.errors import InputError
from attune.projection import config

sys.path.insert(0, str(REPO / "harness"))
import megatron_cpu  # noqa: E402
from test_megatron_real import _megatron  # noqa: E402  the same source, found the same way

HELPER = Path(__file__).resolve().parent / "megatron_verdict.py"
BASE = {"--hidden-size": "64", "--num-attention-heads": "4", "--seq-length": "128", "--max-position-embeddings": "128",
        "--micro-batch-size": "1", "--global-batch-size": "8", "--vocab-size": "1024", "--bf16": True,
        "--tokenizer-type": "NullTokenizer", "--no-rope-fusion": True}


def _layout(rng: random.Random, layers: int, pp: int, mtp: int) -> str:
    """A layout string, legal or with one of the faults Megatron checks for."""
    n = pp * rng.choice([1, 1, 2, 3]) + (rng.random() < 0.1) * rng.choice([-1, 1])
    n = max(1, n)
    counts = [0] * n
    for _ in range(layers):
        counts[rng.randrange(n)] += 1
    stages = ["t" * c for c in counts]
    fault = rng.choice([None] * 6 + ["no-E", "E-late", "L-early", "two-L", "m-early", "space"])
    stages[0] = ("" if fault == "no-E" else "E") + stages[0]
    if fault == "E-late" and n > 1:
        stages[0], stages[1] = stages[0][1:], "E" + stages[1]
    stages[-1] += "m" * mtp + "L"
    if fault == "L-early" and n > 1:
        stages[-1], stages[-2] = stages[-1][:-1], stages[-2] + "L"
    if fault == "two-L":
        stages[0] += "L"
    if fault == "m-early" and mtp:
        stages[-1] = stages[-1].replace("m", "", 1)
        stages[0] = stages[0] + "m"
    text = "|".join(stages)
    if rng.random() < 0.3:  # Megatron's repeat notation
        text = text.replace("tttt", "t*4")
    if fault == "space":
        text = text.replace("|", "| ", 1)
    return text


def cases(count: int = 320, seed: int = 20261205) -> list:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        layers = rng.choice([rng.randint(1, 40), rng.choice([24, 32, 36, 48, 61, 62, 80, 94, 95, 126])])
        pp = rng.choice([1, 2, 2, 3, 4, 4, 6, 8, 16])
        args = dict(BASE, **{"--num-layers": str(layers), "--pipeline-model-parallel-size": str(pp)})
        mode = rng.choice(["even", "counted", "uneven", "stages", "layers", "layout"])
        if mode == "counted":
            for flag in ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"):
                if rng.random() < 0.7:
                    args[flag] = True
        if mode == "uneven":
            for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"):
                if rng.random() < 0.7:
                    args[flag] = str(rng.randint(0, max(1, layers // pp + 3)))
        if mode in ("counted", "uneven", "stages", "layers") and rng.random() < 0.5:
            if mode == "layers" or (mode == "counted" and rng.random() < 0.5):
                args["--num-layers-per-virtual-pipeline-stage"] = str(rng.choice([1, 2, 3, 4]))
            else:
                args["--num-virtual-stages-per-pipeline-rank"] = str(rng.choice([1, 2, 3, 4]))
        if rng.random() < 0.9:
            args["--position-embedding-type"] = "rope"
        if mode == "layout":
            mtp = rng.choice([0, 0, 1])
            if mtp:
                args["--mtp-num-layers"] = "1"
            args["--pipeline-model-parallel-layout"] = _layout(rng, layers, pp, mtp)
        if rng.random() < 0.3:
            args["--no-overlap-p2p-communication"] = True
        out.append(args)
    return out


def _argv(args: dict) -> list:
    argv = []
    for flag, value in args.items():
        argv += [flag] if value is True else [flag] + (str(value).split() if flag == "--recompute-modules" else [value])
    return argv


def megatron_verdicts(cases: list) -> list:
    """Megatron-LM's verdict on each ``(args, world size)``, from one subprocess."""
    megatron = _megatron()
    missing = megatron_cpu.missing_packages()
    assert not missing, "comparing with Megatron-LM needs %s: pip install -e '.[megatron]'" % " ".join(missing)
    env = dict(os.environ, PYTHONPATH=str(megatron))
    done = subprocess.run([sys.executable, str(HELPER)], input=json.dumps(
        [{"argv": _argv(args), "world": world} for args, world in cases]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(out) == len(cases)
    return out


def ours(args: dict) -> dict:
    pp = int(args["--pipeline-model-parallel-size"])
    try:
        job = config.parse(dict(args), pp, "H100", 8)
    except InputError as error:
        return {"ok": False, "error": str(error)}
    return {"ok": True, "ranks": [list(stage[0]) for stage in job.stages],
            "embedding": [r for r, stage in enumerate(job.stages) if stage[1]],
            "loss": [r for r, stage in enumerate(job.stages) if stage[2]]}


def test_the_split_is_megatrons_own():
    all_args = cases()
    theirs = megatron_verdicts([(a, int(a["--pipeline-model-parallel-size"])) for a in all_args])
    differ, stricter, other_depth = [], 0, 0
    for args, mine, megatron_says in zip(all_args, map(ours, all_args), theirs):
        if args["--pipeline-model-parallel-size"] == "1" and any(
                flag in args for flag in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers")):
            # One difference on purpose: uneven first/last stages without pipeline parallelism. Megatron-LM accepts
            # some of them and then builds a model of another depth (24 layers, first 20, last 10, PP 1: it builds
            # 10); we refuse them all.
            assert not mine["ok"] and "uneven-pipeline" in mine["error"]
            stricter += 1
            other_depth += megatron_says["ok"] and sum(map(len, megatron_says["ranks"])) != int(args["--num-layers"])
            continue
        if mine["ok"] != megatron_says["ok"] or (mine["ok"] and any(
                mine[key] != megatron_says[key] for key in ("ranks", "embedding", "loss"))):
            shown = {k: v for k, v in args.items() if k not in BASE}
            differ.append("%s\n    ours:     %s\n    Megatron: %s" % (shown, mine, megatron_says))
    accepted = sum(t["ok"] for t in theirs)
    assert stricter and other_depth, "the cases should include uneven stages without pipeline parallelism, one of " \
                                     "which Megatron-LM builds at another depth"
    assert 0.25 * len(theirs) < accepted < 0.9 * len(theirs), "the cases should mix legal and illegal splits"
    assert not differ, "%d of %d splits differ from Megatron-LM's:\n%s" % (len(differ), len(all_args),
                                                                         "\n".join(differ[:12]))


MODEL = {"--num-layers": "8", "--hidden-size": "96", "--seq-length": "128", "--max-position-embeddings": "128",
         "--vocab-size": "1024", "--bf16": True, "--tokenizer-type": "NullTokenizer", "--no-rope-fusion": True,
         "--position-embedding-type": "rope"}
ON_PURPOSE = {"sequence-parallel", "query-groups", "expert-world-size", "global-batch"}
# Megatron-LM core_v0.16.1 refuses the EP all-to-all overlap at PP > 1 without virtual stages; published
# Megatron-Bridge runs of later releases ran it (legality._ep_overlap), so we accept it
ACCEPTED_ON_PURPOSE = "If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified"


def parallel_cases(count: int = 400, seed: int = 20261206) -> list:
    """``(args, world size)``: TP/PP/CP/DP sizes (sometimes a world they do not divide), heads and query groups,
    sequence lengths, sequence parallelism, experts with EP/ETP, top-k, dispatchers, capacity and padding and the
    EP overlap, recompute
    (selective modules, full with or without its method and layer count), the distributed optimizer and its
    overlaps."""
    rng, extra = random.Random(seed), random.Random(seed + 1000)
    out = []
    for _ in range(count):
        args = dict(MODEL)
        tp, pp, cp, dp = rng.choice([1, 2, 2, 3, 4]), rng.choice([1, 1, 2]), rng.choice([1, 1, 2, 4]), rng.choice([1, 2])
        world = tp * pp * cp * dp + (rng.random() < 0.1) * rng.choice([1, 2])
        args.update({"--num-attention-heads": str(rng.choice([4, 6, 8, 12])), "--tensor-model-parallel-size": str(tp),
                     "--pipeline-model-parallel-size": str(pp), "--context-parallel-size": str(cp),
                     "--seq-length": rng.choice(["128", "128", "130", "96"]),
                     "--micro-batch-size": str(rng.choice([1, 2])), "--global-batch-size": str(rng.choice([8, 12, 16]))})
        if rng.random() < 0.5:
            args.update({"--group-query-attention": True, "--num-query-groups": str(rng.choice([1, 2, 3, 4]))})
        if rng.random() < 0.5:
            args["--sequence-parallel"] = True
        if rng.random() < 0.5:
            args.update({"--num-experts": str(rng.choice([4, 6, 8])), "--moe-router-topk": str(rng.choice([1, 2])),
                         "--expert-model-parallel-size": str(rng.choice([1, 2, 4])),
                         "--moe-token-dispatcher-type": rng.choice(["allgather", "alltoall", "flex"])})
            if rng.random() < 0.5:
                args["--expert-tensor-parallel-size"] = str(rng.choice([1, tp]))
            for flag, chance in (("--disable-bias-linear", 0.6), ("--moe-router-pre-softmax", 0.3),
                                 ("--moe-grouped-gemm", 0.5),
                                 ("--overlap-moe-expert-parallel-comm", 0.3), ("--delay-wgrad-compute", 0.15)):
                if rng.random() < chance:
                    args[flag] = True
            if extra.random() < 0.4:  # capacity, padding and the balancing they need (their own draws)
                if extra.random() < 0.7:
                    args["--moe-expert-capacity-factor"] = extra.choice(["1.0", "1.25", "-1"])
                if extra.random() < 0.6:
                    args["--moe-pad-expert-input-to-capacity"] = True
                if extra.random() < 0.5:
                    args["--moe-flex-dispatcher-backend"] = extra.choice(["deepep", "hybridep"])
                if extra.random() < 0.4:
                    args["--moe-router-load-balancing-type"] = extra.choice(["aux_loss", "sinkhorn", "none"])
        choice = rng.random()
        if choice < 0.3:
            args["--recompute-granularity"] = "selective"
            if rng.random() < 0.5:
                args["--recompute-modules"] = rng.choice(["core_attn", "mlp", "moe", "layernorm moe_act", "attn"])
            if rng.random() < 0.1:
                args["--recompute-num-layers"] = "1"
        elif choice < 0.5:
            args["--recompute-granularity"] = "full"
            if rng.random() < 0.8:
                args["--recompute-method"] = rng.choice(["uniform", "block"])
            if rng.random() < 0.6:
                args["--recompute-num-layers"] = str(rng.choice([1, 2]))
        for flag, chance in (("--use-distributed-optimizer", 0.6), ("--overlap-grad-reduce", 0.5),
                             ("--overlap-param-gather", 0.4)):
            if rng.random() < chance:
                args[flag] = True
        out.append((args, world))
    return out


def test_legality_refuses_what_megatron_refuses():
    from attune.core import legality
    all_cases = parallel_cases()
    theirs = megatron_verdicts(all_cases)
    differ, on_purpose = [], collections.Counter()
    for (args, world), megatron_says in zip(all_cases, theirs):
        rules = {v.rule for v in legality.check(args, {}, world) if v.rule != "cuda-device-max-connections"}
        if rules and rules <= ON_PURPOSE and megatron_says["ok"]:
            on_purpose.update(rules)
            continue
        if not rules and ACCEPTED_ON_PURPOSE in megatron_says.get("error", ""):
            on_purpose["ep-overlap-without-vp"] += 1
            continue
        if bool(rules) == megatron_says["ok"]:
            shown = {k: v for k, v in args.items() if k not in MODEL}
            differ.append("%s world %d\n    ours:     %s\n    Megatron: %s"
                          % (shown, world, sorted(rules) or "legal", megatron_says.get("error", "legal")))
    assert 0.1 * len(theirs) < sum(t["ok"] for t in theirs) < 0.9 * len(theirs)
    assert set(on_purpose) == ON_PURPOSE | {"ep-overlap-without-vp"}, on_purpose  # each one is exercised
    assert not differ, "%d of %d configurations differ from Megatron-LM's verdict:\n%s" % (
        len(differ), len(all_cases), "\n".join(differ[:12]))


LEVERS = {"--num-layers": "8", "--hidden-size": "128", "--num-attention-heads": "8", "--seq-length": "128",
          "--max-position-embeddings": "128", "--vocab-size": "1024", "--tokenizer-type": "NullTokenizer",
          "--no-rope-fusion": True, "--position-embedding-type": "rope", "--disable-bias-linear": True,
          "--micro-batch-size": "1", "--global-batch-size": "16"}


def lever_cases(count: int = 300, seed: int = 20261207) -> list:
    """``(args, world size)`` with the flags the planner's levers set: precision (bf16/fp16, FP8 formats and
    recipes, FP8 parameter gather), optimizer state and gradient dtypes, the distributed optimizer and its
    overlaps, TP communication overlap, fused cross-entropy, attention backends, MoE dispatchers and their
    backends, grouped GEMMs, shared-expert overlap, router fusion, per-token loss, manual GC, CPU offloading.
    ``--moe-permute-fusion`` is left out: Megatron-LM imports Transformer Engine's fused permutation for it, and
    TE is not installed here."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        args, tp = dict(LEVERS), rng.choice([1, 2])
        args["--tensor-model-parallel-size"] = str(tp)
        if tp > 1 and rng.random() < 0.7:
            args["--sequence-parallel"] = True
        precision = rng.choice(["bf16", "bf16", "fp16", "none"])
        if precision != "none":
            args["--" + precision] = True
        if rng.random() < 0.5:
            args["--fp8-format"] = rng.choice(["e4m3", "hybrid"])
            if rng.random() < 0.8:
                args["--fp8-recipe"] = rng.choice(["delayed", "tensorwise", "mxfp8", "blockwise"])
        for flag, chance in (("--fp8-param-gather", 0.15), ("--tp-comm-overlap", 0.3),
                             ("--use-distributed-optimizer", 0.6), ("--overlap-grad-reduce", 0.5),
                             ("--overlap-param-gather", 0.3), ("--use-precision-aware-optimizer", 0.3),
                             ("--grad-reduce-in-bf16", 0.3), ("--calculate-per-token-loss", 0.15),
                             ("--manual-gc", 0.15), ("--cpu-offloading", 0.1)):
            if rng.random() < chance:
                args[flag] = True
        for flag in ("--exp-avg-dtype", "--exp-avg-sq-dtype", "--main-grads-dtype", "--main-params-dtype"):
            if rng.random() < 0.15:
                args[flag] = rng.choice(["fp32", "bf16", "fp16"])
        if rng.random() < 0.4:
            args["--cross-entropy-loss-fusion"] = True
            if rng.random() < 0.6:
                args["--cross-entropy-fusion-impl"] = rng.choice(["native", "te"])
        if rng.random() < 0.3:
            args["--attention-backend"] = rng.choice(["flash", "fused", "unfused", "local", "auto"])
        if rng.random() < 0.4:
            args.update({"--num-experts": "4", "--moe-router-topk": "2",
                         "--expert-model-parallel-size": str(rng.choice([1, 2])),
                         "--moe-token-dispatcher-type": rng.choice(["allgather", "alltoall", "flex"])})
            for flag, chance in (("--moe-grouped-gemm", 0.5), ("--moe-shared-expert-overlap", 0.2),
                                 ("--moe-router-fusion", 0.2)):
                if rng.random() < chance:
                    args[flag] = True
            if rng.random() < 0.3:
                args["--moe-shared-expert-intermediate-size"] = "256"
            if rng.random() < 0.2:
                args["--moe-flex-dispatcher-backend"] = rng.choice(["deepep", "hybridep"])
        out.append((args, tp * 2))
    return out


def _disagreements(cases: list, theirs: list, violations, shown) -> list:
    """One line per ``(args, world size)`` on which ``violations(args, world)`` (legality's) and Megatron-LM's verdict
    disagree about legality, showing the flags ``shown`` keeps."""
    out = []
    for (args, world), megatron_says in zip(cases, theirs):
        rules = sorted({v.rule for v in violations(args, world)})
        if bool(rules) == megatron_says["ok"]:
            flags = {k: v for k, v in args.items() if shown(k)}
            out.append("%s\n    ours:     %s\n    Megatron: %s" % (flags, rules or "legal",
                                                                 megatron_says.get("error", "legal")))
    return out


def test_the_levers_flags_are_refused_where_megatron_refuses_them():
    from attune.core import legality
    all_cases = lever_cases()
    theirs = megatron_verdicts(all_cases)
    differ = _disagreements(all_cases, theirs, lambda args, world: legality.check(
        args, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, world, "h100"), lambda flag: flag not in LEVERS)
    assert 0.2 * len(theirs) < sum(t["ok"] for t in theirs) < 0.8 * len(theirs)
    assert not differ, "%d of %d configurations differ from Megatron-LM's verdict:\n%s" % (
        len(differ), len(all_cases), "\n".join(differ[:12]))


def capacity_cases() -> list:
    """One legal MoE configuration with each combination of capacity factor, padding, dispatcher, flex backend and
    load balancing (the other draws above rarely leave the capacity rules the only ones a configuration breaks)."""
    base = dict(MODEL, **{"--num-attention-heads": "4", "--tensor-model-parallel-size": "1",
                          "--pipeline-model-parallel-size": "1", "--micro-batch-size": "1", "--global-batch-size": "8",
                          "--num-experts": "4", "--moe-router-topk": "2", "--expert-model-parallel-size": "2",
                          "--disable-bias-linear": True, "--moe-grouped-gemm": True})
    out = []
    for capacity in (None, "1.0", "-1"):
        for pad in (False, True):
            for dispatcher, backend in (("alltoall", None), ("allgather", None), ("flex", None), ("flex", "hybridep")):
                for balancing in (None, "sinkhorn"):
                    args = dict(base, **{"--moe-token-dispatcher-type": dispatcher})
                    for flag, value in (("--moe-expert-capacity-factor", capacity),
                                        ("--moe-flex-dispatcher-backend", backend),
                                        ("--moe-router-load-balancing-type", balancing)):
                        if value is not None:
                            args[flag] = value
                    if pad:
                        args["--moe-pad-expert-input-to-capacity"] = True
                    out.append((args, 2))
    return out


def test_capacity_rules_are_megatrons():
    from attune.core import legality
    all_cases = capacity_cases()
    theirs = megatron_verdicts(all_cases)
    differ = _disagreements(all_cases, theirs, lambda args, world: [
        v for v in legality.check(args, {}, world) if v.rule != "cuda-device-max-connections"],
        lambda flag: flag.startswith("--moe-"))
    assert 5 < sum(t["ok"] for t in theirs) < len(theirs) - 5
    assert not differ, "%d of %d differ from Megatron-LM's verdict:\n%s" % (len(differ), len(all_cases),
                                                                           "\n".join(differ[:12]))
