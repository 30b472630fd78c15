"""End to end with the real Claude Code CLI (pinned 2.1.332) against a scripted model on loopback.

The scripted model loads the skill (Claude Code must expand ``${CLAUDE_SKILL_DIR}`` in what reaches the model),
asks which `attune` it runs (the campaign's own), tries a forbidden kubectl command and an edit of the ledger (the guard denies
both), tries to stop early (the Stop hook blocks, with its reason), runs `attune` verbs on the local
backend (a baseline run of a fake Megatron-LM process, finalized), records a stop with evidence,
writes the report, and is then allowed to finish. The test asserts on what the hooks decided, on
what reached the model, and on the campaign's files.

The CLI comes from ATTUNE_CLAUDE_BIN, else `.ci/claude-cli/node_modules/.../claude` (where `.ci/run`
installs it from the npm registry); without it the test says so and skips.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_anthropic import FakeAnthropic, text, tool

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LAUNCHER = REPO / "harness" / "launch_campaign.sh"
FAKE_MEGATRON = REPO / "skill" / "scripts" / "tests" / "data" / "fake_megatron.py"
CLAUDE_VERSION = "2.1.332"
DEFAULT_BIN = REPO / ".ci" / "claude-cli" / "node_modules" / "@anthropic-ai" / "claude-code-linux-x64" / "claude"

RECIPE = (REPO / "skill" / "scripts" / "tests" / "data" / "recipes" / "local_fake_megatron.yaml").read_text()


def claude_bin():
    path = Path(os.environ.get("ATTUNE_CLAUDE_BIN") or DEFAULT_BIN)
    if not path.is_file():
        pytest.skip("the Claude Code CLI is not installed at %s (.ci/run installs @anthropic-ai/claude-code@%s; or set "
                    "ATTUNE_CLAUDE_BIN)" % (path, CLAUDE_VERSION))
    version = subprocess.run([str(path), "--version"], stdout=subprocess.PIPE, timeout=60).stdout.decode()
    assert version.startswith(CLAUDE_VERSION), "pinned Claude Code %s, found %s" % (CLAUDE_VERSION, version)
    return path


def test_real_claude_code_is_kept_in_bounds_and_stops_only_when_the_campaign_is_over(tmp_path):
    binary = claude_bin()
    campaign = tmp_path / "campaign"
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(RECIPE.format(python=sys.executable, script=FAKE_MEGATRON))
    run = "e2e-r001"
    script = [
        # the skill, as the agent loads it: Claude Code expands ${CLAUDE_SKILL_DIR} in its body
        [tool("Skill", skill="attune")],
        # the agent's `attune` is the campaign's (its read-only skill copy and the frozen interpreter)
        [tool("Bash", command="command -v attune", description="which attune")],
        [text("Checking the cluster."), tool("Bash", command="kubectl delete rayjob someone-elses-job",
                                             description="delete")],
        [tool("Write", file_path=str(campaign / "ledger.jsonl"), content="{}\n")],
        [text("I am done.")],
        # the verbs, each alone: the one command that leaves the sandbox
        [tool("Bash", command="attune launch --baseline", description="baseline", timeout=300000)],
        [tool("Bash", command="attune finalize %s --wait 120" % run, description="finalize", timeout=300000)],
        [tool("Bash", command="attune stop --reason 'the baseline alone: nothing left to try in this test' "
                              "--evidence %s" % run, description="stop")],
        [tool("Bash", command="attune report", description="report", timeout=300000)],
        [text("Stopped with evidence and wrote the report.")],
    ]
    home = tmp_path / "home"
    for name in ("home", "cfg", "tmp"):
        (tmp_path / name).mkdir()
    with FakeAnthropic(script) as api:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TMPDIR": str(tmp_path / "tmp"),
               "CLAUDE_CONFIG_DIR": str(tmp_path / "cfg"), "ANTHROPIC_BASE_URL": api.url,
               "ANTHROPIC_API_KEY": "dummy", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "CLAUDE_CODE_MAX_RETRIES": "0", "ATTUNE_CLAUDE_BIN": str(binary), "ATTUNE_PYTHON": sys.executable,
               "ATTUNE_BACKEND": "local", "ATTUNE_RUN_PREFIX": "e2e-", "ATTUNE_BASELINE_YAML": str(baseline),
               "AUTOTUNE_BUDGET": "20", "AUTOTUNE_ALLOW_WEB": "0", "ATTUNE_CLAUDE_MODEL": "fake-model"}
        proc = subprocess.run(["bash", str(LAUNCHER), str(campaign)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=600)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, (out, err)
    assert "finished: yes" in out
    # what reached the model
    assert len(api.requests) == len(script), [api.texts(i)[-300:] for i in range(len(api.requests))]
    skill = api.texts(1)
    assert "${CLAUDE_SKILL_DIR}" not in skill, "the skill's body reached the model unexpanded"
    assert re.search(re.escape(str(campaign)) + r"/\S*skill\S*/past_tuning_projects/", skill), skill[-2000:]
    assert str(campaign / ".attune" / "bin" / "attune") in api.texts(2)
    denied_kubectl = api.texts(3)
    assert "PreToolUse:Bash hook error" in denied_kubectl and "kubectl is not needed" in denied_kubectl
    assert "PreToolUse:Write hook error" in api.texts(4)
    stop_feedback = api.texts(5)
    assert "Stop hook" in stop_feedback and "attune stop --reason" in stop_feedback
    # the session's record
    sessions = [json.loads(line) for line in (campaign / ".attune" / "sessions.jsonl").read_text().splitlines()]
    assert len(sessions) == 1 and sessions[0]["exit_code"] == 0 and sessions[0]["permission_denials"] == 2
    result = json.loads((campaign / ".attune" / "sessions" / ("%s.json" % sessions[0]["session"])).read_text())
    denials = [(d["tool_name"], d["tool_input"].get("command") or d["tool_input"].get("file_path"))
               for d in result["permission_denials"]]
    assert denials == [("Bash", "kubectl delete rayjob someone-elses-job"), ("Write", str(campaign / "ledger.jsonl"))]
    # the campaign's files
    rows = [json.loads(line) for line in (campaign / "ledger.jsonl").read_text().splitlines()]
    kinds = [row["kind"] for row in rows]
    assert kinds[0] == "campaign" and "launch" in kinds and "result" in kinds and "stop" in kinds
    assert [row["event"] for row in rows if row["kind"] == "session"] == ["start", "end"]
    assert (campaign / "REPORT.md").is_file()
    verify = subprocess.run([sys.executable, str(REPO / "skill" / "scripts" / "attune.py"), "verify", "--campaign",
                             str(campaign)], stdout=subprocess.PIPE)
    assert verify.returncode == 0
