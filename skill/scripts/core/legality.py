"""Legality of a Megatron-LM configuration, checked before anything launches.

The rules are Megatron-LM's own (its argument validation and the asserts in the layers it builds),
as the project's reference on Megatron-LM arguments records them. Each violation names the rule,
the values that break it and the fix. The input is the recipe's arguments as
``{"--flag": "value"}`` (``True`` for a flag given without a value), its environment, and the
job's world size (GPUs).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from typing import Mapping, Optional

from . import slime
from .errors import CheckFailed

# Flags that look plausible but Megatron-LM's command line does not have (or no longer uses).
NOT_MEGATRON_FLAGS = {
    "--virtual-pipeline-model-parallel-size": "use --num-layers-per-virtual-pipeline-stage or "
                                              "--num-virtual-stages-per-pipeline-rank (the VP size is derived)",
    "--cpu-offloading": "use --fine-grained-activation-offloading --offload-modules ... or --optimizer-cpu-offload",
    "--bias-swiglu-fusion": "fusions are on by default; only --no-bias-swiglu-fusion exists",
    "--apply-rope-fusion": "fusions are on by default; only --no-rope-fusion exists",
    "--masked-softmax-fusion": "fusions are on by default; only --no-masked-softmax-fusion exists",
    "--use-flash-attn": "legacy and unused outside megatron/legacy; use --attention-backend flash",
}
BLACKWELL = ("b200", "b300", "gb200", "gb300", "vr200")

# Throughput-relevant flags that exist (Megatron-LM core_v0.15 to HEAD, slime's own), from the
# project's reference. Not a complete list: it is what a misspelling is measured against.
# the embedding and the loss counted as one layer each in the pipeline split (Megatron-LM's flags)
ACCOUNT_FLAGS = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")
SGLANG_PREFIX = "--sglang-"  # slime makes these from SGLang's ServerArgs: not in its own argument list
KNOWN_FLAGS = (
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank", "--context-parallel-size", "--expert-model-parallel-size",
    "--expert-tensor-parallel-size", "--sequence-parallel", "--micro-batch-size", "--global-batch-size",
    "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--recompute-modules",
    "--use-distributed-optimizer", "--fine-grained-activation-offloading", "--offload-modules",
    "--optimizer-cpu-offload", "--overlap-grad-reduce", "--overlap-param-gather", "--ddp-bucket-size",
    "--tp-comm-overlap", "--tp-comm-overlap-cfg", "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute",
    "--moe-token-dispatcher-type", "--moe-flex-dispatcher-backend", "--moe-grouped-gemm", "--moe-permute-fusion",
    "--moe-router-fusion", "--moe-router-dtype", "--attention-backend", "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl", "--no-bias-swiglu-fusion", "--no-rope-fusion", "--no-masked-softmax-fusion",
    "--no-bias-dropout-fusion", "--no-bias-gelu-fusion", "--no-gradient-accumulation-fusion", "--bf16", "--fp16",
    "--fp8-format", "--fp8-recipe", "--fp8-param-gather", "--grad-reduce-in-bf16",
    "--accumulate-allreduce-grads-in-fp32", "--use-precision-aware-optimizer", "--attention-softmax-in-fp32",
    "--calculate-per-token-loss", "--manual-gc", "--manual-gc-interval", "--cuda-graph-impl", "--cuda-graph-scope",
    "--empty-unused-memory-level", "--distributed-timeout-minutes", "--log-throughput", "--log-interval",
    "--timing-log-level", "--profile", "--profile-step-start", "--profile-step-end", "--profile-ranks",
    "--use-pytorch-profiler", "--record-memory-history", "--deterministic-mode", "--num-layers", "--seq-length",
    "--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    "--exit-interval", "--train-iters",
    # read by the model and recompute rules (_model_rules and check)
    "--num-attention-heads", "--num-query-groups", "--group-query-attention", "--multi-latent-attention",
    "--max-position-embeddings", "--position-embedding-type", "--mtp-num-layers", "--num-experts",
    "--moe-router-topk", "--moe-router-pre-softmax", "--moe-router-score-function", "--moe-router-load-balancing-type",
    "--moe-shared-expert-overlap", "--moe-shared-expert-intermediate-size", "--disable-bias-linear", "--spec",
    "--no-overlap-p2p-communication", "--use-torch-fsdp2", "--use-megatron-fsdp", "--main-grads-dtype",
    "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype", "--fp4-format", "--fp4-recipe",
    "--normalization", "--transformer-impl", "--moe-expert-capacity-factor", "--moe-pad-expert-input-to-capacity",
    "--softmax-type",
    # slime
    "--actor-num-nodes", "--actor-num-gpus-per-node", "--rollout-num-gpus", "--rollout-num-gpus-per-engine",
    "--num-gpus-per-node", "--colocate", "--offload", "--offload-train", "--no-offload-train", "--offload-rollout",
    "--num-rollout", "--rollout-batch-size", "--n-samples-per-prompt", "--num-steps-per-rollout",
    "--use-dynamic-batch-size", "--max-tokens-per-gpu", "--balance-data", "--debug-train-only",
)


@dataclasses.dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    fix: str

    def __str__(self) -> str:
        return "%s: %s. Fix: %s" % (self.rule, self.message, self.fix)


def _float(text) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        return 0.0  # reported by the projection's parser; a factor of 0 keeps the capacity rules quiet


def _int(args: Mapping, flag: str, default: Optional[int]) -> Optional[int]:
    value = args.get(flag)
    if value is None or value is True:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def layout_stages(text: str) -> Optional[list]:
    """``--pipeline-model-parallel-layout`` (Megatron's grammar: ``E`` embedding, ``t`` decoder layer, ``m`` MTP
    layer, ``L`` loss, ``|`` between stages, ``(..)*n`` and ``x*n`` repeats, commas ignored) as each stage's
    layers, in order (a string of E, t, m and L per stage); None when the text has characters outside that
    grammar (a space is one, as in Megatron-LM's ``PipelineParallelLayerLayout.parse_str_to_list``). Quotes
    around the whole value are taken off first: they are the shell's."""
    flat = str(text).strip().strip("\"'").replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        flat = re.sub(pattern, lambda match: match.group(1) * int(match.group(2)), flat)
    if set(flat) - set("EtmL|"):
        return None
    return flat.split("|")


def _layout_violations(stages: list, pp: int, layers: Optional[int], mtp: int) -> list:
    """``(message, fix)`` for each check of Megatron-LM core_v0.16.1 on a layout that ``stages`` (from
    ``layout_stages``) breaks: ``arguments.validate_args`` (stage count a multiple of PP) and
    ``PipelineParallelLayerLayout.validate_layer_layout`` (the embedding first and the loss last, each once, in
    the order of the stages; every decoder layer placed; the MTP layers after every decoder layer, all in one
    stage, the last virtual stage of its rank)."""
    out = []
    if len(stages) % pp:
        return [("the layout has %d stages, not a multiple of --pipeline-model-parallel-size=%d" % (len(stages), pp),
                 "rewrite the layout for the new PP size (or keep PP)")]
    flat = "".join(stages)
    if not flat.startswith("E") or flat.count("E") != 1:
        out.append(("the layout must begin with the embedding (E), once: Megatron-LM asserts the first layer is "
                    "the embedding", "write E once, at the start of the first stage"))
    if not flat.endswith("L") or flat.count("L") != 1:
        out.append(("the layout must end with the loss (L), once: Megatron-LM asserts the last layer is the loss",
                    "write L once, at the end of the last stage"))
    if layers is not None and flat.count("t") != layers:
        out.append(("the layout places %d decoder layers; --num-layers is %d" % (flat.count("t"), layers),
                    "place every decoder layer exactly once"))
    if flat.count("m") != mtp:
        out.append(("the layout places %d MTP layers; --mtp-num-layers is %d" % (flat.count("m"), mtp),
                    "place each MTP layer (m) once, or set --mtp-num-layers"))
    if "m" in flat:
        vp = len(stages) // pp
        holders = [k for k, stage in enumerate(stages) if "m" in stage]
        if "t" in flat[flat.index("m"):]:
            out.append(("a decoder layer (t) comes after an MTP layer (m)", "place the MTP layers after every "
                        "decoder layer"))
        if len(holders) > 1 or holders[0] // pp != vp - 1:
            out.append(("the MTP layers must all be in one stage, the last virtual stage of its pipeline rank",
                        "move every m into one stage of the last virtual pipeline chunk"))
    return out


def _interleaved(args: Mapping, pp: int, vp: int) -> list:
    """Megatron-LM core_v0.16.1 ``arguments.validate_args``: the interleaved schedule (VP > 1) needs PP > 1, and
    PP > 2 when the pipeline's sends and receives are not overlapped (``--no-overlap-p2p-communication``; they are
    by default)."""
    if vp <= 1:
        return []
    if "--no-overlap-p2p-communication" in args and pp <= 2:
        return [Violation("interleaved-pp", "the interleaved schedule (VP %d) needs --pipeline-model-parallel-size > 2 "
                          "with --no-overlap-p2p-communication (PP is %d)" % (vp, pp),
                          "drop --no-overlap-p2p-communication, raise PP, or remove the virtual stages")]
    if pp <= 1:
        return [Violation("interleaved-pp", "the interleaved schedule (VP %d) needs pipeline parallelism (PP > 1)" % vp,
                          "raise --pipeline-model-parallel-size, or remove the virtual stages")]
    return []


def _pipeline_split(args: Mapping, layers: Optional[int], pp: int, per_vstage: Optional[int]) -> list:
    """The layer split over pipeline stages, as Megatron-LM's ``validate_args`` checks it: an explicit
    ``--pipeline-model-parallel-layout`` sets the split (its stage count a multiple of PP, its decoder layers
    the model's, no other virtual-pipeline flag beside it); uneven first/last stages
    (``--decoder-first/last-pipeline-num-layers``) leave the rest to divide evenly over the middle stages
    (``--num-layers-per-virtual-pipeline-stage`` is refused with them); otherwise the layers divide by PP and
    the layers per stage by the layers per virtual stage, the embedding and the loss each counting as one layer
    where ``--account-for-embedding-in-pipeline-split`` / ``--account-for-loss-in-pipeline-split`` say so (the
    first stage then builds one decoder layer fewer, the last one fewer: Megatron-LM core_v0.16.1
    ``transformer_block.get_num_layers_to_build``, ``arguments.validate_args``), which neither the layout nor
    uneven first/last stages may be given with (``TransformerConfig.__post_init__``)."""
    out = []
    accounted = [flag for flag in ACCOUNT_FLAGS if args.get(flag) is True]
    layout = args.get("--pipeline-model-parallel-layout")
    vstages = args.get("--num-virtual-stages-per-pipeline-rank")
    first = _int(args, "--decoder-first-pipeline-num-layers", None)
    last = _int(args, "--decoder-last-pipeline-num-layers", None)
    uneven = first is not None or last is not None
    if sum(x is not None for x in (layout, vstages, per_vstage)) > 1:
        out.append(Violation("virtual-pipeline", "no more than one of --num-layers-per-virtual-pipeline-stage, "
                             "--num-virtual-stages-per-pipeline-rank and --pipeline-model-parallel-layout can be set",
                             "keep one of them"))
    if layout is not None and layout is not True:
        stages = layout_stages(layout)
        if stages is None:
            out.append(Violation("pipeline-layout", "--pipeline-model-parallel-layout %r has characters outside "
                                 "E, t, m, L, | and repeats" % layout, "write the layout in Megatron's grammar "
                                 "(no spaces)"))
            return out
        mtp = _int(args, "--mtp-num-layers", 0) or 0
        for message, fix in _layout_violations(stages, pp, layers, mtp):
            out.append(Violation("pipeline-layout", message, fix))
        out.extend(_interleaved(args, pp, len(stages) // pp if len(stages) % pp == 0 else 1))
        if uneven:
            out.append(Violation("pipeline-layout", "--decoder-first/last-pipeline-num-layers cannot be given with "
                                 "--pipeline-model-parallel-layout", "put the uneven stages in the layout"))
        if accounted:
            out.append(Violation("pipeline-layout", "%s cannot be given with --pipeline-model-parallel-layout"
                                 % " and ".join(accounted), "place the embedding (E) and loss (L) in the layout"))
        return out
    if uneven and accounted:
        out.append(Violation("uneven-pipeline", "--decoder-first/last-pipeline-num-layers cannot be given with %s"
                             % " and ".join(accounted), "keep one way of evening out the stages"))
        return out
    for flag, value in (("--decoder-first-pipeline-num-layers", first), ("--decoder-last-pipeline-num-layers", last)):
        if value is not None and value <= 0:
            out.append(Violation("uneven-pipeline", "%s=%d must be larger than 0 (Megatron-LM's TransformerConfig)"
                                 % (flag, value), "give the stage at least one layer, or remove the flag"))
    vstages = _int(args, "--num-virtual-stages-per-pipeline-rank", None)
    if vstages is not None:
        out.extend(_interleaved(args, pp, vstages))
    if uneven:
        if per_vstage is not None:
            out.append(Violation("virtual-pipeline", "uneven first/last stages need "
                                 "--num-virtual-stages-per-pipeline-rank, not --num-layers-per-virtual-pipeline-stage",
                                 "give the virtual-pipeline degree with --num-virtual-stages-per-pipeline-rank"))
        if pp == 1:
            out.append(Violation("uneven-pipeline", "--decoder-first/last-pipeline-num-layers needs pipeline "
                                 "parallelism (PP > 1)", "remove them or raise --pipeline-model-parallel-size"))
        elif layers is not None:
            rest = layers - (first or 0) - (last or 0)
            middle = pp - (first is not None) - (last is not None)
            if rest < 0 or (middle and rest % middle) or (not middle and rest):
                out.append(Violation("layers-per-stage", "%d layers left after the first/last stages do not divide "
                                     "evenly over %d middle stage(s)" % (rest, middle),
                                     "choose first/last stage sizes (or a PP size) that leave an even split"))
        return out
    counted = None if layers is None else layers + len(accounted)
    if counted is not None and counted % pp:
        out.append(Violation("layers-per-stage", "--num-layers=%d%s is not divisible by --pipeline-model-parallel-size=%d"
                             % (layers, "".join(" +1 (%s)" % flag[2:] for flag in accounted), pp),
                             "choose a PP size that divides the number of layers (or set an uneven first/last stage, "
                             "or count the embedding and loss in the split)"))
    if per_vstage is not None and counted is not None and counted % pp == 0:
        if (counted // pp) % per_vstage:
            out.append(Violation("virtual-pipeline", "%d layers per pipeline stage are not divisible by "
                                 "--num-layers-per-virtual-pipeline-stage=%d" % (counted // pp, per_vstage),
                                 "choose a number of layers per virtual stage that divides the layers per stage"))
        else:
            out.extend(_interleaved(args, pp, counted // pp // per_vstage))
    return out


def require(recipe, gpu: Optional[str] = None, trusted=None, what: str = "the recipe", known=None) -> None:
    """Refuse a recipe that breaks a rule (``CheckFailed``, exit 1), naming every rule: the one refusal
    ``candidate new`` (``what`` "the candidate", the baseline's flags trusted) and ``launch --baseline`` give.
    ``known``: every flag the program defines (a slime recipe's), so a flag outside them is refused too."""
    violations = check(recipe.args(), recipe.env(), recipe.gpus(), gpu,
                       trusted=recipe.args() if trusted is None else trusted, known=known)
    if violations:
        raise CheckFailed("%s is not a legal Megatron-LM configuration: %s" % (what, "; ".join(map(str, violations))))


# Flags whose values Megatron-LM core_v0.16.1's parser restricts (megatron/training/arguments.py, argparse choices)
CHOICES = {
    "--attention-backend": ("auto", "flash", "fused", "local", "unfused"),
    "--cross-entropy-fusion-impl": ("native", "te"),
    "--cuda-graph-impl": ("local", "none", "transformer_engine"),
    "--exp-avg-dtype": ("bf16", "fp16", "fp32", "fp8"),
    "--exp-avg-sq-dtype": ("bf16", "fp16", "fp32", "fp8"),
    "--fp4-format": ("e2m1",),
    "--fp4-recipe": ("custom", "nvfp4"),
    "--fp8-format": ("e4m3", "hybrid"),
    "--fp8-recipe": ("blockwise", "custom", "delayed", "mxfp8", "tensorwise"),
    "--main-grads-dtype": ("bf16", "fp32"),
    "--main-params-dtype": ("fp16", "fp32"),
    "--moe-flex-dispatcher-backend": ("deepep", "hybridep"),
    "--moe-router-dtype": ("fp32", "fp64"),
    "--moe-router-load-balancing-type": ("aux_loss", "global_aux_loss", "none", "seq_aux_loss", "sinkhorn"),
    "--moe-router-score-function": ("sigmoid", "softmax"),
    "--moe-token-dispatcher-type": ("allgather", "alltoall", "flex"),
    "--normalization": ("LayerNorm", "RMSNorm"),
    "--position-embedding-type": ("learned_absolute", "mrope", "none", "relative", "rope"),
    "--softmax-type": ("learnable", "off-by-one", "vanilla"),
    "--transformer-impl": ("inference_optimized", "local", "transformer_engine"),
}
SELECTIVE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")


def _model_rules(args: Mapping, tp: int, pp: int, cp: int, etp: int, layers: Optional[int]) -> list:
    """``(rule, message, fix)`` for each of Megatron-LM core_v0.16.1's checks on the model and its recompute that
    ``args`` breaks (``arguments.validate_args`` and ``TransformerConfig.__post_init__``): attention heads and
    query groups against TP, the sequence against CP and the position embeddings, the recompute granularity,
    method, layer count and modules, the router's top-k, and biases in expert layers."""
    out = []
    heads = _int(args, "--num-attention-heads", None)
    seq = _int(args, "--seq-length", None)
    if heads:
        groups = heads
        if "--multi-latent-attention" not in args and ("--group-query-attention" in args
                                                        or "--num-query-groups" in args):
            groups = _int(args, "--num-query-groups", heads) or heads
        if heads % tp:
            out.append(("heads-per-rank", "--num-attention-heads %d is not divisible by --tensor-model-parallel-size "
                        "%d" % (heads, tp), "choose a TP size that divides the attention heads"))
        if groups % tp and tp % groups:
            out.append(("query-groups-per-rank", "--num-query-groups %d is neither a multiple nor a divisor of "
                        "--tensor-model-parallel-size %d" % (groups, tp), "choose a TP size that divides the query "
                        "groups, or that they divide"))
        if heads % groups:
            out.append(("query-groups", "--num-attention-heads %d is not divisible by --num-query-groups %d"
                        % (heads, groups), "give a number of query groups that divides the heads"))
    if seq and cp > 1 and seq % (2 * cp):
        out.append(("seq-length-cp", "--seq-length %d is not a multiple of 2 x --context-parallel-size %d"
                    % (seq, cp), "choose a CP size whose double divides the sequence length"))
    positions = _int(args, "--max-position-embeddings", None)
    if seq and positions is not None and positions < seq:
        out.append(("max-position-embeddings", "--max-position-embeddings %d is less than --seq-length %d"
                    % (positions, seq), "raise --max-position-embeddings to at least the sequence length"))
    granularity = args.get("--recompute-granularity")
    method = args.get("--recompute-method")
    recompute_layers = _int(args, "--recompute-num-layers", None)
    if granularity is not None and granularity not in ("full", "selective"):
        out.append(("recompute-granularity", "%r is not full or selective" % granularity, "write full or selective"))
    if granularity is not None and method is not None and method not in ("uniform", "block"):
        out.append(("recompute-method", "--recompute-method %s is not uniform or block" % method,
                    "write uniform or block"))
    if granularity == "full":
        if method is None:
            out.append(("recompute-method", "--recompute-granularity full needs --recompute-method uniform or block",
                        "add --recompute-method uniform (or block)"))
        if recompute_layers is None:
            out.append(("recompute-num-layers", "--recompute-granularity full needs --recompute-num-layers (1 to the "
                        "layers per pipeline rank)", "add --recompute-num-layers"))
    if granularity == "selective":
        if recompute_layers is not None:
            out.append(("recompute-num-layers", "--recompute-num-layers goes with full recompute only",
                        "remove it, or recompute in full"))
        raw = args.get("--recompute-modules")
        modules = str(raw).replace(",", " ").split() if raw not in (None, True) else []
        unknown = [m for m in modules if m not in SELECTIVE_MODULES]
        if unknown:
            out.append(("recompute-modules", "unknown module(s) %s; known: %s" % (", ".join(unknown),
                                                                               ", ".join(SELECTIVE_MODULES)),
                        "name only modules Megatron-LM can recompute"))
        needs = (("moe_act", "--moe-grouped-gemm"), ("mla_up_proj", "--multi-latent-attention"))
        for module, flag in needs:
            if module in modules and flag not in args:
                out.append(("recompute-modules", "recomputing %s needs %s" % (module, flag),
                            "add %s, or recompute other modules" % flag))
        if "shared_experts" in modules and "--moe-shared-expert-overlap" in args \
                and "--moe-shared-expert-intermediate-size" in args:
            out.append(("recompute-modules", "recomputing shared_experts does not work with "
                        "--moe-shared-expert-overlap", "remove one of them"))
        delayed = (args.get("--fp8-format") not in (None, True)
                   and str(args.get("--fp8-recipe") or "delayed") == "delayed")
        if delayed and ("moe_act" in modules or "layernorm" in modules):
            out.append(("recompute-modules", "recomputing moe_act or layernorm does not work with FP8 delayed scaling "
                        "(--fp8-recipe delayed, the default)", "choose another --fp8-recipe, or recompute other "
                        "modules"))
    experts = _int(args, "--num-experts", None)
    if experts:
        topk = _int(args, "--moe-router-topk", 2)
        if topk is not None and not 0 < topk <= experts:
            out.append(("router-topk", "--moe-router-topk %d must be between 1 and --num-experts %d"
                        % (topk, experts), "choose a top-k no larger than the number of experts"))
        if topk == 1 and "--moe-router-pre-softmax" not in args \
                and str(args.get("--moe-router-score-function") or "softmax") == "softmax" \
                and args.get("--moe-router-load-balancing-type") != "sinkhorn":
            out.append(("router-topk", "--moe-router-topk 1 with the softmax score needs --moe-router-pre-softmax "
                        "(the softmax of one score has a zero gradient)", "add --moe-router-pre-softmax"))
        capacity = args.get("--moe-expert-capacity-factor")
        dropless = capacity in (None, True) or _float(capacity) < 0  # a negative factor is none
        if "--moe-pad-expert-input-to-capacity" in args and dropless:
            out.append(("moe-capacity", "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor "
                        "(a factor >= 0)", "add --moe-expert-capacity-factor, or remove the padding"))
        balancing = str(args.get("--moe-router-load-balancing-type") or "aux_loss").split()
        if capacity not in (None, True) and any(kind not in ("aux_loss", "seq_aux_loss", "global_aux_loss", "none")
                                for kind in balancing):
            out.append(("moe-capacity", "--moe-expert-capacity-factor (even a negative one) works with the aux_loss, "
                        "seq_aux_loss, global_aux_loss or none load balancing only (it is %s)" % " ".join(balancing),
                        "choose another --moe-router-load-balancing-type, or remove the capacity factor"))
        if "--moe-pad-expert-input-to-capacity" in args and \
                str(args.get("--moe-token-dispatcher-type") or "allgather") == "flex" and \
                str(args.get("--moe-flex-dispatcher-backend") or "deepep") == "deepep":
            out.append(("moe-capacity", "the flex dispatcher's DeepEP backend does not pad experts to capacity",
                        "remove --moe-pad-expert-input-to-capacity, or use another dispatcher or backend"))
        if "--disable-bias-linear" not in args and etp != 1:
            out.append(("moe-bias", "expert layers with biases (no --disable-bias-linear) need "
                        "--expert-tensor-parallel-size 1 (it is %d; it defaults to TP)" % etp,
                        "add --disable-bias-linear, or set --expert-tensor-parallel-size 1"))
    return out


def _ep_overlap(args: Mapping, ep: int) -> list:
    """``(rule, message, fix)`` for each assert of Megatron-LM on the EP all-to-all overlap and the delayed
    weight gradient that ``args`` breaks (core_v0.16.1 megatron/core/transformer/transformer_config.py,
    ``TransformerConfig.__post_init__``: "overlap_moe_expert_parallel_comm is only supported with expert model
    parallelism", "... supported with alltoall/flex token dispatcher", "disable full recomputation ...", "disable
    recomputation method ...", "recompute_num_layers must be None ...", "... only supported with bf16 or fp16
    model", "disable moe_shared_expert_overlap ...", and "overlap_moe_expert_parallel_comm must be enabled when
    enabling delay_wgrad_compute"). Its "virtual_pipeline_model_parallel_size must be specified when
    pipeline_model_parallel_size > 1" is not enforced: four published Megatron-Bridge Qwen3-235B runs
    (projection/data) ran the overlap at PP 4 and 8 with no virtual pipeline their configurations show."""
    out = []
    if "--delay-wgrad-compute" in args and "--overlap-moe-expert-parallel-comm" not in args:
        out.append(("delay-wgrad-compute", "--delay-wgrad-compute needs --overlap-moe-expert-parallel-comm",
                    "keep the EP all-to-all overlap first (lever moe-a2a-overlap), or remove --delay-wgrad-compute"))
    if "--overlap-moe-expert-parallel-comm" not in args:
        return out
    rule, fix = "moe-a2a-overlap", "remove --overlap-moe-expert-parallel-comm, or meet what it needs"
    dispatcher = str(args.get("--moe-token-dispatcher-type") or "allgather")
    needs = [(ep > 1, "expert parallelism (--expert-model-parallel-size > 1)"),
             (dispatcher in ("alltoall", "flex"), "the alltoall or flex dispatcher (it is %s)" % dispatcher),
             (args.get("--recompute-granularity") != "full", "no full recompute (--recompute-granularity full)"),
             ("--recompute-method" not in args, "no --recompute-method"),
             ("--recompute-num-layers" not in args, "no --recompute-num-layers"),
             ("--bf16" in args or "--fp16" in args, "a bf16 or fp16 model"),
             ("--moe-shared-expert-overlap" not in args, "no --moe-shared-expert-overlap")]
    for holds, what in needs:
        if not holds:
            out.append((rule, "--overlap-moe-expert-parallel-comm needs %s" % what, fix))
    return out


@functools.lru_cache(maxsize=4096)
def _close_match(flag: str, known: tuple, cutoff: float) -> list:
    """The known flag ``flag`` most resembles (difflib), if any: memoised, since a layout sweep checks the same
    recipe's flags tens of thousands of times."""
    return difflib.get_close_matches(flag, known, n=1, cutoff=cutoff)


def check(args: Mapping, env: Mapping, world_size: int, gpu: Optional[str] = None, trusted=(), known=None) -> list:
    """Every rule the configuration breaks (an empty list when it is legal). ``trusted`` are flags
    known to work (the baseline's own), never taken for misspellings. ``known`` is every flag the program
    defines, where it ignores the others silently (slime: its own and the Megatron-LM ones it passes through):
    then a flag outside it is refused even when it resembles none."""
    out = []

    def bad(rule, message, fix):
        out.append(Violation(rule, message, fix))

    exhaustive = known is not None
    known = set(KNOWN_FLAGS) | set(trusted) | set(known or ())
    for flag in args:
        if flag in known or flag in NOT_MEGATRON_FLAGS or (exhaustive and flag.startswith(SGLANG_PREFIX)):
            continue
        close = _close_match(flag, tuple(sorted(known)), 0.88 if not exhaustive else 0.75)
        if close:
            bad("misspelled-flag", "%s looks like a misspelling of %s (slime ignores flags it does not know, "
                "silently; Megatron-LM refuses them)" % (flag, close[0]), "write %s" % close[0])
        elif exhaustive:
            bad("unknown-flag", "%s is neither slime's nor a Megatron-LM flag slime passes through: slime would "
                "ignore it, silently" % flag, "remove it, or write the flag you mean")

    for flag, hint in NOT_MEGATRON_FLAGS.items():
        if flag in args:
            bad("no-such-flag", "%s is not a Megatron-LM command-line flag" % flag, hint)
    if slime.is_slime("", args):  # slime's own start-up asserts
        for rule, message, fix in slime.violations(args):
            bad(rule, message, fix)
    sizes = {}
    for flag, default in (("--tensor-model-parallel-size", 1), ("--pipeline-model-parallel-size", 1),
                          ("--context-parallel-size", 1), ("--expert-model-parallel-size", 1),
                          ("--micro-batch-size", 1), ("--global-batch-size", None), ("--num-layers", None),
                          ("--num-experts", None), ("--num-layers-per-virtual-pipeline-stage", None)):
        value = _int(args, flag, default)
        if value is None and args.get(flag) not in (None, True):
            bad("integer", "%s=%r is not an integer" % (flag, args.get(flag)), "give a whole number")
            return out
        if value is not None and value <= 0:
            bad("positive", "%s=%d must be positive" % (flag, value), "give a size of at least 1")
            return out
        sizes[flag] = value
    tp, pp = sizes["--tensor-model-parallel-size"], sizes["--pipeline-model-parallel-size"]
    cp, ep = sizes["--context-parallel-size"], sizes["--expert-model-parallel-size"]
    etp = _int(args, "--expert-tensor-parallel-size", tp) or tp
    model_parallel = tp * pp * cp
    if world_size <= 0:
        bad("world-size", "the recipe asks for no GPU", "give its worker groups their nvidia.com/gpu limits")
        return out
    if world_size % model_parallel:
        bad("world-size", "world size %d is not divisible by TP x PP x CP = %d x %d x %d = %d"
            % (world_size, tp, pp, cp, model_parallel), "choose parallel sizes whose product divides the GPU count")
        return out
    dp = world_size // model_parallel
    if sizes["--num-experts"] is not None or ep > 1:
        expert_parallel = etp * ep * pp
        if world_size % expert_parallel:
            bad("expert-world-size", "world size %d is not divisible by ETP x EP x PP = %d x %d x %d"
                % (world_size, etp, ep, pp), "choose expert parallel sizes whose product divides the GPU count")
        experts = sizes["--num-experts"]
        if experts is not None and experts % ep:
            bad("experts-per-rank", "--num-experts=%d is not divisible by --expert-model-parallel-size=%d"
                % (experts, ep), "choose an EP size that divides the number of experts")
    mbs, gbs = sizes["--micro-batch-size"], sizes["--global-batch-size"]
    if gbs is not None and gbs % (mbs * dp):
        bad("global-batch", "global batch size (%d) is not divisible by micro batch size (%d) times data parallel "
            "size (%d)" % (gbs, mbs, dp), "keep the global batch (it is part of the workload) and change the "
            "micro batch size or the parallel layout")
    layers = sizes["--num-layers"]
    per_vstage = sizes["--num-layers-per-virtual-pipeline-stage"]
    out.extend(_pipeline_split(args, layers, pp, per_vstage))
    for rule, message, fix in _model_rules(args, tp, pp, cp, etp, layers):
        bad(rule, message, fix)
    for flag, allowed in CHOICES.items():
        value = args.get(flag)
        if value not in (None, True):
            wrong = [v for v in str(value).split() if v not in allowed]
            if wrong:
                bad("choice", "%s %s is not one of %s" % (flag, " ".join(wrong), ", ".join(allowed)),
                    "give one of Megatron-LM's values for %s" % flag)
    if "--fp8-param-gather" in args and not any(
            flag in args for flag in ("--use-distributed-optimizer", "--use-torch-fsdp2", "--use-megatron-fsdp")):
        bad("fp8-param-gather", "--fp8-param-gather needs the distributed optimizer (or FSDP)",
            "add --use-distributed-optimizer, or remove --fp8-param-gather")
    if "--fp8-param-gather" in args and args.get("--fp8-format") in (None, True):
        bad("fp8-param-gather", "--fp8-param-gather needs FP8 training (--fp8-format)",
            "add --fp8-format, or remove --fp8-param-gather")
    if "--moe-shared-expert-overlap" in args and "--moe-shared-expert-intermediate-size" in args \
            and str(args.get("--moe-token-dispatcher-type") or "allgather") != "alltoall":
        bad("moe-shared-expert-overlap", "--moe-shared-expert-overlap works with the alltoall dispatcher only",
            "set --moe-token-dispatcher-type alltoall, or remove --moe-shared-expert-overlap")
    if args.get("--attention-backend") == "local" and str(args.get("--spec") or "").split()[:1] != ["local"]:
        bad("attention-backend", "--attention-backend local needs --spec local (Megatron-LM's local layer spec)",
            "add --spec local, or choose another attention backend")
    position = str(args.get("--position-embedding-type") or "learned_absolute")
    if (_int(args, "--mtp-num-layers", 0) or 0) > 0 and position not in ("rope", "none"):
        bad("mtp", "Multi-Token Prediction (--mtp-num-layers) needs --position-embedding-type rope or none, not %s "
            "(Megatron-LM's validate_args; learned_absolute is its default)" % position,
            "set --position-embedding-type rope (or remove --mtp-num-layers)")
    if "--sequence-parallel" in args and tp == 1:
        bad("sequence-parallel", "--sequence-parallel needs tensor parallelism (TP > 1); Megatron turns it off at TP=1",
            "remove --sequence-parallel or raise --tensor-model-parallel-size")
    if "--overlap-param-gather" in args and not (
            "--use-distributed-optimizer" in args and "--overlap-grad-reduce" in args):
        bad("overlap-param-gather", "--overlap-param-gather needs --use-distributed-optimizer and "
            "--overlap-grad-reduce", "add both (one lever: the three flags go together)")
    if "--tp-comm-overlap" in args and "--sequence-parallel" not in args:
        bad("tp-comm-overlap", "--tp-comm-overlap needs --sequence-parallel", "add --sequence-parallel (TP > 1)")
    for rule, message, fix in _ep_overlap(args, ep):
        bad(rule, message, fix)
    blackwell = gpu is not None and gpu.lower() in BLACKWELL
    exempt = "--overlap-moe-expert-parallel-comm" in args or "--use-megatron-fsdp" in args or \
        "--use-custom-fsdp" in args
    if (tp > 1 or cp > 1) and not blackwell and not exempt and str(env.get("CUDA_DEVICE_MAX_CONNECTIONS")) != "1":
        bad("cuda-device-max-connections", "TP=%d, CP=%d needs CUDA_DEVICE_MAX_CONNECTIONS=1 before Blackwell "
            "(it is %s)" % (tp, cp, env.get("CUDA_DEVICE_MAX_CONNECTIONS", "unset")),
            "set CUDA_DEVICE_MAX_CONNECTIONS=1 in the recipe's environment")
    return out
