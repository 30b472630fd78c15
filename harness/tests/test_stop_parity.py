"""One reading of campaign state: on 1,000 random ledgers (launches with and without an estimate, finished,
failed and never-submitted results, GPU time charged, runs left in flight, stops with finalized, unfinalized and
unknown evidence, launches after a stop), the Stop hook (``attune.core.state.read`` over the files read
tolerantly), ``attune budget`` (``budget.state`` over ``ranking.build``), ``attune status --json`` (the ranking's
``actions``, which the planner acts on) and ``attune stop`` (the refusal it gives a stop with the recorded one's
reason and evidence, run through the real CLI on part of them) agree: budget spent, reserved, left and exhausted,
the runs in flight, what is pending before the ranking's own actions, the leader, and whether a stop is valid."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "harness" / "hooks"))
sys.path.insert(0, str(REPO / "skill" / "scripts"))
sys.path.insert(0, str(REPO / "skill" / "scripts" / "tests"))

import campaign_files  # noqa: E402
import factory  # noqa: E402
from stop import campaign_state  # noqa: E402

from attune.campaign import budget as budget_mod  # noqa: E402
from attune.campaign import ranking as ranking_mod  # noqa: E402
from attune.core import state  # noqa: E402

LEDGERS = 1000


@pytest.fixture(autouse=True)
def _own_key_dir(tmp_path, monkeypatch):  # the integrity keys (harness/integrity_key.py) under tmp_path, not in HOME
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _random_campaign(directory, seed, record_stop=True):
    """A random campaign; with ``record_stop`` False, it ends where its stop would be recorded."""
    rng = random.Random(seed)
    gpu_budget = rng.random() < 0.5
    env = {"AUTOTUNE_GPUH_BUDGET": "%.2f" % rng.uniform(0.2, 3.0)} if gpu_budget else \
        {"AUTOTUNE_BUDGET": str(rng.randint(1, 8))}
    settings = factory.settings(**env) if gpu_budget else factory.settings(AUTOTUNE_GPUH_BUDGET="", **env)
    builder = factory.Builder(directory, settings, campaign_id="parity-%d" % seed)
    launched = []
    for index in range(1, rng.randint(1, 9)):
        run = "r%03d" % index
        builder.launch(run, "baseline" if index == 1 else "candidate", "rec%d" % index, gpus=rng.choice((1, 8)),
                       parent=None if index == 1 else "r001",
                       expected_gpu_hours=rng.choice((None, 0.05, 0.25, 1.0)))
        launched.append(run)
        fate = rng.random()
        if fate < 0.55:
            builder.result(run, 1000.0 + rng.random() * 100, gpus=8, seconds=rng.uniform(10, 900))
        elif fate < 0.7:
            builder.result(run, status="failed", gpus=8, seconds=rng.uniform(0, 300),
                           failure={"class": "oom", "evidence": "CUDA out of memory"})
        elif fate < 0.8:
            builder.result(run, status="failed", gpus=8, seconds=0.0,
                           failure={"class": state.SUBMIT_FAILED, "evidence": "submission refused"})
        # else: left in flight
    if launched and rng.random() < 0.5:
        evidence = rng.sample(launched, rng.randint(1, len(launched))) + (["r999"] if rng.random() < 0.1 else [])
        reason = rng.choice(("nothing left", " "))
        if not record_stop:
            return builder.campaign, settings, env
        builder.campaign.append("stop", ts=builder.clock(), reason=reason, evidence=evidence)
        if rng.random() < 0.2:
            builder.launch("r%03d" % (len(launched) + 1), "candidate", "late", parent="r001")
    return builder.campaign, settings, env


def _core_stop_valid(rows):
    """What `attune stop` requires of the stop it records (a reason, evidence the ledger has, no run in flight),
    applied to the last recorded one over the runs launched before it, and no launch after it."""
    stops = [row for row in rows if row["kind"] == "stop"]
    if not stops:
        return None
    last = stops[-1]
    evidence = last.get("evidence") or []
    if not str(last.get("reason", "")).strip() or not evidence:
        return False
    before = ranking_mod.build([row for row in rows if row["seq"] <= last["seq"]])
    if any(before.run(run) is None for run in evidence) or before.in_flight:
        return False
    return not any(row["kind"] == "launch" and row["seq"] > last["seq"] for row in rows)


def _cli_stop(directory, seed, stop):
    """The exit code `attune stop` gives the recorded stop's reason and evidence, on the same random campaign
    built again up to where the stop was recorded."""
    import subprocess
    copy = directory.parent / (directory.name + "-stop")
    _random_campaign(copy, seed, record_stop=False)
    done = subprocess.run([sys.executable, str(REPO / "skill" / "scripts" / "attune.py"), "stop", "--campaign",
                           str(copy), "--reason", stop["reason"], "--evidence"] + list(stop["evidence"]),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1, 2), done.stderr
    return done.returncode


@pytest.mark.parametrize("block", range(10))
def test_the_stop_hook_and_the_core_read_a_campaign_alike(tmp_path, block):
    for seed in range(block * LEDGERS // 10, (block + 1) * LEDGERS // 10):
        directory = tmp_path / ("c%d" % seed)
        campaign, settings, env = _random_campaign(directory, seed)
        rows = campaign.ledger.rows()
        ranking = ranking_mod.build(rows)
        core = budget_mod.state(settings, ranking, budget_mod.total_gpu_seconds(campaign.gpu_log.rows()))
        hook = campaign_state(str(directory), campaign_files.read_settings(str(directory)))
        assert hook["budget"]["spent"] == pytest.approx(core.spent), seed
        assert hook["budget"]["reserved"] == pytest.approx(core.reserved), seed
        assert hook["budget"]["exhausted"] == core.exhausted, (seed, hook["budget"], core)
        assert hook["budget"]["left"] == pytest.approx(core.left), seed
        assert sorted(hook["in_flight"]) == sorted(core.in_flight), seed
        early = [item for item in ranking.actions if item["action"] in ("finalize", "launch_baseline")]
        assert hook["pending"] == early, seed
        assert hook["leader"] == next((row for row in reversed(rows) if row["kind"] == "leader"), None), seed
        valid = _core_stop_valid(rows)
        assert (hook["stop"] is not None) == bool(valid), (seed, hook["stop_problem"], valid)
        stops = [row for row in rows if row["kind"] == "stop"]
        if stops and seed % 20 == 0:  # `attune stop` itself, in the state the stop was recorded in
            later = any(row["kind"] == "launch" and row["seq"] > stops[-1]["seq"] for row in rows)
            code = _cli_stop(directory, seed, stops[-1])
            assert (code == 0) == (bool(valid) or (later and _core_stop_valid(
                [row for row in rows if row["seq"] <= stops[-1]["seq"]]))), (seed, code)
