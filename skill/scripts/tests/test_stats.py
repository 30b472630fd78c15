"""Student's t for whole degrees of freedom (attune.core.stats) against SciPy's implementation."""

from __future__ import annotations

import math

import pytest

from attune.core import stats

special = pytest.importorskip("scipy.special")


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 10, 17, 30, 61, 200])
def test_the_distribution_function_is_scipys(df):
    for t in (-40.0, -6.2, -2.0, -0.3, 0.0, 0.05, 0.9, 1.7, 3.3, 8.0, 55.0):
        assert stats.t_cdf(t, df) == pytest.approx(float(special.stdtr(df, t)), abs=1e-12)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 6, 9, 15, 40, 120])
def test_the_quantile_is_scipys(df):
    for p in (1e-5, 0.01, 0.025, 0.3, 0.5, 0.8, 0.975, 0.99, 0.9939, 0.99985, 1 - 1e-7):
        expected = float(special.stdtrit(df, p))
        assert stats.t_quantile(p, df) == pytest.approx(expected, rel=1e-8, abs=1e-12)


def test_known_values_and_refusals():
    assert stats.t_quantile(0.975, 1) == pytest.approx(12.706204736174707)  # tan(pi (0.975 - 0.5))
    assert stats.t_quantile(0.995, 3) == pytest.approx(5.840909309733355)
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75)  # 1/2 + atan(1)/pi
    for bad in (0, 2.5, -1):
        with pytest.raises(ValueError):
            stats.t_cdf(1.0, bad)
    for bad in (0.0, 1.0, math.nan):
        with pytest.raises(ValueError):
            stats.t_quantile(bad, 3)
