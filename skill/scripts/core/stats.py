"""Student's t distribution for whole degrees of freedom, in the standard library (measurement.md §4).

The leader test and the gain intervals need t quantiles at the pooled degrees of freedom, which are always a
whole number (a sum of runs-minus-one). For whole ``df`` the distribution function has a finite closed form
(Abramowitz and Stegun 26.7.3 and 26.7.4, in the angle ``theta = atan(t / sqrt(df))``), so the quantile is
found by Halley's method on an exact function (started from the Cornish-Fisher expansion): no series is cut
short and no table is interpolated. The tests check
both against SciPy's ``stdtr`` and ``stdtrit``.
"""

from __future__ import annotations

import functools
import math
import statistics


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with ``df`` (a positive whole number) degrees of freedom."""
    if df < 1 or int(df) != df:
        raise ValueError("df must be a positive whole number, not %r" % (df,))
    df = int(df)
    if t == 0:
        return 0.5
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c = math.sin(theta), math.cos(theta)
    c2 = c * c
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2.4/3.5 cos^4 + ...)), the sum only for df > 1
        total, term = 0.0, 1.0
        for k in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        inside = (2 / math.pi) * (theta + (s * c * total if df > 1 else 0.0))
    else:  # even: sin (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ...)
        total, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        inside = s * total
    inside = min(1.0, max(0.0, inside))  # P(|T| <= |t|)
    return 0.5 + inside / 2 if t > 0 else 0.5 - inside / 2


@functools.lru_cache(maxsize=256)
def _log_density_constant(df: int) -> float:
    return math.lgamma((df + 1) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)


def t_pdf(t: float, df: int) -> float:
    """The density of Student's t with ``df`` degrees of freedom at ``t``."""
    return math.exp(_log_density_constant(df) - (df + 1) / 2.0 * math.log1p(t * t / df))


_NORMAL = statistics.NormalDist()


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The ``t`` with ``P(T <= t) = p`` (0 < p < 1), as closely as the distribution function's rounding allows
    (about 1e-12 relative at the leader test's levels; 1e-10 at p = 1 - 1e-6).

    Halley's method (Newton's with the density's slope, cubic near the root) on the exact distribution
    function, kept inside a bracket of the points seen on either side of the root: a step that leaves it is
    replaced by bisection (or a doubling while no point above the root is known)."""
    if not 0 < p < 1:
        raise ValueError("p must lie strictly between 0 and 1, not %r" % (p,))
    if df < 1 or int(df) != df:
        raise ValueError("df must be a positive whole number, not %r" % (df,))
    df = int(df)
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1 - p, df)
    z = _NORMAL.inv_cdf(p)
    x = z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)  # Cornish-Fisher
    if df >= 8:  # its next two terms (Abramowitz and Stegun 26.7.5), which help only where the series converges
        x += ((3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3) +
              (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / (92160 * df ** 4))
    lo, hi = 0.0, math.inf
    for _ in range(400):
        f = t_cdf(x, df) - p
        if f == 0:
            return x
        if f < 0:
            lo = x
        else:
            hi = x
        slope = t_pdf(x, df)
        if slope > 0:  # Halley's step: the density's own slope is -density (df + 1) x / (df + x^2)
            newton = f / slope
            nxt = x - newton / (1 + newton * (df + 1) * x / (2 * (df + x * x)))
        else:
            nxt = math.nan
        if not lo < nxt < hi:  # out of the bracket (or no slope left): bisect, or double while unbounded
            nxt = (lo + hi) / 2 if hi < math.inf else 2 * max(x, 1.0)
            if nxt > 1e300:
                return math.inf
        elif abs(nxt - x) <= 1e-5 * abs(nxt):  # the error is cubic in the step: about 1e-15 is left
            return nxt
        noise = 4e-16 / slope if slope > 0 else 0.0  # how far the root is known, given the function's rounding
        if abs(nxt - x) <= max(1e-13 * abs(nxt), noise) or (hi < math.inf and hi - lo <= 1e-13 * hi):
            return nxt
        x = nxt
    return x
