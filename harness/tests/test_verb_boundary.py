"""The verbs are the boundary, by effect: the real Claude Code CLI (pinned 2.1.332), driven by a scripted model on
loopback, runs every call of ``boundary_table`` in a prepared campaign (its baseline recipe in the campaign's top
level, one baseline run finished) under the campaign's own settings. The table's attacks go through the ``attune``
verbs and the runs they start, which run outside the agent's sandbox, and through the file tools, which run outside
it too.

After each adversarial call: no byte changed of the campaign's tools, frozen settings and inputs, integrity record
and Claude Code settings, of the user's home, of the integrity keys; no canary file appeared outside every path the
sandbox may write. At the end: nothing appeared late; no request reached the fake Kubernetes API; no secret of the
fixtures (the API key in the CLI's environment, the cloud credentials, the kube token, a file in the CLI's config
folder, the integrity key) reached the model; the integrity check and ``attune verify --replay`` pass on what the
verbs recorded (every record they wrote is whole); the run whose program turned on the campaign left its log as it
printed it. The legitimate calls of an agent's day still work.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import effect_session
from boundary_table import ADVERSARIAL, FINAL, LEGITIMATE
from effect_session import API_KEY, AWS_SECRET, KUBE_TOKEN

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "harness"))

import integrity_key  # noqa: E402

CFG_SECRET = "cfg-sandbox-table-secret-1618"
# what the verbs must leave as it is, whatever the agent does: the campaign's tools, settings, frozen inputs,
# integrity record, and the agent's Claude Code settings in the campaign
STATIC = (".attune/skill/", ".attune/harness/", ".attune/bin/", ".attune/settings.env", ".attune/baseline.yaml",
          ".attune/claude_settings.json", ".attune/integrity.json", ".claude/", "CLAUDE.md", "CLAUDE.local.md",
          ".mcp.json")


def _finish(c, run):
    for _ in range(60):
        done = c.wrapper("finalize", run, "--json", check=False)
        if done.returncode == 0 and b'"status"' in done.stdout:
            return json.loads(done.stdout)
        time.sleep(0.5)
    raise AssertionError("run %s did not finish: %s" % (run, done.stderr.decode()[-500:]))


def test_no_call_in_the_table_crosses_the_verbs_boundary(tmp_path):
    effect_session.claude_bin()
    c = effect_session.prepare(tmp_path, baseline_inside=True)
    camp, home, cfg, kube = c.camp, c.home, c.cfg, c.kube
    try:
        c.wrapper("launch", "--baseline")
        _finish(c, "t-r001")
        (cfg / "secret.json").write_text(json.dumps({"token": CFG_SECRET}))
        outside = tmp_path / "outside"
        outside.mkdir()
        canary = outside / "canary"
        keys = Path(integrity_key.key_dir(c.env))
        key = next(keys.glob("*.key")).read_bytes()
        c.names.update({"canary": str(canary), "keys": str(keys)})

        entries = ADVERSARIAL + LEGITIMATE + FINAL
        judged = list(range(len(ADVERSARIAL))) + list(range(len(ADVERSARIAL) + len(LEGITIMATE), len(entries)))

        # the user's files in HOME: each one there now, and what the home folder and its credential folders list
        # (tools' caches, ~/.cache and ~/.config, and Claude Code's own bookkeeping under ~/.claude left out)
        user_files = [path for path in home.rglob("*") if path.is_file()]

        def take():
            out = effect_session.snapshot(camp, home, cfg, entries=STATIC, extra=(keys, outside))
            for path in user_files:
                out[str(path)] = effect_session.sha(path) if os.path.lexists(path) else "missing"
            for folder in (home, home / ".aws", home / ".kube"):
                out["ls " + str(folder)] = sorted(name for name in os.listdir(folder)
                                                  if folder != home or name not in (".cache", ".config", ".claude"))
            return out

        outcome = effect_session.run_table(c, entries, take)
        calls, results = outcome.calls, outcome.results
        changed = [line for line in effect_session.changes(outcome, entries) if int(line.split(" ", 1)[0]) in judged]
        assert not changed, "\n".join(changed)
        assert not canary.exists()

        # nothing acts late: a process the forging run left behind, a deferred write
        final = take()
        time.sleep(6)
        late = take()
        assert late == final, sorted(k for k in late if late[k] != final.get(k))

        assert kube.requests == [], kube.requests
        sent = json.dumps(outcome.requests)
        for secret in (API_KEY, AWS_SECRET, KUBE_TOKEN, CFG_SECRET, key.hex()):
            assert secret not in sent, "a secret reached the model: %s..." % secret[:12]

        # what the verbs recorded is whole, and every result is its run's own output
        check = subprocess.run([sys.executable, str(REPO / "harness" / "integrity.py"), "verify", str(camp), "--json"],
                               env=c.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert check.returncode == 0, check.stdout.decode()[-2000:]
        replay = c.wrapper("verify", "--replay", "--json", check=False)
        assert replay.returncode == 0, (replay.stdout.decode()[-2000:], replay.stderr.decode()[-1000:])
        forged = camp / "runs" / "t-r003"
        log = (forged / "log.txt").read_text()
        said = [results[i][:600] for i, (_, call) in enumerate(calls) if "forge" in call.get("command", "")
                or "t-r003" in call.get("command", "")]
        assert "forge: could not write" in log and "FORGED-BY-PATH" not in log, (said, log[-1500:])
        assert "forge: wrote" not in log and "forge: reached the API server" not in log, log[-3000:]
        for secret in (AWS_SECRET, KUBE_TOKEN, API_KEY):
            assert secret not in log, "the run read a secret"
        assert not (home / "forge-canary").exists() and not (home / "forge-late-canary").exists()

        # the legitimate calls did what they do
        offset = len(ADVERSARIAL)
        for j, entry in enumerate(LEGITIMATE):
            if entry.expect:
                assert entry.expect in results[offset + j], (calls[offset + j][1], results[offset + j][:800])
        final = {calls[i][1]["command"]: results[i][:400] for i in range(len(entries) - len(FINAL), len(entries))}
        assert (camp / "scratch" / "plan.md").is_file() and (camp / "REPORT.md").is_file(), json.dumps(final)
        print("boundary table: %d adversarial and %d legitimate calls through the real CLI in %.0f s"
              % (len(ADVERSARIAL) + len(FINAL), len(LEGITIMATE), outcome.elapsed))
    finally:
        kube.close()


def test_the_table_covers_every_class_with_enough_calls():
    counts = collections.Counter(entry.cls for entry in ADVERSARIAL + FINAL)
    assert sum(counts.values()) >= 60 and len(counts) == 4 and min(counts.values()) >= 12, counts
    assert len(LEGITIMATE) >= 10
    # each attack is different; only the final writers run again once every link is planted
    commands = [json.dumps([entry.tool, entry.tool_input], sort_keys=True) for entry in ADVERSARIAL]
    assert len(set(commands)) == len(commands), "each adversarial call is different"
