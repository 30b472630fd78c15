"""The recorded agent trial (bench/agent_trials/qwen3-30b-a3b.trial) still replays: every command a reader
following SKILL.md ran answers what the reader read from it, on a fresh SIMULATED campaign, and the campaign
wastes no run, names the untested levers it weighed in its stop and ships."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRIALS = REPO / "bench" / "agent_trials"


def _runner():
    spec = importlib.util.spec_from_file_location("run_trial", TRIALS / "run_trial.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_qwen3_trial_replays_without_divergence_or_waste(tmp_path, capsys):
    runner = _runner()
    out = tmp_path / "trial.json"
    code = runner.main([str(TRIALS / "qwen3-30b-a3b.trial"), "--no-planner", "--keep", str(tmp_path / "c"),
                        "--out", str(out)])
    record = json.loads(out.read_text())["reader"]
    assert code == 0 and record["diverged"] == [], record["diverged"]
    summary = record["summary"]
    assert summary["wasted"] == [] and summary["by_purpose"].get("profile") is None
    assert summary["gain"] > 1.0 and summary["leader"] == "demo-r006"
    for lever in ("expert-parallel-size", "micro-batch-size", "selective-recompute", "fp8-training"):
        assert lever in summary["stop"], lever
    assert "reader: runs=8 candidates=3" in capsys.readouterr().out
