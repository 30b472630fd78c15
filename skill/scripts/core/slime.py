"""slime's fixed-shape RL workload (measurement.md §2.2 and §3.2): what a slime recipe's shape is, which of its two
modes it runs, and its run's metrics columns from the ``step``/``perf`` records its log prints.

A recipe is slime's when its program is slime's ``train.py`` (or ``train_async.py``) or it sets one of slime's own
arguments (``--rollout-batch-size``, ``--actor-num-gpus-per-node``, ...). Its mode is recorded with every result:

* ``train_only``: ``--load-debug-rollout-data`` (the campaign's frozen dump; no SGLang; ``--debug-train-only``
  too), so every candidate trains on identical inputs. The score is the actor's training throughput: per
  rollout, the tokens it trained (``perf/actor_train_tok_per_s`` x ``perf/actor_train_time``, which is the sum
  of the rollout's sequence lengths) over ``perf/actor_train_time``, over the actor's GPUs.
* ``whole_loop``: rollout with SGLang plus training, for levers that move generation. Per rollout, the tokens
  trained over ``perf/step_time`` (``train_wait_time + train_time``: the wait for the rollout included), over
  every GPU of the placement group (slime/ray/placement_group.py: colocated, the larger of the actor's and the
  rollout's; otherwise their sum). The rollout side's ``perf/tokens_per_gpu_per_sec`` is kept beside it.

A whole-loop run is gated on its *train-only replay* (``replay_changes``; correctness/PROTOCOL.md §4.4): its recipe
again, training on one frozen dump of rollouts with no SGLang, so that candidate and baseline train on identical
inputs.

The two ``perf N:`` records are told apart by their keys (``perf_side``); Ray's worker prefix is stripped by the
line parser. The scoring window is every rollout but the first (warm-up: CUDA graph capture, the first weight
update, allocator growth), so a run needs at least ``MIN_ROLLOUTS``.
"""

import collections

from .errors import InputError
from .measure import encode_float

PROGRAMS = ("train.py", "train_async.py")
# slime's own arguments (slime/utils/arguments.py) that mark a recipe as slime's even under another program name
OWN_FLAGS = ("--rollout-batch-size", "--actor-num-gpus-per-node", "--actor-num-nodes", "--rollout-num-gpus",
             "--rollout-num-gpus-per-engine", "--num-rollout", "--n-samples-per-prompt", "--load-debug-rollout-data")
# what a slime workload trains: a candidate may not change them (as the sequence length and batch for Megatron-LM)
SHAPE_ARGS = ("--rollout-batch-size", "--n-samples-per-prompt", "--num-steps-per-rollout", "--global-batch-size",
              "--num-rollout", "--start-rollout-id", "--rollout-max-response-len", "--rollout-max-prompt-len",
              "--rollout-max-context-len", "--load-debug-rollout-data", "--prompt-data", "--seed", "--seq-length")
TRAIN_ONLY_FLAGS = ("--load-debug-rollout-data", "--debug-train-only")
MIN_ROLLOUTS = 3  # the first is warm-up; a score needs at least two rollouts after it
TRAIN_KEYS = ("perf/actor_train_time", "perf/train_time", "perf/step_time", "perf/actor_train_tok_per_s",
              "perf/train_wait_time")
ROLLOUT_KEYS = ("perf/rollout_time", "perf/tokens_per_gpu_per_sec", "perf/effective_tokens_per_gpu_per_sec")

Shape = collections.namedtuple("Shape", "mode actor_gpus placement_gpus num_rollout colocate")


def is_slime(program: str, args) -> bool:
    """Whether a recipe with this program and these arguments runs slime."""
    name = (program or "").rsplit("/", 1)[-1]
    return name in PROGRAMS or any(flag in args for flag in OWN_FLAGS)


def _int(args, flag, default):
    value = args.get(flag)
    if value is None:
        return default
    if value is True or not str(value).isdigit():
        raise InputError("%s=%r: slime needs a whole number here" % (flag, value))
    return int(value)


