"""The alternatives each lever of the planner's space can take, from what the parent recipe sets
(``Context``): ``GENERATORS[lever id](ctx)`` lists ``(name, changes)`` pairs in ``candidate new`` syntax. The
space (``space.py``) applies and checks them."""

from __future__ import annotations

from typing import Optional

from attune.core import legality, slime
from attune.core.recipe import Recipe

RECOMPUTE_FLAGS = ("--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-modules")
VP_FLAGS = ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank")
BOTTLENECKS = ("exposed_tp_communication", "exposed_dp_communication", "exposed_all_to_all",
               "exposed_pipeline_communication", "pipeline_bubble", "host_bound_launching", "memory_headroom",
               "memory_pressure", "stragglers")


def as_int(args: dict, flag: str, default: int) -> int:
    value = args.get(flag)
    if value is None or value is True:
        return default
    try:
        return int(str(value))
    except ValueError:
        return default


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


class Context(object):
    """What the generators read of the parent recipe."""

    def __init__(self, recipe: Recipe, gpu: Optional[str]):
        self.args = recipe.args()
        self.env = recipe.env()
        env = self.env
        self.gpus = int(env["ATTUNE_SIM_GPUS"]) if env.get("ATTUNE_SIM_GPUS", "").isdigit() else recipe.gpus()
        per_node = env.get("ATTUNE_SIM_GPUS_PER_NODE", "")
        self.per_node = int(per_node) if per_node.isdigit() else 8
        self.gpu = gpu or env.get("ATTUNE_SIM_HARDWARE")
        self.blackwell = bool(self.gpu) and self.gpu.lower() in legality.BLACKWELL
        a = self.args
        self.tp = as_int(a, "--tensor-model-parallel-size", 1)
        self.pp = as_int(a, "--pipeline-model-parallel-size", 1)
        self.cp = as_int(a, "--context-parallel-size", 1)
        self.ep = as_int(a, "--expert-model-parallel-size", 1)
        self.mbs = as_int(a, "--micro-batch-size", 1)
        self.layers = as_int(a, "--num-layers", 0)
        # the layers the pipeline split counts: the embedding and the loss too where the recipe says so
        self.split_layers = self.layers + sum(1 for flag in legality.ACCOUNT_FLAGS if a.get(flag) is True)
        self.experts = as_int(a, "--num-experts", 0)
        # a slime recipe's mode and GPUs (core/slime.py); None for Megatron-LM
        self.slime = slime.shape_of(a) if slime.is_slime(recipe.command.program, a) else None

    def has(self, flag: str) -> bool:
        return flag in self.args

    def max_connections_one(self) -> list:
        """The companion change that a TP/CP>1 layout needs before Blackwell, when it is missing."""
        if self.blackwell or self.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1":
            return []
        return [("--env", "CUDA_DEVICE_MAX_CONNECTIONS=1")]


def _toggle(ctx: Context, flag: str, label: str) -> list:
    if ctx.has(flag):
        return [("%s=off" % label, [("--unset", flag[2:])])]
    return [("%s=on" % label, [("--set", flag[2:])])]


def _env_values(ctx: Context, name: str, values: tuple, allow_unset: bool = True) -> list:
    current = ctx.env.get(name)
    out = [("%s=%s" % (name, value), [("--env", "%s=%s" % (name, value))]) for value in values if value != current]
    if allow_unset and current is not None:
        out.append(("%s=unset" % name, [("--unset-env", name)]))
    return out


# ------------------------------------------------------------------------------------------ generators
def _gen_tp(ctx):
    out = []
    for value in (1, 2, 4, 8):
        if value == ctx.tp:
            continue
        changes = [("--set", "tensor-model-parallel-size=%d" % value)]
        if value == 1 and ctx.has("--sequence-parallel"):
            changes.append(("--unset", "sequence-parallel"))
        if value > 1 and ctx.tp == 1:
            if not ctx.has("--sequence-parallel"):
                changes.append(("--set", "sequence-parallel"))
            changes += ctx.max_connections_one()
        out.append(("tensor-model-parallel-size=%d" % value, changes))
    return out


