"""What a campaign's records rest on cannot be re-taken or swapped by anything that lacks the user's key, by effect:

* a campaign whose records were rewritten together with a fresh integrity record (taken by the harness's own
  ``integrity.py`` with a key of the attacker's, with the MAC stripped, with an old record's MAC replayed, with the
  key deleted) fails at its next launch, exit 3, with the violation recorded;
* the baseline recipe is frozen when the campaign is prepared: an edit to the file the settings name (which sits
  in the campaign's top level, where the agent can write) never runs, and an edit to the frozen copy stops every
  launch with exit 3;
* the ``attune`` wrapper gives its verb the environment the campaign was prepared with, never the caller's.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_launcher import attune, launch, setup

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
INTEGRITY = REPO / "harness" / "integrity.py"


def _prepared(tmp_path):
    directory, env = setup(tmp_path)
    code, out, err = launch(directory, env, "--prepare")
    assert code == 0, err
    return directory.resolve(), env


def _forge_ledger(directory: Path) -> None:
    """Rewrite the ledger's history: the first row's note changed and the chain recomputed by the library, so the
    ledger alone is well formed."""
    sys.path.insert(0, str(REPO / "skill" / "scripts"))
    from attune.core.chainlog import ChainLog
    from attune.core.schema import validate_ledger_row

    path = directory / "ledger.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.chmod(0o644)
    path.unlink()
    head = directory / "ledger.jsonl.head"
    if head.exists():
        head.unlink()
    log = ChainLog(path, validate_ledger_row)
    for row in rows:
        payload = {k: v for k, v in row.items() if k not in ("schema_version", "campaign", "seq", "ts", "kind", "prev")}
        if row["seq"] == 0:
            payload["note"] = "forged history"
        log.append(row["kind"], payload, campaign=row["campaign"], ts=row["ts"])


def _integrity(directory, env, *args):
    return subprocess.run([sys.executable, str(INTEGRITY)] + list(args) + [str(directory)], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _resume_fails(directory, env):
    code, out, err = launch(directory, env, "--session", "s-after", "--agent-command", "true")
    assert code == 3, (code, out, err)
    assert "integrity violation" in err and "integrity.json" in err, err
    assert (directory / ".attune" / "integrity_violation.json").is_file()


def test_a_record_signed_with_another_key_fails_the_next_launch(tmp_path):
    directory, env = _prepared(tmp_path)
    _forge_ledger(directory)
    record = directory / ".attune" / "integrity.json"
    record.unlink()  # what a rewrite by code outside the sandbox could do, before taking a record of its own
    attacker = dict(env, ATTUNE_KEY_DIR=str(tmp_path / "attacker-keys"))
    done = _integrity(directory, attacker, "record")
    assert done.returncode == 0, done.stderr
    assert _integrity(directory, attacker, "verify").returncode == 0, "the forged record is whole under its own key"
    _resume_fails(directory, env)


def test_a_record_without_its_mac_or_with_an_old_one_fails(tmp_path):
    directory, env = _prepared(tmp_path)
    record = directory / ".attune" / "integrity.json"
    old = json.loads(record.read_text())
    _forge_ledger(directory)
    # a fresh record as the harness takes it, then its MAC replaced by the genuine old one
    forged = dict(old)
    forged["append_only"] = dict(old["append_only"])
    for name in ("ledger.jsonl",):
        data = (directory / name).read_bytes()
        import hashlib
        forged["append_only"][name] = dict(old["append_only"][name], sha256=hashlib.sha256(data).hexdigest(),
                                           length=len(data))
    record.write_text(json.dumps(forged))
    problems = json.loads(_integrity(directory, env, "verify", "--json").stdout)["problems"]
    assert [p["rule"] for p in problems] == ["record"] and "MAC does not match" in problems[0]["message"]
    del forged["mac"]
    record.write_text(json.dumps(forged))
    problems = json.loads(_integrity(directory, env, "verify", "--json").stdout)["problems"]
    assert "carries no MAC" in problems[0]["message"]
    _resume_fails(directory, env)


def test_a_campaign_whose_key_is_gone_fails_and_is_never_re_signed(tmp_path):
    directory, env = _prepared(tmp_path)
    key_id = json.loads((directory / ".attune" / "integrity.json").read_text())["key_id"]
    key = tmp_path / "state" / "attune" / "keys" / (key_id + ".key")
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    key.unlink()
    before = (directory / ".attune" / "integrity.json").read_bytes()
    done = _integrity(directory, env, "record")
    assert done.returncode == 3 and "is gone" in done.stderr.decode(), done.stderr
    assert (directory / ".attune" / "integrity.json").read_bytes() == before
    _resume_fails(directory, env)


def test_the_untouched_campaign_resumes(tmp_path):
    directory, env = _prepared(tmp_path)
    code, out, err = launch(directory, env, "--session", "s-after", "--agent-command", "true")
    assert code == 1 and "integrity violation" not in err, err  # the agent ended before the campaign finished


def test_the_baseline_runs_from_its_frozen_copy(tmp_path):
    directory, env = _prepared(tmp_path)
    canary = tmp_path / "canary"
    frozen = directory / ".attune" / "baseline.yaml"
    given = tmp_path / "baseline.yaml"
    assert frozen.read_bytes() == given.read_bytes() and not frozen.stat().st_mode & stat.S_IWUSR
    first = json.loads((directory / "ledger.jsonl").read_text().splitlines()[0])
    import hashlib
    assert first["baseline_sha256"] == hashlib.sha256(frozen.read_bytes()).hexdigest()
    # the agent edits the file the settings name: its entrypoint would run a program of the agent's
    text = given.read_text()
    given.write_text(text.replace("  entrypoint: |\n", "  entrypoint: |\n    touch %s;\n" % canary, 1))
    assert "touch" in given.read_text()
    done = subprocess.run(attune(directory).split() + ["launch", "--baseline", "--json"], cwd=str(directory), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["launch"]["run"]
    launch_row = [json.loads(line) for line in (directory / "ledger.jsonl").read_text().splitlines()
                  if '"launch"' in line][-1]
    assert launch_row["recipe_sha256"] == hashlib.sha256(
        (directory / "runs" / run / "recipe.yaml").read_bytes()).hexdigest()
    assert "touch" not in (directory / "runs" / run / "recipe.yaml").read_text()
    subprocess.run(attune(directory).split() + ["teardown", run], cwd=str(directory), env=env,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert not canary.exists()


def test_a_changed_frozen_baseline_stops_every_launch(tmp_path):
    directory, env = _prepared(tmp_path)
    frozen = directory / ".attune" / "baseline.yaml"
    frozen.chmod(0o644)
    frozen.write_text(frozen.read_text() + "# edited\n")
    for verb in (["launch", "--baseline"], ["candidate", "new", "--parent", "baseline", "--lever", "micro-batch-size", "--set", "micro-batch-size=2", "--hypothesis", "x"]):
        done = subprocess.run(attune(directory).split() + verb, cwd=str(directory), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
        assert done.returncode == 3, (verb, done.stderr)
        assert "baseline.yaml" in done.stderr.decode() and "baseline_sha256" in done.stderr.decode()
    assert not (directory / "runs").exists() or not any((directory / "runs").iterdir())
    code, out, err = launch(directory, env, "--session", "s-after", "--agent-command", "true")
    assert code == 3 and ".attune/baseline.yaml" in err, err


def test_the_wrapper_gives_its_verb_the_prepared_environment_only(tmp_path):
    directory, env = _prepared(tmp_path)
    wrapper = directory / ".attune" / "bin" / "attune"
    text = wrapper.read_text()
    assert " -i " in text and "LD_PRELOAD" not in text
    probe = tmp_path / "probe.py"
    probe.write_text("import os, sys\nprint(sorted(os.environ))\n")
    hostile = dict(env, LD_PRELOAD="/nonexistent/evil.so", PYTHONWARNINGS="ignore::evil.Thing", BASH_ENV="/x",
                   KUBECONFIG=str(directory / "scratch" / "kubeconfig"), HOME=str(directory / "scratch"),
                   PATH="%s:.:%s" % (directory / "scratch", env["PATH"]), ATTUNE_CAMPAIGN_LOCK="/elsewhere")
    (directory / "scratch" / "python3").write_text("#!/bin/sh\ntouch %s\n" % (tmp_path / "canary"))
    (directory / "scratch" / "python3").chmod(0o755)
    done = subprocess.run([str(wrapper), "settings", "--json"], cwd=str(directory / "scratch"), env=hostile,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert done.returncode == 0, done.stderr
    # the environment the verb saw: read through the wrapper's own command line, with its program swapped for env
    command = text.strip().splitlines()[-1]
    assert command.startswith("exec ")
    words = __import__("shlex").split(command[len("exec "):])
    seen = subprocess.run(words[:words.index("-I") - 1] + ["env"], env=hostile, stdout=subprocess.PIPE).stdout.decode()
    names = dict(line.split("=", 1) for line in seen.splitlines())
    assert "LD_PRELOAD" not in names and "PYTHONWARNINGS" not in names and "BASH_ENV" not in names
    assert names["HOME"] == env.get("HOME", names["HOME"]) and names["HOME"] != str(directory / "scratch")
    assert names["ATTUNE_CAMPAIGN_LOCK"] == str(directory)
    assert "KUBECONFIG" not in names or "scratch" not in names["KUBECONFIG"]
    assert all(os.path.isabs(entry) and not entry.startswith(str(directory)) for entry in names["PATH"].split(":"))
    assert not (tmp_path / "canary").exists()
