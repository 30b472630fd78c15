"""The Stop hook: blocks with a specific reason until the budget is spent or a valid stop is recorded
and the report exists; lets a violated campaign stop; always answers one JSON object, exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import integrity_fixtures as fx  # noqa: F401  (puts skill/scripts and harness on sys.path)
from factory import Builder

HOOK = Path(__file__).resolve().parent.parent / "hooks" / "stop.py"


@pytest.fixture(autouse=True)
def _own_key_dir(tmp_path, monkeypatch):  # the integrity keys (harness/integrity_key.py) under tmp_path, not in HOME
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def run_hook(directory, event=None):
    env = dict(os.environ, ATTUNE_CAMPAIGN_DIR=str(directory))
    proc = subprocess.run([sys.executable, "-B", str(HOOK)], input=json.dumps(event or {"hook_event_name": "Stop"}).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().strip().splitlines()
    assert len(lines) == 1
    return json.loads(lines[0])


def campaign(tmp_path, **settings):
    b = Builder(tmp_path / "c", **settings)
    b.baseline(runs=2)
    return b


def test_blocks_with_the_budget_leader_and_next_step(tmp_path):
    b = campaign(tmp_path)
    b.launch("r003", "candidate", "x", parent="r001")
    out = run_hook(b.campaign.dir)
    assert out["decision"] == "block"
    assert "Budget left" in out["reason"] and "r003" in out["reason"] and "attune stop --reason" in out["reason"]


def test_a_stop_without_evidence_or_report_is_not_enough(tmp_path):
    b = campaign(tmp_path)
    b.campaign.append("stop", reason="done", evidence=["r999"])
    out = run_hook(b.campaign.dir)
    assert out["decision"] == "block" and "never launched: r999" in out["reason"]
    b.campaign.append("stop", reason="nothing left clears the band", evidence=["r001", "r002"])
    out = run_hook(b.campaign.dir)
    assert out["decision"] == "block" and "attune report" in out["reason"]
    (b.campaign.dir / "REPORT.md").write_text("# report\n")
    out = run_hook(b.campaign.dir)
    assert "decision" not in out and "stop recorded" in out["systemMessage"]
    b.launch("r004", "candidate", "y", parent="r001")
    assert run_hook(b.campaign.dir)["decision"] == "block", "a launch after the stop makes it stale"


def test_a_spent_budget_with_a_report_lets_the_agent_stop(tmp_path):
    b = campaign(tmp_path)
    settings = (b.campaign.dir / ".attune" / "settings.env").read_text()
    assert "AUTOTUNE_GPUH_BUDGET=" in settings
    spent = sum(json.loads(line)["gpu_seconds"] for line in (b.campaign.dir / "gpu_hours.jsonl").read_text().splitlines())
    lines = [line for line in settings.splitlines() if not line.startswith(("AUTOTUNE_GPUH_BUDGET=", "AUTOTUNE_BUDGET="))]
    lines.append("AUTOTUNE_GPUH_BUDGET=%s" % (spent / 3600.0))
    (b.campaign.dir / ".attune" / "settings.env").write_text("\n".join(lines) + "\n")
    assert run_hook(b.campaign.dir)["decision"] == "block"
    (b.campaign.dir / "REPORT.md").write_text("# report\n")
    assert "budget spent" in run_hook(b.campaign.dir)["systemMessage"]


def test_no_campaign_means_no_block(tmp_path):
    out = run_hook(tmp_path)
    assert "decision" not in out and "no campaign" in out["systemMessage"]


def test_an_integrity_violation_lets_the_agent_stop_and_is_recorded(tmp_path):
    import integrity

    directory = fx.build_template(tmp_path)
    integrity.record(str(directory), session=True)
    assert run_hook(directory)["decision"] == "block"
    ledger = directory / "ledger.jsonl"
    ledger.write_bytes(ledger.read_bytes().replace(b'"baseline"', b'"basalina"', 1))
    out = run_hook(directory)
    assert "decision" not in out and "integrity violation" in out["systemMessage"]
    assert (directory / ".attune" / "integrity_violation.json").is_file()


def test_the_leader_line_writes_what_a_candidate_needs_as_every_page_does(tmp_path):
    from attune import cli
    from attune.campaign.ranking import band_text

    b = campaign(tmp_path)
    b.launch("r003", "repeat", "base", parent="r001")
    b.result("r003", 1000.0 / 1.03)  # the baseline's range: 3% of its median
    assert cli.main(["rank", "--campaign", str(b.campaign.dir), "--no-chart"]) == 0  # writes the leader row
    band = [row for row in b.campaign.ledger.rows() if row["kind"] == "leader"][-1]["band"]
    assert "(a candidate needed %s)." % band_text(band) in run_hook(b.campaign.dir)["reason"]
