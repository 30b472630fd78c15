"""`attune diagnose RUN`: a diagnosis that always names something, from the sources it had, in a stated order, on
real runs of the local backend (the SIMULATED Llama-3.1-70B recipe, and a fake Megatron-LM without hardware)."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import DATA, SCRIPTS
from factory import local_campaign, wait

from attune import cli
from attune.campaign import runs
from attune.core import levers as levers_mod
from attune.core.recipe import Recipe

LLAMA = SCRIPTS / "simulate" / "recipes" / "llama3_70b_h100x64.yaml"
SIM = SCRIPTS / "simulate" / "sim_megatron.py"
FAKE = (DATA / "recipes" / "local_fake_megatron.yaml").read_text()

# a training timer block as Megatron-LM prints it with --timing-log-level 1 (megatron/core/timers.py's header and
# row format; the rows' names are those of training.py and finalize_model_grads.py at core_v0.16.1)
TIMERS = """INFO:megatron.core.timers:(min, max) time across ranks (ms):
    forward-backward ...............................: (9000.10, 9100.20)
    all-grads-sync .................................: (2100.00, 2300.00)
    params-all-gather ..............................: (400.00, 450.00)
    optimizer ......................................: (120.00, 130.00)
"""


def finished(campaign, settings) -> str:
    run = runs.launch_baseline(campaign, settings)["run"]
    wait(campaign, settings, run, ("succeeded",))
    assert runs.finalize(campaign, settings, run)["status"] == "finished"
    return run


def diagnose(campaign, run, capsys, *extra) -> tuple:
    code = cli.main(["diagnose", run, "--campaign", str(campaign.dir), "--json"] + list(extra))
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def sim_campaign(tmp_path):
    yield from local_campaign(tmp_path, LLAMA.read_text().format(python=sys.executable, sim=SIM), "dg-", "dg-test")


def test_a_simulated_run_is_diagnosed_from_the_projection_and_says_what_it_lacked(sim_campaign, capsys):
    campaign, settings = sim_campaign
    run = finished(campaign, settings)
    code, result = diagnose(campaign, run, capsys)
    assert code == 0 and result["order"] == ["profile", "timers", "projection", "triage", "catalog"]
    sources = result["sources"]
    assert not sources["profile"]["used"] and "--profile-of %s" % run in sources["profile"]["why"]
    assert not sources["timers"]["used"] and "--timing-log-level 1" in sources["timers"]["why"]
    assert sources["projection"]["used"] and sources["projection"]["hardware"] == "H100"
    assert not sources["triage"]["used"] and sources["catalog"]["used"]
    top = result["top"]
    assert top["source"] == "projection" and top["measured"] is False and top["bottleneck"] != "unknown"
    assert top["bottleneck"] != "compute", "a bottleneck a lever removes comes before compute"
    assert top == result["bottlenecks"][0] and 0 < top["share"] < 1
    # the recipe's own switches are never offered as levers: listed apart
    args = Recipe((campaign.run_dir(run) / "recipe.yaml").read_text()).args()
    entries = {entry["id"]: entry for entry in levers_mod.parse((campaign.dir / "levers.md").read_text())}
    for item in result["bottlenecks"]:
        assert set(item["levers"]) <= set(entries)
        for lever in item["levers"]:
            assert not (entries[lever]["flags"] and all(args.get(flag) is True for flag in entries[lever]["flags"]))
    tp = next(item for item in result["bottlenecks"] if item["bottleneck"] == "exposed_tp_communication")
    assert "sequence-parallel" in tp["levers_in_recipe"] and "sequence-parallel" not in tp["levers"]
    assert result["memory"]["source"] == "log" and result["memory"]["hbm_gib"] == 80


def test_training_timers_in_the_log_are_measured_evidence_listed_before_the_projection(sim_campaign, capsys):
    campaign, settings = sim_campaign
    run = finished(campaign, settings)
    log = campaign.run_dir(run) / "log.txt"
    log.write_text(log.read_text() + TIMERS)  # as a run with --timing-log-level 1 prints them
    code, result = diagnose(campaign, run, capsys)
    assert code == 0 and result["sources"]["timers"]["used"]
    step_ms = result["sources"]["timers"]["step_ms"]
    dp = result["bottlenecks"][0]
    assert dp["source"] == "timers" and dp["measured"] and dp["bottleneck"] == "exposed_dp_communication"
    assert dp["share"] == pytest.approx((2300.0 + 450.0) / step_ms, abs=1e-4)  # the slowest rank's
    assert "all-grads-sync 2300.0 ms" in dp["evidence_text"]
    sources = [item["source"] for item in result["bottlenecks"]]
    assert sources == sorted(sources, key=["profile", "timers", "projection"].index)


def test_without_hardware_or_timers_it_still_names_a_first_step_and_why(tmp_path, capsys):
    script = DATA / "fake_megatron.py"
    made = local_campaign(tmp_path, FAKE.format(python=sys.executable, script=script), "dn-", "dn-test")
    campaign, settings = next(made)
    try:
        run = finished(campaign, settings)
        code, result = diagnose(campaign, run, capsys)
        assert code == 0
        assert not result["sources"]["projection"]["used"] and "--gpu MODEL" in result["sources"]["projection"]["why"]
        top = result["top"]
        assert top["bottleneck"] == "unknown" and top["share"] is None
        assert "no profile, no timers and no projection" in top["evidence_text"]
        assert top["levers"] == ["overlap-grad-reduce", "overlap-param-gather"]
        # with the GPU named, the projection says what else it lacks (this recipe gives no model shape)
        code, result = diagnose(campaign, run, capsys, "--gpu", "h100")
        projection = result["sources"]["projection"]
        assert code == 0 and not projection["used"] and "--hidden-size is required" in projection["why"]
        assert result["top"]["bottleneck"] == "unknown"
    finally:
        for _ in made:
            pass


def test_an_unknown_run_is_refused_naming_the_fix(sim_campaign, capsys):
    campaign, _settings = sim_campaign
    assert cli.main(["diagnose", "dg-r999", "--campaign", str(campaign.dir), "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"]["verb"] == "diagnose"
    assert "the ledger has no launch of run dg-r999" in captured.err and "attune status" in captured.err