def _gen_sp(ctx):
    return _toggle(ctx, "--sequence-parallel", "sequence-parallel") if ctx.tp > 1 else []


def _gen_tp_overlap(ctx):
    if ctx.tp <= 1:
        return []
    if ctx.has("--tp-comm-overlap"):
        return [("tp-comm-overlap=off", [("--unset", "tp-comm-overlap")])]
    changes = [("--set", "tp-comm-overlap")]
    if not ctx.has("--sequence-parallel"):
        changes.append(("--set", "sequence-parallel"))
    return [("tp-comm-overlap=on", changes)]


def _gen_pp(ctx):
    # An explicit --pipeline-model-parallel-layout fixes the stages: Megatron derives VP as stages / PP, so a
    # PP change would silently change the virtual-pipeline size too (and PP 1 would keep a multi-stage
    # layout). Two levers in one change: the PP lever skips such recipes (their layout is hand-balanced).
    if ctx.has("--pipeline-model-parallel-layout"):
        return []
    out = []
    for value in (1, 2, 4, 8):
        if value == ctx.pp:
            continue
        changes = [("--set", "pipeline-model-parallel-size=%d" % value)]
        if value == 1:
            changes += [("--unset", flag[2:]) for flag in VP_FLAGS if ctx.has(flag)]
        out.append(("pipeline-model-parallel-size=%d" % value, changes))
    return out


def _gen_vp(ctx):
    if ctx.pp <= 1 or not ctx.layers or ctx.split_layers % ctx.pp:
        return []
    per_stage = ctx.split_layers // ctx.pp
    by_stages = ctx.has("--num-virtual-stages-per-pipeline-rank")
    out = []
    current = [flag for flag in VP_FLAGS if ctx.has(flag)]
    if current:
        out.append(("virtual-pipeline=off", [("--unset", flag[2:]) for flag in current]))
    for per_vstage in _divisors(per_stage)[:-1]:  # at least two virtual stages per rank
        stages = per_stage // per_vstage
        if by_stages:
            if str(ctx.args.get("--num-virtual-stages-per-pipeline-rank")) == str(stages):
                continue
            changes = [("--set", "num-virtual-stages-per-pipeline-rank=%d" % stages)]
        else:
            if str(ctx.args.get("--num-layers-per-virtual-pipeline-stage")) == str(per_vstage):
                continue
            changes = [("--set", "num-layers-per-virtual-pipeline-stage=%d" % per_vstage)]
        out.append(("virtual-pipeline=%d-stages" % stages, changes))
    return out


def _gen_cp(ctx):
    out = []
    for value in (1, 2, 4):
        if value == ctx.cp:
            continue
        changes = [("--set", "context-parallel-size=%d" % value)]
        if value > 1 and ctx.tp == 1 and ctx.cp == 1:
            changes += ctx.max_connections_one()
        out.append(("context-parallel-size=%d" % value, changes))
    return out


def _gen_ep(ctx):
    if not ctx.experts:
        return []
    out = []
    value = 1
    while value <= min(ctx.experts, ctx.gpus):
        if value != ctx.ep:
            out.append(("expert-model-parallel-size=%d" % value, [("--set", "expert-model-parallel-size=%d" % value)]))
        value *= 2
    return out


def _gen_a2a_overlap(ctx):
    if not ctx.experts or (ctx.ep <= 1 and not ctx.has("--overlap-moe-expert-parallel-comm")):
        return []
    return _toggle(ctx, "--overlap-moe-expert-parallel-comm", "moe-a2a-overlap")


def _gen_delay_wgrad(ctx):
    if not ctx.has("--overlap-moe-expert-parallel-comm") and not ctx.has("--delay-wgrad-compute"):
        return []
    return _toggle(ctx, "--delay-wgrad-compute", "delay-wgrad-compute")


