"""Ranking from the ledger alone: band, leader rule, paired confirmation, order independence."""

from __future__ import annotations

import json
import math
import random
import tempfile
from pathlib import Path

import pytest
from factory import Builder, jittered, settings as make_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attune.campaign import ranking as ranking_mod
from attune.core import stats
from attune.core.chainlog import ENVELOPE, ChainLog
from attune.core.schema import validate_ledger_row


def rank(builder, **kwargs):
    return ranking_mod.build(builder.campaign.ledger.rows(), **kwargs)


def baseline(b, runs=3, step=1000.0):
    b.baseline(runs, step)


def noisy_baseline(b, steps):
    """The baseline r001 and its repeats r002.., one run per step time in ``steps`` (ms per iteration)."""
    for index, step in enumerate(steps, start=1):
        b.launch("r%03d" % index, "baseline" if index == 1 else "repeat", "base", parent=None if index == 1 else "r001")
        b.result("r%03d" % index, step)


def confirmed_candidate(b, run, confirm, recipe, parent, steps):
    """Candidate ``run`` of ``recipe`` on ``parent`` and its confirmation, at the two step times, gated."""
    b.launch(run, "candidate", recipe, parent=parent)
    b.result(run, steps[0])
    b.launch(confirm, "confirm", recipe, parent=run)
    b.result(confirm, steps[1])
    b.gate(run)


def test_band_waits_for_baseline_repeats(tmp_path):
    b = Builder(tmp_path)
    b.launch("r001", "baseline", "base")
    b.result("r001", 1000.0)
    confirmed_candidate(b, "r002", "r003", "fast", "r001", (500.0, 500.0))
    ranked = rank(b)
    assert not ranked.band_established and ranked.repeats_needed == 2
    assert ranked.leader is ranked.baseline
    assert any("repeat the baseline" in item for item in ranked.pending)


def _log_sd(tokens):
    logs = [math.log(value) for value in tokens]
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def test_the_band_is_what_a_2_run_candidate_needs_from_the_baselines_log_sd(tmp_path):
    b = Builder(tmp_path)
    b.launch("r001", "baseline", "base")
    b.result("r001", 1000.0)
    b.launch("r002", "repeat", "base", parent="r001")
    b.result("r002", 1030.0)
    b.launch("r003", "repeat", "base", parent="r001")
    b.result("r003", 1010.0)
    ranked = rank(b)
    sd = _log_sd([run.tokens for run in ranked.baseline.rankable])
    assert ranked.noise_sd == pytest.approx(sd) and ranked.noise_df == 2
    # one candidate tested of the at least 5 the rate is split over: 1% each, its first look 6/pi^2 of that;
    # df 2 from the baseline plus the candidate's own repeat
    level = 0.05 / 5 * 6 / math.pi ** 2
    t = stats.t_quantile(1 - level, 3)
    assert ranked.band == pytest.approx(math.expm1(t * sd * math.sqrt(1 / 2 + 1 / 3)))
    assert ranked.band_established and "3 baseline run(s)" in ranked.band_basis
    assert rank(b, noise_floor=0.2).band == 0.2
    assert rank(b, false_win_rate=0.2).band < ranked.band


def test_a_gain_has_the_t_interval_of_the_log_ratio(tmp_path):
    b = Builder(tmp_path)
    noisy_baseline(b, (1000.0, 1012.0, 994.0))
    confirmed_candidate(b, "r004", "r005", "fast", "r001", (930.0, 941.0))
    ranked = rank(b)
    base, fast = ranked.baseline, ranked.recipe_of("r004")
    xb = [math.log(run.tokens) for run in base.rankable]
    xc = [math.log(run.tokens) for run in fast.rankable]
    d = sum(xc) / 2 - sum(xb) / 3
    ss = sum((x - sum(xb) / 3) ** 2 for x in xb) + sum((x - sum(xc) / 2) ** 2 for x in xc)
    sd = math.sqrt(ss / 3)
    half = stats.t_quantile(0.975, 3) * sd * math.sqrt(1 / 2 + 1 / 3)
    gain = ranked.compare(fast)
    assert gain.estimate == pytest.approx(math.expm1(d)) and gain.df == 3 and gain.sd == pytest.approx(sd)
    assert (gain.low, gain.high) == (pytest.approx(math.expm1(d - half)), pytest.approx(math.expm1(d + half)))
    assert fast.score == pytest.approx(math.exp(sum(xc) / 2))  # the geometric mean
    assert gain.wins == (d > stats.t_quantile(1 - 0.01 * 6 / math.pi ** 2, 3) * sd * math.sqrt(1 / 2 + 1 / 3))
    assert ranking_mod.gain_text(gain).startswith("%+.2f%% (95%% CI %+.2f%% to %+.2f%%; 2 vs 3 runs)" % (
        100 * gain.estimate, 100 * gain.low, 100 * gain.high))


