"""The leader test's arithmetic (measurement.md §4): the moments of a recipe's ln(tokens/s/GPU), the sd pooled
over the baseline, the reference and the recipe, the level of each look, and the least gain that passes it."""

from __future__ import annotations

import math
from typing import Optional

from attune.core.stats import t_cdf, t_quantile

MIN_CANDIDATES = 5  # the leader test assumes a campaign tests at least this many candidates (1% each at 5%)
SPEND = 6 / math.pi ** 2  # look k of a candidate (its run k + 1) spends SPEND / k^2 of its share: they sum to 1
INTERVAL = 0.95  # the two-sided confidence of every gain's interval


def moments(values: list) -> tuple:
    """``(n, mean, sum of squared deviations)`` of ``ln(values)``: a run's value is its log throughput."""
    if not values:
        return 0, 0.0, 0.0
    logs = [math.log(value) for value in values]
    mean = math.fsum(logs) / len(logs)
    return len(logs), mean, math.fsum((x - mean) ** 2 for x in logs)


def pooled(recipes) -> tuple:
    """``(sd, df)`` of ``ln(tokens/s/GPU)`` pooled over the runs of ``recipes`` (each recipe once): the
    within-recipe spread, ``df`` the runs minus one each; ``sd`` None with no repeat."""
    seen, df, ss = set(), 0, 0.0
    for recipe in recipes:
        if recipe is None or recipe.sha in seen or not recipe.n:
            continue
        seen.add(recipe.sha)
        df += recipe.n - 1
        ss += recipe.ss
    return (math.sqrt(ss / df) if df else None), df


def look_level(share: float, runs: int) -> float:
    """The one-sided level of a candidate's look at ``runs`` runs (look ``runs - 1``) out of its ``share``."""
    return share * SPEND / (runs - 1) ** 2


def as_gain(bar: float, floor: float) -> float:
    """A ``need_log`` as a relative gain (the floor exactly when the floor is what binds)."""
    return floor if bar == math.log1p(floor) else math.expm1(bar)


def need_log(share: float, runs: int, reference_runs: int, sd: float, df: int, floor: float) -> float:
    """The least ``d`` (difference of mean log throughput) with which a candidate of ``runs`` runs passes."""
    se = sd * math.sqrt(1.0 / runs + 1.0 / reference_runs)
    return max(math.log1p(floor), t_quantile(1 - look_level(share, runs), df) * se)


def least_share(d: float, runs: int, reference_runs: int, sd: Optional[float], df: int, floor: float) -> float:
    """The share above which a candidate of ``runs`` runs ``d`` ahead (difference of mean log throughput) passes
    the leader test, ``math.inf`` when it passes at none: ``d`` must clear the floor and its one-sided p-value
    ``P(T > d / se)`` must lie below the look's level. This is ``d > need_log(share, ...)`` read the other way
    round (one distribution function, no quantile), so the walk can ask it of a chain once and then compare
    shares."""
    if sd is None or runs < 2 or not d > math.log1p(floor):
        return math.inf
    se = sd * math.sqrt(1.0 / runs + 1.0 / reference_runs)
    if se == 0:
        return 0.0
    return t_cdf(-d / se, df) * (runs - 1) ** 2 / SPEND
