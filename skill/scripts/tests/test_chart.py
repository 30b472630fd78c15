"""The throughput chart: what it shows (chart_data), the artists it draws (figure), and the best-so-far line
(ranking.leader_history) against the leader rule applied to every prefix of the runs."""

from __future__ import annotations

import math
import random

import pytest
from factory import Builder
from hypothesis import given, settings
from hypothesis import strategies as st

from attune.campaign import chart
from attune import cli
from attune.campaign import ranking as ranking_mod
from attune.core.measure import RunScore
from attune.campaign.ranking import RunView

SET = lambda arg: [{"op": "set", "arg": arg}]  # noqa: E731


def campaign_with_everything(directory):
    """A SYNTHETIC campaign: the baseline and two repeats, a kept change (r004, confirmed by r005), an OOM and a
    NaN run, a slower candidate, the leader (r009, confirmed by r010) built on r004, a removal and a run in flight."""
    b = Builder(directory)
    b.baseline(step=1000.0)
    b.launch("r004", "candidate", "overlap", parent="r001", change=SET("--overlap-grad-reduce"),
             lever="overlap-grad-reduce", hypothesis="hide the DP all-reduce")
    b.result("r004", 900.0)
    b.launch("r005", "confirm", "overlap", parent="r004")
    b.result("r005", 905.0)
    b.gate("r004")
    b.launch("r006", "candidate", "mbs2", parent="r004", change=SET("--micro-batch-size"), lever="micro-batch-size")
    b.result("r006", status="failed", failure={"class": "oom", "detail": "CUDA out of memory"})
    b.launch("r007", "candidate", "fp8", parent="r004", change=SET("--fp8-format"), lever="fp8")
    b.result("r007", status="failed", failure={"class": "nan_loss", "detail": "lm loss nan at iteration 7"})
    b.launch("r008", "candidate", "slow", parent="r004", change=SET("--slow"), lever="recompute")
    b.result("r008", 950.0)
    b.launch("r009", "candidate", "tp", parent="r004", change=SET("--tp-comm-overlap"), lever="tp-comm-overlap")
    b.result("r009", 800.0)
    b.launch("r010", "confirm", "tp", parent="r009")
    b.result("r010", 802.0)
    b.gate("r009")
    b.launch("r011", "candidate", "no-overlap", parent="r009", change=[{"op": "unset", "arg": "--overlap-grad-reduce"}],
             lever="overlap-grad-reduce")
    b.result("r011", 870.0)
    b.launch("r012", "candidate", "running", parent="r009", change=SET("--x"), lever="other: --x")
    return b


@pytest.fixture
def ranked(tmp_path):
    b = campaign_with_everything(tmp_path / "c")
    return ranking_mod.build(b.campaign.ledger.rows())


def test_chart_data_shows_every_run_by_purpose_and_failures_by_class(ranked):
    data = chart.chart_data(ranked)
    series = {(purpose, colour): xs for purpose, colour, xs, _ys in data["series"]}
    assert series == {("baseline", "baseline"): [1], ("repeat", "baseline"): [2, 3],
                      ("candidate", "kept"): [4, 9], ("confirm", "kept"): [5, 10], ("candidate", "other"): [8, 11]}
    assert data["failed"] == [(6, "oom"), (7, "nan_loss")]
    assert data["unscored"] == [(12, "running")]
    assert [text for _x, _y, text in data["labels"]] == ["overlap-grad-reduce", "recompute", "tp-comm-overlap",
                                                         "−overlap-grad-reduce"]
    assert data["best"][-1] == ranked.leader.score and ranked.leader.first.run == "r009"
    assert data["band"][-1] == pytest.approx(ranked.band) and data["band_text"] == ranking_mod.band_text(ranked.band)