def _gen_dispatcher(ctx):
    """alltoall, allgather and flex: flex with Megatron-LM's default backend (``--moe-flex-dispatcher-backend``
    deepep, which the gate's rule knows, so leaving the flag out is that backend); choosing another backend is the
    deepep-backend and hybridep-backend levers'."""
    if not ctx.experts:
        return []
    current = str(ctx.args.get("--moe-token-dispatcher-type") or "allgather")
    return [("moe-token-dispatcher-type=%s" % value, [("--set", "moe-token-dispatcher-type=%s" % value)])
            for value in ("alltoall", "allgather", "flex") if value != current]


def _gen_mbs(ctx):
    return [("micro-batch-size=%d" % value, [("--set", "micro-batch-size=%d" % value)])
            for value in (1, 2, 4) if value != ctx.mbs]


def _recompute_state(ctx) -> dict:
    return {flag: ctx.args.get(flag) for flag in RECOMPUTE_FLAGS if flag in ctx.args}


def _recompute_changes(ctx, target: dict) -> list:
    current = _recompute_state(ctx)
    changes = []
    for flag in RECOMPUTE_FLAGS:
        want = target.get(flag)
        if want is None and flag in current:
            changes.append(("--unset", flag[2:]))
        elif want is not None and str(current.get(flag)) != str(want):
            changes.append(("--set", "%s=%s" % (flag[2:], want)))
    return changes


