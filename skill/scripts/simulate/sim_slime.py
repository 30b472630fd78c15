"""A simulated slime GRPO run: slime's real log format, no GPU, no SGLang (README.md in this folder).

Usage::

    ATTUNE_SIM_HARDWARE=H100 python3 skill/scripts/simulate/sim_slime.py <train.py args>

It takes slime's ``train.py`` arguments (slime's own and the Megatron-LM ones it passes through) and prints, for
each of ``--num-rollout`` rollouts, what slime prints (``measurement.md`` §3.2): on the rollout side (the whole
loop only) ``perf N: {...}`` with ``perf/rollout_time`` and ``perf/tokens_per_gpu_per_sec``; on the train side
the timers, one ``step N: {...}`` per optimizer step (``train/loss``, ``train/pg_loss``, ``train/grad_norm``, ...)
and ``perf N: {...}`` with ``perf/actor_train_time``, ``perf/actor_train_tok_per_s``, ``perf/step_time`` and the
rest, each under its Ray worker's prefix and slime's logger prefix, as Python ``repr`` dicts. Every line starts
``SIMULATED``. With ``--save-debug-rollout-data`` a whole-loop run writes each rollout's samples as slime does
(``torch.save``; SIMULATED token ids), and a train-only run whose ``--load-debug-rollout-data`` files exist trains
their samples' lengths.

The training side's time comes from the throughput projection (``projection.api.project``) of the Megatron-LM
layout on the actor's GPUs, applied to the tokens each rollout trains (prompt and response lengths drawn from a
stream keyed on the data, so every candidate of a frozen dump trains the same tokens), with the padding that a
static micro-batch wastes (``--use-dynamic-batch-size`` packs instead); the rollout side's from a generation model
(decode throughput per SGLang engine by hardware, grown sub-linearly with ``--rollout-num-gpus-per-engine``, lower
without CUDA graphs and with a small ``--sglang-mem-fraction-static``, bounded below by the longest sample).
Colocated, the actor's state is offloaded for each rollout and brought back (``perf/sleep_time``,
``perf/wake_up_time``, inside the train side's wait); with ``--no-offload-train`` it stays, and SGLang's memory
fraction must be at most 0.7 beside it (else SGLang's out-of-memory refusal). The noise is the Megatron-LM
simulator's fitted step-time model, per rollout.

Faults (``ATTUNE_SIM_FAULT``): ``placement`` (the placement group is never satisfied: slime's waiting line every
30 simulated seconds, for ever), ``sglang_oom`` (SGLang's KV-cache refusal at start-up), ``actor_died`` (a Ray
train actor dies at rollout ``@N``), ``grad_scale`` (the gradients twice what they should be: the loss as it
was, the logged ``train/grad_norm`` doubled). Exit codes as ``sim_megatron.py``.
"""

from __future__ import annotations

import datetime as dt
import math
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TextIO

if __package__ in (None, ""):  # run as a file: load the attune package from this tree (attune.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import attune  # noqa: F401,E402

from attune.core import files, slime  # noqa: E402
from attune.correctness.rules import Rules  # noqa: E402
from attune.simulate import noise  # noqa: E402
from attune.simulate.sim_megatron import (EXIT_FAILED, START, WALL_LINE, Printer, UsageError,  # noqa: E402
                                          entry, megatron_args)