def test_the_figure_draws_markers_failures_best_so_far_band_and_labels(ranked):
    pytest.importorskip("matplotlib")
    data = chart.chart_data(ranked)
    fig = chart.figure(data)
    ax = fig.axes[0]
    lines = {line.get_gid(): line for line in ax.get_lines()}
    markers = {gid: lines[gid].get_marker() for gid in lines if gid.startswith("runs:")}
    assert markers == {"runs:baseline:baseline": "s", "runs:repeat:baseline": "s", "runs:candidate:kept": "o",
                       "runs:confirm:kept": "D", "runs:candidate:other": "o"}
    assert lines["runs:repeat:baseline"].get_markerfacecolor() != lines["runs:baseline:baseline"].get_markerfacecolor()
    assert list(lines["failed"].get_xdata()) == [6, 7] and lines["failed"].get_marker() == "x"
    assert sorted(text.get_text() for text in ax.texts if text.get_gid() == "failed-label") == ["nan_loss", "oom"]
    best = lines["best-so-far"]
    assert best.get_drawstyle() == "steps-post"
    assert best.get_ydata()[-1] == pytest.approx(ranked.leader.score)
    assert best.get_ydata()[0] == pytest.approx(ranked.runs[0].tokens)  # the baseline's first run leads at first
    to_lead = lines["to-lead"].get_ydata()
    assert to_lead[-1] == pytest.approx(ranked.leader.score * (1 + ranked.band))
    assert all(math.isnan(y) for y in to_lead[:2]) and not math.isnan(to_lead[2])  # from where the test is established
    labels = [text.get_text() for text in ax.texts if text.get_gid() == "label"]
    assert labels == ["overlap-grad-reduce", "recompute", "tp-comm-overlap", "−overlap-grad-reduce"]
    legend = [text.get_text() for text in fig.legends[0].get_texts()]
    assert "to lead with 2 runs: %s (the leader test)" % ranking_mod.band_text(ranked.band) in legend
    assert {"baseline", "repeat of the baseline", "candidate", "confirmation",
            "failed run, with its failure class"} <= set(legend)


def test_rank_writes_the_chart_for_that_campaign(tmp_path):
    pytest.importorskip("matplotlib")
    b = campaign_with_everything(tmp_path / "c")
    assert cli.main(["rank", "--campaign", str(b.campaign.dir)]) == 0
    png = b.campaign.dir / "results_throughput.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_many_candidates_name_only_the_leaders_changes():
    runs = {"r%04d" % i: _view(i, "candidate" if i > 3 else "baseline" if i == 1 else "repeat",
                               "base" if i <= 3 else "c%d" % i, 1000.0 + i) for i in range(1, 60)}
    ranking = ranking_mod.assemble(runs, [], [])
    data = chart.chart_data(ranking)
    assert len([run for run in ranking.runs if run.purpose == "candidate"]) > chart.MAX_LABELS
    assert data["labels"] == []  # no candidate leads (none is gated and confirmed), so none is named


def test_a_lever_label_is_short():
    view = _view(4, "candidate", "x", 1.0)
    view.lever, view.change = "", [{"op": "set", "arg": "--a-very-long-argument-name-indeed", "value": 3}]
    assert chart.lever_label(view).endswith("…") and len(chart.lever_label(view)) == chart.LABEL_CHARS


def _view(index, purpose, recipe, tokens, gate=None, ok=True):
    return RunView(run="r%04d" % index, purpose=purpose, recipe=recipe, launch_ts="2026-11-02T%05d" % index, gpus=8,
                   backend="local", lever="lever-%d" % index, status="finished" if ok else "failed",
                   score=RunScore(True, "", tokens) if ok else RunScore(False, "run failed"), gate=gate)


LEVELS = [950.0, 1000.0, 1004.0, 1010.0, 1016.0, 1021.0, 1025.0, 1050.0, 1100.0]  # close: chains and ties


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(LEVELS), min_size=5, max_size=5),
       st.lists(st.tuples(st.integers(0, 4), st.sampled_from([0.0, 0.0, -0.002, 0.001, 0.003, 0.006]),
                          st.sampled_from([None, "pass", "pass", "pass", "fail"]), st.integers(0, 9).map(bool)),
                min_size=1, max_size=30),
       st.sampled_from([0.002, 0.005, 0.01]), st.integers(2, 3), st.sampled_from([0.05, 0.4]))
