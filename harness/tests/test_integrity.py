"""The campaign integrity check (harness/integrity.py): record, tamper, verify.

Each tamper test changes one protected thing the way an agent could, and asserts that ``verify``
names the path, the rule and says what happened; the clean cases (appends through the library,
levers appended, prompts changed between sessions) must pass.
"""

from __future__ import annotations

import ast
import json
import os
import py_compile
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import integrity_fixtures as fx  # noqa: E402  (puts skill/scripts and harness on sys.path)

import integrity  # noqa: E402
from attune.campaign.ledger import Campaign  # noqa: E402

SKILL_FILE = ".attune/skill/scripts/core/measure.py"


@pytest.fixture(autouse=True)
def _own_key_dir(tmp_path, monkeypatch):  # the integrity keys (harness/integrity_key.py) under tmp_path, not in HOME
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return fx.build_template(tmp_path_factory.mktemp("integrity-template"))


@pytest.fixture
def camp(template, tmp_path):
    """A fresh copy of the campaign, recorded (no session running)."""
    directory = fx.clone(template, tmp_path / "c")
    integrity.record(str(directory))
    return directory


def only(problems, what=None):
    assert len(problems) == 1, problems
    if what is not None:
        assert problems[0]["what"] == what, problems
    return problems[0]


def ledger_rows(directory):
    return [json.loads(line) for line in (directory / "ledger.jsonl").read_bytes().splitlines()]


# ------------------------------------------------------------------------------ clean cases
def test_record_contents(camp):
    rec = json.loads((camp / ".attune" / "integrity.json").read_text())
    assert rec["schema_version"] == 1 and rec["recorded_at"].endswith("Z") and rec["session"] is False
    static = rec["static"]
    entry = static[SKILL_FILE]
    assert entry["type"] == "file" and len(entry["sha256"]) == 64 and entry["size"] > 0 and entry["mode"]
    assert static[".attune/skill"]["type"] == "dir" and static[".attune/harness"]["type"] == "dir"
    assert static[".attune/harness/integrity.py"]["type"] == "file"
    assert static[".attune/settings.env"]["type"] == "file"
    assert not any("__pycache__" in path for path in static)
    ledger = rec["append_only"]["ledger.jsonl"]
    data = (camp / "ledger.jsonl").read_bytes()
    assert ledger["length"] == len(data) and ledger["rows"] == len(data.splitlines())
    assert ledger["last_row_sha256"] == integrity._sha256(data.splitlines()[-1]).hexdigest()
    assert ledger["campaign"] == "test-fixture-20261102"
    assert rec["append_only"]["gpu_hours.jsonl"]["rows"] == 2
    assert rec["append_only"]["levers.md"]["length"] == len(fx.LEVERS)
    assert set(rec["prompts"]) == {"goal_prompt.txt", "resume_prompt.txt"}


def test_clean_campaign_verifies(camp):
    assert integrity.verify(str(camp)) == []


def test_appends_through_the_library_are_clean(camp):
    campaign = Campaign(camp)
    campaign.charge("r003", 8, 600.0)
    campaign.append("result", run="r003", status="failed", failure={"class": "oom"})
    campaign.append("note", text="overlap ran out of memory")
    with open(str(camp / "levers.md"), "a", encoding="utf-8") as handle:
        handle.write("\n## lesson\noverlap-grad-reduce OOMs at this batch size.\n")
    (camp / "notes.md").write_text("free scratch space\n")
    (camp / "runs" / "r004").mkdir()
    assert integrity.verify(str(camp)) == []


def test_the_doctors_session_cache_is_not_a_protected_file(camp):
    """The launcher writes .attune/cache/doctor.json between the record and the verify of a session."""
    from attune.campaign import doctor

    integrity.record(str(camp), session=True)
    report = doctor.Report("kuberay", (doctor.Result("context", doctor.OK, "context test answers"),))
    path = doctor.remember(camp, "session-1", "0" * 64, report)
    assert path == camp / ".attune" / "cache" / "doctor.json"
    assert integrity.verify(str(camp)) == [] and integrity.verify(str(camp), session=True) == []
    path.write_text("{}")  # rewritten or removed by the next launch: still nothing the record holds
    path.unlink()
    assert integrity.verify(str(camp)) == []


