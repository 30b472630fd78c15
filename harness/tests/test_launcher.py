"""The launcher: --prepare lays out the campaign; a stand-in agent (--agent-command) runs a whole
campaign on the local backend; a failed session resumes with --session; an integrity violation
tears down the live runs and exits 3; bad settings exit 2 with one line each; `attune doctor`'s checks
run at every launch and --prepare, a failing one stopping it (exit 1), and a session's second launch
reuses the cluster checks of its first (against the fake Kubernetes API)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
LAUNCHER = REPO / "harness" / "launch_campaign.sh"
FAKE_MEGATRON = REPO / "skill" / "scripts" / "tests" / "data" / "fake_megatron.py"
sys.path.insert(0, str(REPO / "skill" / "scripts"))
sys.path.insert(0, str(REPO / "skill" / "scripts" / "tests"))

from attune.campaign import ledger as campaign_mod  # noqa: E402
from attune.campaign import runs as runs_mod  # noqa: E402
from attune.core import frozen as frozen_mod  # noqa: E402

RECIPE = (REPO / "skill" / "scripts" / "tests" / "data" / "recipes" / "local_fake_megatron.yaml").read_text()


def setup(tmp_path, mode="ok"):
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(RECIPE.format(python=sys.executable, script=FAKE_MEGATRON).replace("FAKE_MODE: ok",
                                                                                           "FAKE_MODE: %s" % mode))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTUNE_", "AUTOTUNE_"))}
    env.update({"ATTUNE_BACKEND": "local", "ATTUNE_RUN_PREFIX": "t-", "ATTUNE_BASELINE_YAML": str(baseline),
                "AUTOTUNE_BUDGET": "20", "AUTOTUNE_ALLOW_WEB": "0", "ATTUNE_PYTHON": sys.executable,
                "ATTUNE_CLAUDE_BIN": str(fake_claude(tmp_path / "claude")),
                "XDG_STATE_HOME": str(tmp_path / "state")})  # the integrity keys (harness/integrity_key.py)
    return tmp_path / "campaign", env


def fake_claude(path, version="2.1.332"):
    """A stand-in `claude` that only answers --version (the doctor's agent check)."""
    path.write_text("#!/bin/sh\necho '%s (Claude Code)'\n" % version)
    path.chmod(0o755)
    return path


def launch(directory, env, *args):
    proc = subprocess.run(["bash", str(LAUNCHER), str(directory)] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def attune(directory):
    return "%s %s" % (sys.executable, directory / ".attune" / "skill" / "scripts" / "attune.py")


def whole_campaign(directory) -> str:
    a = attune(directory)
    return ("set -e; {a} launch --baseline >/dev/null; for i in $(seq 120); do if {a} finalize t-r001 >/dev/null; "
            "then break; fi; sleep 0.5; done; {a} stop --reason 'one run is enough here' --evidence t-r001 "
            ">/dev/null; {a} report >/dev/null || true; echo '{{\"session_id\": \"'$ATTUNE_SESSION_ID'\", "
            "\"result\": \"done\", \"total_cost_usd\": 0.5}}'").format(a=a)


def test_prepare_lays_out_the_campaign(tmp_path):
    directory, env = setup(tmp_path)
    code, out, err = launch(directory, env, "--prepare")
    assert code == 0, err
    assert "prepared:" in out
    skill = directory / ".attune" / "skill" / "scripts" / "attune.py"
    assert skill.is_file() and not (skill.stat().st_mode & stat.S_IWUSR)
    assert (directory / ".claude" / "skills" / "attune").resolve() == (directory / ".attune" / "skill").resolve()
    hooks = json.loads((directory / ".attune" / "claude_settings.json").read_text())
    assert "pre_tool_use.py" in hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    assert "stop.py" in hooks["hooks"]["Stop"][0]["hooks"][0]["command"]
    deny = hooks["permissions"]["deny"]
    assert deny[:2] == ["WebFetch", "WebSearch"]
    for secret in hooks["sandbox"]["filesystem"]["denyRead"]:  # the file tools are kept off what Bash may not read
        assert "Read(/%s/**)" % secret in deny and "Edit(/%s)" % secret in deny, secret
    assert (directory / ".attune" / "baseline.yaml").read_bytes() == (tmp_path / "baseline.yaml").read_bytes()
    assert (directory / "goal_prompt.txt").is_file() and (directory / "resume_prompt.txt").is_file()
    assert (directory / ".attune" / "integrity.json").is_file() and (directory / ".attune" / "settings.env").is_file()
    assert launch(directory, env, "--prepare")[0] == 0, "preparing twice changes nothing"


def test_bad_settings_exit_2_with_one_line_each(tmp_path):
    directory, env = setup(tmp_path)
    env["AUTOTUNE_BUDGET"] = "-3"
    code, out, err = launch(directory, env, "--prepare")
    assert code == 2 and "AUTOTUNE_BUDGET" in err and len(err.strip().splitlines()) == 1
    assert launch(directory, env)[0] == 2


def test_a_stand_in_agent_runs_a_whole_campaign(tmp_path):
    directory, env = setup(tmp_path)
    code, out, err = launch(directory, env, "--agent-command", whole_campaign(directory))
    assert code == 0, err
    assert "finished: yes" in out
    sessions = [json.loads(line) for line in (directory / ".attune" / "sessions.jsonl").read_text().splitlines()]
    assert len(sessions) == 1 and sessions[0]["model_cost_usd"] == 0.5
    rows = campaign_mod.Campaign(directory).ledger.rows()
    ends = [row for row in rows if row["kind"] == "session" and row["event"] == "end"]
    assert ends[0]["model_cost_usd"] == 0.5 and ends[0]["session"] == sessions[0]["session"]
    assert (directory / "REPORT.md").is_file()


def test_a_failed_session_resumes_with_its_id(tmp_path):
    directory, env = setup(tmp_path)
    code, out, err = launch(directory, env, "--agent-command", "echo $ATTUNE_SESSION_ID > notes.md; exit 1")
    assert code == 1 and "--session" in err
    first = (directory / "notes.md").read_text().strip()
    assert "harness/launch_campaign.sh %s --session %s" % (directory, first) in err.replace("\n", " ") or first in err
    code, out, err = launch(directory, env, "--session", first, "--agent-command",
                            "test \"$ATTUNE_SESSION_ID\" = %s && grep -q resuming \"$ATTUNE_PROMPT_FILE\" && %s"
                            % (first, whole_campaign(directory)))
    assert code == 0, err
    sessions = [json.loads(line) for line in (directory / ".attune" / "sessions.jsonl").read_text().splitlines()]
    assert [s["session"] for s in sessions] == [first, first]


def test_an_empty_result_is_resumed_a_bounded_number_of_times(tmp_path):
    directory, env = setup(tmp_path)
    code, out, err = launch(directory, env, "--agent-command", "echo '{\"session_id\": \"s1\", \"result\": \"\"}'")
    assert code == 1
    assert err.count("Stop-hook block cap") == 3
    sessions = (directory / ".attune" / "sessions.jsonl").read_text().splitlines()
    assert len(sessions) == 4


def test_integrity_violation_tears_down_live_runs_and_exits_3(tmp_path):
    directory, env = setup(tmp_path, mode="hang")
    a = attune(directory)
    tamper = ("{a} launch --baseline >/dev/null && sleep 1 && "
              "{py} -c \"p='ledger.jsonl'; d=open(p,'rb').read(); open(p,'wb').write(d.replace(b'baseline', b'basalina', 1))\""
              ).format(a=a, py=sys.executable)
    code, out, err = launch(directory, env, "--agent-command", tamper)
    assert code == 3, err
    assert "integrity violation" in err and "t-r001" in err
    violation = json.loads((directory / ".attune" / "integrity_violation.json").read_text())
    assert "ledger.jsonl" in json.dumps(violation)
    settings = frozen_mod.for_campaign(directory)
    local = runs_mod.backends.get(settings.backend, settings)
    deadline = time.time() + 20
    while time.time() < deadline and local.status(directory / "runs" / "t-r001").state != "torn_down":
        time.sleep(0.2)
    assert local.status(directory / "runs" / "t-r001").state == "torn_down"
    assert launch(directory, env)[0] == 3, "a violated campaign never starts again"


def test_the_rows_digest_is_checked_at_every_launch(tmp_path):
    import pytest

    pytest.importorskip("pyarrow", reason="pyarrow is not installed (the data extra)")
    pytest.importorskip("transformers", reason="transformers is not installed (the data extra)")
    sys.path.insert(0, str(REPO / "skill" / "scripts" / "tests"))
    import test_rows
    from attune.data import rows as rows_mod

    tokenizer = test_rows.save_tokenizer(tmp_path / "tok")
    source = test_rows.write_jsonl(tmp_path / "in.jsonl", test_rows.records(3))
    rows_mod.build(source, tokenizer, test_rows.SEQ, tmp_path / "rows.parquet")
    digest = rows_mod.rows_sha256(tmp_path / "rows.parquet")[0]
    directory, env = setup(tmp_path)
    env.update({"ATTUNE_ROWS_PATH": str(tmp_path / "rows.parquet"), "ATTUNE_ROWS_SHA256": "0" * 64})
    code, out, err = launch(directory, env, "--prepare")
    assert code == 1 and "hash to %s" % digest in err and not (directory / "ledger.jsonl").exists()
    assert "launch_campaign: doctor: rows: failed: ATTUNE_ROWS_SHA256=" in err
    env["ATTUNE_ROWS_SHA256"] = digest
    assert launch(directory, env, "--prepare")[0] == 0
    notes = [row["text"] for row in campaign_mod.Campaign(directory).ledger.rows() if row["kind"] == "note"]
    assert notes == ["rows_sha256 checked at launch: %s (%s)" % (digest, tmp_path / "rows.parquet")]


def bare(env) -> dict:
    """The caller's environment with no setting in it: what a user's new shell holds when they resume."""
    return {k: v for k, v in env.items() if k == "ATTUNE_PYTHON" or not k.startswith(("ATTUNE_", "AUTOTUNE_"))}


def test_the_start_after_prepare_and_a_resume_read_the_campaigns_settings(tmp_path):
    directory, env = setup(tmp_path)
    assert launch(directory, env, "--prepare")[0] == 0
    # a new shell: no setting in the environment; the campaign's frozen copy is the one source
    code, out, err = launch(directory, bare(env), "--agent-command", "echo $ATTUNE_SESSION_ID > notes.md; exit 1")
    assert code == 1, err
    assert "missing" not in err and "warning" not in err
    session = (directory / "notes.md").read_text().strip()
    printed = err.split("Resume with: ", 1)[1].splitlines()[0]
    assert printed.split()[0] == str(LAUNCHER) and printed.split()[-2:] == ["--session", session]
    # the resume command, run exactly as printed, from another directory, with other settings in the environment
    other = dict(env, AUTOTUNE_BUDGET="7", ATTUNE_RUN_PREFIX="t-")
    proc = subprocess.run(printed + " --agent-command " + shlex.quote(
        "test \"$ATTUNE_SESSION_ID\" = %s && %s" % (session, whole_campaign(directory))), shell=True,
        cwd=str(tmp_path), env=other, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "AUTOTUNE_BUDGET: '7' here, '20' in the campaign" in warnings[0], err
    assert frozen_mod.for_campaign(directory).as_env()["AUTOTUNE_BUDGET"] == "20"
    sessions = [json.loads(line) for line in (directory / ".attune" / "sessions.jsonl").read_text().splitlines()]
    assert [s["session"] for s in sessions] == [session, session]


def test_a_resume_where_no_campaign_is_says_so(tmp_path):
    directory, env = setup(tmp_path)
    code, out, err = launch(directory, bare(env), "--session", "abc")
    assert code == 2 and "no campaign here" in err and len(err.strip().splitlines()) == 1, err
    assert not directory.exists() or not any(directory.iterdir())


def test_prepare_runs_the_doctor_and_refuses_on_a_failing_check(tmp_path):
    directory, env = setup(tmp_path)
    env["ATTUNE_CLAUDE_BIN"] = str(fake_claude(tmp_path / "old-claude", "2.0.1"))
    env["ATTUNE_CLAUDE_VERSION"] = "2.1.332"
    code, out, err = launch(directory, env, "--prepare")
    assert code == 1 and not directory.exists(), err
    assert "launch_campaign: doctor: agent: failed: %s is Claude Code 2.0.1, not ATTUNE_CLAUDE_VERSION=2.1.332. Fix: " \
        % (tmp_path / "old-claude") in err
    assert "launch_campaign: doctor: baseline: ok" in err and "failed: agent; nothing was started" in err
    del env["ATTUNE_CLAUDE_VERSION"]
    code, out, err = launch(directory, env, "--prepare")
    assert code == 0 and "launch_campaign: doctor: ok" in err, err


def cluster_env(tmp_path, kube_url):
    from fake_kube import write_kubeconfig

    directory, env = setup(tmp_path)
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, kube_url, namespace=None)
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text((REPO / "skill" / "scripts" / "tests" / "data" / "recipes" / "megatron_rayjob.yaml").read_text())
    env.update({"KUBECONFIG": str(kubeconfig), "ATTUNE_BACKEND": "kuberay", "ATTUNE_KUBE_CONTEXT": "test",
                "ATTUNE_NAMESPACE": "ml-tuning", "ATTUNE_IMAGE": "registry.example.com/megatron:25.04",
                "ATTUNE_SHARED_DIR": "/mnt/shared", "AUTOTUNE_LOG_POD": "log-reader"})
    return directory, env


def test_a_kube_context_that_does_not_exist_stops_the_prepare(tmp_path):
    directory, env = cluster_env(tmp_path, "http://127.0.0.1:9")
    env["ATTUNE_KUBE_CONTEXT"] = "no-such-context"
    code, out, err = launch(directory, env, "--prepare")
    assert code == 1 and not directory.exists()
    assert "launch_campaign: doctor: context: failed: ATTUNE_KUBE_CONTEXT=no-such-context is not a context" in err
    assert "launch_campaign: doctor: namespace: not_run: needs context" in err


def test_the_second_launch_of_a_session_reuses_its_cluster_checks(tmp_path):
    from fake_kube import FakeKube

    kube = FakeKube()
    try:
        kube.namespaces.add("ml-tuning")
        kube.pods["log-reader"] = {}
        kube.pod_mounts["log-reader"] = ["/mnt/shared"]
        directory, env = cluster_env(tmp_path, kube.url)
        agent = "echo $ATTUNE_SESSION_ID > notes.md; exit 1"
        code, out, err = launch(directory, env, "--agent-command", agent)
        assert code == 1 and "launch_campaign: doctor: ok (9 passed, 5 skipped)" in err, err
        session = (directory / "notes.md").read_text().strip()
        cache = json.loads((directory / ".attune" / "cache" / "doctor.json").read_text())
        assert cache["session"] == session and len(kube.dry_runs) == 1 and kube.access_reviews
        kube.requests.clear()
        code, out, err = launch(directory, env, "--session", session, "--agent-command", agent)
        assert code == 1, err  # the agent's exit: neither a doctor failure nor an integrity violation (3)
        assert "context, namespace, crd, access, scope, log_pod, dry_run reused from this session's earlier launch" in err
        assert kube.requests == [] and len(kube.dry_runs) == 1
        code, out, err = launch(directory, env, "--agent-command", agent)  # a new session checks everything again
        assert code == 1 and "reused" not in err and len(kube.dry_runs) == 2
        kube.denied.add(("delete", "rayjobs"))  # the cluster changed: a resumed session does not see it...
        session = (directory / "notes.md").read_text().strip()
        assert launch(directory, env, "--session", session, "--agent-command", agent)[0] == 1
        code, out, err = launch(directory, env, "--agent-command", agent)  # ...a new one does, and stops
        assert code == 1 and "launch_campaign: doctor: access: failed: denied in namespace ml-tuning: delete " \
            "rayjobs.ray.io" in err and "nothing was started" in err
    finally:
        kube.close()


def test_help_lists_every_option_of_both_forms_in_plain_text(tmp_path):
    sys.path.insert(0, str(REPO / "harness"))
    import launcher

    env = dict(os.environ, ATTUNE_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(LAUNCHER), "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "--demo" in text and "exit codes:" in text and "``" not in text
    for parser in (launcher.campaign_parser(), launcher.demo_parser()):
        for action in parser._actions:
            for name in action.option_strings or [action.metavar]:
                assert name in text, "%s of %s is missing from --help" % (name, parser.prog)
    # the same text wherever --help is asked for, and no campaign directory is needed for it
    for argv in (["--demo", "--help"], [str(tmp_path / "c"), "--help"], ["-h"]):
        again = subprocess.run(["bash", str(LAUNCHER)] + argv, env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and again.stdout == text
    assert not (tmp_path / "c").exists()
    bare = subprocess.run(["bash", str(LAUNCHER)], env=env, capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and bare.stderr == text and bare.stdout == ""
