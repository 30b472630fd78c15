"""The simulated workload's noise and loss models (README.md in this folder explains them).

Everything here is a pure function of its inputs: the Megatron-LM arguments, the listed
environment, the projection's step time and the run's seed. Random numbers come from SHA-256 keyed
streams (``Stream``) that use only ``random.Random.random``, whose sequence Python guarantees for a
given seed across versions, so the same inputs print the same numbers (on another platform's maths
library a printed digit could differ where a value sits on a rounding edge).

``FIT`` holds the numbers ``fit_golden.py`` fitted to Megatron-LM's golden curves (the
``dev_dgx_gb200`` developer set); the tests check that the two agree when the data is present.
"""

from __future__ import annotations

import hashlib
import math
import random
from typing import Mapping, Optional

from attune.correctness.rules import training_env

# From `python3 skill/scripts/simulate/fit_golden.py $ATTUNE_CORPUS_DIR/megatron_golden` (rounded as printed).
FIT = {
    "step_time": {
        # the first logged iteration's excess over the steady step (seconds; lognormal): 50 cases on 8 GPUs
        "first_step_excess_s": {"median": 6.0, "log_sd": 0.319},
        # the next iteration's excess: intercept + per_step x steady step time (least squares, 50 cases)
        "second_step_excess": {"intercept_s": 0.0419, "per_step_s": 0.0121},
        # per-step jitter: robust sd of log(t / median) over steps 5-20, median over the 50 cases
        "jitter_log_sd": 0.0096,
        # steps more than 5 robust sd slow: how often, and how slow (in robust sds; lognormal)
        "slow_step": {"probability": 0.0575, "median_sds": 15.41, "log_sd_sds": 0.834},
        # run-to-run offset of the steady step time: 3 ckpt-resume reruns with same-commit goldens
        "run_offset": {"log_sd": 0.0123},
    },
    "loss_shape": {
        # L(s) / L(1) = floor + (1 - floor) exp(-((s - 1 - delay)+ / c)^k)
        "c": 486.5, "k": 0.92, "floor": 0.3973, "delay": 9.0,
        "initial_over_ln_vocab": 1.0095,  # L(1) / ln(50257) over the golden cases (median)
        "wiggle_sd": 0.001317,  # step-to-step wiggle shared by every run of one data order (relative)
    },
    "loss_noise": {  # relative loss: a constant offset (sd_offset) plus a random walk (sd_walk per step)
        "rerun": {"sd_offset": 2.53e-06, "sd_walk": 4.77e-07},  # 4 pairs: only determinism settings differ
        "order": {"sd_offset": 4.17e-06, "sd_walk": 3.61e-07},  # 35 pairs: same-weights placement changes
        "init": {"sd_offset": 0.00412, "sd_walk": 0.000175},  # 152 pairs: placement that re-draws weights
        "numeric": {"sd_offset": 0.00277, "sd_walk": 0.000348},  # 765 pairs: numeric or fixed changes
    },
}
SLOW_STEP_CAP_SDS = 3.0  # a slow step's size is drawn at most this many log-sds above its median
DEFAULT_VOCAB = 50257  # Megatron's GPT-2 BPE vocabulary, when --vocab-size is not given
LEVELS = ("numeric", "init", "order", "rerun")


class Stream(object):
    """Reproducible random numbers for one purpose, keyed by text."""

    def __init__(self, *key):
        digest = hashlib.sha256("\x1f".join(str(part) for part in key).encode("utf-8")).digest()
        self._random = random.Random(int.from_bytes(digest[:16], "big"))

    def uniform(self) -> float:
        return self._random.random()

    def normal(self) -> float:
        """A standard normal draw (Box-Muller on ``random()``: stable across Python versions)."""
        u1 = 1.0 - self._random.random()  # in (0, 1]
        u2 = self._random.random()
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def _text(value) -> str:
    return "true" if value is True else str(value)


def keys(args: Mapping, env: Mapping, rules) -> dict:
    """What decides each part of the loss, as text keys (``LEVELS`` plus ``data``).

    Each argument is classed as the gate classes it (``correctness.rules``): ``numeric`` and ``fixed``
    arguments, unlisted ones and placement made numeric by ``numeric_when`` go into the ``numeric``
    key; placement with ``init: true`` and the fixed arguments into ``init`` (which weights each rank
    draws); placement with ``exact: false`` and swaps into ``order`` (kernels and reduction order);
    the fixed arguments alone into ``data`` (the data order every run of the workload shares).
    ``exact: true`` placement changes nothing. An argument set to its rule's default counts as unset.
    Environment variables count only when the rules list them, the host's plumbing aside
    (``correctness.rules.training_env``)."""
    parts = {"numeric": [], "init": [], "order": [], "data": []}
    items = [("arg", name, value) for name, value in args.items()]
    items += [("env", name, env[name]) for name in sorted(training_env(env, rules))]
    for kind, name, value in items:
        rule = rules.get(kind, name)
        text = "%s %s=%s" % (kind, name, _text(value))
        if rule is not None and rule.default is not None and _text(value) == rule.default:
            continue
        if rule is None:
            cls = "numeric"
        else:
            cls = rule.cls
            if cls in ("placement", "swap") and any(flag in args for flag in rule.numeric_when):
                cls = "numeric"
        if cls in ("numeric", "fixed"):
            parts["numeric"].append(text)
        if cls == "fixed":
            parts["init"].append(text)
            parts["data"].append(text)
        if cls == "placement" and rule.init:
            parts["init"].append(text)
        if (cls == "placement" and not rule.exact) or cls == "swap":
            parts["order"].append(text)
    return {level: "\n".join(sorted(texts)) for level, texts in parts.items()}