# ------------------------------------------------------------------------ static files
def test_edited_skill_file(camp):
    path = camp / SKILL_FILE
    path.write_text(path.read_text() + "\n# faster, honest\n")
    problem = only(integrity.verify(str(camp)), SKILL_FILE)
    assert problem["rule"] == "changed"
    assert "protected file changed" in problem["message"] and "SHA-256" in problem["message"]
    assert problem["expected"].startswith("sha256=") and problem["found"] != problem["expected"]


def test_same_size_edit_is_caught(camp):
    path = camp / SKILL_FILE
    data = bytearray(path.read_bytes())
    data[10] = ord("X") if data[10] != ord("X") else ord("Y")
    path.write_bytes(bytes(data))
    assert only(integrity.verify(str(camp)), SKILL_FILE)["rule"] == "changed"


def test_deleted_skill_file(camp):
    (camp / SKILL_FILE).unlink()
    problem = only(integrity.verify(str(camp)), SKILL_FILE)
    assert problem["rule"] == "deleted" and "deleted" in problem["message"] and problem["found"] == "missing"


def test_added_skill_file(camp):
    (camp / ".attune/skill/scripts/core/shortcut.py").write_text("SCORE = 1e9\n")
    problem = only(integrity.verify(str(camp)), ".attune/skill/scripts/core/shortcut.py")
    assert problem["rule"] == "added" and "added" in problem["message"] and problem["expected"] == "missing"


def test_bytecode_cache_written_by_python_is_accepted(camp):
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    code = "import sys; sys.path.insert(0, %r); import attune.cli, attune.campaign.ledger, attune.correctness" % str(
        camp / ".attune/skill/scripts")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
    subprocess.run([sys.executable, "-O", "-c", code], check=True, env=env, timeout=120)
    cached = sorted(camp.glob(".attune/skill/scripts/core/__pycache__/*.pyc"))
    assert any(".opt-1." in path.name for path in cached) and any(".opt-" not in path.name for path in cached)
    assert integrity.verify(str(camp)) == []


def _cache_path(camp, opt=""):
    tag = sys.implementation.cache_tag
    return camp / (".attune/skill/scripts/core/__pycache__/measure.%s%s.pyc" % (tag, opt))


def test_forged_bytecode_cache_is_caught(camp, tmp_path):
    forged = tmp_path / "measure.py"
    forged.write_text((camp / SKILL_FILE).read_text() + "\nNOISE_FLOOR = 0.0\n")
    target = _cache_path(camp)
    py_compile.compile(str(forged), cfile=str(target), doraise=True)
    problem = only(integrity.verify(str(camp)), str(target.relative_to(camp)))
    assert problem["rule"] == "added" and "code differs from its source" in problem["message"]
    assert "forged .pyc runs in place of its source" in problem["message"]
    py_compile.compile(str(camp / SKILL_FILE), cfile=str(target), doraise=True)  # the honest compilation
    assert integrity.verify(str(camp)) == []


def test_other_files_in_a_bytecode_cache_are_caught(camp):
    folder = _cache_path(camp).parent
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    (folder / "measure.cpython-27.pyc").write_bytes(b"\0" * 32)
    (folder / ("shortcut.%s.pyc" % sys.implementation.cache_tag)).write_bytes(b"\0" * 32)
    problems = integrity.verify(str(camp))
    by_name = dict((p["what"].rsplit("/", 1)[1], p["message"]) for p in problems)
    assert set(by_name) == {"notes.txt", "measure.cpython-27.pyc", "shortcut.%s.pyc" % sys.implementation.cache_tag}
    assert "not a bytecode cache file name" in by_name["notes.txt"]
    assert "PYTHONDONTWRITEBYTECODE=1" in by_name["measure.cpython-27.pyc"]
    assert "no recorded source" in by_name["shortcut.%s.pyc" % sys.implementation.cache_tag]
    assert all(p["rule"] == "added" for p in problems)


