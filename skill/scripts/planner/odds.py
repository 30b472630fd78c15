"""The odds the planner decides by: the projection's error read as a lognormal factor ``F`` on a configuration's
projected tokens/s/GPU (``log F ~ N(0, sd)``), the probability that a predicted gain truly clears a threshold, and its
expected improvement. Pure functions of numbers (``policy.py`` says how the planner uses them)."""

from __future__ import annotations

import math


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def lognormal_sd(median_abs: float) -> float:
    """The sd of ``log F`` (F lognormal around 1) whose ``|F - 1|`` has median ``median_abs`` (bisection)."""
    lo, hi = 1e-6, 5.0
    for _ in range(100):
        mid = (lo + hi) / 2
        inside = _phi(math.log(1 + median_abs) / mid) - _phi(math.log(max(1e-12, 1 - median_abs)) / mid)
        lo, hi = (mid, hi) if inside > 0.5 else (lo, mid)
    return (lo + hi) / 2


def probability_above(gain: float, threshold: float, sd: float) -> float:
    """P(true gain > threshold) when the true ratio is ``(1 + gain) * F``, ``log F ~ N(0, sd)``."""
    if gain <= -1:
        return 0.0
    return 1.0 - _phi((math.log1p(threshold) - math.log1p(gain)) / sd)


def expected_improvement(gain: float, sd: float) -> float:
    """E[max(0, (1 + gain) * F - 1)], ``log F ~ N(0, sd)`` (the lognormal call price at strike 1)."""
    if gain <= -1:
        return 0.0
    d2 = math.log1p(gain) / sd
    return (1 + gain) * math.exp(sd * sd / 2) * _phi(d2 + sd) - _phi(d2)
