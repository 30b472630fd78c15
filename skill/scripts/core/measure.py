"""Score one run from the per-iteration metrics that ``finalize`` records (measurement.md §3).

A run is scored on the iterations of the scoring window (default 5 to 19, inclusive, numbered as
Megatron prints them). The score is the median step time over the window and

    tokens/s/GPU = global_batch_size * seq_length / (median step time in s * GPUs)

A run is not rankable, and says why, when it did not finish, when an iteration of the window is
missing or has no positive step time, when any iteration has a NaN or infinite loss, or when any
iteration was skipped (``skipped`` or ``nan`` above zero).

A slime run (``core/slime.py``; measurement.md §3.2) records one entry per rollout with the tokens the actor
trained in it, and its own window (every rollout but the first): per rollout, tokens / (seconds x GPUs), and the
score is the median over the window.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def to_float(value) -> Optional[float]:
    """A metric value as a float: numbers as they are, ``"nan"``/``"inf"``/``"-inf"`` strings decoded."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.lower() in NON_FINITE:
        return NON_FINITE[value.lower()]
    return None


def encode_float(value: float):
    """The inverse of ``to_float`` for writing strict JSON."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


class RunScore(NamedTuple):
    """A run's score, or why it has none. A tuple: cheap to build and to pass between processes."""

    rankable: bool
    why: str  # empty when rankable
    tokens_per_s_per_gpu: Optional[float] = None
    step_time_s: Optional[float] = None  # median over the window
    step_mean_s: Optional[float] = None
    step_min_s: Optional[float] = None
    step_max_s: Optional[float] = None
    spread: Optional[float] = None  # (max - min) / median over the window
    steps: int = 0

    def as_dict(self) -> dict:
        return self._asdict()


def not_rankable(why: str) -> RunScore:
    return RunScore(False, why)


def score_run(status: str, metrics: Optional[dict], window=(5, 19), failure: Optional[dict] = None) -> RunScore:
    """Score a finalized run; never raises on bad metrics, returns a not-rankable score instead."""
    if status != "finished":
        detail = ""
        if failure:
            detail = ": " + str(failure.get("class") or failure.get("detail") or "").strip()
            memory = {"gpu": "GPU memory", "host": "host memory"}.get(failure.get("memory"))
            detail += " (%s)" % memory if memory else ""
        return not_rankable("run %s%s" % (status, detail.rstrip(": ")))
    if not isinstance(metrics, dict):
        return not_rankable("no metrics recorded")
    if "tokens" in metrics:  # a slime run: the tokens of each rollout, and its own window (core/slime.py)
        return _score_rollouts(metrics)
    sizes = {}
    for field in ("global_batch_size", "seq_length", "gpus"):
        value = metrics.get(field)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return not_rankable("metrics.%s is missing or not a positive integer" % field)
        sizes[field] = value
    fast = _score_clean_run(metrics, sizes, window)
    return fast if fast is not None else _score_careful(metrics, sizes, window)


def _score_careful(metrics: dict, sizes: dict, window) -> RunScore:
    """Check everything in order and name the first problem (any metrics shape)."""
    checked = _window_times(metrics, window)
    return checked if isinstance(checked, RunScore) else _score(checked[0], sizes)


def _score_rollouts(metrics: dict) -> RunScore:
    """A slime run (measurement.md §3.2): per rollout of its window, tokens / (seconds x GPUs); the score is their
    median, the spread their range over it."""
    gpus = metrics.get("gpus")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= 0:
        return not_rankable("metrics.gpus is missing or not a positive integer")
    window = metrics.get("window")
    if not (isinstance(window, list) and len(window) == 2 and all(type(n) is int for n in window)):
        return not_rankable("metrics.window is not two rollout ids")
    if window[1] - window[0] + 1 < 2:
        return not_rankable("rollouts %d-%d: a slime run is scored on at least 2 rollouts after the first"
                            % tuple(window))
    checked = _window_times(metrics, tuple(window), what="rollout")
    if isinstance(checked, RunScore):
        return checked
    times, indices = checked
    tokens = metrics.get("tokens")
    if not isinstance(tokens, list) or len(tokens) != len(metrics["iter"]):
        return not_rankable("metrics.tokens does not have one value per rollout")
    rates = []
    for seconds, index in zip(times, indices):
        count = tokens[index]
        if type(count) is not int or count <= 0:
            return not_rankable("rollout %d has no positive token count" % metrics["iter"][index])
        rates.append(count / (seconds * gpus))
    ordered, by_time = sorted(rates), sorted(times)
    median = _median(ordered)
    return RunScore(rankable=True, why="", tokens_per_s_per_gpu=median, step_time_s=_median(by_time),
                    step_mean_s=sum(times) / len(times), step_min_s=by_time[0], step_max_s=by_time[-1],
                    spread=(ordered[-1] - ordered[0]) / median, steps=len(times))


