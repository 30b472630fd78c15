#!/usr/bin/env python3
"""Real Megatron-LM golden curves as gate benchmark pairs: comparable pairs of index.json become run
directories (baseline = case a, candidate = case b), labelled by a RULE on their flag diff, then
(--evaluate) each goes through ``attune gate`` like bench/gate_suite.py does.

Usage (from the repository root)::

    .venv/bin/python bench/gate_real_curves.py [--out DIR]   # default bench/out/gate_real_curves
    .venv/bin/python bench/gate_real_curves.py --evaluate [--jobs N] [--batch [--attune-root CHECKOUT]]

Corpus: ``$ATTUNE_CORPUS_DIR/megatron_golden`` (default ``../shared/data``), read in place.

Pairs. Within each group of index.json (same model and data), the pairs with no ``ci_world_size``
difference (the gate rejects topology changes), leaving out cases whose lm loss is all zero
(distillation) and pairs with fewer than 20 finite common steps in 1..20. ``other_diff`` differences
in TEST_TYPE are ignored: the golden curve is run 1 of a ckpt-resume test, a run from scratch.

Run directories. recipe.yaml: a RayJob whose entrypoint is ``python3 pretrain_gpt.py`` with the case's
effective MODEL_ARGS (True = a bare flag), env_vars = its ENV_VARS, GPUs = its CI world size (4 per
worker). One edit, the same in both recipes: ``--train-iters 20``, because the logs hold steps 1..20
(every case sets --lr-decay-iters, so the LR schedule does not depend on it). log.txt: a comment line,
the ``using world size`` line (from the recipe), and one real-format iteration line per step 1..20
with ``lm loss`` = ``%.6E`` of the golden value and ``num zeros`` = the golden num-zeros when the
recipe has --log-num-zeros-in-grad. Derived from the recipe: learning rate (Megatron's schedule),
global batch size, consumed samples. Placeholders (said in the comment line): elapsed time per
iteration 1000.0 ms, the timestamps, loss scale 1.0 (bf16) or the --initial-loss-scale / 2^32 (fp16).
Left out (no golden value): grad norm, params norm, the rows digest line.

Repeats (repeat1/). Case a deterministic (its ``determinism.ci_compares`` is "exact first ...") and
both goldens from the same commit (one software snapshot): its own curve (deterministic reruns are
bitwise identical; Megatron's CI checks that; across software snapshots they need not be, so a pair
from two commits gets no such repeat). Otherwise: the
curve of a same-group case c (c != b) at the same world size whose diff from a holds only
DETERMINISM_FLAGS, written with a's recipe (a repeat is a run of the baseline recipe); none if no
such case.

Labels, by rule on the names of the differing flags (MODEL_ARGS and ENV_VARS):
  faulty      if any differing flag is in a math-changing category:
    architecture: --num-layers --hidden-size --ffn-hidden-size --num-attention-heads --num-query-groups
        --group-query-attention --kv-channels --swiglu --disable-bias-linear
        --untie-embeddings-and-output-weights --position-embedding-type --rotary-interleaved --rotary-percent
        --rotary-base --normalization --apply-layernorm-1p --qk-layernorm --apply-query-key-layer-scaling
        --max-position-embeddings --num-experts --moe-router-topk --moe-expert-capacity-factor
        --moe-token-drop-policy --mtp-num-layers
    optimizer: --optimizer --adam-beta1 --adam-beta2 --adam-eps --sgd-momentum --weight-decay --clip-grad
        --decoupled-lr --decoupled-min-lr
    LR: --lr --min-lr --lr-decay-style --lr-decay-iters --lr-warmup-fraction --lr-warmup-iters
        --lr-warmup-init
    dropout: --hidden-dropout --attention-dropout
    precision: --bf16 --fp16 --fp8-format --fp8-recipe --fp8-param-gather --grad-reduce-in-bf16
        --accumulate-allreduce-grads-in-fp32 --attention-softmax-in-fp32 --use-precision-aware-optimizer
        --megatron-fsdp-grad-comm-dtype --megatron-fsdp-main-grads-dtype --megatron-fsdp-main-params-dtype
        --moe-router-dtype --initial-loss-scale --loss-scale
    loss definition: --calculate-per-token-loss --moe-aux-loss-coeff --moe-z-loss-coeff
    data/tokenizer: --data-path --split --mock-data --seq-length --tokenizer-type --tokenizer-model
        --vocab-file --merge-file --vocab-size --fim-data --fim-rate --fim-spm-rate
    init: --init-method-std --seed --data-parallel-random-init
    batch size: --global-batch-size --rampup-batch-size
  legitimate  if every differing flag is in a same-math category (an empty diff included):
    parallel layout: --tensor-model-parallel-size --pipeline-model-parallel-size
        --num-layers-per-virtual-pipeline-stage --num-virtual-stages-per-pipeline-rank
        --context-parallel-size --expert-model-parallel-size --expert-tensor-parallel-size
        --sequence-parallel --use-tp-pp-dp-mapping --decoder-first-pipeline-num-layers
        --decoder-last-pipeline-num-layers --microbatch-group-size-per-virtual-pipeline-stage
        --micro-batch-size --num-distributed-optimizer-instances --hierarchical-context-parallel-sizes
        --cp-comm-type
    overlap: --overlap-grad-reduce --overlap-param-gather --overlap-param-gather-with-optimizer-step
        --overlap-p2p-communication --overlap-p2p-communication-warmup-flush --tp-comm-overlap
        --tp-comm-overlap-cfg --defer-embedding-wgrad-compute --wgrad-deferral-limit --delay-wgrad-compute
        --ddp-bucket-size --ddp-average-in-collective --align-grad-reduce --overlap-moe-expert-parallel-comm
    recompute: --recompute-granularity --recompute-method --recompute-num-layers --recompute-modules
    fusion/kernel: --no-rope-fusion --no-bias-swiglu-fusion --no-masked-softmax-fusion
        --no-bias-dropout-fusion --no-bias-gelu-fusion --no-gradient-accumulation-fusion
        --cross-entropy-loss-fusion --cross-entropy-fusion-impl --attention-backend --transformer-impl
        --use-mcore-models --moe-grouped-gemm --moe-permute-fusion --moe-router-fusion
        --moe-token-dispatcher-type --cuda-graph-impl --cuda-graph-scope
    distributed optimizer: --use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy
    checkpoint/IO: --save --load --save-interval --ckpt-format --ckpt-fully-parallel-load
        --ckpt-fully-parallel-save --no-ckpt-fully-parallel-save --dist-ckpt-strictness
        --dist-ckpt-optim-fully-reshardable --async-save --async-strategy --async-ckpt-use-cpu-shm
        --use-persistent-ckpt-worker --use-checkpoint-opt_param-scheduler --auto-detect-ckpt-format
        --verify-integrity --ckpt-assume-constant-structure --no-mmap-bin-files --data-cache-path
        --check-weight-hash-across-dp-replicas-interval
    logging: any --log-* flag, --tensorboard-dir --timing-log-level --eval-interval --eval-iters
        --exit-interval
    determinism/runtime env: --deterministic-mode NVTE_ALLOW_NONDETERMINISTIC_ALGO NCCL_ALGO
        CUBLAS_WORKSPACE_CONFIG NON_DETERMINSTIC_RESULTS CUDA_DEVICE_MAX_CONNECTIONS PYTORCH_CUDA_ALLOC_CONF
  unlabelled  otherwise (e.g. --test-mode, --export-*): excluded from the evaluation and counted.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gate_common as gc  # noqa: E402

STEPS = 20
ELAPSED_MS = 1000.0
T0 = dt.datetime(2026, 11, 2, 9, 0, 0)


def _words(text: str) -> frozenset:
    return frozenset(text.split())


MATH = {
    "architecture": _words("""--num-layers --hidden-size --ffn-hidden-size --num-attention-heads --num-query-groups
        --group-query-attention --kv-channels --swiglu --disable-bias-linear --untie-embeddings-and-output-weights
        --position-embedding-type --rotary-interleaved --rotary-percent --rotary-base --normalization
        --apply-layernorm-1p --qk-layernorm --apply-query-key-layer-scaling --max-position-embeddings --num-experts
        --moe-router-topk --moe-expert-capacity-factor --moe-token-drop-policy --mtp-num-layers"""),
    "optimizer": _words("""--optimizer --adam-beta1 --adam-beta2 --adam-eps --sgd-momentum --weight-decay --clip-grad
        --decoupled-lr --decoupled-min-lr"""),
    "LR": _words("""--lr --min-lr --lr-decay-style --lr-decay-iters --lr-warmup-fraction --lr-warmup-iters
        --lr-warmup-init"""),
    "dropout": _words("--hidden-dropout --attention-dropout"),
    "precision": _words("""--bf16 --fp16 --fp8-format --fp8-recipe --fp8-param-gather --grad-reduce-in-bf16
        --accumulate-allreduce-grads-in-fp32 --attention-softmax-in-fp32 --use-precision-aware-optimizer
        --megatron-fsdp-grad-comm-dtype --megatron-fsdp-main-grads-dtype --megatron-fsdp-main-params-dtype
        --moe-router-dtype --initial-loss-scale --loss-scale"""),
    "loss definition": _words("--calculate-per-token-loss --moe-aux-loss-coeff --moe-z-loss-coeff"),
    "data/tokenizer": _words("""--data-path --split --mock-data --seq-length --tokenizer-type --tokenizer-model
        --vocab-file --merge-file --vocab-size --fim-data --fim-rate --fim-spm-rate"""),
    "init": _words("--init-method-std --seed --data-parallel-random-init"),
    "batch size": _words("--global-batch-size --rampup-batch-size"),
}
DETERMINISM_FLAGS = _words("""--deterministic-mode NVTE_ALLOW_NONDETERMINISTIC_ALGO NCCL_ALGO CUBLAS_WORKSPACE_CONFIG
    NON_DETERMINSTIC_RESULTS""")
SAME = {
    "parallel layout": _words("""--tensor-model-parallel-size --pipeline-model-parallel-size
        --num-layers-per-virtual-pipeline-stage --num-virtual-stages-per-pipeline-rank --context-parallel-size
        --expert-model-parallel-size --expert-tensor-parallel-size --sequence-parallel --use-tp-pp-dp-mapping
        --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers
        --microbatch-group-size-per-virtual-pipeline-stage --micro-batch-size --num-distributed-optimizer-instances
        --hierarchical-context-parallel-sizes --cp-comm-type"""),
    "overlap": _words("""--overlap-grad-reduce --overlap-param-gather --overlap-param-gather-with-optimizer-step
        --overlap-p2p-communication --overlap-p2p-communication-warmup-flush --tp-comm-overlap --tp-comm-overlap-cfg
        --defer-embedding-wgrad-compute --wgrad-deferral-limit --delay-wgrad-compute --ddp-bucket-size
        --ddp-average-in-collective --align-grad-reduce --overlap-moe-expert-parallel-comm"""),
    "recompute": _words("--recompute-granularity --recompute-method --recompute-num-layers --recompute-modules"),
    "fusion/kernel": _words("""--no-rope-fusion --no-bias-swiglu-fusion --no-masked-softmax-fusion
        --no-bias-dropout-fusion --no-bias-gelu-fusion --no-gradient-accumulation-fusion --cross-entropy-loss-fusion
        --cross-entropy-fusion-impl --attention-backend --transformer-impl --use-mcore-models --moe-grouped-gemm
        --moe-permute-fusion --moe-router-fusion --moe-token-dispatcher-type --cuda-graph-impl --cuda-graph-scope"""),
    "distributed optimizer": _words("""--use-distributed-optimizer --use-megatron-fsdp
        --data-parallel-sharding-strategy"""),
    "checkpoint/IO": _words("""--save --load --save-interval --ckpt-format --ckpt-fully-parallel-load
        --ckpt-fully-parallel-save --no-ckpt-fully-parallel-save --dist-ckpt-strictness
        --dist-ckpt-optim-fully-reshardable --async-save --async-strategy --async-ckpt-use-cpu-shm
        --use-persistent-ckpt-worker --use-checkpoint-opt_param-scheduler --auto-detect-ckpt-format --verify-integrity
        --ckpt-assume-constant-structure --no-mmap-bin-files --data-cache-path
        --check-weight-hash-across-dp-replicas-interval"""),
    "logging": _words("--tensorboard-dir --timing-log-level --eval-interval --eval-iters --exit-interval"),
    "determinism/runtime env": DETERMINISM_FLAGS | _words("CUDA_DEVICE_MAX_CONNECTIONS PYTORCH_CUDA_ALLOC_CONF"),
}


def category(flag: str, table: dict):
    for name, flags in table.items():
        if flag in flags:
            return name
    if table is SAME and flag.startswith("--log-"):
        return "logging"
    return None


def label(flags) -> tuple:
    """(label, {flag: category}) by the rule of the module docstring."""
    math_hits = {f: category(f, MATH) for f in flags if category(f, MATH)}
    if math_hits:
        return "faulty", math_hits
    same = {f: category(f, SAME) for f in flags}
    if all(same.values()):
        return "legitimate", same
    return "unlabelled", {f: c or "unlisted" for f, c in same.items()}


# ============================================================================================ runs
def world_size(case: dict) -> int:
    sizes = sorted({int(s["world_size"]) for s in case.get("ci_schedule") or []})
    return sizes[0] if sizes else (4 if case["case"].endswith("_1node") else 8)


def deterministic(case: dict) -> bool:
    return str((case.get("determinism") or {}).get("ci_compares", "")).startswith("exact")


def run_files(case: dict, loss_from: dict, name: str, index: int) -> tuple:
    """(recipe text, log lines): ``case``'s recipe with ``loss_from``'s golden curve."""
    args, env = gc.effective(case)
    args["--train-iters"] = STEPS
    world = world_size(case)
    replicas = max(1, world // 4)
    comment = ("real Megatron-LM golden config %s (NVIDIA/Megatron-LM %s); --train-iters set to %d (logs hold "
               "steps 1..%d); made by bench/gate_real_curves.py" % (case["case"], case["source"]["commit"][:12],
                                                                    STEPS, STEPS))
    recipe = gc.recipe_yaml("rc-%04d-%s" % (index, name), args, env, replicas, world // replicas, comment,
                            label="gate-real-curves")
    loss = gc.metric_values(loss_from, "lm loss", STEPS)
    zeros = gc.metric_values(loss_from, "num-zeros", STEPS) if args.get("--log-num-zeros-in-grad") else None
    gbs = int(float(args["--global-batch-size"]))
    fp16 = bool(args.get("--fp16"))
    scale = float(args.get("--initial-loss-scale", 2.0 ** 32)) if fp16 else 1.0
    lines = ["# lm loss%s: Megatron-LM golden values of %s (%s); elapsed time per iteration (%.1f ms), "
             "timestamps%s are placeholders; learning rate, batch size and consumed samples follow the recipe" % (
                 " and num zeros" if zeros else "", loss_from["case"], loss_from["flavor"], ELAPSED_MS,
                 " and loss scale" if fp16 else ""),
             gc.startup_line(args, world)]
    start = T0 + dt.timedelta(minutes=10 * index)
    for step in range(1, STEPS + 1):
        nz = None
        if zeros is not None and zeros[step - 1] == zeros[step - 1]:
            nz = repr(float(zeros[step - 1]))
        lines.append(gc.iteration_line(gc.timestamp(start, step * ELAPSED_MS / 1000.0), step, STEPS, step * gbs,
                                       ELAPSED_MS, gc.learning_rate(args, step), gbs, loss[step - 1], scale, None, nz))
    return recipe, lines


def usable(case: dict) -> bool:
    loss = gc.metric_values(case, "lm loss", STEPS)
    return not case.get("lm_loss_all_zero") and all(v == v for v in loss)


def build(corpus: Path, out: Path) -> dict:
    index = gc.load_index(corpus)
    rows, counts = [], {"pairs_in_groups": 0, "world_size_differs": 0, "all_zero_or_short": 0, "unlabelled": 0}
    unlabelled = []
    n = 0
    for group in sorted(index["groups"], key=lambda g: g["group_id"]):
        pairs = {(p["a"], p["b"]): p for p in group["pairs"]}
        for pair in group["pairs"]:
            counts["pairs_in_groups"] += 1
            if "ci_world_size" in (pair.get("other_diff") or {}):
                counts["world_size_differs"] += 1
                continue
            a, b = gc.load_case(corpus, pair["a"]), gc.load_case(corpus, pair["b"])
            if not (usable(a) and usable(b)):
                counts["all_zero_or_short"] += 1
                continue
            args, env = gc.diff_keys(pair)
            verdict, cats = label(sorted(args | env))
            if verdict == "unlabelled":
                counts["unlabelled"] += 1
                unlabelled.append({"a": pair["a"], "b": pair["b"], "flags": cats})
                continue
            n += 1
            name = "p%04d" % n
            pdir = out / name
            gc.write_run(pdir / "baseline", *run_files(a, a, name + "-baseline", n))
            gc.write_run(pdir / "candidate", *run_files(b, b, name + "-candidate", n))
            repeat = None
            if deterministic(a) and pair.get("lm_loss_goldens_same_commit"):
                repeat = a["case"]
            else:
                for other in sorted(group["cases"]):
                    key = tuple(sorted((a["case"], other)))
                    p = pairs.get(key)
                    if other in (a["case"], b["case"]) or p is None or "ci_world_size" in (p.get("other_diff") or {}):
                        continue
                    ka, ke = gc.diff_keys(p)
                    if (ka | ke) <= DETERMINISM_FLAGS and usable(gc.load_case(corpus, other)):
                        repeat = other
                        break
            if repeat:
                gc.write_run(pdir / "repeat1", *run_files(a, gc.load_case(corpus, repeat), name + "-repeat1", n))
            meta = {"name": name, "a": a["case"], "b": b["case"], "group": group["group_id"], "label": verdict,
                    "categories": cats, "MODEL_ARGS_diff": pair.get("MODEL_ARGS_diff") or {},
                    "ENV_VARS_diff": pair.get("ENV_VARS_diff") or {}, "other_diff": pair.get("other_diff") or {},
                    "deterministic_a": deterministic(a), "repeat_curve_from": repeat,
                    "lm_loss_goldens_same_commit": pair.get("lm_loss_goldens_same_commit"),
                    "max_rel_diff_steps_1_20": max(abs(x - y) / max(abs(x), abs(y)) for x, y in zip(
                        gc.metric_values(a, "lm loss", STEPS), gc.metric_values(b, "lm loss", STEPS))),
                    "world_size": world_size(a), "real": True}
            gc.write_json(pdir / "pair.json", meta)
            rows.append(meta)
    counts.update({"written": len(rows), "faulty": sum(r["label"] == "faulty" for r in rows),
                   "legitimate": sum(r["label"] == "legitimate" for r in rows),
                   "with_repeat": sum(bool(r["repeat_curve_from"]) for r in rows)})
    gc.write_json(out / "pairs.json", {"counts": counts, "pairs": rows, "unlabelled": unlabelled})
    return {"counts": counts, "rows": rows, "unlabelled": unlabelled}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(gc.REPO / "bench" / "out" / "gate_real_curves"))
    parser.add_argument("--evaluate", action="store_true")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--jobs", type=int, default=0)
    parser.add_argument("--batch", action="store_true",
                        help="gate the pairs in --jobs Python processes (correctness.gate.run_gate, what attune gate "
                             "calls) instead of one attune gate process per pair: the same verdicts, faster")
    parser.add_argument("--attune-root", default=str(gc.REPO),
                        help="with --batch: the checkout whose gate judges (to compare two versions on the same pairs)")
    opts = parser.parse_args(argv)
    corpus = gc.corpus_dir()
    if not (corpus / "index.json").exists():
        print("no golden corpus at %s (set ATTUNE_CORPUS_DIR)" % corpus, file=sys.stderr)
        return 2
    out = Path(opts.out)
    built = build(corpus, out)
    c = built["counts"]
    print("group pairs %d: world size differs %d, all-zero/short %d, unlabelled %d (excluded)" % (
        c["pairs_in_groups"], c["world_size_differs"], c["all_zero_or_short"], c["unlabelled"]))
    print("wrote %d pairs (%d faulty, %d legitimate; %d with a repeat) to %s" % (
        c["written"], c["faulty"], c["legitimate"], c["with_repeat"], out))
    flags = {}
    for item in built["unlabelled"]:
        for flag, cat in item["flags"].items():
            if cat == "unlisted":
                flags[flag] = flags.get(flag, 0) + 1
    print("unlisted flags in unlabelled pairs: %s" % (
        ", ".join("%s (%d)" % kv for kv in sorted(flags.items())) or "none"))
    if opts.evaluate:
        if not gc.gate_available(opts.python):
            print("attune.py has no `gate` verb yet: nothing evaluated")
            return 0
        rows = [{"name": "%s %s" % (r["name"], "+".join(sorted(set(r["categories"].values())))), "dir": out / r["name"],
                 "label": r["label"], "repeats": ["repeat1"] if r["repeat_curve_from"] else [],
                 "maxrel": "%.1e" % r["max_rel_diff_steps_1_20"]} for r in built["rows"]]
        gc.evaluate(rows, opts.python, opts.jobs, batch=opts.batch, root=Path(opts.attune_root))
        tot = gc.print_table(rows, extra_col="maxrel")
        faulty = [r for r in rows if r["label"] == "faulty"]
        print("faulty pairs flagged by the convergence check alone (convergence.passed false): %d/%d" % (
            sum(r["convergence"] is False for r in faulty), len(faulty)))
        print("faulty pairs flagged by the config check (config.passed false):             %d/%d" % (
            sum(r["config"] is False for r in faulty), len(faulty)))
        print("  of which Bridge's validate_convergence (bridge.passed false):              %d/%d" % (
            sum(r["bridge"] is False for r in faulty), len(faulty)))
        print("  of which the calibrated check (calibrated.passed false):                   %d/%d" % (
            sum(r["calibrated"] is False for r in faulty), len(faulty)))
        print("faulty pairs the convergence check flags while the config check passes:     %d/%d" % (
            sum(r["convergence"] is False and r["config"] is True for r in faulty), len(faulty)))
        layout = [r for r in faulty if r["layout_change"]]
        print("faulty pairs with a layout change (a change whose class re-draws the weights) flagged by the "
              "convergence check alone: %d/%d" % (sum(r["convergence"] is False for r in layout), len(layout)))
        print("  of which the first iteration's loss showed the same initial weights:         %d" % sum(
            bool(r.get("same_init_measured")) for r in layout))
        print("faulty pairs without one flagged by the convergence check alone:            %d/%d" % (
            sum(r["convergence"] is False for r in faulty if not r["layout_change"]),
            sum(1 for r in faulty if not r["layout_change"])))
        legit = [r for r in rows if r["label"] == "legitimate"]
        for part in ("config", "checks", "bridge", "calibrated"):
            print("legitimate pairs failing %-10s: %d/%d" % (part, sum(r[part] is False for r in legit), len(legit)))
        print("legitimate pairs the whole gate rejects: %d/%d; faulty pairs it catches: %d/%d" % (
            sum(r["ours"] != "pass" for r in legit), len(legit), sum(r["ours"] == "fail" for r in faulty),
            len(faulty)))
        gc.write_json(out / "evaluation.json", {"totals": tot, "rows": [
            {k: v for k, v in r.items() if k != "dir"} for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
