"""Megatron-LM command-line arguments to one validated, frozen ``Job``: model shape, parallel
layout, batch, recompute, overlap and precision.

The input is ``attune.core.recipe.Recipe(text).args()``: ``{"--flag": "value"}``, ``True`` for a flag
given without a value. Defaults are Megatron-LM's own (``megatron/training/arguments.py`` and
``TransformerConfig``): ``--ffn-hidden-size`` 4h, ``--kv-channels`` h/heads, query groups = heads
without ``--group-query-attention``, dropouts 0.1, vocabulary padded to a multiple of
``--make-vocab-size-divisible-by`` (128) x TP. Where Megatron has no default (``--vocab-size`` when
only a tokenizer is named) a stated default is used and a warning says so.

Illegal layouts raise ``ConfigError`` naming the rule. The rules come from ``attune.core.legality``
(world size, global batch, experts per rank, the pipeline split and its layout, virtual and interleaved
pipelines, heads and query groups against TP, the sequence against CP, recompute, router, sequence
parallelism, overlap flags: Megatron-LM's ``validate_args`` and ``TransformerConfig.__post_init__``, checked
against Megatron-LM's own verdicts by ``tests/test_megatron_legality.py``); the few left here are the
projection's own (a model shape it needs, the head dimension, MoE patterns).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from typing import Mapping, Optional

from attune.core import legality
from attune.core.errors import InputError

DEFAULT_VOCAB = 50257  # GPT-2 BPE, the vocabulary of Megatron-LM's default GPT2BPETokenizer
# Legality rules about spelling, not the layout: warnings here. The environment rule
# (CUDA_DEVICE_MAX_CONNECTIONS) is dropped: ``project`` does not see the environment.
_SOFT_RULES = {"misspelled-flag", "no-such-flag"}
_ENV_RULES = {"cuda-device-max-connections"}
# Flags this module reads beyond legality.KNOWN_FLAGS (never reported as misspellings).
MODEL_FLAGS = (
    "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups", "--group-query-attention",
    "--kv-channels", "--vocab-size", "--make-vocab-size-divisible-by", "--swiglu", "--squared-relu",
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
    "--v-head-dim", "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size", "--moe-layer-freq", "--mtp-num-layers", "--window-size",
    "--window-attn-skip-freq", "--hidden-dropout", "--attention-dropout", "--untie-embeddings-and-output-weights",
    "--num-virtual-stages-per-pipeline-rank", "--pipeline-model-parallel-layout",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--no-overlap-p2p-communication",
    "--fp4-format", "--use-megatron-fsdp", "--use-torch-fsdp2", "--normalization", "--position-embedding-type",
    "--tokenizer-type", "--tokenizer-model", "--max-position-embeddings", "--moe-flex-dispatcher-backend",
    "--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype",
)
# Every argument ``parse`` reads for the step time (a lever none of whose flags is here is not modelled: the
# projection cannot tell its alternatives apart). The projection reads no environment variable.
READS = frozenset((
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "--attention-backend", "--attention-dropout", "--bf16", "--context-parallel-size",
    "--cross-entropy-fusion-impl", "--cross-entropy-loss-fusion",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--delay-wgrad-compute",
    "--exp-avg-dtype", "--exp-avg-sq-dtype", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--ffn-hidden-size", "--fine-grained-activation-offloading", "--fp16", "--fp4-format", "--fp8", "--fp8-format",
    "--fp8-param-gather", "--global-batch-size", "--grad-reduce-in-bf16", "--group-query-attention",
    "--hidden-dropout", "--hidden-size", "--kv-channels", "--kv-lora-rank", "--main-params-dtype",
    "--make-vocab-size-divisible-by", "--max-position-embeddings", "--micro-batch-size", "--moe-ffn-hidden-size",
    "--moe-expert-capacity-factor", "--moe-flex-dispatcher-backend", "--moe-layer-freq",
    "--moe-pad-expert-input-to-capacity", "--moe-router-topk",
    "--moe-shared-expert-intermediate-size", "--moe-token-dispatcher-type", "--mtp-num-layers",
    "--multi-latent-attention", "--normalization", "--num-attention-heads", "--num-experts", "--num-layers",
    "--num-layers-per-virtual-pipeline-stage", "--num-query-groups", "--num-virtual-stages-per-pipeline-rank",
    "--no-overlap-p2p-communication", "--optimizer-cpu-offload", "--overlap-grad-reduce",
    "--overlap-moe-expert-parallel-comm", "--overlap-param-gather", "--pipeline-model-parallel-layout",
    "--pipeline-model-parallel-size",
    "--position-embedding-type", "--q-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim",
    "--recompute-granularity", "--recompute-method", "--recompute-modules", "--recompute-num-layers",
    "--seq-length", "--sequence-parallel", "--softmax-type", "--squared-relu", "--swiglu", "--tensor-model-parallel-size",
    "--tokenizer-model", "--tokenizer-type", "--tp-comm-overlap", "--transformer-impl",
    "--untie-embeddings-and-output-weights",
    "--use-custom-fsdp", "--use-distributed-optimizer", "--use-megatron-fsdp", "--use-precision-aware-optimizer",
    "--use-torch-fsdp2", "--v-head-dim", "--virtual-pipeline-model-parallel-size", "--vocab-size",
    "--window-attn-skip-freq", "--window-size",
))
READS_ENV = frozenset()

SELECTIVE_MODULES = legality.SELECTIVE_MODULES


class ConfigError(InputError):
    """An illegal Megatron configuration; the message names the rule that it breaks."""


@dataclasses.dataclass(frozen=True)
class Job:
    # shape
    layers: int
    hidden: int
    ffn: int
    heads: int
    groups: int
    kv_channels: int
    vocab: int  # padded
    gated: bool  # SwiGLU-style gated MLP (two fc1 halves)
    mla: Optional[dict]  # q_lora_rank, kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim
    experts: int  # 0 = dense
    topk: int
    moe_ffn: int
    shared_ffn: int
    moe_pattern: tuple  # 1 per MoE layer, 0 per dense layer
    mtp_layers: int
    window: Optional[int]  # sliding-window size (left) of window-attention layers
    sink: bool  # --softmax-type off-by-one or learnable: attention with a sink term in the softmax (GPT-OSS)
    window_pattern: tuple  # 1 per window-attention layer
    hidden_dropout: float
    attention_dropout: float
    untied: bool
    # layout
    tp: int
    pp: int
    vp: int
    cp: int
    ep: int
    etp: int
    dp: int
    sp: bool
    stages: tuple  # per physical PP rank: (decoder layer indices, has embedding, has loss, mtp layers)
    # batch
    mbs: int
    gbs: int
    seq: int
    microbatches: int
    # recompute
    recompute: str  # "", "selective", "full"
    recompute_method: str
    recompute_layers: int
    recompute_modules: tuple
    # optimizer, overlap, precision
    dist_opt: bool
    overlap_grad: bool
    overlap_param: bool
    tp_overlap: bool
    ep_overlap: bool
    p2p_overlap: bool
    dispatcher: str  # allgather | alltoall | flex (DeepEP/HybridEP)
    # --moe-expert-capacity-factor (0.0: none, dropless) and --moe-pad-expert-input-to-capacity: each expert takes at
    # most capacity x its balanced share of tokens; padded, it takes exactly that many (static shapes)
    capacity: float
    pad_to_capacity: bool
    precision: str  # bf16 | fp8 | fp4
    grad_bytes: int
    param_bytes: int
    optimizer_bytes: int  # per parameter: master weights + two Adam moments
    flash: bool
    # the loss's implementation: "unfused" (Megatron's vocab_parallel_cross_entropy, the default), "native"
    # (--cross-entropy-loss-fusion: its jit-fused version) or "te" (with --cross-entropy-fusion-impl te: Transformer
    # Engine's parallel cross-entropy, which writes the logits' gradient into the bf16 logits in the forward pass and
    # keeps no fp32 copy). timing.LOSS_BYTES has the traffic of each, memory.logits_bytes what each keeps
    cross_entropy: str
    gpus: int
    warnings: tuple


def _int(args: Mapping, flag: str, default: Optional[int]) -> Optional[int]:
    value = args.get(flag)
    if value is None or value is True:
        return default
    try:
        return int(str(value).strip())
    except ValueError:
        raise ConfigError("integer: %s=%r is not an integer. Fix: give a whole number" % (flag, value))


def _float(args: Mapping, flag: str, default: float) -> float:
    value = args.get(flag)
    if value is None or value is True:
        return default
    try:
        return float(str(value).strip())
    except ValueError:
        raise ConfigError("number: %s=%r is not a number" % (flag, value))


def parse_pattern(text, layers: int, flag: str, int_rule) -> tuple:
    """A per-layer 0/1 pattern: an integer N (``int_rule(i, N)`` for 0-based layer i) or a Python
    list expression such as ``[0]*3+[1]*58`` (only lists of 0/1, ``+`` and ``*`` are evaluated)."""
    text = str(text).strip()
    if re.fullmatch(r"\d+", text):
        n = int(text)
        if n <= 0:
            raise ConfigError("%s: %s must be positive" % (flag, text))
        return tuple(int_rule(i, n) for i in range(layers))

    pattern = _list_pattern(text, flag)
    if len(pattern) != layers:
        raise ConfigError("%s: the pattern has %d entries; --num-layers is %d" % (flag, len(pattern), layers))
    return pattern


@functools.lru_cache(maxsize=256)
def _list_pattern(text: str, flag: str) -> tuple:
    """A list expression of 0/1 evaluated (a sweep parses the same one for every layout)."""
    def value(node):
        if isinstance(node, ast.Expression):
            return value(node.body)
        if isinstance(node, ast.List):
            return [value(item) for item in node.elts]
        if isinstance(node, ast.Constant) and node.value in (0, 1) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(ast.dump(node))

    try:
        pattern = value(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, TypeError):
        raise ConfigError("%s: %r is neither an integer nor a list expression of 0/1" % (flag, text))
    if not isinstance(pattern, list) or any(v not in (0, 1) for v in pattern):
        raise ConfigError("%s: %r does not evaluate to a list of 0/1" % (flag, text))
    return tuple(pattern)


def parse_layout(text: str, pp: int, layers: int, mtp: int) -> tuple:
    """``--pipeline-model-parallel-layout`` (Megatron's grammar: ``E`` embedding, ``t`` decoder layer,
    ``m`` MTP layer, ``L`` loss, ``|`` between stages, ``(..)*n`` and ``x*n`` repeats) as the stages in
    order, each ``(number of decoder layers, embedding, loss, mtp layers)``, and the VP size."""
    flat = text.replace(",", "").replace('"', "").replace("'", "").replace(" ", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        flat = re.sub(pattern, lambda match: match.group(1) * int(match.group(2)), flat)
    bad = set(flat) - set("EtmL|")
    if bad:
        raise ConfigError("pipeline-layout: unknown characters %s in --pipeline-model-parallel-layout "
                          "(E, t, m, L and | are allowed)" % "".join(sorted(bad)))
    stages = flat.split("|")
    if len(stages) % pp:
        raise ConfigError("pipeline-layout: the layout has %d stages, not a multiple of "
                          "--pipeline-model-parallel-size %d" % (len(stages), pp))
    if flat.count("t") != layers:
        raise ConfigError("pipeline-layout: the layout places %d decoder layers; --num-layers is %d"
                          % (flat.count("t"), layers))
    if flat.count("m") != mtp:
        raise ConfigError("pipeline-layout: the layout places %d MTP layers; --mtp-num-layers is %d"
                          % (flat.count("m"), mtp))
    return [(s.count("t"), "E" in s, "L" in s, s.count("m")) for s in stages], len(stages) // pp


def _ranks(stages: list, pp: int) -> tuple:
    """Stages in order (stage k lives on rank k % pp) to per-rank (layer indices, E, L, mtp)."""
    ranks = [[[], False, False, 0] for _ in range(pp)]
    first = 0
    for k, (count, embedding, loss, mtp) in enumerate(stages):
        rank = ranks[k % pp]
        rank[0].extend(range(first, first + count))
        first += count
        rank[1], rank[2], rank[3] = rank[1] or embedding, rank[2] or loss, rank[3] + mtp
    return tuple((tuple(r[0]), r[1], r[2], r[3]) for r in ranks)


def even_layout(layers: int, pp: int, vp: int, mtp: int = 0, loss_cost: float = 1.0, mtp_cost: float = 2.0) -> str:
    """A layout string for ``layers`` over ``pp * vp`` stages, balanced by cost the way hand-written
    layouts are: the loss (output layer) costs ``loss_cost`` decoder layers and each MTP depth
    ``mtp_cost``, so the last stage takes fewer decoder layers; the rest are spread evenly, earlier
    stages taking the remainder. Embedding first, MTP and loss last."""
    stages = pp * vp
    target = (layers + loss_cost + mtp * mtp_cost) / stages
    last = min(layers, max(0, int(round(target - loss_cost - mtp * mtp_cost)))) if stages > 1 else layers
    rest = layers - last
    others = stages - 1
    counts = [rest // others + (1 if i < rest % others else 0) for i in range(others)] + [last] if others else [last]
    parts = ["t" * n for n in counts]
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + "m" * mtp + "L"
    return "|".join(parts)


_DTYPE_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "fp8": 1}


def _optimizer_bytes(args: Mapping) -> int:
    """Adam state per parameter: fp32 master weights and moments (12 B), or with
    ``--use-precision-aware-optimizer`` the dtypes ``--main-params-dtype``, ``--exp-avg-dtype`` and
    ``--exp-avg-sq-dtype`` name (Megatron's defaults fp32)."""
    if "--use-precision-aware-optimizer" not in args:
        return 12
    total = 0
    for flag in ("--main-params-dtype", "--exp-avg-dtype", "--exp-avg-sq-dtype"):
        name = str(args.get(flag) or "fp32").lower()
        if name not in _DTYPE_BYTES:
            raise ConfigError("optimizer-dtype: %s %s is not one of %s" % (flag, name, ", ".join(_DTYPE_BYTES)))
        total += _DTYPE_BYTES[name]
    return total


def _cross_entropy(args: Mapping) -> str:
    """The loss's implementation (Megatron-LM ``LanguageModule.compute_language_model_loss``): ``unfused``
    without ``--cross-entropy-loss-fusion``, else ``native`` or ``te`` as ``--cross-entropy-fusion-impl`` says
    (Megatron's choices; default ``native``)."""
    if "--cross-entropy-loss-fusion" not in args:
        return "unfused"
    impl = str(args.get("--cross-entropy-fusion-impl") or "native")
    if impl not in ("native", "te"):
        raise ConfigError("cross-entropy-fusion-impl: %r is not native or te" % impl)
    return impl


def _precision(args: Mapping, warnings: list) -> str:
    if args.get("--fp4-format") not in (None,):
        return "fp4"
    if args.get("--fp8-format") not in (None,) or args.get("--fp8") not in (None,):
        return "fp8"
    if "--bf16" in args or "--fp16" in args:
        return "bf16"
    warnings.append("neither --bf16 nor --fp16 is given, so Megatron would train in fp32; this model only "
                    "covers mixed precision and projects the run as --bf16")
    return "bf16"


def parse(args: Mapping, gpus: int, gpu_name: str, gpus_per_node: int) -> Job:
    """Validate ``args`` for ``gpus`` GPUs and return the ``Job``; ``ConfigError`` names a broken rule."""
    warnings = []
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= 0:
        raise ConfigError("gpus: the GPU count must be a positive integer, not %r" % (gpus,))
    args = dict(args)
    if "--virtual-pipeline-model-parallel-size" in args:  # Bridge/NeMo spelling: accepted, with a note
        warnings.append("--virtual-pipeline-model-parallel-size is a Megatron-Bridge/NeMo field, not a Megatron-LM "
                        "flag; read as --num-virtual-stages-per-pipeline-rank")
        args.setdefault("--num-virtual-stages-per-pipeline-rank", args.pop("--virtual-pipeline-model-parallel-size"))

    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads"):
        if _int(args, flag, None) is None:
            raise ConfigError("model-shape: %s is required" % flag)
    layers, hidden, heads = _int(args, "--num-layers", 0), _int(args, "--hidden-size", 0), \
        _int(args, "--num-attention-heads", 0)
    seq = _int(args, "--seq-length", None)
    if seq is None:
        raise ConfigError("model-shape: --seq-length is required")
    tp, pp = _int(args, "--tensor-model-parallel-size", 1), _int(args, "--pipeline-model-parallel-size", 1)
    cp, ep = _int(args, "--context-parallel-size", 1), _int(args, "--expert-model-parallel-size", 1)
    etp = _int(args, "--expert-tensor-parallel-size", tp)
    mbs = _int(args, "--micro-batch-size", 1)
    for name, value in (("--num-layers", layers), ("--hidden-size", hidden), ("--num-attention-heads", heads),
                        ("--seq-length", seq), ("--expert-tensor-parallel-size", etp)):
        if value <= 0:
            raise ConfigError("positive: %s=%d must be positive" % (name, value))

    # The layout rules legality.py already has (the layer split included: it reads a custom layout and
    # uneven first/last stages the way Megatron-LM does).
    layout_text = args.get("--pipeline-model-parallel-layout")
    hard, soft = [], []
    for violation in legality.check(args, {}, gpus, gpu_name, trusted=MODEL_FLAGS):
        if violation.rule not in _ENV_RULES:
            (soft if violation.rule in _SOFT_RULES else hard).append(violation)
    warnings.extend(str(v) for v in soft)
    if hard:
        raise ConfigError("\n".join(str(v) for v in hard))

    dp = gpus // (tp * pp * cp)
    gbs = _int(args, "--global-batch-size", mbs * dp)
    groups = _int(args, "--num-query-groups", heads) if "--group-query-attention" in args or \
        "--num-query-groups" in args else heads
    mla = None
    if "--multi-latent-attention" in args:
        mla = {"q_lora_rank": _int(args, "--q-lora-rank", None), "kv_lora_rank": _int(args, "--kv-lora-rank", 32),
               "qk_head_dim": _int(args, "--qk-head-dim", 128),
               "qk_pos_emb_head_dim": _int(args, "--qk-pos-emb-head-dim", 64),
               "v_head_dim": _int(args, "--v-head-dim", 128)}
        groups = heads
    kv_channels = _int(args, "--kv-channels", None)
    if kv_channels is None:
        if hidden % heads:
            raise ConfigError("kv-channels: --hidden-size %d is not divisible by --num-attention-heads %d "
                              "(give --kv-channels)" % (hidden, heads))
        kv_channels = hidden // heads

    experts = _int(args, "--num-experts", 0) or 0
    if ep > 1 and not experts:
        raise ConfigError("expert-parallel: --expert-model-parallel-size %d needs --num-experts" % ep)
    topk = _int(args, "--moe-router-topk", 2) if experts else 0
    ffn = _int(args, "--ffn-hidden-size", None)
    gated = "--swiglu" in args
    if ffn is None:
        ffn = int(4 * hidden * 2 / 3 / 64) * 64 if gated else 4 * hidden  # Megatron's default
    moe_ffn = _int(args, "--moe-ffn-hidden-size", ffn) if experts else 0
    shared_ffn = _int(args, "--moe-shared-expert-intermediate-size", 0) if experts else 0
    moe_pattern = parse_pattern(args.get("--moe-layer-freq", "1"), layers, "--moe-layer-freq",
                                lambda i, n: 1 if i % n == 0 else 0) if experts else (0,) * layers
    mtp = _int(args, "--mtp-num-layers", 0) or 0
    window, window_pattern = None, (0,) * layers
    if args.get("--window-size") not in (None, True):
        sizes = [int(x) for x in re.findall(r"-?\d+", str(args["--window-size"]))]
        if not sizes:
            raise ConfigError("window-size: --window-size %r has no integer" % args["--window-size"])
        window = sizes[0] if sizes[0] > 0 else None
        if window:
            skip = args.get("--window-attn-skip-freq")
            window_pattern = (1,) * layers if skip in (None, True) else parse_pattern(
                skip, layers, "--window-attn-skip-freq", lambda i, n: 1 if (i + 1) % n else 0)

    # pipeline layout
    vp = _int(args, "--num-virtual-stages-per-pipeline-rank", None)
    per_vstage = _int(args, "--num-layers-per-virtual-pipeline-stage", None)
    if sum(x is not None for x in (vp, per_vstage, layout_text)) > 1:
        raise ConfigError("virtual-pipeline: give only one of --num-layers-per-virtual-pipeline-stage, "
                          "--num-virtual-stages-per-pipeline-rank and --pipeline-model-parallel-layout")
    # the embedding and the loss counted as one layer each in the split (Megatron-LM core_v0.16.1
    # transformer_block.get_num_layers_to_build): the stage holding one builds a decoder layer fewer
    embedding = args.get("--account-for-embedding-in-pipeline-split") is True
    loss = args.get("--account-for-loss-in-pipeline-split") is True
    counted = layers + embedding + loss
    if layout_text:
        if embedding or loss:
            raise ConfigError("pipeline-layout: --account-for-embedding/loss-in-pipeline-split cannot be given with "
                              "--pipeline-model-parallel-layout (place E and L in the layout)")
        stages, vp = parse_layout(str(layout_text), pp, layers, mtp)
    else:
        if per_vstage is not None:
            vp = (counted // pp) // per_vstage
        vp = vp or 1
        first = _int(args, "--decoder-first-pipeline-num-layers", None)
        last = _int(args, "--decoder-last-pipeline-num-layers", None)
        counts = [counted // pp] * pp
        if (first is not None or last is not None) and (embedding or loss):
            raise ConfigError("uneven-pipeline: --decoder-first/last-pipeline-num-layers cannot be given with "
                              "--account-for-embedding/loss-in-pipeline-split")
        if first is not None or last is not None:
            if pp == 1:
                raise ConfigError("uneven-pipeline: --decoder-first/last-pipeline-num-layers needs PP > 1")
            rest = layers - (first or 0) - (last or 0)
            middle = pp - (first is not None) - (last is not None)
            if rest < 0 or (middle and rest % middle) or (not middle and rest):
                raise ConfigError("uneven-pipeline: %d layers left for %d middle stages do not divide evenly"
                                  % (rest, middle))
            counts = [rest // middle if middle else 0] * pp
            if first is not None:
                counts[0] = first
            if last is not None:
                counts[-1] = last
        elif counted % pp:
            raise ConfigError("layers-per-stage: --num-layers=%d%s is not divisible by --pipeline-model-parallel-size=%d"
                              % (layers, " (+%d counted for the embedding and loss)" % (counted - layers)
                                 if counted != layers else "", pp))
        if vp > 1 and any(c % vp for c in counts):
            raise ConfigError("virtual-pipeline: layers per pipeline stage %s are not divisible by the %d virtual "
                              "stages per rank" % (counts, vp))
        last_stage = pp * vp - 1
        stages = [(counts[k % pp] // vp - (embedding and k == 0) - (loss and k == last_stage), k == 0,
                   k == last_stage, mtp if k == last_stage else 0) for k in range(pp * vp)]
        if any(stage[0] < 0 for stage in stages):
            raise ConfigError("layers-per-stage: not enough layers in the first or last virtual stage for the "
                              "embedding and loss counted in the split")
    stages = _ranks(stages, pp)
    # the pipeline's sends and receives overlap with the interleaved schedule unless --no-overlap-p2p-communication
    # (legality.py checks the PP sizes the schedule needs)
    p2p_overlap = vp > 1 and "--no-overlap-p2p-communication" not in args

    # granularity, method, layer count and modules checked by legality.py, as Megatron-LM does
    recompute = str(args.get("--recompute-granularity") or "")
    method = str(args.get("--recompute-method") or "")
    modules = ()
    if recompute == "selective":
        raw = args.get("--recompute-modules")
        modules = tuple(str(raw).replace(",", " ").split()) if raw not in (None, True) else ("core_attn",)
    recompute_layers = _int(args, "--recompute-num-layers", 1) if recompute == "full" else 0

    ep_overlap = "--overlap-moe-expert-parallel-comm" in args
    if ep_overlap and (ep <= 1 or recompute == "full" or "moe" in modules):
        raise ConfigError("ep-overlap: --overlap-moe-expert-parallel-comm needs EP > 1, no full recompute and no "
                          "'moe' in --recompute-modules")
    if "--delay-wgrad-compute" in args and not ep_overlap:
        raise ConfigError("delay-wgrad: --delay-wgrad-compute needs --overlap-moe-expert-parallel-comm")

    precision = _precision(args, warnings)
    dispatcher = str(args.get("--moe-token-dispatcher-type") or "allgather")
    if dispatcher not in ("allgather", "alltoall", "flex"):
        raise ConfigError("moe-token-dispatcher-type: %r is not allgather, alltoall or flex" % dispatcher)
    capacity = _float(args, "--moe-expert-capacity-factor", 0.0) if experts else 0.0
    capacity = max(capacity, 0.0)  # a negative factor is no capacity (Megatron-LM's TransformerConfig)
    if args.get("--vocab-size") not in (None, True):
        vocab = _int(args, "--vocab-size", DEFAULT_VOCAB)
    else:
        vocab = DEFAULT_VOCAB
        warnings.append("no --vocab-size: the tokenizer's vocabulary is not read; projected with %d (GPT-2 BPE, "
                        "Megatron's default tokenizer); give --vocab-size for the real one" % DEFAULT_VOCAB)
    multiple = _int(args, "--make-vocab-size-divisible-by", 128) * tp
    vocab = -(-vocab // multiple) * multiple
    for flag in ("--use-megatron-fsdp", "--use-torch-fsdp2", "--use-custom-fsdp"):
        if flag in args:
            warnings.append("%s is not modelled: projected as DDP with the distributed optimizer" % flag)
    if "--fine-grained-activation-offloading" in args or "--optimizer-cpu-offload" in args:
        warnings.append("CPU offloading is not modelled: memory and time ignore it")
    attention_backend = str(args.get("--attention-backend") or "auto")
    if str(args.get("--transformer-impl") or "transformer_engine") == "local":
        attention_backend = "local"  # Megatron's own layers: DotProductAttention, a materialised softmax
    sp = "--sequence-parallel" in args and tp > 1
    return Job(
        layers=layers, hidden=hidden, ffn=ffn, heads=heads, groups=groups, kv_channels=kv_channels, vocab=vocab,
        gated=gated, mla=mla, experts=experts, topk=topk, moe_ffn=moe_ffn, shared_ffn=shared_ffn,
        moe_pattern=moe_pattern, mtp_layers=mtp, window=window, window_pattern=window_pattern,
        sink=str(args.get("--softmax-type") or "vanilla") != "vanilla",
        hidden_dropout=_float(args, "--hidden-dropout", 0.1),
        attention_dropout=_float(args, "--attention-dropout", 0.1),
        untied="--untie-embeddings-and-output-weights" in args,
        tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, dp=dp, sp=sp, stages=stages,
        mbs=mbs, gbs=gbs, seq=seq, microbatches=gbs // (mbs * dp),
        recompute=recompute, recompute_method=method, recompute_layers=recompute_layers, recompute_modules=modules,
        dist_opt="--use-distributed-optimizer" in args, overlap_grad="--overlap-grad-reduce" in args,
        overlap_param="--overlap-param-gather" in args, tp_overlap="--tp-comm-overlap" in args and sp,
        ep_overlap=ep_overlap, p2p_overlap=p2p_overlap, precision=precision,
        dispatcher=dispatcher, capacity=capacity,
        pad_to_capacity=bool(capacity) and "--moe-pad-expert-input-to-capacity" in args,
        grad_bytes=2 if "--grad-reduce-in-bf16" in args else 4,
        param_bytes=1 if ("--fp8-param-gather" in args and precision == "fp8") else 2,
        optimizer_bytes=_optimizer_bytes(args),
        flash=attention_backend not in ("unfused", "local"),
        cross_entropy=_cross_entropy(args),
        gpus=gpus, warnings=tuple(warnings))
