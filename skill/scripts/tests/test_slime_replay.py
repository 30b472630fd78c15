"""A whole-loop slime campaign gated on train-only replays (correctness/PROTOCOL.md §4.4), end to end on the local
backend with the SIMULATED slime workload: the baseline saves its rollouts as slime does, they are frozen with
`attune rows from-slime` and `to-slime`, and `attune launch --replay-of RUN --rollouts MANIFEST` trains each run's
recipe on that one dump; `attune gate --run RUN` of a whole-loop run compares the replays."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import SCRIPTS
from factory import local_campaign, wait

from attune import cli
from attune.campaign import ranking, runs
from attune.core import slime
from attune.core.errors import CheckFailed, InputError
from attune.core.recipe import Recipe

SIM = SCRIPTS / "simulate" / "sim_slime.py"
RECIPE = SCRIPTS / "simulate" / "recipes" / "qwen3_4b_grpo_h100x8.yaml"
SMALL = {"--rollout-batch-size": "8", "--n-samples-per-prompt": "4", "--rollout-max-response-len": "512",
         "--num-rollout": "4"}

pytest.importorskip("torch", reason="slime's dumps are torch.save files (the pod extra)")


def whole_loop() -> str:
    made = Recipe(RECIPE.read_text().format(python=sys.executable, sim=SIM), str(RECIPE))
    changes = [{"op": "set", "arg": flag, "value": value} for flag, value in SMALL.items()]
    # relative: each run saves into its own working folder (runs/<run>/work/), where a confined local run writes
    changes.append({"op": "set", "arg": slime.SAVE_FLAG, "value": "saved/{rollout_id}.pt"})
    return made.apply(changes).render()


@pytest.fixture
def campaign(tmp_path):
    yield from local_campaign(tmp_path, whole_loop(), "wl-", "wl-test")


def finish(made, settings, row) -> str:
    wait(made, settings, row["run"], ("succeeded",))
    result = runs.finalize(made, settings, row["run"])
    assert result["status"] == "finished", result
    return row["run"]


def candidate(made, settings, *change) -> str:
    assert cli.main(["candidate", "new", "--campaign", str(made.dir), "--parent", "baseline", "--set", *change,
                     "--lever", "other: --%s" % change[0].split("=")[0], "--hypothesis", "h", "--gate-will-fail"]) == 0
    run = sorted(path.name for path in (made.dir / "runs").iterdir())[-1]
    return finish(made, settings, runs.launch_candidate(made, settings, run))


def freeze(made, base, capsys) -> str:
    """The baseline's saved rollouts frozen into the campaign: rows, then the dump slime loads; its manifest."""
    scratch = made.dir / "scratch"
    assert cli.main(["rows", "from-slime", str(made.run_dir(base) / "work" / "saved" / "{rollout_id}.pt"), "--out",
                     str(scratch / "rollouts.parquet")]) == 0
    capsys.readouterr()
    assert cli.main(["rows", "to-slime", str(scratch / "rollouts.parquet"), "--out", str(scratch / "dump"),
                     "--json"]) == 0
    return json.loads(capsys.readouterr().out)["manifest"]


def replay(made, settings, run, manifest) -> str:
    return finish(made, settings, runs.launch_replay(made, settings, run, manifest))


def gate(made, run, capsys) -> dict:
    capsys.readouterr()
    cli.main(["gate", "--campaign", str(made.dir), "--run", run, "--json"])
    return json.loads(capsys.readouterr().out)