FAULTS = ("none", "placement", "sglang_oom", "actor_died", "grad_scale")
TRAIN_ACTOR, ROLLOUT_ACTOR = "(MegatronTrainRayActor pid=%d, ip=10.0.0.1)", "(RolloutManager pid=%d, ip=10.0.0.1)"
TRAIN_PID, ROLLOUT_PID = 4210, 4102
# decode tokens/s of one SGLang engine on one GPU, by hardware (SIMULATED model constants, not measurements)
DECODE_TOKENS_PER_S = {"A100": 2400.0, "H100": 4200.0, "H200": 4800.0, "B200": 7600.0, "GB200": 7800.0}
SEQUENCE_TOKENS_PER_S = 90.0  # one sequence's decode speed: the longest sample bounds the rollout from below
ENGINE_SCALING = 0.8  # an engine of n GPUs decodes n ** 0.8 times as fast as one
NO_CUDA_GRAPH = 0.7
PROMPT_TOKENS = 180
# colocated, the actor's state leaves the GPU for the rollout and comes back (slime's sleep/wake_up: the NCCL groups
# destroyed and rebuilt, the state copied over PCIe): fixed seconds plus its GiB over a copy rate (SIMULATED)
SLEEP_S, WAKE_S, OFFLOAD_GIB_PER_S = 2.0, 1.5, 10.0
RESIDENT_MEM_FRACTION = 0.7  # the most SGLang may reserve while the actor's state stays resident (levers.md)
WAIT_EVERY_S = 30.0
WARM_UP = 1.4  # the first rollout's training is this much slower (CUDA graph capture, allocator growth)
SHORT_MICROBATCH_TOKENS = 512.0
PACKING = 0.98  # the share of a packed micro-batch's token budget that samples fill
RL_LOSS, RL_DECAY = 0.02, 0.97  # the policy loss at the first step, and its fall per step (SIMULATED)
GRAD_NORM = 0.35  # the gradient norm, moved by the same relative noise as the loss (SIMULATED)


def _number(args: dict, flag: str, default: float) -> float:
    value = args.get(flag)
    try:
        return float(value) if value not in (None, True) else default
    except ValueError:
        raise UsageError("%s=%r is not a number. Fix: give a number" % (flag, value))


def _stamp(moment: dt.datetime, where: str) -> str:
    return "[%s] %s -" % (moment.strftime("%Y-%m-%d %H:%M:%S"), where)


def _fault(env: dict):
    fault, _, at = (env.get("ATTUNE_SIM_FAULT") or "none").strip().partition("@")
    if fault not in FAULTS:
        raise UsageError("ATTUNE_SIM_FAULT=%r: unknown fault for the slime simulator. Fix: one of %s, optionally "
                         "@ROLLOUT (e.g. actor_died@2)" % (fault, ", ".join(FAULTS)))
    if at and not at.isdigit():
        raise UsageError("ATTUNE_SIM_FAULT=%r: the rollout after @ is not a whole number" % fault)
    return fault, int(at) if at else 1


def lengths(args: dict, rollout: int) -> list:
    """Prompt plus response tokens of each sample of ``rollout``: read from the frozen dump where its file exists
    (``--load-debug-rollout-data``, e.g. one this simulator saved), else drawn from a stream keyed on the data (the
    dump's name or the prompt set); the same for every candidate either way."""
    dumped = _dump_file(args.get("--load-debug-rollout-data"), rollout)
    if dumped is not None and dumped.is_file():
        from attune.data import rollout as rollout_mod
        data, _ = rollout_mod.read_dump(dumped)
        return [len(sample["tokens"]) for sample in data["samples"]]
    data = str(args.get("--load-debug-rollout-data") or args.get("--prompt-data") or "data")
    samples = int(_number(args, "--rollout-batch-size", 8.0) * _number(args, "--n-samples-per-prompt", 1.0))
    longest = int(_number(args, "--rollout-max-response-len", 1024.0))
    stream = noise.Stream("slime-lengths", data, rollout)
    out = []
    for _ in range(samples):
        response = int(min(longest, max(16.0, 0.45 * longest * math.exp(0.6 * stream.normal()))))
        out.append(PROMPT_TOKENS + response)
    return out


def _dump_file(template, rollout: int) -> Optional[Path]:
    if not isinstance(template, str) or not template:
        return None
    return Path(template.replace("{rollout_id}", str(rollout)))


def save_rollout(template: str, rollout: int, samples: list, per_prompt: int, seed: str) -> None:
    """Write ``rollout``'s samples as slime's ``--save-debug-rollout-data`` does (``torch.save`` of
    ``{"rollout_id", "samples": [Sample.to_dict()...]}``): token ids drawn for the lengths, the prompt's first
    ``PROMPT_TOKENS``, a reward per sample. SIMULATED content, slime's format."""
    try:
        import torch
    except ImportError:
        raise UsageError("--save-debug-rollout-data: the simulator writes slime's dumps with torch.save, and torch "
                         "is not installed. Fix: pip install torch (the pod extra)")
    import numpy as np
    rng = np.random.default_rng(list(("%s|%d" % (seed, rollout)).encode("utf-8")))
    out = []
    for index, total in enumerate(samples):
        out.append({"index": index, "group_index": index // max(1, per_prompt), "tokens": rng.integers(
            0, 32000, size=total).tolist(), "response_length": total - PROMPT_TOKENS, "loss_mask": None,
            "reward": float(rng.integers(0, 2)), "status": "completed"})
    path = _dump_file(template, rollout)
    files.make_folders(path.parent)
    with files.replacing(path) as handle:
        torch.save({"rollout_id": rollout, "samples": out}, handle)