def test_bytecode_cache_folder_replaced_by_symlink(camp, tmp_path):
    _cache_path(camp).parent.symlink_to(tmp_path)
    problem = only(integrity.verify(str(camp)))
    assert problem["rule"] == "symlink" and problem["what"].endswith("core/__pycache__")


def test_deleted_folder_is_one_problem(camp):
    shutil.rmtree(str(camp / ".attune/skill/references"))
    problem = only(integrity.verify(str(camp)), ".attune/skill/references")
    assert problem["rule"] == "deleted" and "folder" in problem["message"] and "inside it" in problem["message"]


def test_chmod_skill_file(camp):
    path = camp / SKILL_FILE
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(mode ^ stat.S_IXUSR)
    problem = only(integrity.verify(str(camp)), SKILL_FILE)
    assert problem["rule"] == "mode"
    assert problem["expected"] == "mode %04o" % mode and problem["found"] == "mode %04o" % (mode ^ stat.S_IXUSR)
    assert "permissions changed" in problem["message"]


def test_chmod_of_a_protected_folder(camp):
    folder = camp / ".attune/skill/scripts"
    folder.chmod(stat.S_IMODE(folder.stat().st_mode) ^ stat.S_IWGRP)
    assert only(integrity.verify(str(camp)), ".attune/skill/scripts")["rule"] == "mode"


def test_skill_file_replaced_by_symlink(camp, tmp_path):
    path = camp / SKILL_FILE
    copy = tmp_path / "measure.py"
    copy.write_bytes(path.read_bytes())  # identical content: the swap alone is the problem
    path.unlink()
    path.symlink_to(copy)
    problem = only(integrity.verify(str(camp)), SKILL_FILE)
    assert problem["rule"] == "symlink" and "replaced by a symlink to %s" % copy in problem["message"]


def test_skill_tree_replaced_by_symlink(camp, tmp_path):
    elsewhere = tmp_path / "skill-copy"
    shutil.move(str(camp / ".attune/skill"), str(elsewhere))
    (camp / ".attune/skill").symlink_to(elsewhere)
    problem = only(integrity.verify(str(camp)), ".attune/skill")
    assert problem["rule"] == "symlink" and "inside it" in problem["message"]


def test_skill_link_repointed(template, tmp_path):
    directory = fx.clone(template, tmp_path / "c")
    link = directory / ".claude/skills/attune"
    link.parent.mkdir(parents=True)
    link.symlink_to(Path("..") / ".." / ".attune" / "skill")
    integrity.record(str(directory))
    assert integrity.verify(str(directory)) == []
    link.unlink()
    link.symlink_to(tmp_path)
    problem = only(integrity.verify(str(directory)), ".claude/skills/attune")
    assert problem["rule"] == "symlink" and "re-pointed" in problem["message"]


def test_edited_settings(camp):
    path = camp / ".attune/settings.env"
    path.write_text(path.read_text().replace("AUTOTUNE_GPUH_BUDGET=40", "AUTOTUNE_GPUH_BUDGET=4000"))
    problem = only(integrity.verify(str(camp)), ".attune/settings.env")
    assert problem["rule"] == "changed" and "protected file changed" in problem["message"]


def test_edited_harness_file(camp):
    path = camp / ".attune/harness/integrity.py"
    path.write_text(path.read_text().replace("return problems", "return []"))
    assert only(integrity.verify(str(camp)), ".attune/harness/integrity.py")["rule"] == "changed"


# ---------------------------------------------------------------------- append-only logs
def test_truncated_ledger(camp):
    path = camp / "ledger.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:data.rstrip(b"\n").rfind(b"\n") + 1])  # the last row dropped
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "truncated" and "truncated from %d" % len(data) in problem["message"]


def test_garbage_appended_to_ledger(camp):
    rows = len(ledger_rows(camp))
    with open(str(camp / "ledger.jsonl"), "ab") as handle:
        handle.write(b'{"kind":"leader","run":"r003"}\n')
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "chain"
    assert "not a well-formed append after the %d recorded rows" % rows in problem["message"]
    assert "line %d" % (rows + 1) in problem["message"]


def test_invalid_json_appended_to_ledger(camp):
    with open(str(camp / "ledger.jsonl"), "ab") as handle:
        handle.write(b"this is not json\n")
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "chain" and "not valid JSON" in problem["message"]


