"""Early stopping (ATTUNE_EARLY_STOP=1) on the local backend with the SIMULATED Llama-3.1-70B recipe: a candidate
whose scored iterations so far show it cannot beat the leader is stopped, recorded stopped_early with the evidence,
charged for the simulated time it used, and never ranked; one that may win runs to its end; baseline runs are never
stopped."""

from __future__ import annotations

import sys
import time

import pytest
from conftest import SCRIPTS
from factory import local_campaign, wait

from attune import cli
from attune.campaign import earlystop, ranking, runs

LLAMA = SCRIPTS / "simulate" / "recipes" / "llama3_70b_h100x64.yaml"
SIM = SCRIPTS / "simulate" / "sim_megatron.py"


@pytest.fixture
def campaign(tmp_path):
    text = LLAMA.read_text().format(python=sys.executable, sim=SIM).replace(
        "ATTUNE_SIM_SEED: auto", "ATTUNE_SIM_SEED: auto\n      ATTUNE_SIM_SPEED: \"0.25\"")
    yield from local_campaign(tmp_path, text, "es-", "early-stop", ATTUNE_EARLY_STOP="1")


def finish(made, settings, run):
    deadline = time.time() + 120
    while time.time() < deadline:
        row = runs.finalize(made, settings, run)
        if row is not None:
            return row
        time.sleep(0.2)
    raise AssertionError("run %s never ended" % run)


def candidate(made, *change, lever):
    assert cli.main(["candidate", "new", "--campaign", str(made.dir), "--parent", "baseline", *change, "--lever",
                     lever, "--hypothesis", "h"]) == 0
    return sorted(p.name for p in (made.dir / "runs").iterdir())[-1]


def test_a_candidate_that_cannot_win_is_stopped_early_and_never_ranked(campaign, capsys):
    made, settings = campaign
    for _ in range(3):  # baseline runs are never stopped, however they compare
        row = finish(made, settings, runs.launch_baseline(made, settings)["run"])
        assert row["status"] == "finished"
    slower = candidate(made, "--set", "tensor-model-parallel-size=8", lever="tensor-parallel-size")
    runs.launch_candidate(made, settings, slower)
    row = finish(made, settings, slower)
    assert row["status"] == "stopped_early", row
    evidence = row["early_stop"]
    assert evidence["scored_steps"] >= earlystop.MIN_SCORED and evidence["best_case"] < evidence["need"]
    assert evidence["through_step"] < 19 and "it needs" in evidence["evidence"]
    ranked = ranking.build(made.ledger.rows())
    assert not ranked.run(slower).score.rankable and ranked.leader.first.run != slower
    charge = [r for r in made.gpu_log.rows() if r["run"] == slower][0]
    full = [r for r in made.gpu_log.rows() if r["run"] == ranked.baseline.first.run][0]
    assert 0 < charge["seconds"] < full["seconds"]  # charged for the simulated time it used, not a whole run
    capsys.readouterr()


def test_a_candidate_that_may_win_runs_to_its_end(campaign):
    made, settings = campaign
    for _ in range(3):
        finish(made, settings, runs.launch_baseline(made, settings)["run"])
    faster = candidate(made, "--set", "tp-comm-overlap", lever="tp-comm-overlap")
    runs.launch_candidate(made, settings, faster)
    row = finish(made, settings, faster)
    assert row["status"] == "finished" and "early_stop" not in row
