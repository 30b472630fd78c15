#!/usr/bin/env python3
"""Replay an agent trial: the `attune` commands a reader following SKILL.md ran, in order, on a fresh SIMULATED
campaign, and set them beside the planner's campaign on the same recipe and budget.

A trial file (``*.trial``, beside this script) holds:

    # model: qwen3-30b-a3b          the demo recipe (harness/demo.py MODELS)
    # budget: 300                   GPU-hours
    ## SKILL.md §4.1: ...            the reader's note: which step it follows and why (kept in the record)
    attune launch --baseline ...     a command, run in the campaign (ATTUNE_CAMPAIGN_DIR); `launch` is followed
                                     to its end by `attune poll RUN --json` (SKILL.md section 3)
    expect: EXPR                     a Python expression over `out` (the last command's JSON), `code` and
                                     `kept` (outputs kept by name); false means the replay diverged from
                                     what the reader saw
    keep: NAME                       keep the last command's JSON as kept["NAME"] (a number the reader
                                     compares a later one with)

Every run is SIMULATED (the local backend and skill/scripts/simulate/sim_megatron.py) and seeded by its run id,
so a replay sees what the reader saw. The record (``--out``, JSON) has, for the trial and for the planner: runs
by purpose, GPU-hours spent, the shipped gain, the stop's reason, and every wasted run with why: a failed run, a
run the gate's configuration check fails, a profile run that found no trace, a run of a recipe measured already
(other than a baseline repeat, a confirmation or a requested repeat).

    .venv/bin/python bench/agent_trials/run_trial.py bench/agent_trials/qwen3-30b-a3b.trial --out /tmp/trial.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "skill"))

from harness import demo  # noqa: E402

ATTUNE = [sys.executable, str(REPO / "skill" / "scripts" / "attune.py")]
DONE = ("succeeded", "failed", "lost", "torn_down")


def parse(path: Path) -> dict:
    """``{"model", "budget", "steps": [{"note"|"command"|"expect": text, "line": n}]}``."""
    trial = {"model": None, "budget": None, "steps": []}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        for key in ("model", "budget"):
            if line.startswith("# %s:" % key):
                trial[key] = line.split(":", 1)[1].strip()
        if line.startswith("##"):
            trial["steps"].append({"note": line.lstrip("# "), "line": number})
        elif line.startswith("attune "):
            trial["steps"].append({"command": line, "line": number})
        elif line.startswith("expect:"):
            trial["steps"].append({"expect": line.split(":", 1)[1].strip(), "line": number})
        elif line.startswith("keep:"):
            trial["steps"].append({"keep": line.split(":", 1)[1].strip(), "line": number})
        elif not line.startswith("#"):
            raise SystemExit("%s:%d: neither a note (##), a command (attune ...), an expect: nor a keep: line"
                             % (path, number))
    if not trial["model"] or not trial["budget"]:
        raise SystemExit("%s: give `# model:` and `# budget:` lines" % path)
    return trial


def attune(campaign: Path, words: list) -> tuple:
    env = dict(os.environ, ATTUNE_CAMPAIGN_DIR=str(campaign))
    proc = subprocess.run(ATTUNE + words, capture_output=True, text=True, env=env, cwd=str(campaign))
    try:
        out = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        out = None
    return proc.returncode, out, proc.stdout, proc.stderr


def follow(campaign: Path, run: str, timeout_s: float = 600.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _code, out, _stdout, _err = attune(campaign, ["poll", run, "--json"])
        state = (out or {}).get("state") or (out or {}).get("status", {}).get("state")
        if state in DONE:
            return state
        time.sleep(0.5)
    raise SystemExit("run %s did not end in %.0f s" % (run, timeout_s))


def replay(trial: dict, campaign: Path) -> dict:
    config = demo.prepare(campaign, trial["model"], float(trial["budget"]))
    code, out, _stdout, err = attune(campaign, ["init", "--config", str(config), "--campaign-id", "trial"])
    if code:
        raise SystemExit("init: %s" % err.strip())
    record, last, diverged, kept = [], None, [], {}
    for step in trial["steps"]:
        if "note" in step:
            record.append({"note": step["note"]})
            continue
        if "keep" in step:
            kept[step["keep"]] = last[1]
            continue
        if "expect" in step:
            ok = bool(eval(step["expect"], {}, {"out": last[1], "code": last[0], "kept": kept}))  # noqa: S307
            record.append({"expect": step["expect"], "holds": ok})
            if not ok:
                diverged.append("line %d: %s" % (step["line"], step["expect"]))
            continue
        words = shlex.split(step["command"])[1:]
        code, out, stdout, err = attune(campaign, words)
        entry = {"command": step["command"], "exit": code}
        if words[0] == "launch" and code == 0 and out:
            run = out["launch"]["run"]
            entry["run"], entry["state"] = run, follow(campaign, run)
        if code not in (0, 1):
            entry["stderr"] = err.strip()[-500:]
        record.append(entry)
        last = (code, out)
        print("trial: %s -> exit %d%s" % (step["command"][:110], code,
                                           " (%s %s)" % (entry["run"], entry["state"]) if "run" in entry else ""),
              file=sys.stderr)
    return {"steps": record, "diverged": diverged, "summary": summarize(campaign)}


def summarize(campaign: Path) -> dict:
    """Runs, GPU-hours, the shipped gain, the stop, and the wasted runs of a campaign, from its ledger."""
    sys.path.insert(0, str(REPO / "skill" / "scripts"))
    from attune.campaign import ledger, ranking as ranking_mod
    made = ledger.Campaign(campaign)
    rows = made.ledger.rows()
    launches = [row for row in rows if row["kind"] == "launch"]
    results = {row["run"]: row for row in rows if row["kind"] == "result"}
    gates = {row["run"]: row for row in rows if row["kind"] == "gate"}
    ranked = ranking_mod.build(rows)
    by_purpose, seen, wasted = {}, {}, []
    for row in launches:
        run, purpose = row["run"], row["purpose"]
        by_purpose[purpose] = by_purpose.get(purpose, 0) + 1
        result = results.get(run, {})
        if result.get("status") not in (None, "finished"):
            wasted.append({"run": run, "why": "%s: %s" % (result.get("status"), (result.get("failure") or {}).get(
                "class"))})
        elif purpose == "profile" and not (campaign / "runs" / run / "profile").exists():
            wasted.append({"run": run, "why": "a profile run that found no trace"})
        elif gates.get(run, {}).get("verdict") == "fail":
            wasted.append({"run": run, "why": "the gate failed it: %s" % "; ".join(gates[run].get("reasons", []))[:200]})
        elif purpose == "candidate" and row["recipe_sha256"] in seen:
            wasted.append({"run": run, "why": "the recipe of %s again" % seen[row["recipe_sha256"]]})
        seen.setdefault(row["recipe_sha256"], run)
    spent = sum(row["gpu_seconds"] for row in made.gpu_log.rows() if "gpu_seconds" in row) / 3600.0
    stop = next((row for row in reversed(rows) if row["kind"] == "stop"), None)
    base, lead = ranked.baseline, ranked.leader
    gain = (lead.score / base.score - 1.0) if base is not None and lead is not None and base.score else None
    return {"runs": len(launches), "by_purpose": by_purpose, "gpu_hours": round(spent, 2),
            "candidates": by_purpose.get("candidate", 0), "leader": lead.first.run if lead else None,
            "gain": None if gain is None else round(gain, 4), "wasted": wasted,
            "levers_tried": [row.get("lever") for row in launches if row["purpose"] == "candidate"],
            "stop": stop.get("reason") if stop else None, "simulated": True}


def planner(model: str, budget: str, campaign: Path) -> dict:
    proc = subprocess.run([str(REPO / "harness" / "launch_campaign.sh"), "--demo", str(campaign), "--demo-model",
                           model, "--demo-budget", budget], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit("planner campaign failed: %s" % proc.stderr[-2000:])
    return {"summary": summarize(campaign)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("trial", type=Path)
    parser.add_argument("--out", type=Path, help="write the record (JSON) here too")
    parser.add_argument("--keep", type=Path, help="run the campaigns under this directory and keep them")
    parser.add_argument("--no-planner", action="store_true", help="replay the trial only")
    args = parser.parse_args(argv)
    trial = parse(args.trial)
    root = args.keep or Path(tempfile.mkdtemp(prefix="attune-trial-"))
    root.mkdir(parents=True, exist_ok=True)
    out = {"trial": args.trial.name, "model": trial["model"], "budget_gpu_hours": float(trial["budget"]),
           "simulated": True, "reader": replay(trial, root / "reader")}
    if not args.no_planner:
        out["planner"] = planner(trial["model"], trial["budget"], root / "planner")
    text = json.dumps(out, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    for who in ("reader", "planner"):
        if who in out:
            s = out[who]["summary"]
            print("%s: runs=%d candidates=%d gpu_hours=%.1f gain=%s wasted=%d leader=%s SIMULATED" % (
                who, s["runs"], s["candidates"], s["gpu_hours"],
                "n/a" if s["gain"] is None else "%+.2f%%" % (100 * s["gain"]), len(s["wasted"]), s["leader"]))
    if out["reader"]["diverged"]:
        print("diverged: %s" % "; ".join(out["reader"]["diverged"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