def _utilization(tokens: float) -> float:
    """How well a micro-batch of ``tokens`` tokens uses the GPU, relative to a long one (kernel launches and small
    GEMMs cost a short micro-batch as much as ``SHORT_MICROBATCH_TOKENS`` more tokens would). SIMULATED."""
    return tokens / (tokens + SHORT_MICROBATCH_TOKENS)


def _efficiency(samples: list, mbs: int, args: dict, seq: int, forward_only: bool = False) -> float:
    """The training throughput of these samples relative to the projection's (full ``seq``-token sequences): a
    static micro-batch of ``mbs`` samples pads each to its longest; ``--use-dynamic-batch-size`` packs them into
    micro-batches of up to ``--max-tokens-per-gpu`` tokens with no padding (``forward_only``: the log-prob passes,
    up to ``--log-probs-max-tokens-per-gpu`` where it is set). SIMULATED."""
    reference = _utilization(seq * mbs)
    if "--use-dynamic-batch-size" in args:
        budget = _number(args, "--max-tokens-per-gpu", float(seq))
        if forward_only:
            budget = _number(args, "--log-probs-max-tokens-per-gpu", budget)
        return PACKING * _utilization(budget) / reference
    groups = [samples[i:i + mbs] for i in range(0, len(samples), mbs)]
    padded = sum(max(group) * len(group) / _utilization(max(group) * len(group)) for group in groups)
    return sum(samples) / padded / reference