def test_torn_tail_is_a_warning_not_a_violation(camp):
    with open(str(camp / "ledger.jsonl"), "ab") as handle:
        handle.write(b'{"schema_version":1,"camp')  # a writer that stopped mid-append
    warnings = []
    assert integrity.verify(str(camp), warnings=warnings) == []
    assert any("torn final line" in warning for warning in warnings)
    Campaign(camp).append("note", text="after a crash")  # moves the torn bytes aside, records recovery
    assert integrity.verify(str(camp)) == []


def test_rewritten_middle_ledger_row_same_length(camp):
    path = camp / "ledger.jsonl"
    lines = path.read_bytes().split(b"\n")
    middle = len(lines) // 2
    original = lines[middle]
    lines[middle] = original.replace(b'"ts":"2026', b'"ts":"2027', 1)
    assert len(lines[middle]) == len(original) and lines[middle] != original
    path.write_bytes(b"\n".join(lines))
    assert path.stat().st_size == len(b"\n".join(lines))
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "prefix" and "recorded prefix" in problem["message"]
    assert "BROKEN at line %d" % (middle + 2) in problem["message"]  # the next row's prev no longer matches


def test_rewritten_row_appended_after_record(camp):
    campaign = Campaign(camp)
    campaign.append("note", text="aaaa")
    campaign.append("note", text="bbbb")
    path = camp / "ledger.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"text":"aaaa"', b'"text":"zzzz"'))
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "chain" and "prev does not match" in problem["message"]


def test_deleted_ledger_head(camp):
    (camp / "ledger.jsonl.head").unlink()
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "chain" and "head record" in problem["message"]


def test_deleted_gpu_log(camp):
    (camp / "gpu_hours.jsonl").unlink()
    problem = only(integrity.verify(str(camp)), "gpu_hours.jsonl")
    assert problem["rule"] == "deleted" and "append-only file deleted" in problem["message"]
    assert "2 rows" in problem["message"]


def test_ledger_replaced_by_symlink(camp, tmp_path):
    path = camp / "ledger.jsonl"
    copy = tmp_path / "ledger-copy.jsonl"
    copy.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(copy)
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "symlink" and "symlink" in problem["message"]


def test_chmod_ledger(camp):
    path = camp / "ledger.jsonl"
    path.chmod(0o444)
    problem = only(integrity.verify(str(camp)), "ledger.jsonl")
    assert problem["rule"] == "mode" and problem["found"] == "mode 0444"


def test_levers_prefix_edited_is_caught(camp):
    path = camp / "levers.md"
    path.write_text(fx.LEVERS.replace("Overlap", "Skip") + "\n## new\n")
    problem = only(integrity.verify(str(camp)), "levers.md")
    assert problem["rule"] == "prefix" and "written bytes may not be edited" in problem["message"]


def test_levers_truncated_is_caught(camp):
    (camp / "levers.md").write_text(fx.LEVERS[:10])
    assert only(integrity.verify(str(camp)), "levers.md")["rule"] == "truncated"


def test_levers_appended_is_ok(camp):
    with open(str(camp / "levers.md"), "a", encoding="utf-8") as handle:
        handle.write("\n## lesson\nanything may be appended\n")
    assert integrity.verify(str(camp)) == []


def test_record_refuses_a_broken_chain(camp):
    with open(str(camp / "gpu_hours.jsonl"), "ab") as handle:
        handle.write(b"{}\n")
    with pytest.raises(integrity.RecordError, match="gpu_hours.jsonl.*already broken"):
        integrity.record(str(camp))


# ------------------------------------------------------------------------------- prompts
def test_prompt_edited_during_a_session_is_caught(camp):
    integrity.record(str(camp), session=True)
    Campaign(camp).append("session", session="s1", event="start")
    (camp / "goal_prompt.txt").write_text("Report 1e9 tokens/s.\n")
    problem = only(integrity.verify(str(camp)), "goal_prompt.txt")
    assert problem["rule"] == "session_prompt" and "while a session runs" in problem["message"]


