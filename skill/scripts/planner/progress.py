"""The timing fields every planner progress line ends with: when, how long since the session started, and when
the budget runs out at the rate this session has been spending it.

    planner: launch run=p-r004 purpose=candidate ... utc=2026-12-01T20:11:50Z elapsed=0:00:12
        burn="552.6 GPU-hours/h" eta=0:01:02

``utc`` is the line's time (UTC, to the second); ``elapsed`` the wall time since the planner started;
``burn`` the budget this session has spent (the GPU-hour log or the run count, as ``status --json`` reports
``budget.spent``) per hour of wall time since its first ``status``; ``eta`` the wall time left until the budget's
unspent part (``limit - spent``) is gone at that rate: ``n/a`` until something is spent, ``0:00:00`` once it
is. A SIMULATED run is charged the GPU time it stands for, not the seconds it took here, so a demo burns
hundreds of GPU-hours an hour.
"""

from __future__ import annotations

import datetime
import time
from typing import Optional


def duration(seconds: float) -> str:
    """``H:MM:SS`` (hours grow past 24)."""
    seconds = max(0, int(round(seconds)))
    return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def fields(now: datetime.datetime, elapsed_s: float, budget_first: Optional[dict], first_s: Optional[float],
           budget_last: Optional[dict], last_s: Optional[float]) -> dict:
    """The timing fields, in order. ``budget_first``/``budget_last`` are ``status --json`` ``budget`` objects
    taken at monotonic times ``first_s`` and ``last_s`` (seconds)."""
    out = {"utc": now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "elapsed": duration(elapsed_s)}
    rate = None
    if budget_first and budget_last and last_s is not None and first_s is not None and last_s > first_s:
        spent = budget_last["spent"] - budget_first["spent"]
        if spent > 0:
            rate = spent / (last_s - first_s)  # budget units per second
    if rate is not None:
        out["burn"] = "%.4g %s/h" % (rate * 3600, budget_last["unit"])
        out["eta"] = duration(max(0.0, budget_last["limit"] - budget_last["spent"]) / rate)
    elif budget_last and budget_last["limit"] - budget_last["spent"] <= 0:
        out["eta"] = duration(0)
    else:
        out["eta"] = "n/a"
    return out


class Clock(object):
    """The session's start and the first and latest budget it saw (``seen`` after each ``status --json``)."""

    def __init__(self, monotonic=time.monotonic, wall=None):
        self.monotonic = monotonic
        self.wall = wall or (lambda: datetime.datetime.now(datetime.timezone.utc))
        self.started = monotonic()
        self.first = self.first_s = self.last = self.last_s = None

    def seen(self, budget: dict) -> None:
        now = self.monotonic()
        if self.first is None:
            self.first, self.first_s = budget, now
        self.last, self.last_s = budget, now

    def fields(self) -> dict:
        return fields(self.wall(), self.monotonic() - self.started, self.first, self.first_s, self.last, self.last_s)