def loss_shape(step: float, fit: dict = FIT) -> float:
    """The loss at ``step`` relative to step 1 (``FIT['loss_shape']``)."""
    p = fit["loss_shape"]
    lag = max(0.0, step - 1.0 - p["delay"])
    return p["floor"] + (1.0 - p["floor"]) * math.exp(-((lag / p["c"]) ** p["k"]))


def initial_loss(vocab: Optional[int], fit: dict = FIT) -> float:
    return fit["loss_shape"]["initial_over_ln_vocab"] * math.log(vocab or DEFAULT_VOCAB)


def _offset_walk(stream: Stream, steps: int, sd_offset: float, sd_walk: float) -> list:
    """``[r(1), ..., r(steps)]``: one offset plus a random walk that starts at 0 on step 1."""
    offset = sd_offset * stream.normal()
    out, walk = [], 0.0
    for step in range(1, steps + 1):
        if step > 1:
            walk += sd_walk * stream.normal()
        out.append(offset + walk)
    return out


def losses(steps: int, level_keys: dict, run_key: Optional[str], vocab: Optional[int], fit: dict = FIT) -> list:
    """lm loss for iterations 1..``steps``.

    ``L(s) = L(1) * shape(s) * (1 + wiggle(data, s) + sum over levels of offset + walk)``, each level
    drawn from its own key: two runs share every level whose key they share. ``run_key`` is the run's
    own key (None on a deterministic setup: reruns are then bitwise equal)."""
    start = initial_loss(vocab, fit)
    wiggle = Stream("wiggle", level_keys["data"])
    total = [0.0] * steps
    for level in LEVELS:
        key = run_key if level == "rerun" else level_keys[level]
        if key is None:
            continue
        sd = fit["loss_noise"][level]
        for index, value in enumerate(_offset_walk(Stream("loss", level, key), steps, sd["sd_offset"],
                                                   sd["sd_walk"])):
            total[index] += value
    return [start * loss_shape(step, fit) * (1.0 + fit["loss_shape"]["wiggle_sd"] * wiggle.normal() + total[step - 1])
            for step in range(1, steps + 1)]


def step_times(steps: int, step_s: float, run_key: str, fit: dict = FIT) -> list:
    """Seconds per iteration for iterations 1..``steps``: the projected step time times the run's
    offset, times per-step jitter and the occasional slow step, plus the warm-up of iterations 1-2."""
    p = fit["step_time"]
    stream = Stream("step-time", run_key)
    steady = step_s * math.exp(p["run_offset"]["log_sd"] * stream.normal())
    out = []
    for step in range(1, steps + 1):
        jitter = p["jitter_log_sd"] * stream.normal()
        if stream.uniform() < p["slow_step"]["probability"]:
            z = min(SLOW_STEP_CAP_SDS, stream.normal())
            jitter = abs(jitter) + p["jitter_log_sd"] * p["slow_step"]["median_sds"] * math.exp(
                p["slow_step"]["log_sd_sds"] * z)
        seconds = steady * math.exp(jitter)
        if step == 1:
            first = p["first_step_excess_s"]
            seconds += first["median"] * math.exp(first["log_sd"] * stream.normal())
        elif step == 2:
            seconds += p["second_step_excess"]["intercept_s"] + p["second_step_excess"]["per_step_s"] * steady
        out.append(seconds)
    return out


def steady_offset(step_s: float, run_key: str, fit: dict = FIT) -> float:
    """The run's steady step time (the projection's times its run offset), for reports and tests."""
    return step_s * math.exp(fit["step_time"]["run_offset"]["log_sd"] * Stream("step-time", run_key).normal())


def learning_rate(iteration: int, args: Mapping, train_iters: int) -> float:
    """Megatron-LM's learning rate after ``iteration`` steps (OptimizerParamScheduler: linear warm-up
    from --lr-warmup-init, then constant, linear or cosine decay to --min-lr)."""
    def number(flag, default):
        value = args.get(flag)
        try:
            return float(value) if value not in (None, True) else default
        except ValueError:
            return default
    top, low = number("--lr", 1e-4), number("--min-lr", 0.0)
    gbs = number("--global-batch-size", 1.0) or 1.0
    decay = number("--lr-decay-iters", None)
    if decay is None and args.get("--lr-decay-samples") not in (None, True):
        decay = number("--lr-decay-samples", 0.0) / gbs
    decay = decay if decay else float(train_iters)
    if args.get("--lr-warmup-iters") not in (None, True):
        warmup = number("--lr-warmup-iters", 0.0)
    elif args.get("--lr-warmup-samples") not in (None, True):
        warmup = number("--lr-warmup-samples", 0.0) / gbs
    else:
        warmup = number("--lr-warmup-fraction", 0.0) * decay
    start = number("--lr-warmup-init", 0.0)
    if warmup > 0 and iteration <= warmup:
        return start + (top - start) * iteration / warmup
    style = str(args.get("--lr-decay-style") or "linear")
    if style == "constant":
        return top
    if iteration > decay:
        return low
    ratio = (iteration - warmup) / max(1e-12, decay - warmup)
    if style == "cosine":
        return low + (top - low) * 0.5 * (math.cos(math.pi * ratio) + 1.0)
    if style == "inverse-square-root":
        return max(low, top * math.sqrt(max(1.0, warmup)) / math.sqrt(max(1.0, iteration)))
    return top - (top - low) * ratio
