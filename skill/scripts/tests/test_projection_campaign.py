"""The projection inside a campaign: `attune project`, the memory pre-filter of `candidate new`, and the
projected-against-measured table of RESULTS.md, on the SIMULATED Llama-3.1-70B recipe."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import SCRIPTS
from factory import local_campaign, wait

from attune import cli
from attune.campaign import runs

LLAMA = SCRIPTS / "simulate" / "recipes" / "llama3_70b_h100x64.yaml"
SIM = SCRIPTS / "simulate" / "sim_megatron.py"
NO_RECOMPUTE = ["--unset", "recompute-granularity", "--unset", "recompute-method", "--unset", "recompute-num-layers"]


@pytest.fixture
def sim(tmp_path):
    for campaign, settings in local_campaign(tmp_path, LLAMA.read_text().format(python=sys.executable, sim=SIM),
                                             "sim-", "sim-projection"):
        yield campaign, settings, tmp_path / "baseline.yaml"


def main(*argv):
    return cli.main(list(argv))


def test_project_prints_memory_time_and_throughput(sim, capsys):
    _campaign, _settings, baseline = sim
    assert main("project", str(baseline), "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hardware"] == "H100" and out["gpus"] == 64 and out["memory"]["fits"]
    assert out["layout"]["tp"] == 4 and out["layout"]["pp"] == 8 and out["layout"]["dp"] == 2
    assert out["tokens_per_s_per_gpu"] == pytest.approx(128 * 8192 / out["time"]["step_s"] / 64)
    assert main("project", str(baseline), "--hardware", "A100", "--gpus", "64") in (0, 1)
    text = capsys.readouterr().out
    assert "hardware: A100 x 64" in text and "tokens_per_s_per_gpu:" in text
    assert main("project", str(baseline), "--hardware", "TPU") == 2
    assert "unknown hardware 'TPU'" in capsys.readouterr().err


def test_a_candidate_the_projection_says_will_not_fit_is_refused_unless_forced(sim, capsys):
    campaign, _settings, _baseline = sim
    args = ["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", *NO_RECOMPUTE,
            "--lever", "full-recompute", "--hypothesis", "drop recompute: -25% step time"]
    assert main(*args) == 1
    err = capsys.readouterr().err
    assert "the projection says the candidate does not fit in GPU memory on H100" in err
    assert "GiB usable (weights" in err and "activations" in err
    assert not (campaign.dir / "runs").exists() or not list((campaign.dir / "runs").iterdir())
    assert main(*args, "--force", "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["projection"]["fits"] is False and record["projection"]["memory_gib"] > 76.0


def test_results_compare_the_projection_with_what_runs_measured(sim):
    campaign, settings, _baseline = sim
    row = runs.launch_baseline(campaign, settings)
    assert row["projection"]["hardware"] == "H100" and row["projection"]["fits"]
    wait(campaign, settings, row["run"], ("succeeded",))
    runs.finalize(campaign, settings, row["run"])
    charge = [r for r in campaign.gpu_log.rows() if r["run"] == row["run"]][0]
    log = (campaign.run_dir(row["run"]) / "log.txt").read_text()
    simulated = float(log.rsplit("ATTUNE simulated wall time: ", 1)[1].split(" s", 1)[0])
    assert simulated > 300 and charge["seconds"] == pytest.approx(simulated, abs=0.01)  # not the second it took
    assert main("rank", "--campaign", str(campaign.dir), "--no-chart") == 0
    text = (campaign.dir / "RESULTS.md").read_text()
    table = text.split("## Projection against measurement", 1)[1].split("##", 1)[0]
    assert "Median absolute error" in table and "over 1 run(s)" in table
    line = next(line for line in table.splitlines() if line.startswith("| %s" % row["run"]))
    assert "SIMULATED" in line and "%.1f" % row["projection"]["tokens_per_s_per_gpu"] in line


def test_a_candidate_says_which_of_its_changes_the_projection_does_not_model(sim, capsys):
    """A change the projection reads is a prediction; one it does not read (an environment variable, a flag no term
    of the model uses) leaves the parent's number, and the record says so instead of a bare +0.0%."""
    campaign, _settings, _baseline = sim
    base = ["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--hypothesis", "h"]
    assert main(*base, "--env", "NCCL_NVLS_ENABLE=0", "--lever", "nvls", "--json") == 0
    unmodelled = json.loads(capsys.readouterr().out)
    assert unmodelled["projection"]["not_modelled"] == ["NCCL_NVLS_ENABLE"]
    assert main(*base, "--set", "tp-comm-overlap", "--lever", "tp-comm-overlap", "--json") == 0
    modelled = json.loads(capsys.readouterr().out)
    assert modelled["projection"]["not_modelled"] == []
    assert modelled["projection"]["tokens_per_s_per_gpu"] != unmodelled["projection"]["tokens_per_s_per_gpu"]
    assert main(*base, "--set", "manual-gc", "--lever", "manual-gc") == 0
    assert "projection_not_modelled: --manual-gc (the projection reads none" in capsys.readouterr().out


def test_project_json_says_per_change_whether_the_projection_models_it(sim, capsys):
    """`attune project` of a candidate's recipe lists the candidate's changes (from the record beside it, or from
    --against RECIPE) each with ``modelled``; with nothing to compare with, ``changes`` is null."""
    campaign, _settings, baseline = sim
    assert main("candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--hypothesis", "h",
                "--set", "tp-comm-overlap", "--env", "NCCL_NVLS_ENABLE=0", "--lever", "tp-comm-overlap",
                "--json") == 0
    run = json.loads(capsys.readouterr().out)["run"]
    recipe = campaign.run_dir(run) / "recipe.yaml"
    assert main("project", str(recipe), "--json") == 0
    beside = json.loads(capsys.readouterr().out)["changes"]
    assert {(item.get("arg") or item.get("env")): item["modelled"] for item in beside} == {
        "--tp-comm-overlap": True, "NCCL_NVLS_ENABLE": False}
    assert main("project", str(recipe), "--against", str(baseline), "--json") == 0
    assert json.loads(capsys.readouterr().out)["changes"] == beside
    assert main("project", str(recipe), "--against", str(baseline)) == 0
    text = capsys.readouterr().out
    assert "--tp-comm-overlap True: modelled" in text and "NCCL_NVLS_ENABLE 0: NOT modelled" in text
    assert main("project", str(baseline), "--json") == 0
    assert json.loads(capsys.readouterr().out)["changes"] is None
