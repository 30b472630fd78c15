"""Scoring one run: the window, the median, tokens/s/GPU and the reasons a run is not rankable."""

from __future__ import annotations

import math

import pytest
from factory import metrics

from attune.core.measure import encode_float, score_run, to_float


def test_score_uses_the_median_step_time_of_the_window():
    steps = [9000.0] * 4 + [1000.0 + 10 * i for i in range(15)] + [5000.0]  # warm-up and exit outside 5..19
    score = score_run("finished", metrics(steps, gbs=256, seq=4096, gpus=64))
    assert score.rankable and score.steps == 15
    sizes = {"global_batch_size": 256, "seq_length": 4096, "gpus": 64}
    from attune.core import measure as m
    assert m._score_clean_run(metrics(steps, gbs=256, seq=4096, gpus=64), sizes, (5, 19)) == score
    assert score.step_time_s == pytest.approx(1.070)
    assert score.tokens_per_s_per_gpu == pytest.approx(256 * 4096 / (1.070 * 64))
    assert score.step_min_s == pytest.approx(1.0) and score.step_max_s == pytest.approx(1.14)
    assert score.step_mean_s == pytest.approx(1.07)
    assert score.spread == pytest.approx(0.14 / 1.07)


def test_window_is_configurable():
    steps = [1000.0] * 10 + [2000.0] * 10
    assert score_run("finished", metrics(steps), window=(2, 9)).step_time_s == pytest.approx(1.0)
    assert score_run("finished", metrics(steps), window=(12, 19)).step_time_s == pytest.approx(2.0)


@pytest.mark.parametrize("kwargs, why", [
    ({"drop": (7,)}, "iteration(s) 7 of the window 5-19 missing"),
    ({"drop": (5, 6, 7, 12)}, "iteration(s) 5-7, 12 of the window 5-19 missing"),
    ({"nan_at": 2}, "NaN loss at iteration 2"),
    ({"skipped_at": 20}, "iteration 20 was skipped"),
])
def test_not_rankable_with_reason(kwargs, why):
    score = score_run("finished", metrics(1000.0, **kwargs))
    assert not score.rankable and score.why == why and score.tokens_per_s_per_gpu is None


def test_other_reasons():
    assert score_run("failed", None, failure={"class": "oom"}).why == "run failed: oom"
    assert score_run("failed", None, failure={"class": "oom", "memory": "host"}).why == "run failed: oom (host memory)"
    assert score_run("failed", None, failure={"class": "oom", "memory": "gpu"}).why == "run failed: oom (GPU memory)"
    assert score_run("timeout", None).why == "run timeout"
    assert score_run("finished", None).why == "no metrics recorded"
    bad = metrics(1000.0)
    bad["gpus"] = 0
    assert "metrics.gpus" in score_run("finished", bad).why
    inf = metrics(1000.0)
    inf["loss"][3] = "inf"
    assert score_run("finished", inf).why == "infinite loss at iteration 4"
    zero = metrics(1000.0)
    zero["step_ms"][8] = 0
    assert score_run("finished", zero).why == "iteration 9 has no positive step time"
    twice = metrics(1000.0)
    for column in ("iter", "step_ms", "loss", "skipped", "nan"):
        twice[column].append(twice[column][0])
    assert score_run("finished", twice).why == "iteration 1 is reported twice"
    nan_count = metrics(1000.0)
    nan_count["nan"][10] = 1
    ragged = metrics(1000.0)
    ragged["loss"].pop()
    assert score_run("finished", ragged).why == "metrics.loss does not have one value per iteration"
    assert not score_run("finished", nan_count).rankable


def test_non_finite_round_trip():
    for value in (float("nan"), float("inf"), float("-inf"), 2.5):
        back = to_float(encode_float(value))
        assert (math.isnan(back) and math.isnan(value)) or back == value
    assert to_float(None) is None and to_float(True) is None and to_float("x") is None


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from attune.core import measure  # noqa: E402

values = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.integers(-2, 5000),
                   st.none(), st.sampled_from(["nan", "inf", "-inf", "x"]))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 22), st.data())
def test_fast_path_agrees_with_the_careful_path(count, data):
    def column(elements):
        return data.draw(st.lists(elements, min_size=count, max_size=count))
    numbers = list(range(1, count + 1))
    if data.draw(st.booleans()):
        numbers = column(st.integers(0, 22))
    metrics = {"global_batch_size": 8, "seq_length": 128, "gpus": 2, "iter": numbers,
               "step_ms": column(st.one_of(st.floats(0.5, 5000), values)),
               "loss": column(st.one_of(st.floats(0, 12), values)),
               "skipped": column(st.sampled_from([0, 0, 0, 1])), "nan": column(st.sampled_from([0, 0, 0, 1]))}
    sizes = {"global_batch_size": 8, "seq_length": 128, "gpus": 2}
    fast = measure._score_clean_run(metrics, sizes, (5, 19))
    careful = measure._score_careful(metrics, sizes, (5, 19))
    if fast is not None:
        assert fast == careful