def run(argv: list, env: dict, out: TextIO, project, config_error=(), sleep: Callable[[float], None] = None) -> int:
    """Simulate one slime run of ``train.py argv``; write its output to ``out``; return the exit code."""
    hardware = (env.get("ATTUNE_SIM_HARDWARE") or "").strip()
    if not hardware:
        raise UsageError("ATTUNE_SIM_HARDWARE is not set: the simulated GPU type (e.g. H100) is required. Fix: set "
                         "ATTUNE_SIM_HARDWARE in the recipe's env_vars")
    fault, fault_at = _fault(env)
    speed = float(env.get("ATTUNE_SIM_SPEED") or 0.02)
    args = megatron_args(argv)
    shape = slime.shape_of(args)
    rollouts = shape.num_rollout
    if not rollouts or rollouts < 1:
        raise UsageError("--num-rollout is not set: a slime benchmark runs a fixed number of rollouts. Fix: give "
                         "--num-rollout N (at least %d)" % slime.MIN_ROLLOUTS)
    printer = Printer(out, sleep or (lambda seconds: None))
    seed = (env.get("ATTUNE_RUN_ID") or env.get("ATTUNE_SIM_SEED") or "0").strip()

    def finish(code):
        printer.line("%s %.3f s (exit %s)" % (WALL_LINE, (printer.clock - START).total_seconds(), code))
        return code

    def say(actor, where, text):
        printer.line("%s %s %s" % (actor, _stamp(printer.clock, where), text))

    train, rollout_side = TRAIN_ACTOR % TRAIN_PID, ROLLOUT_ACTOR % ROLLOUT_PID
    printer.line("%s Start training: %d rollouts, mode %s, %d GPUs in the placement group"
                 % (_stamp(printer.clock, "train.py:22"), rollouts, shape.mode, shape.placement_gpus))
    if fault == "placement":
        while True:  # slime waits for ever; the line every 30 s is all the log ever shows
            printer.line("%s Waiting for placement group of %d GPUs (elapsed %ds): %d GPUs registered with Ray, %d "
                         "available." % (_stamp(printer.clock, "placement_group.py:71"), shape.placement_gpus,
                                         int((printer.clock - START).total_seconds()), shape.placement_gpus // 2,
                                         shape.placement_gpus // 2))
            printer.advance(WAIT_EVERY_S)
            printer.sleep(max(speed, 0.05))
    mega = {flag: value for flag, value in args.items() if flag not in slime.OWN_FLAGS}
    per_rollout = [lengths(args, rid) for rid in range(rollouts)]  # each dump file read once
    samples = per_rollout[0]
    seq = int(_number(args, "--seq-length", float(max(samples) if samples else 4096)))
    mega.update({"--seq-length": str(seq), "--micro-batch-size": str(int(_number(args, "--micro-batch-size", 1.0)))})
    gbs = int(len(samples) / max(1.0, _number(args, "--num-steps-per-rollout", 1.0)))
    mega["--global-batch-size"] = str(gbs)
    try:
        projection = project(mega, shape.actor_gpus, hardware, None)
    except config_error as exc:
        say(train, "megatron_utils.py:88", "AssertionError: %s" % exc)
        return finish(EXIT_FAILED)
    resident = shape.mode == "whole_loop" and shape.colocate and "--no-offload-train" in args
    if resident and _number(args, "--sglang-mem-fraction-static", 0.8) > RESIDENT_MEM_FRACTION:
        fault = "sglang_oom"  # the actor's state stays on the GPU: SGLang's share no longer fits beside it
    if not shape.mode == "train_only" and fault == "sglang_oom":
        say(rollout_side, "sglang_engine.py:120", "RuntimeError: Not enough memory. Please try to increase "
            "--mem-fraction-static.")
        return finish(EXIT_FAILED)
    if not projection["memory"].get("fits", True):
        say(train, "model.py:640", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
            "has a total capacity of %.2f GiB" % float(projection["memory"].get("hbm_gib") or 80.0))
        return finish(EXIT_FAILED)
    tokens_per_s_gpu = float(projection["tokens_per_s_per_gpu"])
    state_gib = sum(float((projection["memory"].get("breakdown_gib") or {}).get(part) or 0.0)
                    for part in ("weights", "grads", "optimizer"))
    offloads = shape.mode == "whole_loop" and shape.colocate and not resident
    sleep_s = SLEEP_S + state_gib / OFFLOAD_GIB_PER_S if offloads else 0.0
    wake_s = WAKE_S + state_gib / OFFLOAD_GIB_PER_S if offloads else 0.0
    tflops_per_gpu = float(projection.get("model_tflops_per_gpu") or 0.0)
    steps_per_rollout = max(1, int(_number(args, "--num-steps-per-rollout", 1.0)))
    mbs = int(_number(args, "--micro-batch-size", 1.0))
    # the fitted step-time noise of the Megatron-LM simulator, per rollout; the first rollout warms up
    factors = noise.step_times(rollouts + 2, 1.0, "slime:%s" % seed)[2:]
    factors[0] *= WARM_UP
    engine_gpus = max(1, int(_number(args, "--rollout-num-gpus-per-engine", 1.0)))
    decode = DECODE_TOKENS_PER_S.get(hardware.upper(), 4000.0) * engine_gpus ** ENGINE_SCALING
    if "--sglang-disable-cuda-graph" in args:
        decode *= NO_CUDA_GRAPH
    decode *= min(1.0, _number(args, "--sglang-mem-fraction-static", 0.8) / 0.8)
    rollout_gpus = shape.placement_gpus if shape.colocate else max(1, shape.placement_gpus - shape.actor_gpus)
    engines = max(1, rollout_gpus // engine_gpus)
    # the loss: an RL curve times the Megatron-LM simulator's relative loss noise, keyed by what decides each part
    # of it (numerics, initialisation, reduction order, the run itself): the gate measures it as it does lm loss
    total_steps = rollouts * steps_per_rollout
    level_keys = noise.keys(args, env, Rules())
    run_key = None if "--deterministic-mode" in args else "slime:%s" % seed
    relative = [value / (noise.initial_loss(None) * noise.loss_shape(step))
                for step, value in enumerate(noise.losses(total_steps, level_keys, run_key, None), 1)]
    # grad_scale: the gradients reduced with a sum where an average belongs (x the data-parallel size, here 2);
    # Adam's update does not see a constant scale, so the loss stays where it was and only the norm shows it
    grad_scale = 2.0 if fault == "grad_scale" else 1.0
    step_id = 0
    for rid in range(rollouts):
        samples = per_rollout[rid]
        trained = sum(samples)
        efficiency = _efficiency(samples, mbs, args, seq)
        actor_train = trained / (tokens_per_s_gpu * shape.actor_gpus * efficiency) * factors[rid]
        # the forward-only log-prob passes (actor and reference): a third of a training pass, packed to their own
        # budget where --log-probs-max-tokens-per-gpu gives one (slime/utils/arguments.py)
        log_probs = actor_train / 3.0 * efficiency / _efficiency(samples, mbs, args, seq, forward_only=True)
        ref_log_probs = log_probs
        if shape.mode == "whole_loop":
            response = sum(samples) - PROMPT_TOKENS * len(samples)
            generate = max(response / (decode * engines), (max(samples) - PROMPT_TOKENS) / SEQUENCE_TOKENS_PER_S)
            rollout_time = generate * (1.0 + 0.03 * noise.Stream("slime-rollout", seed, rid).normal()) + 2.0
            printer.advance(rollout_time)
            say(rollout_side, "rollout.py:1303", "perf %d: %r" % (rid, {
                "rollout/response_len/mean": response / float(len(samples)), "perf/rollout_time": rollout_time,
                "perf/tokens_per_gpu_per_sec": response / rollout_time / rollout_gpus,
                "perf/longest_sample_tokens_per_sec": (max(samples) - PROMPT_TOKENS) / rollout_time}))
            wait = sleep_s + rollout_time + wake_s + 0.4
            if slime.SAVE_FLAG in args:
                save_rollout(str(args[slime.SAVE_FLAG]), rid, samples, int(_number(args, "--n-samples-per-prompt",
                                                                                 1.0)), str(args.get("--prompt-data")))
        else:
            wait = 0.3
        say(train, "timer.py:24", "Timer train_wait start")
        say(train, "timer.py:32", "Timer train_wait end (elapsed: %.1fs)" % wait)
        if fault == "actor_died" and rid == fault_at:
            printer.advance(actor_train / 2.0)
            printer.line("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
                         "class_name: MegatronTrainRayActor, actor_id: 6b0b2b5a3e5cbd6f, pid: %d" % TRAIN_PID)
            return finish(EXIT_FAILED)
        say(train, "timer.py:24", "Timer actor_train start")
        for step in range(steps_per_rollout):
            printer.advance(actor_train / steps_per_rollout)
            printer.sleep(speed)
            loss = RL_LOSS * RL_DECAY ** step_id * relative[step_id]
            say(train, "model.py:649", "step %d: %r" % (step_id, {
                "train/loss": loss, "train/pg_loss": loss * 0.9, "train/entropy_loss": 0.41,
                "train/grad_norm": GRAD_NORM * (1.0 + 0.01 * noise.Stream("slime-grad", rid, step).normal())
                * relative[step_id] * grad_scale,
                "train/lr-pg_0": 1e-6, "train/global_batch_size": gbs, "train/step": step_id}))
            step_id += 1
        say(train, "timer.py:32", "Timer actor_train end (elapsed: %.1fs)" % actor_train)
        train_time = actor_train + log_probs + ref_log_probs + 0.2
        flops = tflops_per_gpu * (trained / (tokens_per_s_gpu * shape.actor_gpus))
        offload = {"perf/sleep_time": sleep_s, "perf/wake_up_time": wake_s} if offloads else {}
        say(train, "train_metric_utils.py:44", "perf %d: %r" % (rid, dict(offload, **{
            "perf/data_preprocess_time": 0.01, "perf/train_wait_time": wait, "perf/ref_log_probs_time": ref_log_probs,
            "perf/log_probs_time": log_probs, "perf/actor_train_time": actor_train, "perf/train_time": train_time,
            "perf/log_probs_tflops": flops / log_probs / 3.0, "perf/actor_train_tflops": flops / actor_train,
            "perf/actor_train_tok_per_s": trained / actor_train, "perf/step_time": wait + train_time,
            "perf/wait_time_ratio": wait / (wait + train_time)})))
    printer.line("%s training done after %d rollouts" % (_stamp(printer.clock, "train.py:96"), rollouts))
    return finish(0)


def main(argv: Optional[list] = None) -> int:
    return entry("sim_slime", run, argv, sleep=time.sleep)


if __name__ == "__main__":
    raise SystemExit(main())