def _per_chunk(ctx) -> int:
    if not ctx.layers or ctx.pp <= 0:
        return 1
    per_stage = ctx.layers // ctx.pp
    vp = 1
    if ctx.has("--num-layers-per-virtual-pipeline-stage"):
        per = as_int(ctx.args, "--num-layers-per-virtual-pipeline-stage", per_stage)
        vp = max(1, per_stage // max(1, per))
    elif ctx.has("--num-virtual-stages-per-pipeline-rank"):
        vp = max(1, as_int(ctx.args, "--num-virtual-stages-per-pipeline-rank", 1))
    return max(1, per_stage // vp)


def _recompute_targets(ctx) -> list:
    """(lever, name, target flags) for every recompute setting worth a run."""
    granularity = str(ctx.args.get("--recompute-granularity") or "")
    targets = []
    none_lever = "selective-recompute" if granularity == "selective" else "full-recompute"
    targets.append((none_lever, "recompute=none", {}))
    targets.append(("full-recompute", "recompute=full/uniform/1",
                    {"--recompute-granularity": "full", "--recompute-method": "uniform",
                     "--recompute-num-layers": "1"}))
    chunk = _per_chunk(ctx)
    for layers in sorted({1, chunk // 2, chunk - 1}):
        if 0 < layers < chunk:
            targets.append(("full-recompute", "recompute=full/block/%d" % layers,
                            {"--recompute-granularity": "full", "--recompute-method": "block",
                             "--recompute-num-layers": str(layers)}))
    targets.append(("selective-recompute", "recompute=selective/core_attn", {"--recompute-granularity": "selective"}))
    targets.append(("selective-recompute", "recompute=selective/mlp",
                    {"--recompute-granularity": "selective", "--recompute-modules": "mlp"}))
    return targets


def _gen_recompute(lever_id):
    def generate(ctx):
        out = []
        for lever, name, target in _recompute_targets(ctx):
            if lever != lever_id:
                continue
            changes = _recompute_changes(ctx, target)
            if changes:
                out.append((name, changes))
        return out
    return generate


def _gen_param_gather(ctx):
    if ctx.has("--overlap-param-gather"):
        return [("overlap-param-gather=off", [("--unset", "overlap-param-gather")])]
    changes = [("--set", "overlap-param-gather")]
    for flag in ("--overlap-grad-reduce", "--use-distributed-optimizer"):
        if not ctx.has(flag):
            changes.append(("--set", flag[2:]))
    return [("overlap-param-gather=on", changes)]


def _gen_bucket(ctx):
    current = ctx.args.get("--ddp-bucket-size")
    out = [("ddp-bucket-size=%d" % value, [("--set", "ddp-bucket-size=%d" % value)])
           for value in (20000000, 128000000) if str(current) != str(value)]
    if current is not None:
        out.append(("ddp-bucket-size=default", [("--unset", "ddp-bucket-size")]))
    return out


def _gen_expandable(ctx):
    name, value = "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"
    current = ctx.env.get(name)
    if current == value:
        return [("expandable-segments=off", [("--unset-env", name)])]
    if current is None:
        return [("expandable-segments=on", [("--env", "%s=%s" % (name, value))])]
    return []  # another allocator setting: not this lever's to replace


def _gen_p2p_chunk(ctx):
    if ctx.pp <= 1 and "NCCL_P2P_NET_CHUNKSIZE" not in ctx.env:
        return []
    return _env_values(ctx, "NCCL_P2P_NET_CHUNKSIZE", ("2097152",))


# ------------------------------------------------------------------------------------------ slime's levers
DYNAMIC_BUDGETS = (4608, 9216, 16384)  # --max-tokens-per-gpu values slime's examples use (levers.md)
ENGINE_GPUS = (1, 2, 4, 8)
MEM_FRACTIONS = ("0.6", "0.7", "0.8", "0.85")


def _gen_dynamic_batch(ctx):
    """Pack the actor's micro-batches up to a token budget instead of a fixed count of padded samples."""
    if ctx.slime is None:
        return []
    current = ctx.args.get("--max-tokens-per-gpu")
    if not ctx.has("--use-dynamic-batch-size"):
        return [("dynamic-batch-size=%d" % budget, [("--set", "use-dynamic-batch-size"),
                                                    ("--set", "max-tokens-per-gpu=%d" % budget)])
                for budget in DYNAMIC_BUDGETS]
    out = [("max-tokens-per-gpu=%d" % budget, [("--set", "max-tokens-per-gpu=%d" % budget)])
           for budget in DYNAMIC_BUDGETS if str(budget) != current]
    out.append(("dynamic-batch-size=off", [("--unset", "use-dynamic-batch-size"), ("--unset", "max-tokens-per-gpu")]))
    return out


def _gen_log_probs_budget(ctx):
    """A token budget of their own for the forward-only log-prob passes (actor and reference), which hold no
    gradients: where dynamic batching packs the training micro-batches, twice and four times the training's. The
    whole loop only: a train-only score times the actor's training alone (measurement.md §3.2)."""
    if ctx.slime is None or ctx.slime.mode != "whole_loop" or not ctx.has("--use-dynamic-batch-size"):
        return []
    train = as_int(ctx.args, "--max-tokens-per-gpu", 0)
    current = ctx.args.get("--log-probs-max-tokens-per-gpu")
    budgets = [train * k for k in (2, 4) if train and str(train * k) != current]
    out = [("log-probs-max-tokens-per-gpu=%d" % n, [("--set", "log-probs-max-tokens-per-gpu=%d" % n)]) for n in budgets]
    if current is not None:
        out.append(("log-probs-max-tokens-per-gpu=off", [("--unset", "log-probs-max-tokens-per-gpu")]))
    return out


def _gen_engine_tp(ctx):
    """The GPUs of each SGLang rollout engine (its TP), and its CUDA graphs where the recipe turned them off: only
    where the run generates (the whole loop)."""
    if ctx.slime is None or ctx.slime.mode != "whole_loop":
        return []
    rollout = ctx.slime.placement_gpus if ctx.slime.colocate else ctx.slime.placement_gpus - ctx.slime.actor_gpus
    current = as_int(ctx.args, "--rollout-num-gpus-per-engine", 1)
    out = [("rollout-num-gpus-per-engine=%d" % n, [("--set", "rollout-num-gpus-per-engine=%d" % n)])
           for n in ENGINE_GPUS if n != current and rollout > 0 and rollout % n == 0]
    if ctx.has("--sglang-disable-cuda-graph"):  # decode without CUDA graphs pays a launch per kernel per token
        out.insert(0, ("sglang-cuda-graph=on", [("--unset", "sglang-disable-cuda-graph")]))
    return out


def _gen_mem_fraction(ctx):
    """The share of GPU memory SGLang reserves for its weights and KV cache (the whole loop only)."""
    if ctx.slime is None or ctx.slime.mode != "whole_loop":
        return []
    current = ctx.args.get("--sglang-mem-fraction-static")
    return [("sglang-mem-fraction-static=%s" % f, [("--set", "sglang-mem-fraction-static=%s" % f)])
            for f in MEM_FRACTIONS if f != current]


def _gen_offload(ctx):
    """Keep the actor resident through the rollout (``--no-offload-train``) where both fit, or offload it again:
    colocated, the whole loop only; dropping offload lowers the SGLang memory fraction with it (its Pitfalls)."""
    if ctx.slime is None or ctx.slime.mode != "whole_loop" or not ctx.slime.colocate:
        return []
    if ctx.has("--no-offload-train"):
        return [("offload-train=on", [("--unset", "no-offload-train")])]
    current = ctx.args.get("--sglang-mem-fraction-static")
    out = [("offload-train=off", [("--set", "no-offload-train")])]
    if current != "0.6":
        out.append(("offload-train=off,sglang-mem-fraction-static=0.6",
                    [("--set", "no-offload-train"), ("--set", "sglang-mem-fraction-static=0.6")]))
    return out


GENERATORS = {
    "tensor-parallel-size": _gen_tp,
    "sequence-parallel": _gen_sp,
    "tp-comm-overlap": _gen_tp_overlap,
    "pipeline-parallel-size": _gen_pp,
    "virtual-pipeline": _gen_vp,
    "context-parallel-size": _gen_cp,
    "expert-parallel-size": _gen_ep,
    "moe-a2a-overlap": _gen_a2a_overlap,
    "delay-wgrad-compute": _gen_delay_wgrad,
    "token-dispatcher": _gen_dispatcher,
    "micro-batch-size": _gen_mbs,
    "selective-recompute": _gen_recompute("selective-recompute"),
    "full-recompute": _gen_recompute("full-recompute"),
    "distributed-optimizer": lambda ctx: _toggle(ctx, "--use-distributed-optimizer", "distributed-optimizer"),
    "expandable-segments": _gen_expandable,
    "overlap-grad-reduce": lambda ctx: _toggle(ctx, "--overlap-grad-reduce", "overlap-grad-reduce"),
    "overlap-param-gather": _gen_param_gather,
    "ddp-bucket-size": _gen_bucket,
    "cuda-device-max-connections": lambda ctx: _env_values(ctx, "CUDA_DEVICE_MAX_CONNECTIONS", ("1", "8", "32")),
    "high-priority-nccl-streams": lambda ctx: _env_values(ctx, "TORCH_NCCL_HIGH_PRIORITY", ("1",)),
    "nvls": lambda ctx: _env_values(ctx, "NCCL_NVLS_ENABLE", ("0", "1"), allow_unset=False),
    "nccl-cta-policy": lambda ctx: _env_values(ctx, "NCCL_CTA_POLICY", ("1",)),
    "nccl-p2p-chunksize": _gen_p2p_chunk,
    "avoid-record-streams": lambda ctx: _env_values(ctx, "TORCH_NCCL_AVOID_RECORD_STREAMS", ("1",)),
    "dynamic-batch-size": _gen_dynamic_batch,
    "rollout-engine-tp": _gen_engine_tp,
    "log-probs-max-tokens": _gen_log_probs_budget,
    "sglang-mem-fraction": _gen_mem_fraction,
    "slime-offload": _gen_offload,
}
