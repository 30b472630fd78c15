#!/usr/bin/env python3
"""Benchmark the harness hooks' latency per call (not a test: it measures).

    .venv/bin/python bench/bench_hooks.py [--repeat 30]

Prepares a campaign on the local backend (``harness/launch_campaign.sh DIR --prepare``) with a
SYNTHETIC ledger of a few hundred rows written through the library, then runs, each ``--repeat``
times as a fresh process the way Claude Code runs the launcher's hooks (``python3 -B -S HOOK`` with the
event on stdin): a bare ``python3 -c pass`` for reference, the PreToolUse guard on an allowed Bash
command, on a denied kubectl command and on an Edit, and the Stop hook (which also verifies the
campaign's integrity). It reports min / median / max wall milliseconds and the median added over the
bare interpreter. Goal: under 50 ms added.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "skill" / "scripts"))
sys.path.insert(0, str(REPO / "skill" / "scripts" / "tests"))


def build(root: Path) -> Path:
    baseline = root / "baseline.yaml"
    baseline.write_text((REPO / "skill" / "scripts" / "tests" / "data" / "recipes" / "megatron_rayjob.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTUNE_", "AUTOTUNE_"))}
    env.update({"ATTUNE_BACKEND": "local", "ATTUNE_RUN_PREFIX": "bench-", "ATTUNE_BASELINE_YAML": str(baseline),
                "AUTOTUNE_GPUH_BUDGET": "1000", "AUTOTUNE_ALLOW_WEB": "0", "ATTUNE_PYTHON": sys.executable,
                "ATTUNE_AGENT": "planner"})  # no agent runs; the planner needs no CLI for the doctor to find
    directory = root / "campaign"
    proc = subprocess.run(["bash", str(REPO / "harness" / "launch_campaign.sh"), str(directory), "--prepare"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise SystemExit("bench: prepare failed: %s" % proc.stderr.decode())
    from attune.campaign.ledger import Campaign
    from factory import jittered, metrics
    campaign = Campaign(directory)
    for n in range(1, 101):  # SYNTHETIC runs: launch, result, charge
        run = "bench-r%03d" % n
        campaign.append("launch", run=run, purpose="baseline" if n == 1 else "candidate", recipe_sha256="%064x" % n,
                        gpus=16, backend="local", **({} if n == 1 else {"parent": "bench-r001"}))
        campaign.append("result", run=run, status="finished", metrics=metrics(jittered(1000.0, 0.02, n)))
        campaign.charge(run, 16, 300.0)
    sys.path.insert(0, str(REPO / "harness"))
    import integrity
    integrity.record(str(directory), session=True)
    return directory


def time_calls(argv, stdin: bytes, env, repeat: int) -> list:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        out.append((time.perf_counter() - start) * 1000.0)
        if proc.returncode != 0:
            raise SystemExit("bench: %s exited %d: %s" % (argv, proc.returncode, proc.stderr.decode()[-500:]))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        directory = build(Path(tmp))
        hooks = directory / ".attune" / "harness" / "hooks"
        env = dict(os.environ, ATTUNE_CAMPAIGN_DIR=str(directory), PYTHONDONTWRITEBYTECODE="1")
        base = {"session_id": "bench", "cwd": str(directory), "transcript_path": "/dev/null"}
        cases = [
            ("python3 -c pass", [sys.executable, "-c", "pass"], {}),
            ("pre_tool_use: Bash attune status (allow)", [sys.executable, "-B", "-S", str(hooks / "pre_tool_use.py")],
             dict(base, hook_event_name="PreToolUse", tool_name="Bash",
                  tool_input={"command": "python3 %s status" % (directory / ".attune/skill/scripts/attune.py")})),
            ("pre_tool_use: Bash kubectl delete (deny)", [sys.executable, "-B", "-S", str(hooks / "pre_tool_use.py")],
             dict(base, hook_event_name="PreToolUse", tool_name="Bash",
                  tool_input={"command": "kubectl delete rayjob other --context x -n y"})),
            ("pre_tool_use: Edit ledger.jsonl (deny)", [sys.executable, "-B", "-S", str(hooks / "pre_tool_use.py")],
             dict(base, hook_event_name="PreToolUse", tool_name="Edit",
                  tool_input={"file_path": str(directory / "ledger.jsonl"), "old_string": "a", "new_string": "b"})),
            ("stop (block, with the integrity check)", [sys.executable, "-B", "-S", str(hooks / "stop.py")],
             dict(base, hook_event_name="Stop", stop_hook_active=False)),
        ]
        print("data: SYNTHETIC campaign (100 runs in the ledger), repeat %d" % args.repeat)
        medians = {}
        for name, command, event in cases:
            samples = time_calls(command, json.dumps(event).encode(), env, args.repeat)
            medians[name] = statistics.median(samples)
            added = "" if name.startswith("python3") else ", added %.1f ms" % (medians[name] - medians["python3 -c pass"])
            print("%s: min %.1f ms, median %.1f ms, max %.1f ms%s" % (name, min(samples), medians[name], max(samples),
                                                                     added))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