def shape_of(args) -> Shape:
    """The slime recipe's mode and GPUs, from its arguments (slime's defaults where it sets none)."""
    actor = _int(args, "--actor-num-nodes", 1) * _int(args, "--actor-num-gpus-per-node", 8)
    colocate = "--colocate" in args
    rollout = _int(args, "--rollout-num-gpus", actor if colocate else 0)
    train_only = any(flag in args for flag in TRAIN_ONLY_FLAGS)
    if train_only:
        placement = actor
    elif colocate:
        placement = max(actor, rollout)
    else:
        placement = actor + rollout
    return Shape("train_only" if train_only else "whole_loop", actor, placement, _int(args, "--num-rollout", None),
                 colocate)


def violations(args) -> list:
    """The rules slime's own argument checks assert before it trains (slime/utils/arguments.py), and the benchmark's
    fixed length, as ``(rule, message, fix)``: a run that breaks one tests nothing."""
    out = []
    rollouts = args.get("--num-rollout")
    if not (isinstance(rollouts, str) and rollouts.isdigit() and int(rollouts) >= MIN_ROLLOUTS):
        out.append(("benchmark-rollouts", "--num-rollout is %r: a slime benchmark run is a fixed number of rollouts, "
                    "at least %d (the first is warm-up and not scored)" % (rollouts, MIN_ROLLOUTS),
                    "set --num-rollout N with N >= %d (and no --num-epoch)" % MIN_ROLLOUTS))
    if "--use-dynamic-batch-size" in args and args.get("--max-tokens-per-gpu") in (None, True):
        out.append(("dynamic-batch-size", "--use-dynamic-batch-size needs --max-tokens-per-gpu (slime asserts "
                    "max_tokens_per_gpu must be set when use_dynamic_batch_size is set)",
                    "give --max-tokens-per-gpu N (e.g. 9216)"))
    if "--balance-by-flops" in args and "--use-dynamic-batch-size" not in args:
        out.append(("balance-by-flops", "--balance-by-flops requires --use-dynamic-batch-size (slime asserts it)",
                    "set --use-dynamic-batch-size with --max-tokens-per-gpu, or drop --balance-by-flops"))
    return out


def compare(baseline_args, candidate_args) -> list:
    """Workload differences between a slime candidate and its baseline, one line each (empty: the same)."""
    problems = []
    for flag in SHAPE_ARGS:
        if baseline_args.get(flag) != candidate_args.get(flag):
            problems.append("%s is %r in the baseline and %r in the candidate: the RL workload is fixed, it is not "
                            "a lever" % (flag, baseline_args.get(flag), candidate_args.get(flag)))
    if shape_of(baseline_args).mode != shape_of(candidate_args).mode:
        problems.append("the baseline runs %s and the candidate %s: a candidate keeps its baseline's mode "
                        "(--load-debug-rollout-data)" % (shape_of(baseline_args).mode, shape_of(candidate_args).mode))
    return problems


