"""rules/numerics_list.yaml: it loads, every entry is well formed, and every flag and environment
variable of the reference's table (megatron.md §2) is classed."""

from __future__ import annotations

import yaml

from attune.correctness import rules as rules_mod
from attune.correctness.rules import CLASSES, Rules

# The CLI flags in the table of megatron.md §2 "Megatron-LM throughput-relevant arguments" (names
# only; the reference marks --cpu-offloading, --virtual-pipeline-model-parallel-size,
# --apply-rope-fusion, --bias-swiglu-fusion and --masked-softmax-fusion as not CLI flags).
REFERENCE_FLAGS = """
--accumulate-allreduce-grads-in-fp32 --attention-backend --attention-softmax-in-fp32 --bf16
--calculate-per-token-loss --context-parallel-size --cross-entropy-fusion-impl --cross-entropy-loss-fusion
--cuda-graph-impl --cuda-graph-scope --ddp-bucket-size --delay-wgrad-compute --deterministic-mode
--distributed-timeout-minutes --empty-unused-memory-level --enable-cuda-graph --expert-model-parallel-size
--expert-tensor-parallel-size --external-cuda-graph --fine-grained-activation-offloading --fp16 --fp8-format
--fp8-param-gather --fp8-recipe --global-batch-size --grad-reduce-in-bf16 --log-interval --log-throughput
--log-timers-to-tensorboard --manual-gc --manual-gc-interval --micro-batch-size --moe-enable-deepep
--moe-flex-dispatcher-backend --moe-grouped-gemm --moe-permute-fusion --moe-router-dtype --moe-router-fusion
--moe-token-dispatcher-type --no-bias-dropout-fusion --no-bias-gelu-fusion --no-bias-swiglu-fusion
--no-gradient-accumulation-fusion --no-masked-softmax-fusion --no-rope-fusion --num-layers-per-virtual-pipeline-stage
--num-virtual-stages-per-pipeline-rank --optimizer-cpu-offload --overlap-grad-reduce --overlap-moe-expert-parallel-comm
--overlap-param-gather --pipeline-model-parallel-size --profile --profile-ranks --profile-step-end
--profile-step-start --recompute-granularity --recompute-method --recompute-modules --recompute-num-layers
--record-memory-history --sequence-parallel --tensor-model-parallel-size --timing-log-level --tp-comm-overlap
--tp-comm-overlap-cfg --use-distributed-optimizer --use-flash-attn --use-precision-aware-optimizer
--use-pytorch-profiler
""".split()
# The environment variables named in the same section.
REFERENCE_ENV = """
CUBLAS_WORKSPACE_CONFIG CUDA_DEVICE_MAX_CONNECTIONS NCCL_ALGO NCCL_CTA_POLICY NCCL_GRAPH_REGISTER
NCCL_NET_GDR_LEVEL NCCL_NVLS_ENABLE NVTE_ALLOW_NONDETERMINISTIC_ALGO NVTE_BWD_LAYERNORM_SM_MARGIN
NVTE_FWD_LAYERNORM_SM_MARGIN PYTORCH_CUDA_ALLOC_CONF TORCH_NCCL_AVOID_RECORD_STREAMS TORCH_NCCL_HIGH_PRIORITY
""".split()
# The reference's class N: these must never pass the configuration check.
REFERENCE_NUMERIC = """
--bf16 --fp16 --fp8-format --fp8-recipe --fp8-param-gather --grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32
--use-precision-aware-optimizer --attention-softmax-in-fp32 --calculate-per-token-loss --moe-router-dtype
--global-batch-size
""".split()
# What the protocol says never changes (PROTOCOL.md §2.1): fixed, so no override can reclass it.
NEVER_CHANGES = """
--seq-length --global-batch-size --seed --lr --min-lr --lr-warmup-iters --lr-decay-style --train-iters --data-path
--bf16 --fp16 --fp8-format --calculate-per-token-loss
""".split()


def test_the_rules_file_loads_with_valid_unique_entries():
    data = yaml.safe_load(rules_mod.RULES_FILE.read_text(encoding="utf-8"))
    names = [(entry["kind"], entry["name"]) for entry in data["entries"]]
    assert len(names) == len(set(names)), "an entry is listed twice"
    rules = Rules()
    assert len(rules.rules) == len(names)
    assert {rule.cls for rule in rules.rules.values()} <= set(CLASSES)
    assert all(rule.reason and rule.source and rule.stacks for rule in rules.rules.values())


def test_every_flag_and_variable_of_the_reference_table_is_classed():
    rules = Rules()
    missing = [flag for flag in REFERENCE_FLAGS if rules.get("arg", flag) is None]
    missing += [name for name in REFERENCE_ENV if rules.get("env", name) is None]
    assert not missing


def test_the_reference_numeric_flags_and_the_never_changing_ones_fail():
    rules = Rules()
    assert all(rules.get("arg", flag).cls in ("numeric", "fixed") for flag in REFERENCE_NUMERIC)
    assert [flag for flag in NEVER_CHANGES if rules.get("arg", flag) is None
            or rules.get("arg", flag).cls != "fixed"] == []


def test_an_unlisted_argument_counts_as_numeric():
    cls, _exact, rule, _why = Rules().classify("arg", "--surely-not-a-megatron-flag", None, "true", {}, {})
    assert cls == "numeric" and rule.origin == "default"


def test_layout_changes_are_marked_as_re_drawing_the_initial_weights():
    rules = Rules()
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                 "--num-layers-per-virtual-pipeline-stage", "--expert-model-parallel-size"):
        assert rules.get("arg", flag).init, flag
    assert not rules.get("arg", "--tp-comm-overlap").init
    assert all(rule.cls in ("placement", "swap") for rule in rules.rules.values() if rule.init)