def _median(ordered: list) -> float:
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2.0


def _window_times(metrics: dict, window, what: str = "iteration"):
    """The window's step times in seconds and their positions in the columns, or the not-rankable score that
    names the first problem."""
    numbers = metrics.get("iter")
    if not isinstance(numbers, list) or not numbers:
        return not_rankable("metrics have no %ss" % what)
    columns = {}
    for name in ("step_ms", "loss", "skipped", "nan"):
        column = metrics.get(name)
        if column is None:
            column = [None] * len(numbers)
        elif not isinstance(column, list) or len(column) != len(numbers):
            return not_rankable("metrics.%s does not have one value per %s" % (name, what))
        columns[name] = column
    position = {}
    for index, number in enumerate(numbers):
        if not isinstance(number, int):
            return not_rankable("an %s number is not an integer" % what)
        if number in position:
            return not_rankable("%s %d is reported twice" % (what, number))
        position[number] = index
    isfinite = math.isfinite
    losses, skipped, nans = columns["loss"], columns["skipped"], columns["nan"]
    for number in sorted(position):
        index = position[number]
        loss = losses[index]
        if loss is not None and not (type(loss) is float and isfinite(loss)):
            loss = to_float(loss)
            if loss is not None and not isfinite(loss):
                return not_rankable("%s loss at %s %d" % ("NaN" if loss != loss else "infinite", what, number))
        if skipped[index]:
            return not_rankable("%s %d was skipped" % (what, number))
        if nans[index]:
            return not_rankable("%s %d counted a NaN iteration" % (what, number))
    first, last = window
    missing = [n for n in range(first, last + 1) if n not in position]
    if missing:
        return not_rankable("%s(s) %s of the window %d-%d missing" % (what, _ranges(missing), first, last))
    times, indices = [], []
    for number in range(first, last + 1):
        step = to_float(columns["step_ms"][position[number]])
        if step is None or not isfinite(step) or step <= 0:
            return not_rankable("%s %d has no positive step time" % (what, number))
        times.append(step / 1000.0)
        indices.append(position[number])
    return times, indices


def _score_clean_run(metrics: dict, sizes: dict, window) -> Optional[RunScore]:
    """The common case in one pass of C-level list operations: iterations 1..n in order, every
    loss finite, nothing skipped, every window step time positive. Returns None otherwise, and
    the careful path finds and names the problem."""
    numbers = metrics.get("iter")
    if type(numbers) is not list:
        return None
    count = len(numbers)
    columns = [metrics.get(name) for name in ("step_ms", "loss", "skipped", "nan")]
    if any(type(column) is not list or len(column) != count for column in columns):
        return None
    steps, losses, skipped, nans = columns
    first, last = window
    if last > count or numbers != list(range(1, count + 1)):
        return None
    try:
        if not math.isfinite(sum(losses)) or any(skipped) or any(nans):
            return None
        times = [step / 1000.0 for step in steps[first - 1:last]]
        if not math.isfinite(sum(times)) or min(times) <= 0:
            return None
    except TypeError:  # a None or a string ("nan") somewhere: let the careful path say which
        return None
    return _score(times, sizes)


def _score(times: list, sizes: dict) -> RunScore:
    ordered = sorted(times)
    median = _median(ordered)
    tokens = sizes["global_batch_size"] * sizes["seq_length"] / (median * sizes["gpus"])
    return RunScore(
        rankable=True, why="", tokens_per_s_per_gpu=tokens, step_time_s=median,
        step_mean_s=sum(times) / len(times), step_min_s=ordered[0], step_max_s=ordered[-1],
        spread=(ordered[-1] - ordered[0]) / median, steps=len(times),
    )


def _ranges(numbers) -> str:
    """``[5, 6, 7, 9]`` -> ``"5-7, 9"``."""
    out = []
    start = prev = numbers[0]
    for number in numbers[1:] + [None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if number is not None:
            start = prev = number
    return ", ".join(out)