def test_a_noisy_candidate_widens_only_its_own_test(tmp_path):
    b = Builder(tmp_path)
    noisy_baseline(b, (1000.0, 1006.0, 997.0))
    before = rank(b)
    confirmed_candidate(b, "r004", "r005", "noisy", "r001", (800.0, 1000.0))
    confirmed_candidate(b, "r006", "r007", "steady", "r001", (960.0, 962.0))
    ranked = rank(b)
    base, steady = ranked.baseline, ranked.recipe_of("r006")
    # the baseline's and the leader's runs: the noisy candidate is not in it
    assert ranked.noise_sd == pytest.approx(ranking_mod.pooled((base, steady))[0]) and ranked.noise_df == 3
    assert before.noise_sd == pytest.approx(ranking_mod.pooled((base,))[0])
    noisy, steady = ranked.compare(ranked.recipe_of("r004")), ranked.compare(ranked.recipe_of("r006"))
    assert noisy.sd > 5 * steady.sd and noisy.need > steady.need
    assert not noisy.wins and steady.wins and ranked.leader.first.run == "r006"


def test_each_look_and_each_candidate_spends_part_of_the_rate(tmp_path):
    b = Builder(tmp_path)
    noisy_baseline(b, (1000.0, 1008.0, 995.0))
    confirmed_candidate(b, "r004", "r005", "x", "r001", (975.0, 976.0))
    two = rank(b).compare(rank(b).recipe_of("r004"))
    assert two.level == pytest.approx(0.01 * 6 / math.pi ** 2)
    b.launch("r006", "repeat", "x", parent="r004")
    b.result("r006", 975.5)
    three = rank(b).compare(rank(b).recipe_of("r004"))
    assert three.level == pytest.approx(two.level / 4)  # look 2 of a candidate: 6 / (pi^2 2^2) of its share
    for index in range(7, 15):  # 8 more candidates tested: the rate is split 9 ways
        b.launch("r%03d" % index, "candidate", "y%d" % index, parent="r001")
        b.result("r%03d" % index, 1001.0)
    ranked = rank(b)
    assert ranked.tested == 9 and ranked.compare(ranked.recipe_of("r004")).level == pytest.approx(0.05 / 9 * 6 / math.pi ** 2 / 4)


def test_a_close_candidate_is_repeated_before_it_is_judged(tmp_path):
    b = Builder(tmp_path)
    noisy_baseline(b, (1000.0, 1010.0, 990.0))
    b.launch("r004", "candidate", "close", parent="r001")
    b.result("r004", 975.0)  # +2.6%: above the floor, below what 2 runs need at this noise
    b.launch("r005", "confirm", "close", parent="r004")
    b.result("r005", 977.0)
    b.gate("r004")
    ranked = rank(b)
    gain = ranked.compare(ranked.recipe_of("r004"))
    assert ranked.noise_floor < gain.estimate < gain.need and not gain.wins
    assert ranked.run_status(ranked.run("r004")) == "ahead of leader, not conclusive"
    assert any(item.startswith("repeat r004: +2.") and "--repeat-of r004" in item for item in ranked.pending)
    assert [(a["run"], a["repeat_of"]) for a in ranked.actions if a["action"] == "repeat"] == [("r004", "r004")]
    assert [a["text"] for a in ranked.actions] == ranked.pending


def test_leader_needs_band_gate_and_confirmation(tmp_path):
    b = Builder(tmp_path)
    baseline(b)
    b.launch("r004", "candidate", "fast", parent="r001")
    b.result("r004", 900.0)  # +11%
    ranked = rank(b)
    assert ranked.leader is ranked.baseline
    assert ranked.run_status(ranked.run("r004")) == "beats leader; needs confirmation and gate"
    assert any(item.startswith("confirm r004") for item in ranked.pending)
    b.launch("r005", "confirm", "fast", parent="r004")
    b.result("r005", 905.0)
    ranked = rank(b)
    assert ranked.leader is ranked.baseline and ranked.run_status(ranked.run("r004")) == "beats leader; needs gate"
    b.gate("r004", "fail", reasons=["loss diverged"])
    ranked = rank(b)
    assert ranked.leader is ranked.baseline and ranked.run_status(ranked.run("r004")) == "gate failed"


