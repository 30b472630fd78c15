"""Student's t distribution for whole degrees of freedom, in the standard library (measurement.md §4).

The leader test and the gain intervals need t quantiles at the pooled degrees of freedom, which are always a
whole number (a sum of runs-minus-one). For whole ``df`` the distribution function has a finite closed form
(Abramowitz and Stegun 26.7.3 and 26.7.4, in the angle ``theta = atan(t / sqrt(df))``), so the quantile is
found by bisection on an exact function: no series is cut short and no table is interpolated. The tests check
both against SciPy's ``stdtr`` and ``stdtrit``.
"""

from __future__ import annotations

import functools
import math


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


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The ``t`` with ``P(T <= t) = p`` (0 < p < 1), to about 1e-12 relative."""
    if not 0 < p < 1:
        raise ValueError("p must lie strictly between 0 and 1, not %r" % (p,))
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
        if hi > 1e300:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * hi:
            break
    return (lo + hi) / 2