def test_a_whole_loop_run_is_gated_on_its_replay_against_the_baselines(campaign, tmp_path, capsys):
    made, settings = campaign
    base = finish(made, settings, runs.launch_baseline(made, settings))
    assert sorted(p.name for p in (made.run_dir(base) / "work" / "saved").iterdir()) == ["0.pt", "1.pt", "2.pt", "3.pt"]
    manifest = freeze(made, base, capsys)
    cand = candidate(made, settings, "sglang-mem-fraction-static=0.6")
    with pytest.raises(CheckFailed, match="baseline run %s has no finished replay" % base):
        from attune.correctness import gate as gate_mod
        gate_mod.gate_campaign_run(made, settings, cand)
    reference = replay(made, settings, base, manifest)
    rerun = replay(made, settings, base, manifest)
    with pytest.raises(CheckFailed, match="it has no finished one.*--replay-of RUN --rollouts FILE"):
        gate_mod.gate_campaign_run(made, settings, cand)
    own = replay(made, settings, cand, manifest)

    launches = {row["run"]: row for row in made.ledger.rows() if row["kind"] == "launch"}
    dump_sha = json.loads(open(manifest).read())["rows_sha256"]
    assert launches[own]["purpose"] == "replay" and launches[own]["parent"] == cand
    assert launches[own]["rows_sha256"] == dump_sha
    replayed = Recipe.load(made.run_dir(own) / "recipe.yaml")
    assert slime.shape_of(replayed.args()).mode == "train_only" and slime.SAVE_FLAG not in replayed.args()
    assert replayed.args()["--sglang-mem-fraction-static"] == "0.6"  # the candidate's own recipe, replayed
    # it reads the dump's copy in the campaign's records, checked there, not the scratch/ dump the agent can change
    frozen = made.dir / ".attune" / "dumps" / dump_sha
    assert replayed.args()["--load-debug-rollout-data"] == str(frozen / "{rollout_id}.pt")
    assert sorted(p.name for p in frozen.iterdir()) == sorted(p.name for p in Path(manifest).parent.iterdir())
    # the replay trains the very samples the whole loop generated: the same tokens per rollout
    tokens = {run: [row for row in made.ledger.rows() if row["kind"] == "result" and row["run"] == run][0]
              ["metrics"]["tokens"] for run in (base, reference, own)}
    assert tokens[base] == tokens[reference] == tokens[own]

    result = gate(made, cand, capsys)
    assert result["verdict"] == "pass", result["reasons"]
    assert result["run"] == cand and result["against"] == base
    assert result["replays"] == {"baseline": reference, "candidate": own, "reruns": [rerun]}
    assert [c["name"] for c in result["config"]["changes"]] == ["--sglang-mem-fraction-static"]
    assert result["checks"]["data"]["passed"] and result["convergence"]["grad_norm"]["reruns"] == 1
    row = [r for r in made.ledger.rows() if r["kind"] == "gate"][-1]
    assert row["run"] == cand and row["replays"]["candidate"] == own
    view = ranking.build(made.ledger.rows())
    assert not view.run(own).score.rankable and "replay run" in view.run(own).score.why
    assert view.recipe_of(cand).gate == "pass"
    assert cli.main(["verify", "--replay", "--campaign", str(made.dir)]) == 0

    bad = candidate(made, settings, "lr=3e-6")
    replay(made, settings, bad, manifest)
    failed = gate(made, bad, capsys)
    assert failed["verdict"] == "fail" and any("--lr" in reason for reason in failed["reasons"])


def test_a_replay_is_refused_where_it_cannot_stand_for_its_run(campaign, tmp_path, capsys):
    made, settings = campaign
    base = finish(made, settings, runs.launch_baseline(made, settings))
    manifest = freeze(made, base, capsys)
    with pytest.raises(InputError, match="--replay-of wl-r999: the ledger has no launch"):
        runs.launch_replay(made, settings, "wl-r999", manifest)
    with pytest.raises(InputError, match="not a dump manifest"):
        runs.launch_replay(made, settings, base, made.dir / "scratch" / "rollouts.parquet")
    own = replay(made, settings, base, manifest)
    with pytest.raises(InputError, match="trains on frozen rollouts already"):
        runs.launch_replay(made, settings, own, manifest)
    with pytest.raises(InputError, match="is the train-only replay of run %s: gate the run it replays" % base):
        from attune.correctness import gate as gate_mod
        gate_mod.gate_campaign_run(made, settings, own)
    assert cli.main(["launch", "--campaign", str(made.dir), "--replay-of", base]) == 2  # --rollouts goes with it


def test_a_dump_that_lacks_a_rollout_the_run_trains_is_refused():
    args = {"--actor-num-gpus-per-node": "8", "--colocate": True, "--num-rollout": "4", "--start-rollout-id": "2"}
    with pytest.raises(InputError, match=r"the run trains rollouts 2-5.*so 4, 5 would be missing"):
        slime.replay_changes(args, "/d/{rollout_id}.pt", [0, 1, 2, 3], "0" * 64)
    changes = slime.replay_changes(dict(args, **{slime.SAVE_FLAG: "/s/{rollout_id}.pt"}), "/d/{rollout_id}.pt",
                                   range(8), "a" * 64)
    assert changes[0] == {"op": "unset", "arg": slime.SAVE_FLAG}
    assert {"op": "set", "env": "ATTUNE_ROWS_SHA256", "value": "a" * 64} in changes
