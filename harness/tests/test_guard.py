"""Tests of the PreToolUse guard (harness/hooks/pre_tool_use.py).

Table-driven: each case is a tool call, the decision expected and, for a deny, a piece of the
reason (which tells the agent what to do instead). The campaign is a temporary directory with a
frozen ``.attune/settings.env`` (context ctx-a, namespace team-a, run prefix alice-llama-, log pod
attune-log, web off); ``{camp}``, ``{other}`` (a folder outside the campaign) and ``{man}`` (a folder
of manifests outside the campaign) are filled in per run. Cases call ``decide`` directly; a few run
the hook as a subprocess, as Claude Code does.
"""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
HOOKS = os.path.abspath(os.path.join(HERE, os.pardir, "hooks"))
for _path in (HOOKS, HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import campaign_files  # noqa: E402
import guard_cases  # noqa: E402
import pre_tool_use as guard  # noqa: E402
from guard_cases import ALLOW, CASES, CTX, DENY, RECORDS, SETTINGS  # noqa: E402

HOOK_SCRIPT = os.path.join(HOOKS, "pre_tool_use.py")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return guard_cases.build(tmp_path_factory.mktemp("guard"))


def _event(tool, tool_input, cwd):
    return guard_cases.event(tool, tool_input, cwd)


def test_enough_cases():
    allowed = sum(1 for c in CASES if c.expect == ALLOW)
    denied = sum(1 for c in CASES if c.expect == DENY)
    assert allowed + denied == len(CASES) >= 150
    assert allowed >= 60 and denied >= 60
    assert all(c.why for c in CASES if c.expect == DENY)


@pytest.mark.parametrize("case", CASES, ids=[guard_cases.case_id(c) for c in CASES])
def test_case(case, dirs):
    event = _event(case.tool, guard_cases.fill(case.tool_input, dirs), guard_cases.cwd_of(case.cwd, dirs))
    decision, reason = guard.decide(event, dirs["camp"], guard_cases.settings_for(case))
    assert decision == case.expect, reason
    assert isinstance(reason, str) and reason
    if case.expect == DENY:
        assert case.why in reason, reason
    else:
        assert "not a security boundary" in reason


def test_frozen_settings_file_is_what_the_guard_reads(dirs):
    assert campaign_files.read_settings(dirs["camp"])["ATTUNE_RUN_PREFIX"] == "alice-llama-"


def test_no_campaign_denies_checked_tools_only(dirs):
    event = _event("Bash", {"command": "ls"}, dirs["other"])
    assert guard.decide(event, None, {})[0] == DENY
    assert guard.decide(_event("Read", {"file_path": "/etc/hosts"}, dirs["other"]), None, {})[0] == ALLOW


def test_missing_settings_deny_kubectl_but_not_plain_commands(dirs):
    event = _event("Bash", {"command": "kubectl get pods " + CTX}, dirs["camp"])
    decision, reason = guard.decide(event, dirs["camp"], {})
    assert decision == DENY and "frozen settings" in reason
    assert guard.decide(_event("Bash", {"command": "ls"}, dirs["camp"]), dirs["camp"], {})[0] == ALLOW
    local = {"ATTUNE_BACKEND": "local", "ATTUNE_RUN_PREFIX": "alice-llama-"}
    decision, reason = guard.decide(event, dirs["camp"], local)
    assert decision == DENY and "local backend" in reason


@pytest.mark.parametrize("event", [None, [], "text", {"tool_name": "Bash", "tool_input": "ls"},
                                   {"tool_name": "Bash", "tool_input": {"command": 3}},
                                   {"tool_name": "Edit", "tool_input": {"file_path": 7}}])
def test_odd_events_are_denied_not_crashed(event, dirs):
    decision, reason = guard.decide(event, dirs["camp"], SETTINGS)
    assert decision == DENY and reason


def test_deep_nesting_is_denied_quickly(dirs):
    command = "echo " + "$(echo " * 40 + "hi" + ")" * 40
    decision, reason = guard.decide(_event("Bash", {"command": command}, dirs["camp"]), dirs["camp"], SETTINGS)
    assert decision == DENY and "too deeply" in reason
    shallow = "echo " + "$(echo " * 5 + "hi" + ")" * 5
    assert guard.decide(_event("Bash", {"command": shallow}, dirs["camp"]), dirs["camp"], SETTINGS)[0] == ALLOW


def test_huge_command_is_denied(dirs):
    command = "echo " + "x" * (guard.MAX_COMMAND + 1)
    decision, reason = guard.decide(_event("Bash", {"command": command}, dirs["camp"]), dirs["camp"], SETTINGS)
    assert decision == DENY and "too long" in reason


# ------------------------------------------------------------------------------------ subprocess
def _run_hook(stdin_text, dirs, env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("ATTUNE_CAMPAIGN_DIR", "CLAUDE_PROJECT_DIR")}
    env["ATTUNE_CAMPAIGN_DIR"] = dirs["camp"]
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, HOOK_SCRIPT], input=stdin_text.encode("utf-8"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(HOOKS)))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8")
    assert out.count("\n") == 1 and out.endswith("\n"), out
    data = json.loads(out)  # the whole of stdout is one JSON object
    assert list(data) == ["hookSpecificOutput"]
    spec = data["hookSpecificOutput"]
    assert spec["hookEventName"] == "PreToolUse"
    assert spec["permissionDecision"] in (ALLOW, DENY)
    assert spec["permissionDecisionReason"]
    return spec


