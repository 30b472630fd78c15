"""The campaign's Claude Code sandbox settings, its `attune` wrapper, and the agent's settings under the
integrity record: Claude Code settings that gain `disableAllHooks` between sessions (the campaign's
`.claude/settings.local.json`, the user's `~/.claude/settings.json`) fail the next launch with exit 3;
a cosmetic change to the user's settings does not."""

from __future__ import annotations

import json
import subprocess
import sys

from test_launcher import launch, setup


def _prepared(tmp_path, user_settings=None):
    directory, env = setup(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env["HOME"] = str(home)
    if user_settings is not None:
        (home / ".claude").mkdir()
        (home / ".claude" / "settings.json").write_text(json.dumps(user_settings))
    env["KUBECONFIG"] = "%s:%s" % (tmp_path / "kube" / "a.yaml", tmp_path / "kube" / "b.yaml")
    code, out, err = launch(directory, env, "--prepare")
    assert code == 0, err
    return directory, env, home


def test_the_settings_turn_the_sandbox_on_and_let_only_attune_out(tmp_path):
    directory, env, home = _prepared(tmp_path)
    settings = json.loads((directory / ".attune" / "claude_settings.json").read_text())
    box = settings["sandbox"]
    assert box["enabled"] is True and box["failIfUnavailable"] is True and box["allowUnsandboxedCommands"] is False
    assert box["excludedCommands"] == ["attune:*"] and settings["permissions"]["allow"] == ["Bash(attune:*)"]
    deny_write = set(box["filesystem"]["denyWrite"])
    for rel in ("ledger.jsonl", "gpu_hours.jsonl", "levers.md", "runs", ".attune", ".claude", "CLAUDE.md",
                "REPORT.md", "recipe.yaml", "goal_prompt.txt"):
        assert str(directory / rel) in deny_write, rel
    assert box["filesystem"]["allowWrite"] == [str(directory / "notes.md"), str(directory / "scratch")]
    deny_read = set(box["filesystem"]["denyRead"])
    assert {str(home / ".kube"), str(home / ".claude"), str(tmp_path / "kube" / "a.yaml"),
            str(tmp_path / "kube" / "b.yaml")} <= deny_read
    assert box["network"]["allowedDomains"] == []
    assert {"name": "KUBECONFIG", "mode": "deny"} in box["credentials"]["envVars"]


def test_the_wrapper_runs_the_campaigns_read_only_cli_on_this_campaign_only(tmp_path):
    directory, env, _ = _prepared(tmp_path)
    wrapper = directory / ".attune" / "bin" / "attune"
    assert wrapper.is_file() and not wrapper.stat().st_mode & 0o222
    env = dict(env, ATTUNE_CAMPAIGN_DIR=str(tmp_path / "elsewhere"), PYTHONPATH=str(tmp_path / "evil"))
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "attune.core.py").write_text("raise SystemExit('the evil module was imported')\n")
    proc = subprocess.run([str(wrapper), "status", "--json"], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout.decode())["campaign"] == json.loads(
        (directory / "ledger.jsonl").read_text().splitlines()[0])["campaign"]
    other = subprocess.run([str(wrapper), "status", "--campaign", str(tmp_path)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
    assert other.returncode == 2 and "ATTUNE_CAMPAIGN_LOCK" in other.stderr.decode()


def _first_session(directory, env):
    code, out, err = launch(directory, env, "--agent-command", "echo $ATTUNE_SESSION_ID > scratch/session; exit 1")
    assert code == 1, err
    return (directory / "scratch" / "session").read_text().strip()


def test_disable_all_hooks_in_the_campaigns_local_settings_fails_the_next_launch(tmp_path):
    directory, env, _ = _prepared(tmp_path)
    session = _first_session(directory, env)
    (directory / ".claude" / "settings.local.json").write_text(json.dumps({"disableAllHooks": True}))
    code, out, err = launch(directory, env, "--session", session, "--agent-command", "exit 0")
    assert code == 3, err
    assert ".claude/settings.local.json" in err


def test_disable_all_hooks_in_the_users_settings_fails_the_next_launch(tmp_path):
    directory, env, home = _prepared(tmp_path, {"theme": "dark", "permissions": {"allow": []}})
    user = home / ".claude" / "settings.json"
    session = _first_session(directory, env)
    user.write_text(json.dumps({"theme": "light", "permissions": {"allow": []}}))  # cosmetic: no violation
    assert launch(directory, env, "--session", session, "--agent-command", "exit 1")[0] == 1
    user.write_text(json.dumps({"theme": "light", "permissions": {"allow": []}, "disableAllHooks": True}))
    code, out, err = launch(directory, env, "--session", session, "--agent-command", "exit 0")
    assert code == 3, err
    assert str(user) in err and "agent_settings" in err
    violation = json.loads((directory / ".attune" / "integrity_violation.json").read_text())
    assert [(p["rule"], p["found"]) for p in violation["problems"]] == [("agent_settings", "disableAllHooks added")]


def test_the_record_holds_the_agents_settings_paths_even_when_absent(tmp_path):
    directory, env, _ = _prepared(tmp_path)
    record = json.loads((directory / ".attune" / "integrity.json").read_text())
    for rel in (".claude/settings.json", ".claude/settings.local.json", ".claude/hooks", "CLAUDE.md", ".mcp.json",
                ".claude/skills", ".attune/bin"):
        assert rel in record["static"], rel
    assert record["static"]["CLAUDE.md"] == {"type": "missing"}


def test_the_wrapper_reads_only_inside_the_campaign_and_writes_only_into_scratch(tmp_path):
    directory, env, home = _prepared(tmp_path)
    wrapper = str(directory / ".attune" / "bin" / "attune")
    secret = home / ".kube" / "config"
    secret.parent.mkdir()
    secret.write_text("users: [{name: u, user: {token: a-secret-token}}]\n")

    def run(*args, cwd=directory):
        proc = subprocess.run([wrapper, *args], cwd=str(cwd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=120)
        return proc.returncode, proc.stdout.decode() + proc.stderr.decode()

    for args in (("metrics", str(secret)), ("settings", "--config", str(secret)), ("rows", "sha", "../kube"),
                 ("profile", "/etc")):
        code, out = run(*args)
        assert code == 2 and "reads only files inside the campaign" in out and "a-secret-token" not in out, (args, out)
    code, out = run("rows", "from-slime", "scratch/dump.pt", "--out", "ledger.jsonl")
    assert code == 2 and "writes only into its scratch/" in out
    (directory / "scratch" / "train.log").write_text("not a training log\n")
    code, out = run("metrics", "scratch/train.log")
    assert "inside the campaign" not in out  # read: the verb's own verdict on the file follows