def test_gated_confirmed_candidate_leads_only_beyond_band(tmp_path):
    b = Builder(tmp_path)
    baseline(b)
    b.launch("r004", "candidate", "tiny", parent="r001")
    b.result("r004", 995.0)  # +0.5%, inside the 1% floor
    b.launch("r005", "confirm", "tiny", parent="r004")
    b.result("r005", 995.0)
    b.gate("r004")
    ranked = rank(b)
    assert ranked.leader is ranked.baseline
    assert ranked.run_status(ranked.run("r004")) == "within noise of leader"
    confirmed_candidate(b, "r006", "r007", "big", "r001", (950.0, 950.0))
    ranked = rank(b)
    assert ranked.leader.first.run == "r006"
    assert ranked.relative(ranked.leader.score, ranked.baseline) == pytest.approx(1000 / 950 - 1)
    # a later candidate within the band of the new leader does not displace it
    confirmed_candidate(b, "r008", "r009", "big+", "r006", (946.0, 946.0))
    ranked = rank(b)
    assert ranked.leader.first.run == "r006"
    assert [recipe.first.run for recipe in ranked.lineage(ranked.leader)] == ["r001", "r006"]


def test_failed_and_unrankable_runs_never_lead(tmp_path):
    b = Builder(tmp_path)
    baseline(b)
    b.launch("r004", "candidate", "nan", parent="r001")
    b.result("r004", 500.0, nan_at=6)
    b.launch("r005", "confirm", "nan", parent="r004")
    b.result("r005", 500.0)
    b.gate("r004")
    ranked = rank(b)
    assert ranked.leader is ranked.baseline  # one rankable run is no confirmation
    assert ranked.run_status(ranked.run("r004")) == "not rankable: NaN loss at iteration 6"


def test_in_flight_runs_are_pending(tmp_path):
    b = Builder(tmp_path)
    baseline(b)
    b.launch("r004", "candidate", "x", parent="r001")
    ranked = rank(b)
    assert [run.run for run in ranked.in_flight] == ["r004"]
    assert ranked.pending[0].startswith("finalize run r004")
    assert ranked.run_status(ranked.run("r004")) == "running"


def _shuffled_ledger(source_rows, seed, directory):
    """Write the same payload rows in another order, re-chained, and read them back."""
    order = list(source_rows[1:])
    random.Random(seed).shuffle(order)
    Path(directory).mkdir(parents=True)
    log = ChainLog(Path(directory) / "ledger.jsonl", validate_ledger_row)
    head = source_rows[0]
    log.append(head["kind"], {k: v for k, v in head.items() if k not in ENVELOPE}, campaign=head["campaign"],
               ts=head["ts"])
    for row in order:
        log.append(row["kind"], {k: v for k, v in row.items() if k not in ENVELOPE}, ts=row["ts"])
    return log.rows()


def _fingerprint(ranked):
    return json.dumps({
        "band": ranked.band, "basis": ranked.band_basis, "established": ranked.band_established,
        "baseline": ranked.baseline and ranked.baseline.sha, "leader": ranked.leader and ranked.leader.sha,
        "runs": [(run.run, run.status, run.tokens, run.gate, ranked.run_status(run)) for run in ranked.runs],
        "pending": ranked.pending, "stop": ranked.stop and ranked.stop["reason"],
    }, sort_keys=True)


campaigns = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.floats(800, 1100), st.sampled_from(["pass", "fail", None]),
              st.booleans(), st.booleans()),
    min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(campaigns, st.integers(2, 4), st.integers(0, 2**16))
