"""The CLI as a user runs it: from a read-only copy of the tree, with documented exit codes."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA, REPO, SCRIPTS
from factory import Builder

from attune import cli
from attune.core.errors import EXIT_CODES

VERBS = ["init", "settings", "doctor", "verify", "rank", "status", "budget", "stop", "note", "lesson", "metrics", "candidate", "project",
         "launch", "poll", "finalize", "teardown", "kube", "topology", "gate", "diagnose", "profile", "report", "rows"]


@pytest.fixture(scope="module")
def readonly_tree(tmp_path_factory):
    """A read-only copy of skill/ with no install of the project, as a campaign runs it."""
    root = tmp_path_factory.mktemp("ro") / "skill"
    shutil.copytree(REPO / "skill", root, ignore=shutil.ignore_patterns("__pycache__", "tests"))
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    yield root
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def run(tree, *args, env=None, cwd=None):
    full_env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1"}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-S" if False else "-B", str(tree / "scripts" / "attune.py"), *args],
                          capture_output=True, text=True, env=full_env, cwd=cwd or tree.parent)


def fixture_copy(tmp_path):
    target = tmp_path / "campaign"
    shutil.copytree(DATA / "campaign_basic", target)
    return target


def test_exit_codes_and_verbs_are_pinned():
    assert EXIT_CODES == {"ok": 0, "check_failed": 1, "usage": 2, "integrity": 3}
    assert sorted(cli.VERBS) == sorted(VERBS)


def test_status_from_a_readonly_copy(readonly_tree, tmp_path):
    campaign = fixture_copy(tmp_path)
    proc = run(readonly_tree, "status", "--campaign", str(campaign))
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if ": " in line)
    assert lines["leader"].startswith("r004 20482.9 tokens/s/GPU (+6.39% (95% CI +5.27% to +7.52%; 2 vs 3 runs) vs "
                                      "baseline)")
    assert lines["in_flight"].startswith("r010")
    assert "next: confirm r009" in proc.stdout
    proc = run(readonly_tree, "status", "--json", env={"ATTUNE_CAMPAIGN_DIR": str(campaign)})
    info = json.loads(proc.stdout)
    assert info["leader"]["run"] == "r004" and info["band"]["established"] is True
    assert info["budget"]["spent"] == 12.0 and info["stop"] is None
    assert not list(readonly_tree.rglob("__pycache__"))


def test_campaign_defaults_to_current_directory(readonly_tree, tmp_path):
    campaign = fixture_copy(tmp_path)
    proc = run(readonly_tree, "budget", "--json", cwd=campaign)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["left"] == 27.75


def test_bad_settings_give_one_line_and_exit_2(readonly_tree, tmp_path):
    env = {"ATTUNE_RUN_PREFIX": "me-x-", "ATTUNE_BASELINE_YAML": "b.yaml", "ATTUNE_BACKEND": "kuberay",
           "ATTUNE_KUBE_CONTEXT": "c", "ATTUNE_IMAGE": "i", "ATTUNE_SHARED_DIR": "/s", "AUTOTUNE_LOG_POD": "p",
           "AUTOTUNE_GPUH_BUDGET": "10"}
    cases = [
        ({}, "ATTUNE_NAMESPACE: missing"),
        ({"ATTUNE_NAMESPACE": "ns", "AUTOTUNE_GPUH_BUDGET": "-3"}, "AUTOTUNE_GPUH_BUDGET=-3.0: must be greater than 0"),
        ({"ATTUNE_NAMESPACE": "ns", "AUTOTUNE_BUDGET": "4"}, "both are set"),
        ({"ATTUNE_NAMESPACE": "ns", "AUTOTUNE_GPUH_BUDGET": ""}, "neither is set"),
        ({"ATTUNE_NAMESPACE": "ns", "ATTUNE_RUN_PREFIX": "Me_X"}, "ATTUNE_RUN_PREFIX='Me_X'"),
    ]
    for extra, needle in cases:
        proc = run(readonly_tree, "init", "--campaign", str(tmp_path / "new"), env=dict(env, **extra))
        assert proc.returncode == 2, (extra, proc.stderr)
        assert proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Fix:" in lines[0], lines
        assert not (tmp_path / "new" / "ledger.jsonl").exists()


def test_init_then_note_then_verify(readonly_tree, tmp_path):
    env = {"ATTUNE_RUN_PREFIX": "me-x-", "ATTUNE_BASELINE_YAML": "b.yaml", "ATTUNE_BACKEND": "local",
           "AUTOTUNE_BUDGET": "5"}
    directory = tmp_path / "new"
    proc = run(readonly_tree, "init", "--campaign", str(directory), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["campaign"].startswith("me-x-")
    assert run(readonly_tree, "note", "first look", "--campaign", str(directory)).returncode == 0
    proc = run(readonly_tree, "verify", "--campaign", str(directory), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["ledger"]["rows"] == 2
    # the frozen settings win over a changed environment
    proc = run(readonly_tree, "settings", "--campaign", str(directory), "--json", env=dict(env, AUTOTUNE_BUDGET="9"))
    assert json.loads(proc.stdout)["AUTOTUNE_BUDGET"] == "5"


def test_tampering_exits_3_and_blocks_rank_and_report(readonly_tree, tmp_path):
    campaign = fixture_copy(tmp_path)
    ledger = campaign / "ledger.jsonl"
    ledger.write_bytes(ledger.read_bytes().replace(b'"status":"failed"', b'"status":"finished"', 1))
    proc = run(readonly_tree, "verify", "--campaign", str(campaign))
    assert proc.returncode == 3
    assert "BROKEN at line" in proc.stderr and "ledger.jsonl" in proc.stderr
    for verb in ("rank", "status", "report"):
        proc = run(readonly_tree, verb, "--campaign", str(campaign))
        assert proc.returncode == 3, verb
    assert not (campaign / "RESULTS.md").exists() and not (campaign / "recipe.yaml").exists()


def test_missing_ledger_is_a_usage_error(readonly_tree, tmp_path):
    proc = run(readonly_tree, "status", "--campaign", str(tmp_path))
    assert proc.returncode == 2 and "has no ledger" in proc.stderr


def test_usage_errors_exit_2(readonly_tree):
    assert run(readonly_tree, "nonsense").returncode == 2
    assert run(readonly_tree, "stop").returncode == 2
    assert run(readonly_tree, "--help").returncode == 0


def test_stop_checks_its_evidence(tmp_path):
    campaign = fixture_copy(tmp_path)
    assert cli.main(["stop", "--campaign", str(campaign), "--reason", "x", "--evidence", "r999"]) == 2
    # r010 is still in flight
    assert cli.main(["stop", "--campaign", str(campaign), "--reason", "x", "--evidence", "r008"]) == 1
    b = Builder.__new__(Builder)
    from attune.campaign.ledger import Campaign
    c = Campaign(campaign)
    c.append("result", run="r010", status="failed", failure={"class": "oom"})
    assert cli.main(["stop", "--campaign", str(campaign), "--reason", "nothing left clears ±1%",
                     "--evidence", "r008", "r009", "r010"]) == 0
    stops = [row for row in c.ledger.rows() if row["kind"] == "stop"]
    assert stops[0]["evidence"] == ["r008", "r009", "r010"]
    del b


def test_budget_need_refuses_over_budget(tmp_path, capsys):
    campaign = fixture_copy(tmp_path)
    assert cli.main(["budget", "--campaign", str(campaign), "--need", "27.75"]) == 0
    assert cli.main(["budget", "--campaign", str(campaign), "--need", "27.8"]) == 1
    assert "launch refused" in capsys.readouterr().err


def test_report_ships_the_gated_leader(tmp_path, without_replay):
    campaign = fixture_copy(tmp_path)
    assert cli.main(["report", "--campaign", str(campaign)]) == 0
    shipped = (campaign / "recipe.yaml").read_bytes()
    assert shipped == (campaign / "runs" / "r004" / "recipe.yaml").read_bytes()
    text = (campaign / "REPORT.md").read_text()
    assert "**Shipped**" in text and "| Gain | +6.39% (95% CI +5.27% to +7.52%; 2 vs 3 runs), passes the leader test" in text
    assert "### r004: set --overlap-grad-reduce; set --overlap-param-gather" in text
    assert "| r006 | micro-batch-size |" in text
    assert "23.5 hours of training on the shipped recipe's 8 GPUs" in text


@pytest.mark.parametrize("damage, reason", [
    ("violation", "integrity_violation"),
    ("recipe", "recipe_file"),
])
def test_report_refuses_to_ship(tmp_path, without_replay, damage, reason):
    campaign = fixture_copy(tmp_path)
    assert cli.main(["report", "--campaign", str(campaign)]) == 0
    if damage == "violation":
        (campaign / ".attune" / "integrity_violation.json").write_text("{}")
    else:
        (campaign / "runs" / "r004" / "recipe.yaml").write_text("edited after the run\n")
    assert cli.main(["report", "--campaign", str(campaign)]) == 1
    assert not (campaign / "recipe.yaml").exists()
    assert (campaign / "recipe.yaml.withdrawn").exists()
    text = (campaign / "REPORT.md").read_text()
    assert "**Not shipped**" in text and "FAIL %s" % reason in text


def test_installed_console_script_entry_point_is_the_cli():
    text = (REPO / "pyproject.toml").read_text()
    assert 'attune = "attune.cli:main"' in text
    assert (SCRIPTS / "cli" / "__init__.py").exists()


def test_a_failed_gate_demotes_the_leader_and_the_baseline_ships(tmp_path, without_replay):
    from attune.campaign.ledger import Campaign
    campaign = fixture_copy(tmp_path)
    Campaign(campaign).append("gate", run="r005", verdict="fail", against="r001", reasons=["loss off"])
    assert cli.main(["report", "--campaign", str(campaign)]) == 0
    assert (campaign / "recipe.yaml").read_bytes() == (campaign / "runs" / "r001" / "recipe.yaml").read_bytes()
    text = (campaign / "REPORT.md").read_text()
    assert "None: the baseline recipe is kept." in text and "No payback" in text
    assert "| r004 | overlap-grad-reduce |" in text and "gate failed" in text


def test_gpu_log_of_another_campaign_is_an_integrity_error(tmp_path):
    from attune.core.chainlog import ChainLog
    campaign = fixture_copy(tmp_path)
    for suffix in ("", ".head"):
        (campaign / ("gpu_hours.jsonl" + suffix)).unlink()
    ChainLog(campaign / "gpu_hours.jsonl").append(
        "charge", {"run": "r001", "gpus": 1, "seconds": 1.0, "gpu_seconds": 1}, campaign="someone-else")
    assert cli.main(["status", "--campaign", str(campaign)]) == 3


def test_metrics_verb_on_a_real_log(readonly_tree):
    log = DATA / "logs" / "A_iteration" / "mlm602_fp16_skipped.log"
    proc = run(readonly_tree, "metrics", str(log))
    assert proc.returncode == 0, proc.stderr
    assert "steps: 4 (iterations 1-4)" in proc.stdout and "memory_reports: 1" in proc.stdout
    proc = run(readonly_tree, "metrics", str(log), "--json")
    parsed = json.loads(proc.stdout)
    assert [step["elapsed_ms"] for step in parsed["steps"]] == [5801.1, 1152.3, 1118.1, 1119.8]
    assert run(readonly_tree, "metrics", "/nonexistent.log").returncode == 2
    proc = run(readonly_tree, "metrics", str(DATA / "logs" / "C_failures" / "mlm92_oom_old_format.log"))
    assert "triage: oom (line 9): RuntimeError: CUDA out of memory." in proc.stdout and "memory: gpu" in proc.stdout
    proc = run(readonly_tree, "metrics", str(DATA / "logs" / "C_failures" / "fang1_default_cpu_allocator.log"),
               "--json")
    assert json.loads(proc.stdout)["triage"]["memory"] == "host"
    proc = run(readonly_tree, "metrics", str(DATA / "logs" / "C_failures" / "ray14394_tune_error_after_slurm_oom_kill.log"),
               "--exit-code", "1")
    assert "triage: oom (line 6): slurmstepd: error: Detected 8 oom-kill event(s)" in proc.stdout
    proc = run(readonly_tree, "metrics", str(DATA / "megatron_cpu" / "killed_rank.log"), "--exit-code", "-9")
    assert "triage: crash (line 868): exitcode  : -9" in proc.stdout  # the log's lines name the crash, as in finalize


BACKGROUND_PIDS = r"""
import json, os, sys, threading
sys.path.insert(0, sys.argv[1])
from attune.campaign.background import Background
alone = Background(os.getpid).result()
stop = threading.Event()
worker = threading.Thread(target=stop.wait)
worker.start()
beside_a_thread = Background(os.getpid).result()
stop.set()
worker.join()
print(json.dumps({"caller": os.getpid(), "alone": alone, "beside_a_thread": beside_a_thread}))
"""


def test_background_work_forks_only_a_process_with_no_other_thread():
    """A forked child has only the forking thread: a lock another thread held at the fork stays held in the child
    forever. So a fresh process works in a child, and one with another thread works in the caller. Run in a fresh
    interpreter, as the CLI runs, since this test process may have threads from other tests."""
    proc = subprocess.run([sys.executable, "-c", BACKGROUND_PIDS, str(SCRIPTS)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    pids = json.loads(proc.stdout)
    assert pids["alone"] != pids["caller"]
    assert pids["beside_a_thread"] == pids["caller"]


def test_background_work_runs_in_the_caller_when_no_process_can_be_forked(monkeypatch, tmp_path):
    import os as os_module
    from attune.campaign import background

    def refuse():
        raise OSError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(background.os, "fork", refuse)
    assert background.Background(lambda a, b: a + b, 2, 3).result() == 5
    campaign = fixture_copy(tmp_path)
    assert cli.main(["rank", "--campaign", str(campaign)]) == 0
    assert os_module.path.exists(campaign / "RESULTS.md")


def test_verify_fails_when_the_gpu_hours_belong_to_another_campaign(tmp_path, capsys):
    mine, other = Builder(tmp_path / "mine", campaign_id="me-a-1"), Builder(tmp_path / "other", campaign_id="me-b-1")
    for b in (mine, other):
        b.launch("r001", "baseline", "base")
        b.result("r001", 1000.0)
    for name in ("gpu_hours.jsonl", "gpu_hours.jsonl.head"):
        shutil.copy(other.campaign.dir / name, mine.campaign.dir / name)
    assert cli.main(["status", "--campaign", str(mine.campaign.dir)]) == 3
    capsys.readouterr()
    assert cli.main(["verify", "--campaign", str(mine.campaign.dir), "--json"]) == 3
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["ok"] is False and data["ledger"]["ok"] and data["gpu_hours"]["ok"]
    assert data["campaign_mismatch"] == "gpu_hours.jsonl belongs to campaign 'me-b-1' but ledger.jsonl to 'me-a-1'"
    assert "attune verify: gpu_hours.jsonl belongs to campaign 'me-b-1'" in captured.err
    assert cli.main(["verify", "--campaign", str(other.campaign.dir)]) == 0
