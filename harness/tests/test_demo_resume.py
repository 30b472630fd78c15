"""The demo, stopped part way, resumes with the exact command it printed, from a new shell holding no setting
and from another directory: exit 0, the same session goes on, nothing is launched twice; the command printed
at the end of the finished campaign resumes it too, and launches nothing."""

from __future__ import annotations

import pytest
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.fixture(autouse=True)
def _own_key_dir(tmp_path, monkeypatch):  # the integrity keys (harness/integrity_key.py) under tmp_path, not in HOME
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def bare_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTUNE_", "AUTOTUNE_"))}
    env.update(ATTUNE_PYTHON=sys.executable, **extra)
    return env


def run(command, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=isinstance(command, str), env=env, cwd=str(cwd), capture_output=True,
                          text=True, timeout=600)


def launches(directory: Path) -> list:
    rows = [json.loads(line) for line in (directory / "ledger.jsonl").read_text().splitlines() if line.strip()]
    return [row["run"] for row in rows if row["kind"] == "launch"]


def sessions(directory: Path) -> list:
    return [json.loads(line)["session"] for line in
            (directory / ".attune" / "sessions.jsonl").read_text().splitlines()]


def test_a_stopped_demo_resumes_with_the_command_it_printed(tmp_path):
    directory = tmp_path / "demo"
    # the planner is killed right after its third launch: the demo ends unfinished (exit 1) and says how to resume
    first = run(["bash", str(REPO / "harness" / "launch_campaign.sh"), "--demo", str(directory)],
                bare_env(ATTUNE_PLANNER_FAULT="after-launch:3"), tmp_path)
    assert first.returncode == 1, first.stderr[-3000:]
    printed = first.stderr.split("Resume with: ", 1)[1].splitlines()[0]
    session = printed.split()[-1]
    before = launches(directory)
    assert len(before) == 3

    other = tmp_path / "elsewhere"
    other.mkdir()
    resumed = run(printed, bare_env(), other)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "finished: yes" in resumed.stdout and "warning" not in resumed.stderr
    after = launches(directory)
    assert after[:3] == before and len(after) == len(set(after)) > 3, "nothing launched twice"
    assert set(sessions(directory)) == {session}

    # the finished campaign prints its own resume command; resuming it launches nothing
    again = [line.split(": ", 1)[1] for line in resumed.stdout.splitlines() if line.startswith("resume: ")]
    assert len(again) == 1 and again[0].split()[-1] == session
    last = run(again[0], bare_env(), other)
    assert last.returncode == 0 and "finished: yes" in last.stdout, last.stderr[-3000:]
    assert launches(directory) == after
    assert set(sessions(directory)) == {session}


def test_ctrl_c_says_how_to_resume_and_the_printed_command_finishes_the_campaign(tmp_path):
    import signal

    directory = tmp_path / "demo"
    proc = subprocess.Popen(["bash", str(REPO / "harness" / "launch_campaign.sh"), "--demo", str(directory)],
                            env=bare_env(), cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    seen = []
    for line in proc.stderr:  # Ctrl-C once the first run has a result: the terminal signals the whole group
        seen.append(line)
        if line.startswith("planner: result "):
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest_out, rest_err = proc.communicate(timeout=120)
    err = "".join(seen) + rest_err
    assert proc.returncode == 130, err[-3000:]
    ends = [line for line in err.splitlines() if line.startswith("launch_campaign: interrupted;")]
    assert len(ends) == 1 and "Traceback" not in err, err[-3000:]
    printed = ends[0].split("resume with: ", 1)[1]
    resumed = run(printed, bare_env(), tmp_path)
    assert resumed.returncode == 0 and "finished: yes" in resumed.stdout, resumed.stderr[-3000:]
    runs = launches(directory)
    assert len(runs) == len(set(runs)) > 1
