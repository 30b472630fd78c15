"""`launch_campaign.sh --demo`: the README's first command runs a whole SIMULATED campaign (local backend,
simulated Llama-3.1-70B on 64 H100s, the planner) and leaves artifacts that agree with the ledger."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "skill" / "scripts"))
sys.path.insert(0, str(HERE.parent))

import integrity  # noqa: E402

from attune.core import levers as levers_mod
from attune.campaign import ranking as ranking_mod, snapshot as snapshot_mod  # noqa: E402


@pytest.fixture(autouse=True)
def _own_key_dir(tmp_path, monkeypatch):  # the integrity keys (harness/integrity_key.py) under tmp_path, not in HOME
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def run_demo(directory: Path, *extra) -> subprocess.CompletedProcess:
    env = dict(os.environ, ATTUNE_PYTHON=sys.executable, ATTUNE_BACKEND="kuberay", AUTOTUNE_BUDGET="3")
    return subprocess.run(["bash", str(REPO / "harness" / "launch_campaign.sh"), "--demo", str(directory), *extra],
                          env=env, capture_output=True, text=True, timeout=600)


def test_the_demo_runs_a_whole_campaign_whose_artifacts_agree_with_the_ledger(tmp_path):
    directory = tmp_path / "demo"
    proc = run_demo(directory, "--demo-budget", "60")
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert printed["RESULTS.md"] == str(directory / "RESULTS.md") and printed["REPORT.md"] == str(directory / "REPORT.md")
    assert printed["campaign_dir"] == str(directory)
    assert "planner: launch run=demo-r001 purpose=baseline" in proc.stderr  # progress, run by run

    # the exported ATTUNE_*/AUTOTUNE_* settings did not leak in: the demo's own config ran
    snap = snapshot_mod.take(directory)
    assert snap.settings.backend == "local" and snap.settings.gpuh_budget == 60.0 and snap.settings.agent == "planner"
    assert integrity.verify(str(directory)) == []
    ranking = snap.ranking
    assert all(run.simulated for run in ranking.runs) and len(ranking.runs) >= 4

    results = (directory / "RESULTS.md").read_text()
    report = (directory / "REPORT.md").read_text()
    assert "**SIMULATED**" in results and "**SIMULATED**" in report
    lead, base = ranking.leader, ranking.baseline
    assert "| Leader | %s: %.1f tokens/s/GPU" % (lead.first.run, lead.score) in results
    if lead is not base:
        gain = ranking.relative(lead.score, base)
        assert "| Gain | %+.2f%%" % (gain * 100) in report
        for recipe in ranking.lineage(lead)[1:]:  # every shipped change passed the gate
            assert recipe.gate == "pass", recipe.first.run
        shipped = (directory / "recipe.yaml").read_bytes()
        assert hashlib.sha256(shipped).hexdigest() == lead.sha

    lessons = levers_mod.parse_lessons((directory / "levers.md").read_text())
    candidates = [run for run in ranking.runs if run.purpose == "candidate" and run.finalized]
    assert len(lessons) == len(candidates) and all(item["Result"].endswith("SIMULATED") for item in lessons)
    summary = json.loads((directory / "past_tuning_project.json").read_text())
    assert summary["simulated"] is True and summary["campaign"] == snap.campaign.id

    again = run_demo(directory)  # a finished demo is left as it is, and says so
    assert again.returncode == 0 and "finished: yes" in again.stdout


def test_the_slime_demo_ships_a_gated_recipe_with_an_interval_on_its_gain(tmp_path):
    """``--demo-model qwen3-4b-grpo``: a SIMULATED slime campaign (train-only on frozen rollouts) to a shipped
    recipe whose every change passed the gate, its gain with a 95% interval, and a ledger that re-derives."""
    directory = tmp_path / "slime"
    proc = run_demo(directory, "--demo-model", "qwen3-4b-grpo")
    assert proc.returncode == 0, proc.stderr[-3000:]
    snap = snapshot_mod.take(directory)
    ranking = snap.ranking
    assert all(run.simulated for run in ranking.runs) and integrity.verify(str(directory)) == []
    lead, base = ranking.leader, ranking.baseline
    assert lead is not base and all(recipe.gate == "pass" for recipe in ranking.lineage(lead)[1:])
    gain = ranking.compare(lead, base)
    assert gain.wins and gain.low is not None and gain.low > 0
    report = (directory / "REPORT.md").read_text()
    assert "**SIMULATED**" in report and "| Gain | %s" % ranking_mod.gain_text(gain) in report
    assert hashlib.sha256((directory / "recipe.yaml").read_bytes()).hexdigest() == lead.sha
    assert "--use-dynamic-batch-size" in (directory / "recipe.yaml").read_text()
    summary = json.loads((directory / "past_tuning_project.json").read_text())
    assert summary["simulated"] is True and summary["model"]["slime_mode"] == "train_only"
    from attune import cli
    assert cli.main(["verify", "--replay", "--campaign", str(directory)]) == 0


def test_the_whole_loop_slime_demo_gates_its_candidates_on_train_only_replays(tmp_path):
    """``--demo-model qwen3-4b-grpo-loop``: the whole loop (rollout and training), SIMULATED. The baseline saves its
    rollouts; the planner freezes them, launches the baseline's and each gated candidate's train-only replay
    (purpose replay, charged, never ranked), and the gate compares those; the ledger re-derives."""
    directory = tmp_path / "loop"
    proc = run_demo(directory, "--demo-model", "qwen3-4b-grpo-loop", "--demo-budget", "12")
    assert proc.returncode == 0, proc.stderr[-3000:]
    snap = snapshot_mod.take(directory)
    rows = snap.campaign.ledger.rows()
    launches = {row["run"]: row for row in rows if row["kind"] == "launch"}
    gates = [row for row in rows if row["kind"] == "gate"]
    assert gates and all(row.get("replays") for row in gates), gates
    for row in gates:
        replays = row["replays"]
        assert launches[replays["candidate"]]["purpose"] == "replay" == launches[replays["baseline"]]["purpose"]
        assert launches[replays["candidate"]]["parent"] == row["run"]
        assert launches[replays["baseline"]]["parent"] == row["against"] and replays["reruns"]
    assert any(row["verdict"] == "pass" for row in gates)
    assert all(not run.score.rankable for run in snap.ranking.runs if run.purpose == "replay")
    assert all(run.simulated for run in snap.ranking.runs) and integrity.verify(str(directory)) == []
    summary = json.loads((directory / "past_tuning_project.json").read_text())
    assert summary["model"]["slime_mode"] == "whole_loop"
    assert all(item["lever"] for item in summary["rejected"] + summary["kept"])  # no replay is a lever tried
    rejected = (directory / "REPORT.md").read_text().split("## Rejected levers")[1].split("\n## ")[0]
    assert not [run for run, row in launches.items() if row["purpose"] == "replay" and "| %s |" % run in rejected]
    from attune import cli
    assert cli.main(["verify", "--replay", "--campaign", str(directory)]) == 0


def test_the_demo_never_writes_into_a_directory_that_is_not_its_own(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    proc = run_demo(tmp_path)
    assert proc.returncode == 2 and "is not an ATTUNE demo campaign" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_the_demo_without_a_directory_runs_in_a_new_temporary_one(tmp_path, monkeypatch, capsys):
    import tempfile

    import launcher

    ran = []
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes it
    monkeypatch.setattr(launcher, "demo", lambda directory, model, budget, in_flight=None: ran.append(directory) or 0)
    monkeypatch.chdir(tmp_path)
    assert launcher.main(["--demo"]) == 0
    assert launcher.main(["--demo", "--demo-model", "qwen3-30b-a3b"]) == 0
    first, second = ran
    assert first != second and first.parent == tmp_path and first.name.startswith("attune-demo-")
    assert first.is_dir() and not any(first.iterdir())  # new and empty: demo.prepare lays it out
    err = capsys.readouterr().err
    assert "the demo runs in a new temporary directory, %s" % first in err and str(second) in err
    assert not (tmp_path / "attune-demo").exists()
