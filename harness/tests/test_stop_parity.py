"""The Stop hook reads the campaign by the rules of `attune budget` and `attune stop`: on 1,000 random ledgers
(launches with and without an estimate, finished, failed and never-submitted results, GPU time charged, runs
left in flight, stops with finalized, unfinalized and unknown evidence, launches after a stop), its budget
(spent, reserved, exhausted), the runs in flight and whether a recorded stop is valid are those of
`attune_core` (budget.state over ranking.build, and the checks `attune stop` makes before it records one)."""

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

from attune_core import budget as budget_mod  # noqa: E402
from attune_core import ranking as ranking_mod  # noqa: E402

LEDGERS = 1000


def _random_campaign(directory, seed):
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
                           failure={"class": ranking_mod.SUBMIT_FAILED, "evidence": "submission refused"})
        # else: left in flight
    if launched and rng.random() < 0.5:
        evidence = rng.sample(launched, rng.randint(1, len(launched))) + (["r999"] if rng.random() < 0.1 else [])
        builder.campaign.append("stop", ts=builder.clock(), reason=rng.choice(("nothing left", " ")),
                                evidence=evidence)
        if rng.random() < 0.2:
            builder.launch("r%03d" % (len(launched) + 1), "candidate", "late", parent="r001")
    return builder.campaign, settings, env


def _core_stop_valid(rows, ranking):
    """What `attune stop` requires of the stop it records, applied to the last recorded one."""
    stops = [row for row in rows if row["kind"] == "stop"]
    if not stops:
        return None
    last = stops[-1]
    evidence = last.get("evidence") or []
    if not str(last.get("reason", "")).strip() or not evidence:
        return False
    if any(ranking.run(run) is None or not ranking.run(run).finalized for run in evidence):
        return False
    return not any(row["kind"] == "launch" and row["seq"] > last["seq"] for row in rows)


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
        assert sorted(hook["in_flight"]) == sorted(core.in_flight), seed
        valid = _core_stop_valid(rows, ranking)
        assert (hook["stop"] is not None) == bool(valid), (seed, hook["stop_problem"], valid)
