"""What a log parse keeps, in bounded memory at any log size: the first and last items of a list
(``Bounded``), the steps kept in full (``Steps``; ``logparse``'s docstring, **Bounds**) and the step-time
statistics with an exact median while the distinct times fit (``StepStats``)."""

from __future__ import annotations

from collections import Counter, deque

STEPS_KEPT = 2000
TAIL_STEPS = 500
RUN_HEAD_STEPS = 100
PROBLEM_STEPS = 100
RECORDS_KEPT = 200
FAILURES_KEPT = 20
ERRORS_KEPT = 20
WARNINGS_KEPT = 50
MEDIAN_VALUES = 1 << 16  # distinct step times counted for an exact median (they are printed to 0.1 ms)


class Bounded(object):
    """The first ``head`` and the last ``tail`` items appended, and how many were."""

    __slots__ = ("head", "tail", "total", "limit")

    def __init__(self, head: int, tail: int):
        self.head, self.tail, self.total, self.limit = [], deque(maxlen=tail), 0, head

    def append(self, item) -> None:
        self.total += 1
        if len(self.head) < self.limit:
            self.head.append(item)
        else:
            self.tail.append(item)

    def items(self) -> list:
        return self.head + list(self.tail)

    def dropped(self) -> int:
        return self.total - len(self.head) - len(self.tail)


def is_problem(step: dict) -> bool:
    bad = ("nan", "inf", "-inf")
    return (step["lm_loss"] in bad or step["grad_norm"] in bad or (step["skipped"] or 0) != 0
            or (step["nan"] or 0) != 0 or any(value in bad for value in step["losses"].values()))


class Steps(object):
    """The steps kept in full (module docstring, **Bounds**), in log order."""

    def __init__(self):
        self.head, self.run_head, self.problems = [], [], []
        self.tail = deque(maxlen=TAIL_STEPS)
        self.total = 0
        self.run_open = False  # the latest run started past STEPS_KEPT: its first steps are kept

    def add(self, step: dict, new_run: bool, problem: bool) -> None:
        item = (self.total, step)
        self.total += 1
        if len(self.head) < STEPS_KEPT:
            self.head.append(item)
            return
        if new_run:
            self.run_head, self.run_open = [], True
        if self.run_open and len(self.run_head) < RUN_HEAD_STEPS:
            self.run_head.append(item)
        elif problem and len(self.problems) < PROBLEM_STEPS:
            self.problems.append(item)
        self.tail.append(item)

    def items(self) -> list:
        if self.total <= STEPS_KEPT:
            return [step for _, step in self.head]
        kept = dict(self.head)
        for part in (self.run_head, self.problems, self.tail):
            kept.update(part)
        return [kept[seq] for seq in sorted(kept)]


class StepStats(object):
    """Statistics over every step of a log, in constant memory (the step times' median exactly while
    they hold at most ``MEDIAN_VALUES`` distinct values)."""

    def __init__(self):
        self.count, self.first, self.last = 0, None, None
        self.times, self.time_sum, self.time_count = Counter(), 0.0, 0
        self.time_min = self.time_max = None
        self.times_overflow = False
        self.problems = self.skipped = self.nan = 0
        self.global_batch_size = None

    def add(self, step: dict, problem: bool) -> None:
        self.count += 1
        if self.first is None:
            self.first = step
        self.last = step
        elapsed = step["elapsed_ms"]
        if isinstance(elapsed, float):
            self.time_sum += elapsed
            self.time_count += 1
            if self.time_min is None or elapsed < self.time_min:
                self.time_min = elapsed
            if self.time_max is None or elapsed > self.time_max:
                self.time_max = elapsed
            if not self.times_overflow:
                self.times[elapsed] += 1
                if len(self.times) > MEDIAN_VALUES:
                    self.times_overflow, self.times = True, Counter()
        if problem:
            self.problems += 1
        self.skipped += step["skipped"] if isinstance(step["skipped"], int) else 0
        self.nan += step["nan"] if isinstance(step["nan"], int) else 0
        if isinstance(step["global_batch_size"], int):
            self.global_batch_size = step["global_batch_size"]

    def as_dict(self) -> dict:
        times = {"count": self.time_count, "mean": self.time_sum / self.time_count if self.time_count else None,
                 "min": self.time_min, "max": self.time_max, "median": None}
        if self.times_overflow:
            times["median_unavailable"] = "more than %d distinct step times" % MEDIAN_VALUES
        elif self.times:
            times["median"] = median(sorted(self.times), self.times, self.time_count)
        first, last = ({"step": step["step"], "line_no": step["line_no"]} if step else None
                       for step in (self.first, self.last))
        return {"steps": self.count, "first": first, "last": last, "elapsed_ms": times,
                "problem_steps": self.problems, "skipped_iterations": self.skipped, "nan_iterations": self.nan,
                "global_batch_size": self.global_batch_size}


def median(ordered: list, counts: Counter, total: int) -> float:
    wanted = [(total - 1) // 2, total // 2]  # the middle one, or the middle two
    values, seen = [], 0
    for value in ordered:
        seen += counts[value]
        while wanted and wanted[0] < seen:
            values.append(value)
            wanted.pop(0)
        if not wanted:
            break
    return (values[0] + values[1]) / 2.0