def test_ranking_does_not_depend_on_row_order(plan, repeats, seed):
    with tempfile.TemporaryDirectory() as tmp:
        b = Builder(Path(tmp) / "one")
        rng = random.Random(seed)
        baseline(b, runs=repeats, step=1000.0)
        number = repeats
        for recipe, step, verdict, confirm, finish in plan:
            number += 1
            run = "r%03d" % number
            b.launch(run, "candidate", recipe, parent="r001")
            if not finish:
                continue
            b.result(run, jittered(step, 0.02, rng.random()))
            if confirm:
                number += 1
                b.launch("r%03d" % number, "confirm", recipe, parent=run)
                b.result("r%03d" % number, jittered(step, 0.02, rng.random()))
            if verdict:
                b.gate(run, verdict)
        rows = b.campaign.ledger.rows()
        expected = _fingerprint(ranking_mod.build(rows))
        shuffled = _shuffled_ledger(rows, seed, Path(tmp) / "two")
        assert [row["seq"] for row in shuffled] == list(range(len(rows)))
        assert _fingerprint(ranking_mod.build(shuffled)) == expected


def test_settings_feed_ranking(tmp_path):
    s = make_settings(ATTUNE_NOISE_FLOOR="0.05", ATTUNE_BASELINE_REPEATS="2")
    b = Builder(tmp_path, settings_obj=s)
    baseline(b, runs=2)
    ranked = ranking_mod.build(b.campaign.ledger.rows(), s.window, s.noise_floor, s.baseline_repeats)
    assert ranked.band == 0.05 and ranked.band_established


def test_profile_runs_are_listed_but_never_scored(tmp_path):
    b = Builder(tmp_path)
    baseline(b)
    b.launch("r004", "profile", "base+profiler", parent="r001")
    b.result("r004", 500.0)
    ranked = rank(b)
    assert ranked.run("r004").tokens is None
    assert ranked.run_status(ranked.run("r004")).startswith("not rankable: profile run")
    assert ranked.leader is ranked.baseline


def test_runs_launched_through_the_profiler_hook_are_never_scored(tmp_path):
    from attune.campaign import snapshot
    b = Builder(tmp_path)
    baseline(b)
    hooks = [{"name": "profiler", "args": {"start": "10", "end": "12"}}]
    b.launch("r004", "candidate", "fast", parent="r001", pod_hooks=hooks)
    b.launch("r005", "confirm", "fast", parent="r004", pod_hooks=[{"name": "nccl_debug"}] + hooks)
    b.launch("r006", "repeat", "base", parent="r001", pod_hooks=[{"name": "nccl_debug"}])
    snapshot.take(b.campaign.dir, use_cache=True).finish()  # the launches are cached; the results merge into them
    for run in ("r004", "r005", "r006"):
        b.result(run, 500.0 if run != "r006" else 1000.0)
    b.gate("r004")
    for ranked in (rank(b), snapshot.take(b.campaign.dir, use_cache=True).ranking):
        for run in ("r004", "r005"):
            assert ranked.run(run).tokens is None
            assert ranked.run_status(ranked.run(run)).startswith("not rankable: launched through the profiler pod hook")
        assert ranked.run("r006").tokens is not None  # other hooks do not slow the steps
        assert ranked.leader is ranked.baseline


def test_noise_wider_than_a_lever_can_clear_is_pending(tmp_path):
    b = Builder(tmp_path / "c")
    noisy_baseline(b, (1000.0, 1300.0, 1000.0))
    ranked = rank(b)
    sd = _log_sd([run.tokens for run in ranked.baseline.rankable])
    assert ranked.band_established and ranked.noise_sd == pytest.approx(sd) and sd > ranking_mod.NOISY_SD
    assert any(item.startswith("the run-to-run sd is %.2f%%" % (100 * sd)) for item in ranked.pending)
    quiet = Builder(tmp_path / "q")
    quiet.baseline(3, 1000.0)
    assert not any("run-to-run sd" in item for item in rank(quiet).pending)


def _stack(b):
    """A baseline of 3 noisy runs, change A (r004, ~10% faster) and on it change B (r006, ~6% faster again)."""
    noisy_baseline(b, (1000.0, 1010.0, 990.0))
    confirmed_candidate(b, "r004", "r005", "A", "r001", (900.0, 905.0))
    confirmed_candidate(b, "r006", "r007", "A+B", "r004", (850.0, 853.0))


def _removal(b, run, steps, verdict="pass"):
    b.launch(run, "candidate", "A+B-A %s" % run, parent="r006", leave_out="r004")
    for index, step in enumerate(steps):
        if index:
            b.launch("%s-%d" % (run, index), "confirm", "A+B-A %s" % run, parent=run)
        b.result(run if not index else "%s-%d" % (run, index), step)
    if verdict:
        b.gate(run, verdict)