def test_leader_history_is_the_ranking_of_every_prefix(levels, spec, floor, repeats, rate):
    """Each entry is what ``assemble`` gives for the runs launched up to it (order, not file position)."""
    runs = {}
    for index, (recipe, jitter, gate, ok) in enumerate(spec, 1):
        purpose = ("baseline" if index == 1 else "repeat") if recipe == 0 else (
            "candidate" if not any(v.recipe == "c%d" % recipe for v in runs.values()) else "confirm")
        view = _view(index, purpose, "base" if recipe == 0 else "c%d" % recipe, levels[recipe] * (1 + jitter), gate,
                     ok)
        runs[view.run] = view
    full = ranking_mod.assemble(runs, [], [], floor, repeats, rate)
    history = ranking_mod.leader_history(full)
    assert len(history) == len(full.runs)
    for count, (score, band, established) in enumerate(history, 1):
        prefix = ranking_mod.assemble({run.run: run for run in full.runs[:count]}, [], [], floor, repeats, rate)
        expected = prefix.leader.score if prefix.leader is not None else None
        assert (score is None) == (expected is None)
        if score is not None:
            assert math.isclose(score, expected)
        assert math.isclose(band, prefix.band) and established == prefix.band_established


def _assert_history_is_every_prefix(full):
    history = ranking_mod.leader_history(full)
    assert len(history) == len(full.runs)
    for count, (score, band, established) in enumerate(history, 1):
        prefix = ranking_mod.assemble({run.run: run for run in full.runs[:count]}, [], [], full.noise_floor,
                                      full.baseline_repeats, full.false_win_rate)
        expected = prefix.leader.score if prefix.leader is not None else None
        assert (score is None) == (expected is None), count
        if score is not None:
            assert math.isclose(score, expected), count
        assert math.isclose(band, prefix.band) and established == prefix.band_established, count
    return history


@pytest.mark.parametrize("seed", range(4))
def test_a_long_campaign_has_the_history_of_every_prefix(seed):
    """Sixty recipes over 200 runs, confirmations and gates arriving late and in any order: the history walks on
    from the part of its chain below each moved recipe, and must still agree with a full ranking of each prefix."""
    rng = random.Random(seed)
    levels = {"c%d" % i: 1000.0 * (1 + rng.uniform(-0.01, 0.05)) for i in range(60)}
    runs, seen, index = {}, set(), 0
    for index in range(1, 4):
        view = _view(index, "baseline" if index == 1 else "repeat", "base", 1000.0 * (1 + rng.gauss(0, 0.003)))
        runs[view.run] = view
    for index in range(4, 204):
        recipe = rng.choice(sorted(levels))
        purpose = "confirm" if recipe in seen else "candidate"
        seen.add(recipe)
        view = _view(index, purpose, recipe, levels[recipe] * (1 + rng.gauss(0, 0.004)),
                     rng.choice([None, None, "pass", "pass", "pass", "fail"]), rng.random() > 0.05)
        runs[view.run] = view
    history = _assert_history_is_every_prefix(ranking_mod.assemble(runs, [], [], 0.005, 3, 0.05))
    assert len({score for score, _band, _established in history}) >= 3  # the leader moved: chains formed


def test_the_best_so_far_follows_the_leader_rule_not_the_best_score():
    """A recipe within the band of the leader does not lead, even when its score is higher: the line stays."""
    plan = [("baseline", "base", 1000.0, None)] + [("repeat", "base", 1000.0, None)] * 2 + [
        ("candidate", "a", 1020.0, "pass"), ("confirm", "a", 1020.0, None),
        ("candidate", "b", 1025.0, "pass"), ("confirm", "b", 1025.0, None),
        ("candidate", "c", 1100.0, None), ("confirm", "c", 1100.0, None)]  # c: never gated
    runs = {}
    for index, (purpose, recipe, tokens, gate) in enumerate(plan, 1):
        view = _view(index, purpose, recipe, tokens, gate)
        runs[view.run] = view
    ranking = ranking_mod.assemble(runs, [], [])
    history = [score for score, _band, _established in ranking_mod.leader_history(ranking)]
    assert history == pytest.approx([1000.0] * 4 + [1020.0] * 5) and ranking.leader.score == pytest.approx(1020.0)