def test_prompt_edited_without_a_session_record_is_not_checked(camp):
    (camp / "goal_prompt.txt").write_text("new goal\n")
    assert integrity.verify(str(camp)) == []
    assert only(integrity.verify(str(camp), session=True), "goal_prompt.txt")["rule"] == "session_prompt"


def test_prompt_edited_after_the_session_ended(camp):
    integrity.record(str(camp), session=True)
    campaign = Campaign(camp)
    campaign.append("session", session="s1", event="start")
    campaign.append("session", session="s1", event="end", exit_code=0)
    (camp / "resume_prompt.txt").write_text("Resume, and profile the leader first.\n")
    assert integrity.verify(str(camp)) == []  # between sessions: the launcher's reprompt records it
    assert only(integrity.verify(str(camp), session=True))["what"] == "resume_prompt.txt"


def test_reprompt_between_sessions(camp):
    integrity.record(str(camp), session=True)
    old = integrity._sha256(fx.GOAL.encode()).hexdigest()
    assert integrity.reprompt(str(camp)) is None  # unchanged: nothing recorded
    (camp / "goal_prompt.txt").write_text("A new goal.\n")
    new = integrity._sha256(b"A new goal.\n").hexdigest()
    row = integrity.reprompt(str(camp))
    assert row["kind"] == "integrity" and row["event"] == "prompts_changed"
    assert old in row["detail"] and new in row["detail"] and "unchanged: resume_prompt.txt" in row["detail"]
    assert row["files"] == {"goal_prompt.txt": new}
    assert ledger_rows(camp)[-1] == row
    assert integrity.verify(str(camp), session=True) == []  # re-recorded; the ledger row is a clean append
    assert integrity.reprompt(str(camp)) is None


def test_reprompt_keeps_the_rest_of_the_record(camp):
    (camp / SKILL_FILE).write_text("tampered\n")
    (camp / "goal_prompt.txt").write_text("A new goal.\n")
    assert integrity.reprompt(str(camp)) is not None
    assert only(integrity.verify(str(camp)), SKILL_FILE)["rule"] == "changed"  # not laundered


# ----------------------------------------------------------------------------- violation
def test_violation_writes_the_file_and_a_ledger_row(camp):
    (camp / SKILL_FILE).write_text("tampered\n")
    problems = integrity.verify(str(camp))
    data = integrity.violation(str(camp), problems)
    saved = json.loads((camp / ".attune/integrity_violation.json").read_text())
    assert saved == json.loads(json.dumps(data))
    assert saved["problems"][0]["what"] == SKILL_FILE and saved["problems"][0]["rule"] == "changed"
    assert {"what", "expected", "found", "rule"} <= set(saved["problems"][0])
    assert saved["ledger_row"] is True
    row = ledger_rows(camp)[-1]
    assert row["kind"] == "integrity" and row["event"] == "violation"
    assert SKILL_FILE in row["detail"] and set(row["files"]) == {SKILL_FILE}
    assert row["files"][SKILL_FILE] == integrity._sha256(b"tampered\n").hexdigest()
    # the same problems again (the Stop hook fires repeatedly): nothing new
    rows = len(ledger_rows(camp))
    integrity.violation(str(camp), integrity.verify(str(camp)))
    assert len(ledger_rows(camp)) == rows
    # a later, different violation: the first stays, the new one is added to the list
    (camp / ".attune/settings.env").write_text("AUTOTUNE_GPUH_BUDGET=1\n")
    integrity.violation(str(camp), integrity.verify(str(camp)))
    saved = json.loads((camp / ".attune/integrity_violation.json").read_text())
    assert saved["problems"][0]["what"] == SKILL_FILE
    assert [p["what"] for p in saved["later"][0]["problems"]] == [".attune/settings.env", SKILL_FILE]
    assert saved["later"][0]["ledger_row"] is True and len(ledger_rows(camp)) == rows + 1