@pytest.mark.parametrize("steps", [(850.0, 851.0),  # a little faster, within r006's interval: the leave-one-out rule
                                   (853.0, 854.0)])  # a little slower: the walk takes it (past A) before r006
def test_a_kept_change_whose_removal_is_as_fast_is_left_out(tmp_path, steps):
    b = Builder(tmp_path)
    _stack(b)
    ranked = rank(b)
    assert ranked.leader.first.run == "r006" and not ranked.dropped
    _removal(b, "r008", steps)  # the stack without A: as fast, within its interval
    ranked = rank(b)
    assert ranked.leader.first.run == "r008"
    assert ranked.dropped == ((ranked.recipe_of("r004").sha, ranked.recipe_of("r008").sha),)
    assert ranked.run_status(ranked.run("r004")) == \
        "left out: the stack is as fast without it (leave-one-out r008)"
    assert ranked.recipe_of("r004").sha not in ranked.kept and ranked.recipe_of("r006").sha in ranked.kept
    gain = ranked.compare(ranked.recipe_of("r006"), ranked.recipe_of("r008"))
    assert gain.low <= 0
    assert [(removal.first.run, stack.first.run) for removal, stack in ranked.leave_outs(ranked.recipe_of("r004"))] \
        == [("r008", "r006")]
    assert ranking_mod.leader_history(ranked)[-1][0] == pytest.approx(ranked.leader.score)


@pytest.mark.parametrize("steps, verdict", [((950.0, 952.0), "pass"),  # A pulls its weight: the removal is slower
                                            ((851.0,), "pass"),  # one run: not yet measured enough
                                            ((851.0, 852.0), "fail"),  # the gate failed it
                                            ((851.0, 852.0), None)])  # not gated
def test_a_removal_that_loses_or_is_not_eligible_leaves_the_change_in(tmp_path, steps, verdict):
    b = Builder(tmp_path)
    _stack(b)
    _removal(b, "r008", steps, verdict)
    ranked = rank(b)
    assert ranked.leader.first.run == "r006" and not ranked.dropped
    assert ranked.recipe_of("r004").sha in ranked.kept
    assert ranking_mod.leader_history(ranked)[-1][0] == pytest.approx(ranked.leader.score)


def test_a_removal_of_a_change_off_the_lineage_is_an_ordinary_candidate(tmp_path):
    b = Builder(tmp_path)
    _stack(b)
    b.launch("r008", "candidate", "C", parent="r001")
    b.result("r008", 990.0)
    b.launch("r009", "candidate", "A+B-C", parent="r006", leave_out="r008")  # r008 is not on r006's lineage
    b.result("r009", 849.0)  # a little faster than r006, within its interval: r006 stays, r008 is no change of it
    b.launch("r010", "confirm", "A+B-C", parent="r009")
    b.result("r010", 850.0)
    b.gate("r009")
    ranked = rank(b)
    assert ranked.leader.first.run == "r006" and not ranked.dropped


def test_status_compares_a_runs_recipe_with_the_leader_as_the_verdict_does(tmp_path):
    """``status.last_results[].vs_leader`` is the run's recipe against the leader, as the verdict judges it (the
    geometric means of their rankable runs); the run alone is ``run_vs_leader`` beside it: a slow confirmation of a
    recipe that is ahead reads ahead, with its own number shown."""
    from attune.campaign import snapshot, status
    b = Builder(tmp_path)
    noisy_baseline(b, [1000.0, 1010.0, 990.0])
    confirmed_candidate(b, "r004", "r005", "fast", "r001", [900.0, 1020.0])  # the confirmation is slower than r001
    ranking = rank(b)
    recipe = ranking.recipe_of("r004")
    info = status.collect(snapshot.take(b.campaign.dir))
    last = {item["run"]: item for item in info["last_results"]}
    confirm = last["r005"]
    assert confirm["run_vs_leader"] == pytest.approx(ranking.relative(ranking.run("r005").tokens, ranking.leader))
    assert confirm["vs_leader"] == pytest.approx(ranking.relative(recipe.score, ranking.leader))
    assert confirm["recipe_runs"] == 2 and last["r004"]["vs_leader"] == confirm["vs_leader"]
    assert confirm["vs_leader"] != confirm["run_vs_leader"]
    text = status.render(info, "")
    assert "result: r005 " in text and "vs leader over 2 run(s); this run " in text
