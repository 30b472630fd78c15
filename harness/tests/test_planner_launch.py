"""ATTUNE_AGENT=planner through harness/launch_campaign.sh on the SIMULATED Llama-3.1-70B recipe (64 H100s, local
backend, seconds per run): a whole campaign ends with exit 0, a valid ledger, RESULTS.md and REPORT.md, a gate on
every leader and the lessons in levers.md; a planner killed mid-campaign (once with a candidate written but not
launched, once with a run in flight) resumes with --session without launching anything twice, and a planner that
ends its session early is resumed by the launcher's stop-rule check."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCRIPTS = REPO / "skill" / "scripts"
LAUNCHER = REPO / "harness" / "launch_campaign.sh"
LLAMA = SCRIPTS / "simulate" / "recipes" / "llama3_70b_h100x64.yaml"
SIM = SCRIPTS / "simulate" / "sim_megatron.py"
sys.path.insert(0, str(SCRIPTS))

from attune.core import levers as levers_mod  # noqa: E402


def setup(tmp_path, budget: int):
    baseline = tmp_path / "baseline.yaml"
    text = LLAMA.read_text().format(python=sys.executable, sim=SIM)
    # a faster simulated clock (the same in every run, so no run differs from another by it)
    text = text.replace("      ATTUNE_SIM_SEED: auto\n",
                        "      ATTUNE_SIM_SEED: auto\n      ATTUNE_SIM_SPEED: \"0.002\"\n")
    assert "ATTUNE_SIM_SPEED" in text
    baseline.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTUNE_", "AUTOTUNE_"))}
    env.update({"ATTUNE_BACKEND": "local", "ATTUNE_RUN_PREFIX": "p-", "ATTUNE_BASELINE_YAML": str(baseline),
                "AUTOTUNE_BUDGET": str(budget), "AUTOTUNE_ALLOW_WEB": "0", "ATTUNE_PYTHON": sys.executable,
                "ATTUNE_AGENT": "planner"})
    return tmp_path / "campaign", env


def launch(directory, env, *args, fault=None):
    env = dict(env)
    if fault:
        env["ATTUNE_PLANNER_FAULT"] = fault
    proc = subprocess.run(["bash", str(LAUNCHER), str(directory)] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=600)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def resume(err, env, fault=None):
    """Run the resume command the launcher printed, exactly as printed, from a new shell holding no setting."""
    printed = err.split("Resume with: ", 1)[1].splitlines()[0]
    env = {k: v for k, v in env.items() if k == "ATTUNE_PYTHON" or not k.startswith(("ATTUNE_", "AUTOTUNE_"))}
    if fault:
        env["ATTUNE_PLANNER_FAULT"] = fault
    proc = subprocess.run(printed, shell=True, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=600)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def attune(directory, *args):
    proc = subprocess.run([sys.executable, str(directory / ".attune" / "skill" / "scripts" / "attune.py")] +
                          list(args), cwd=str(directory), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=dict(os.environ, ATTUNE_CAMPAIGN_DIR=str(directory)))
    return proc.returncode, proc.stdout.decode()


def ledger(directory) -> list:
    return [json.loads(line) for line in (directory / "ledger.jsonl").read_text().splitlines() if line.strip()]


def check_finished_campaign(directory) -> list:
    """What every finished planner campaign shows; returns its ledger rows."""
    assert attune(directory, "verify", "--json")[0] == 0
    assert (directory / "RESULTS.md").is_file() and (directory / "REPORT.md").is_file()
    rows = ledger(directory)
    launches = [r for r in rows if r["kind"] == "launch"]
    runs = [r["run"] for r in launches]
    assert len(runs) == len(set(runs)), "a run launched twice"
    candidates = [r for r in launches if r["purpose"] == "candidate"]
    shas = [r["recipe_sha256"] for r in candidates]
    assert len(shas) == len(set(shas)), "the same candidate recipe launched twice"
    results = [r["run"] for r in rows if r["kind"] == "result"]
    assert sorted(results) == sorted(runs), "every run finalized exactly once"
    catalog = {entry["id"] for entry in levers_mod.parse((directory / "levers.md").read_text())}
    for row in candidates:
        assert row["lever"] in catalog and row["change"] and row["hypothesis"]
    # a gate on every leader
    sha_of = {r["run"]: r["recipe_sha256"] for r in launches}
    passed = {sha_of[r["run"]] for r in rows if r["kind"] == "gate" and r["verdict"] == "pass"}
    base = next(r["recipe_sha256"] for r in launches if r["purpose"] == "baseline")
    leaders = [r for r in rows if r["kind"] == "leader"]
    assert leaders
    for row in leaders:
        assert row["recipe_sha256"] == base or row["recipe_sha256"] in passed, row
    confirms = [r for r in launches if r["purpose"] == "confirm"]
    for row in leaders:
        if row["recipe_sha256"] != base:
            assert any(sha_of[c["run"]] == row["recipe_sha256"] for c in confirms), "a leader without confirmation"
    # one lesson per tested candidate, in levers.md and in the ledger
    lessons = levers_mod.parse_lessons((directory / "levers.md").read_text())
    lesson_runs = {lesson["Runs"].split()[0] for lesson in lessons}
    assert lesson_runs == {r["run"] for r in candidates}
    # over: a stop recorded, or the budget spent
    code, out = attune(directory, "status", "--json")
    status = json.loads(out)
    assert status["stop"] is not None or status["budget"]["exhausted"]
    assert status["in_flight"] == []
    sessions = [json.loads(line) for line in (directory / ".attune" / "sessions.jsonl").read_text().splitlines()]
    ends = [r for r in rows if r["kind"] == "session" and r["event"] == "end"]
    assert len(ends) == len(sessions) and all(r["agent"] == "planner" for r in ends)
    notes = (directory / "notes.md").read_text()
    assert "## Tried" in notes and "## Log" in notes
    return rows


def test_a_planner_campaign_on_the_simulated_llama_70b(tmp_path):
    directory, env = setup(tmp_path, budget=14)
    code, out, err = launch(directory, env)
    assert code == 0, err[-4000:]
    assert "finished: yes" in out
    rows = check_finished_campaign(directory)
    assert "planner: launch run=p-r001 purpose=baseline" in err and "planner: result run=p-r004" in err
    timed = re.compile(r"^planner: \S+(?: .*)? utc=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ elapsed=\d+:\d\d:\d\d"
                       r"(?: burn=\"[0-9.e+]+ [A-Za-z-]+/h\")? eta=(?:\d+:\d\d:\d\d|n/a)$")
    lines = [line for line in err.splitlines() if line.startswith("planner: ")]
    assert lines and all(timed.match(line) for line in lines), [line for line in lines if not timed.match(line)][:3]
    assert any(" burn=" in line for line in lines), "once runs are charged the line says when the budget runs out"
    status = json.loads(attune(directory, "status", "--json")[1])
    assert status["leader"]["run"] != status["baseline"]["run"]
    assert status["leader"]["vs_baseline"] > status["band"]["value"]
    stop = [r for r in rows if r["kind"] == "stop"]
    assert stop and stop[-1]["evidence"], "the planner stops with evidence before the budget is spent"
    assert (directory / "recipe.yaml").is_file(), "the winner shipped"
    report = (directory / "REPORT.md").read_text()
    assert status["leader"]["run"] in report
    # the leave-one-out of the final stack: every change of the lineage but the last is removed once against the
    # leader and measured (never skipped on a prediction), written by `candidate new --leave-out`
    from attune.campaign import snapshot as snapshot_mod
    ranking = snapshot_mod.take(directory).ranking
    owed = [recipe for recipe in ranking.lineage(ranking.leader)[1:-1] if not recipe.first.leave_out]
    loo = [r for r in rows if r["kind"] == "launch" and r.get("hypothesis", "").startswith("Leave-one-out of ")]
    assert all(r.get("leave_out") for r in loo)
    assert {r["leave_out"] for r in loo} >= {recipe.first.run for recipe in owed} or \
        "the budget cannot hold the leave-one-out" in stop[-1]["reason"], (owed, loo, stop[-1]["reason"])
    assert "## Leave-one-out" in report


def test_a_killed_planner_resumes_without_launching_anything_twice(tmp_path):
    directory, env = setup(tmp_path, budget=8)
    # 1. killed right after writing its first candidate (never launched)
    code, out, err = launch(directory, env, fault="after-candidate:1")
    assert code == 1, err[-3000:]
    session = err.split("--session ")[-1].split()[0]
    orphan = json.loads((directory / "runs" / "p-r004" / "candidate.json").read_text())
    assert "p-r004" not in {r["run"] for r in ledger(directory) if r["kind"] == "launch"}
    # 2. resumed with the command it printed: the written candidate is launched, not written again; killed with its
    #    confirmation in flight
    code, out, err = resume(err, env, fault="after-launch:2")
    assert code == 1, err[-3000:]
    assert "planner: resume run=p-r004" in err and "missing" not in err and "warning" not in err
    launches = {r["run"]: r for r in ledger(directory) if r["kind"] == "launch"}
    assert launches["p-r004"]["change"] == orphan["change"]
    confirm = next(run for run, r in launches.items() if r["purpose"] == "confirm")
    assert confirm not in {r["run"] for r in ledger(directory) if r["kind"] == "result"}, "killed with it in flight"
    # 3. resumed again: the run in flight is finalized first; this session ends early (exit 0, unfinished) and
    #    the launcher's stop-rule check resumes it until the campaign is over
    code, out, err = resume(err, env, fault="exit-after-launch:2")
    assert code == 0, err[-4000:]
    assert "finished: yes" in out
    assert "planner: follow run=%s" % confirm in err
    assert "the stop rule does not hold" in err
    rows = check_finished_campaign(directory)
    sessions = [json.loads(line) for line in (directory / ".attune" / "sessions.jsonl").read_text().splitlines()]
    assert {s["session"] for s in sessions} == {session} and len(sessions) >= 4
    assert [s["exit_code"] for s in sessions][:2] == [-9, -9]
    status = json.loads(attune(directory, "status", "--json")[1])
    assert status["budget"]["exhausted"] or status["stop"] is not None
    assert sum(1 for r in rows if r["kind"] == "launch" and r["purpose"] == "confirm"
               and r.get("parent") == "p-r004") == 1