def perf_side(data: dict):
    """``"train"`` for the train side's ``perf N:`` record, ``"rollout"`` for the rollout side's, else None."""
    if any(key in data for key in TRAIN_KEYS):
        return "train"
    if any(key in data for key in ROLLOUT_KEYS):
        return "rollout"
    return None


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def metrics_columns(parsed: dict, shape: Shape) -> tuple:
    """The ledger's ``result.metrics`` of a slime run, one column entry per rollout (``iter`` is the rollout id),
    and warnings. ``step_ms`` is the mode's time per rollout; ``tokens`` what the actor trained in it; ``loss`` the
    rollout's last ``train/loss`` (else ``train/pg_loss``); ``window`` every rollout but the first. slime numbers
    its ``step`` records by accumulated optimizer step, so the steps are shared out to the rollouts in order."""
    train, rollout, step_losses = {}, {}, []
    for record in parsed.get("perf", ()):
        data, index = record.get("data") or {}, record.get("index")
        if record.get("line_type") == "perf":
            side = perf_side(data)
            if side == "train":
                train[index] = data
            elif side == "rollout":
                rollout[index] = data
        elif record.get("line_type") == "step":
            loss = data.get("train/loss", data.get("train/pg_loss"))
            step_losses.append((index, loss))
    ids = sorted(train)
    time_key = "perf/actor_train_time" if shape.mode == "train_only" else "perf/step_time"
    step_ms, tokens = [], []
    for rid in ids:
        data = train[rid]
        seconds = _number(data.get(time_key))
        rate, train_time = _number(data.get("perf/actor_train_tok_per_s")), _number(data.get("perf/actor_train_time"))
        step_ms.append(None if seconds is None else seconds * 1000.0)
        tokens.append(None if rate is None or train_time is None else int(round(rate * train_time)))
    ordered = [loss for _, loss in sorted(step_losses, key=lambda item: item[0])]
    per = len(ordered) // len(ids) if ids else 0
    losses = [_loss(ordered[(n + 1) * per - 1]) if per else None for n in range(len(ids))]
    metrics = {"slime_mode": shape.mode, "gpus": shape.actor_gpus if shape.mode == "train_only"
               else shape.placement_gpus, "iter": ids, "step_ms": step_ms, "tokens": tokens, "loss": losses,
               "skipped": [0] * len(ids), "nan": [0] * len(ids), "window": [ids[1] if len(ids) > 1 else 1,
                                                                      ids[-1] if ids else 1]}
    if shape.mode == "whole_loop":
        metrics["rollout_tokens_per_gpu_per_s"] = [_number((rollout.get(rid) or {}).get("perf/tokens_per_gpu_per_sec"))
                                                   for rid in ids]
    warnings = []
    if shape.num_rollout is not None and len(ids) < shape.num_rollout:
        warnings.append("the log has the train side's perf record of %d of its %d rollouts"
                        % (len(ids), shape.num_rollout))
    if len(ids) < MIN_ROLLOUTS:
        warnings.append("%d rollout(s) logged: a score needs at least %d (the first is warm-up)"
                        % (len(ids), MIN_ROLLOUTS))
    return metrics, warnings


def _loss(value):
    """A loss as the ledger writes it: a number, or ``"nan"``/``"inf"`` for a non-finite one."""
    if isinstance(value, str):
        return value.lower() if value.lower() in ("nan", "inf", "-inf") else None
    value = _number(value)
    return None if value is None else encode_float(value)


SAVE_FLAG = "--save-debug-rollout-data"
REPLAY_PURPOSE = "replay"


def replay_changes(args, dump_template: str, rollouts, rows_sha256: str) -> list:
    """The recipe changes that turn a whole-loop run of ``args`` into its train-only replay on the frozen dump
    ``dump_template`` (``.../{rollout_id}.pt``, as ``attune rows to-slime`` writes it) holding ``rollouts``: load the
    dump, train only, save nothing, and carry the dump's rows_sha256 (the gate's data check compares it). Refused
    (``InputError``) for a run that is not a whole-loop one, or when the dump lacks a rollout the run trains."""
    shape = shape_of(args)
    if shape.mode != "whole_loop":
        raise InputError("the run trains on frozen rollouts already (%s): it is its own replay. Fix: replay a "
                         "whole-loop run" % ", ".join(flag for flag in TRAIN_ONLY_FLAGS if flag in args))
    start = _int(args, "--start-rollout-id", 0)
    wanted = set(range(start, start + (shape.num_rollout or 0)))
    missing = sorted(wanted - set(rollouts))
    if missing:
        raise InputError("the dump holds rollouts %s; the run trains rollouts %d-%d (--start-rollout-id, "
                         "--num-rollout), so %s would be missing. Fix: freeze the rollouts of a run of the same "
                         "length (its %s)" % (_ids(sorted(rollouts)), start, start + len(wanted) - 1, _ids(missing),
                                              SAVE_FLAG))
    changes = [{"op": "set", "arg": "--load-debug-rollout-data", "value": dump_template},
               {"op": "set", "arg": "--debug-train-only", "value": True},
               {"op": "set", "env": "ATTUNE_ROWS_SHA256", "value": rows_sha256}]
    if SAVE_FLAG in args:
        changes.insert(0, {"op": "unset", "arg": SAVE_FLAG})
    return changes


def _ids(ids) -> str:
    return ", ".join(str(i) for i in ids[:8]) + (" and %d more" % (len(ids) - 8) if len(ids) > 8 else "")