def test_subprocess_allows_with_frozen_settings(dirs):
    event = _event("Bash", {"command": "attune status --json"}, dirs["camp"])
    spec = _run_hook(json.dumps(event), dirs)
    assert spec["permissionDecision"] == ALLOW
    assert "not a security boundary" in spec["permissionDecisionReason"]
    event = _event("Bash", {"command": "kubectl get pods --context ctx-a -n team-a"}, dirs["camp"])
    spec = _run_hook(json.dumps(event), dirs)
    assert spec["permissionDecision"] == DENY and "attune kube" in spec["permissionDecisionReason"]


def test_subprocess_denies_edit_of_ledger_and_web(dirs):
    event = _event("Edit", {"file_path": os.path.join(dirs["camp"], "ledger.jsonl"), "old_string": "x",
                            "new_string": "y"}, dirs["camp"])
    spec = _run_hook(json.dumps(event), dirs)
    assert spec["permissionDecision"] == DENY and RECORDS in spec["permissionDecisionReason"]
    spec = _run_hook(json.dumps(_event("WebSearch", {"query": "x"}, dirs["camp"])), dirs)
    assert spec["permissionDecision"] == DENY and "AUTOTUNE_ALLOW_WEB" in spec["permissionDecisionReason"]


@pytest.mark.parametrize("stdin_text", ["not json {", "", "[1, 2]", "\xff\xfe garbage"])
def test_subprocess_malformed_stdin_is_denied(stdin_text, dirs):
    spec = _run_hook(stdin_text, dirs)
    assert spec["permissionDecision"] == DENY


def test_subprocess_without_campaign_denies_bash(dirs):
    event = _event("Bash", {"command": "ls"}, dirs["other"])
    env = {k: v for k, v in os.environ.items() if k not in ("ATTUNE_CAMPAIGN_DIR", "CLAUDE_PROJECT_DIR")}
    proc = subprocess.run([sys.executable, HOOK_SCRIPT], input=json.dumps(event).encode(), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=env, timeout=60)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["hookSpecificOutput"]["permissionDecision"] == DENY


def test_each_guard_module_imports_only_the_modules_before_it():
    import ast
    import re as re_mod
    folder = os.path.join(HOOKS, "guard")
    doc = ast.get_docstring(ast.parse(open(os.path.join(folder, "__init__.py")).read()))
    order = ["context", "lexer", "paths", "commands", "interpreters", "writers", "manifest", "kubectl", "verbs",
             "dispatch"]
    assert [name for name in order if re_mod.search(r"\b%s\b" % name, doc)] == order
    assert sorted(order) == sorted(name[:-3] for name in os.listdir(folder) if name.endswith(".py") and name != "__init__.py")
    for index, name in enumerate(order):
        tree = ast.parse(open(os.path.join(folder, name + ".py")).read())
        relative = [node for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1]
        imported = {node.module for node in relative if node.module}
        imported |= {alias.name for node in relative if not node.module for alias in node.names}
        assert imported <= set(order[:index]), (name, sorted(imported - set(order[:index])))
        private = [alias.name for node in relative if node.module for alias in node.names if alias.name.startswith("_")]
        assert not private, "%s takes private names from the modules before it: %s" % (name, private)


def test_every_program_has_one_checker_registered_by_the_module_that_defines_it():
    from guard import context
    for name in ("kubectl", "attune", "env", "sudo", "bash", "eval", "perl", "awk", "tee", "mv", "rm", "curl",
                 "find", "chmod"):
        assert name in context.PROGRAMS, name
    assert context.PROGRAMS["kubectl"] is context.PROGRAMS["kubectl.exe"]
    assert any(pattern.match("python3.11") for pattern, _ in context.PROGRAM_PATTERNS)
    with pytest.raises(ValueError, match="'tee' has two checkers"):
        context.checker("tee")(lambda *args: None)