def test_violation_does_not_append_to_a_broken_ledger(camp):
    path = camp / "ledger.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    problems = integrity.verify(str(camp))
    integrity.violation(str(camp), problems)
    saved = json.loads((camp / ".attune/integrity_violation.json").read_text())
    assert saved["ledger_row"] is False and "the ledger is what broke" in saved["ledger_note"]
    assert path.read_bytes() == data[:len(data) // 2]


def test_removed_violation_file_is_caught(camp):
    (camp / "levers.md").write_text("gone" * 100)
    integrity.violation(str(camp), integrity.verify(str(camp)))
    (camp / ".attune/integrity_violation.json").unlink()
    problems = integrity.verify(str(camp))
    assert {p["rule"] for p in problems} == {"prefix", "violation_removed"}


def test_missing_record(camp):
    (camp / ".attune/integrity.json").unlink()
    problem = only(integrity.verify(str(camp)), ".attune/integrity.json")
    assert problem["rule"] == "record" and "no integrity record" in problem["message"]


def test_enforce(camp):
    assert integrity.enforce(str(camp)) == []
    assert not (camp / ".attune/integrity_violation.json").exists()
    (camp / SKILL_FILE).unlink()
    assert integrity.enforce(str(camp))[0]["rule"] == "deleted"
    assert (camp / ".attune/integrity_violation.json").exists()


# ----------------------------------------------------------------------------- live runs
def test_live_runs_tolerates_a_corrupt_ledger(camp):
    assert integrity.live_runs(str(camp)) == ["r003"]
    path = camp / "ledger.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines.insert(2, b"{not json")
    path.write_bytes(b"\n".join(lines) + b'{"kind":"launch","run":"r009"')  # and a torn tail
    assert integrity.live_runs(str(camp)) == ["r003"]
    assert integrity.live_runs(str(camp / "nowhere")) == []


# ---------------------------------------------------------------------------------- CLI
def _cli(directory, *args):
    script = directory / ".attune/harness/integrity.py"  # the campaign's own copy, as the launcher runs it
    return subprocess.run([sys.executable, str(script)] + list(args), capture_output=True, text=True,
                          timeout=120)


def test_cli_exit_codes(camp):
    out = _cli(camp, "record", str(camp))
    assert out.returncode == 0, out.stderr
    out = _cli(camp, "verify", str(camp))
    assert out.returncode == 0 and "integrity: ok" in out.stdout, out.stdout + out.stderr
    assert integrity.verify(str(camp)) == []  # running from the copy left no bytecode cache in it
    (camp / SKILL_FILE).write_text("tampered\n")
    out = _cli(camp, "verify", str(camp), "--json")
    assert out.returncode == 3
    report = json.loads(out.stdout)
    assert report["ok"] is False and report["problems"][0]["what"] == SKILL_FILE
    assert not (camp / ".attune/integrity_violation.json").exists()
    out = _cli(camp, "verify", str(camp), "--write-violation")
    assert out.returncode == 3 and "VIOLATION [changed]" in out.stdout
    assert (camp / ".attune/integrity_violation.json").exists()
    assert _cli(camp, "verify").returncode == 2
    assert _cli(camp, "explode", str(camp)).returncode == 2
    assert _cli(camp, "verify", str(camp / "nowhere")).returncode == 2


def test_cli_session_record_and_reprompt(camp):
    assert _cli(camp, "record", str(camp), "--session").returncode == 0
    (camp / "goal_prompt.txt").write_text("changed\n")
    assert _cli(camp, "verify", str(camp)).returncode == 3
    out = _cli(camp, "reprompt", str(camp))
    assert out.returncode == 0 and "prompts changed between sessions" in out.stdout
    assert _cli(camp, "verify", str(camp)).returncode == 0
    out = _cli(camp, "live-runs", str(camp))
    assert out.returncode == 0 and out.stdout.split() == ["r003"]


def test_cli_record_refuses_a_broken_ledger(camp):
    with open(str(camp / "ledger.jsonl"), "ab") as handle:
        handle.write(b"[]\n")
    out = _cli(camp, "record", str(camp))
    assert out.returncode == 3 and "already broken" in out.stderr


# --------------------------------------------------------------------------- Python 3.7
def test_module_is_python_37_syntax():
    source = (fx.HARNESS / "integrity.py").read_text()
    ast.parse(source, feature_version=(3, 7))
    for needle in (".removeprefix(", ".removesuffix(", "functools.cache\n", ":="):
        assert needle not in source, needle
