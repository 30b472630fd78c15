"""attune candidate new: one change on a parent, checked before anything launches."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conftest import DATA
from factory import settings as make_settings

from attune.campaign import ledger as campaign_mod
from attune import cli
from attune.core.recipe import Recipe


@pytest.fixture
def campaign(tmp_path):
    baseline = tmp_path / "baseline.yaml"
    shutil.copy(DATA / "recipes" / "megatron_rayjob.yaml", baseline)
    settings = make_settings(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX="alice-llama8b-")
    return campaign_mod.init(tmp_path / "c", settings, "alice-llama8b-test")


def new(campaign, *args):
    return cli.main(["candidate", "new", "--campaign", str(campaign.dir), *args])


def test_a_candidate_is_written_with_its_record(campaign, capsys):
    assert new(campaign, "--parent", "baseline", "--set", "overlap-grad-reduce", "--lever", "overlap-grad-reduce",
               "--hypothesis", "hide the DP all-reduce: step time -5%", "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["run"] == "alice-llama8b-r001" and record["gpus"] == 16
    assert record["change"] == [{"op": "set", "arg": "--overlap-grad-reduce", "value": True}]
    recipe = Recipe((campaign.run_dir("alice-llama8b-r001") / "recipe.yaml").read_text())
    assert recipe.args()["--overlap-grad-reduce"] is True and recipe.args()["--exit-interval"] == "20"
    assert "name: alice-llama8b-r001" in recipe.render()  # the baseline's own name, kept
    assert recipe.with_name("alice-llama8b-r007").render().count("alice-llama8b-r007") == 1
    # a child of that candidate gets the next id and records its own diff only
    assert new(campaign, "--parent", "alice-llama8b-r001", "--env", "NCCL_NVLS_ENABLE=1", "--lever", "nvls",
               "--hypothesis", "NVLS all-reduce") == 0
    child = json.loads((campaign.run_dir("alice-llama8b-r002") / "candidate.json").read_text())
    assert child["change"] == [{"op": "set", "env": "NCCL_NVLS_ENABLE", "value": "1"}]


def test_illegal_and_shape_changing_candidates_are_refused(campaign, capsys):
    assert new(campaign, "--parent", "baseline", "--set=--overlap-param-gather", "--lever", "overlap-param-gather",
               "--hypothesis", "x") == 1
    assert "overlap-param-gather: --overlap-param-gather needs" in capsys.readouterr().err
    assert new(campaign, "--parent", "baseline", "--set=--global-batch-size=256", "--lever", "other: --global-batch-size",
               "--hypothesis", "x") == 2
    assert "not a lever" in capsys.readouterr().err
    assert new(campaign, "--parent", "baseline", "--unset-env", "CUDA_DEVICE_MAX_CONNECTIONS", "--lever", "cuda-device-max-connections",
               "--hypothesis", "x") == 1
    assert "cuda-device-max-connections" in capsys.readouterr().err
    assert new(campaign, "--parent", "r999", "--set=--seed=1", "--lever", "other:--seed", "--hypothesis", "x") == 2
    assert new(campaign, "--parent", "baseline", "--set=--bf16", "--lever", "other: --bf16", "--hypothesis", "x") == 2
    assert "nothing to try" in capsys.readouterr().err
    assert not list((campaign.dir / "runs").glob("*")), "nothing is written when a check fails"


def test_change_syntax():
    from attune.campaign.candidates import parse_changes
    from attune.core.errors import InputError
    assert parse_changes(sets=["micro-batch-size=2", "--lr=1e-4", "use-distributed-optimizer"]) == [
        {"op": "set", "arg": "--micro-batch-size", "value": "2"}, {"op": "set", "arg": "--lr", "value": "1e-4"},
        {"op": "set", "arg": "--use-distributed-optimizer", "value": True}]
    assert parse_changes(unsets=["sequence-parallel"]) == [{"op": "unset", "arg": "--sequence-parallel"}]
    with pytest.raises(InputError, match="not an argument name"):
        parse_changes(sets=["bad name=1"])
    with pytest.raises(InputError, match="needs one change"):
        parse_changes()
    for name in ("LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "PYTHONPATH", "PYTHONSTARTUP", "BASH_ENV",
                 "PATH"):
        with pytest.raises(InputError, match="load or run code it names"):
            parse_changes(envs=["%s=scratch/x" % name])
    assert parse_changes(envs=["CUDA_DEVICE_MAX_CONNECTIONS=1"]) == [
        {"op": "set", "env": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "1"}]


def test_a_candidate_says_what_the_gate_will_say_of_its_changes(campaign, capsys):
    assert new(campaign, "--parent", "baseline", "--set", "overlap-grad-reduce", "--lever", "overlap-grad-reduce",
               "--hypothesis", "h", "--json") == 0
    gate = json.loads(capsys.readouterr().out)["gate_config"]
    assert gate == {"passes": True, "reasons": [],
                    "changes": [{"name": "--overlap-grad-reduce", "kind": "arg", "class": "placement"}]}
    knob = ["--parent", "baseline", "--env", "NVTE_USE_FAST_MATH=1", "--lever", "other: NVTE_USE_FAST_MATH",
            "--hypothesis", "h"]
    before = sorted(os.listdir(campaign.dir / "runs"))
    # a variable off the allowlist (core/envpolicy.py) that the baseline does not set: refused before the gate
    assert new(campaign, "--parent", "baseline", "--env", "VENDOR_TUNING_KNOB=1", "--lever", "other: knob",
               "--hypothesis", "h") == 2
    assert "VENDOR_TUNING_KNOB is not on the allowlist" in capsys.readouterr().err
    # the gate would fail it, so it could never lead or ship: refused before any GPU time, no run id used
    assert new(campaign, *knob, "--json") == 1
    captured = capsys.readouterr()
    error = json.loads(captured.out)["error"]
    assert error["verb"] == "candidate" and error["exit_code"] == 1
    assert "the gate's configuration check will fail this candidate" in captured.err
    assert "environment variable NVTE_USE_FAST_MATH: unset -> 1 is numeric" in captured.err
    assert sorted(os.listdir(campaign.dir / "runs")) == before
    # --draft: every check made and the record answered, nothing written
    assert new(campaign, *knob, "--draft", "--json") == 0
    draft = json.loads(capsys.readouterr().out)
    assert draft["run"] is None and draft["draft"] is True and draft["gate_config"]["passes"] is False
    assert draft["gate_config"]["changes"] == [{"name": "NVTE_USE_FAST_MATH", "kind": "env", "class": "numeric"}]
    assert sorted(os.listdir(campaign.dir / "runs")) == before
    assert new(campaign, *knob, "--draft") == 0
    assert "draft: nothing written, no run id used" in capsys.readouterr().out
    # written on purpose (a fault check of the gate): it says so
    assert new(campaign, *knob, "--gate-will-fail") == 0
    out = capsys.readouterr().out
    assert "gate_class: NVTE_USE_FAST_MATH numeric" in out
    assert "warning: the gate will fail this candidate, so it can never lead or ship: config: environment variable " \
           "NVTE_USE_FAST_MATH: unset -> 1 is numeric" in out and "--gate-will-fail" in out
    assert len(os.listdir(campaign.dir / "runs")) == len(before) + 1


def test_a_leave_one_out_undoes_one_kept_change_of_the_stack(campaign, capsys):
    base = Recipe((campaign.dir / ".." / "baseline.yaml").read_text()).args()
    assert new(campaign, "--parent", "baseline", "--set", "overlap-grad-reduce", "--lever", "overlap-grad-reduce",
               "--hypothesis", "hide the DP all-reduce") == 0  # r001
    assert new(campaign, "--parent", "alice-llama8b-r001", "--env", "NCCL_NVLS_ENABLE=1", "--lever", "nvls",
               "--hypothesis", "NVLS all-reduce") == 0  # r002, on r001
    capsys.readouterr()
    assert new(campaign, "--parent", "alice-llama8b-r002", "--leave-out", "alice-llama8b-r001", "--lever",
               "overlap-grad-reduce", "--hypothesis", "the stack loses the overlap's gain", "--json") == 0
    record = json.loads(capsys.readouterr().out)
    assert record["leave_out"] == "alice-llama8b-r001" and record["parent"] == "alice-llama8b-r002"
    assert record["change"] == [{"op": "unset", "arg": "--overlap-grad-reduce"}]
    made = Recipe((campaign.run_dir(record["run"]) / "recipe.yaml").read_text())
    assert "--overlap-grad-reduce" not in made.args() and made.env()["NCCL_NVLS_ENABLE"] == "1"
    assert "--overlap-grad-reduce" not in base
    # refused: a run off the parent's lineage, a run without a candidate record, explicit changes beside it
    assert new(campaign, "--parent", "alice-llama8b-r001", "--leave-out", "alice-llama8b-r002", "--lever", "nvls",
               "--hypothesis", "x") == 2
    assert "not a change of alice-llama8b-r001's stack" in capsys.readouterr().err
    assert new(campaign, "--parent", "alice-llama8b-r002", "--leave-out", "alice-llama8b-r099", "--lever", "nvls",
               "--hypothesis", "x") == 2
    assert "no candidate.json" in capsys.readouterr().err
    assert new(campaign, "--parent", "alice-llama8b-r002", "--leave-out", "alice-llama8b-r001", "--unset",
               "overlap-grad-reduce", "--lever", "overlap-grad-reduce", "--hypothesis", "x") == 2
    assert "without --set" in capsys.readouterr().err
    assert sorted(p.name for p in (campaign.dir / "runs").iterdir()) == ["alice-llama8b-r001", "alice-llama8b-r002",
                                                                        "alice-llama8b-r003"]
