#!/usr/bin/env python3
"""Early stopping (ATTUNE_EARLY_STOP=1) measured on the planner's SIMULATED demo campaigns: the same recipe and
budget with early stopping off and on; GPU-hours spent, runs, the shipped gain, and for every stopped run whether
it would have won had it run to its end (its counterfactual: the same recipe and run id run to the end by the
simulator, which seeds a run by its id, scored on the same window against the need it was stopped on).

    .venv/bin/python bench/bench_early_stop.py [--models llama3-70b qwen3-30b-a3b] [--out FILE]

The simulated runs are slowed (ATTUNE_SIM_SPEED in the recipe, seconds of wall time per step) so that the planner
looks at a candidate while it runs, as it would on a cluster; the GPU-hours are the simulated ones either way.
Every number is SIMULATED.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "harness"))

from attune.core import logparse  # noqa: E402
from attune.core.recipe import Recipe  # noqa: E402
from harness import demo  # noqa: E402

SPEED_S = "0.1"


def campaign(model: str, budget: float, early: bool, where: Path) -> dict:
    config = demo.prepare(where, model, budget)
    baseline = where / "baseline.yaml"
    baseline.write_text(baseline.read_text().replace("ATTUNE_SIM_SEED: auto",
                                                     "ATTUNE_SIM_SEED: auto\n      ATTUNE_SIM_SPEED: \"%s\"" % SPEED_S))
    with open(config, "a") as handle:
        handle.write("ATTUNE_EARLY_STOP=%d\n" % int(early))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATTUNE_", "AUTOTUNE_"))}
    for line in config.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    proc = subprocess.run([str(REPO / "harness" / "launch_campaign.sh"), str(where)], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit("campaign %s failed: %s" % (where, proc.stderr[-3000:]))
    rows = [json.loads(line) for line in (where / "ledger.jsonl").read_text().splitlines()]
    spent = sum(json.loads(line).get("gpu_seconds", 0) for line in (where / "gpu_hours.jsonl").read_text()
                .splitlines()) / 3600.0
    launches = [r for r in rows if r["kind"] == "launch"]
    results = {r["run"]: r for r in rows if r["kind"] == "result"}
    leader = [r for r in rows if r["kind"] == "leader"]
    stopped = [results[r["run"]] for r in launches if results.get(r["run"], {}).get("status") == "stopped_early"]
    charged = {}
    for line in (where / "gpu_hours.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "gpu_seconds" in row:
            charged[row["run"]] = charged.get(row["run"], 0) + row["gpu_seconds"] / 3600.0
    report = (where / "REPORT.md").read_text()
    gain = next((line.split("|")[2].strip().split(" ")[0] for line in report.splitlines()
                 if line.startswith("| Gain")), None)
    return {"runs": len(launches), "gpu_hours": round(spent, 2), "shipped_gain": gain,
            "stopped": [dict(run=r["run"], charged_gpu_hours=round(charged.get(r["run"], 0.0), 3),
                             **{k: r["early_stop"][k] for k in ("through_step", "best_case", "need")},
                             counterfactual=counterfactual(where, r["run"], r["early_stop"])) for r in stopped],
            "leader_rows": len(leader)}


def counterfactual(where: Path, run: str, evidence: dict) -> dict:
    """The stopped run run to its end: its tokens/s/GPU over the scoring window, its gain against the leader it was
    stopped against, and whether that clears the need (a false stop)."""
    recipe = Recipe.load(where / "runs" / run / "recipe.yaml")
    env = dict(os.environ, **recipe.env())
    env.update(ATTUNE_RUN_ID=run, ATTUNE_SIM_SPEED="0")
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(recipe.command.text, shell=True, env=env, cwd=tmp, capture_output=True, text=True)
        log = Path(tmp) / "log.txt"
        log.write_text(proc.stdout + proc.stderr)
        steps = [s for s in logparse.parse_file(log)["steps"] if 5 <= s["step"] <= 19 and s.get("elapsed_ms")]
        text = log.read_text()
    wall = float(text.rsplit("ATTUNE simulated wall time: ", 1)[1].split(" s", 1)[0])
    args = recipe.args()
    gpus = int(recipe.env().get("ATTUNE_SIM_GPUS") or recipe.gpus())
    step_s = statistics.median(s["elapsed_ms"] for s in steps) / 1000.0
    tokens = int(args["--global-batch-size"]) * int(args["--seq-length"]) / step_s / gpus
    gain = tokens / evidence["leader_tokens_per_s_per_gpu"] - 1
    return {"tokens_per_s_per_gpu": round(tokens, 1), "gain": round(gain, 4), "would_have_won": gain >= evidence["need"],
            "full_run_gpu_hours": round(wall * recipe.gpus() / 3600.0, 3)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["llama3-70b", "qwen3-30b-a3b"])
    parser.add_argument("--budget", type=float, default=None, help="GPU-hours (default: the demo's)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = {"simulated": True, "speed_s_per_step": float(SPEED_S), "models": {}}
    with tempfile.TemporaryDirectory(prefix="attune-es-") as root:
        for model in args.models:
            budget = args.budget or demo.MODELS[model][1]
            both = {}
            for early in (False, True):
                both["on" if early else "off"] = campaign(model, budget, early, Path(root) / ("%s-%d" % (model, early)))
            off, on = both["off"], both["on"]
            stopped = on["stopped"]
            false = [s for s in stopped if s["counterfactual"]["would_have_won"]]
            saved_by_stops = sum(s["counterfactual"]["full_run_gpu_hours"] - s["charged_gpu_hours"] for s in stopped)
            out["models"][model] = dict(both, budget=budget, saved_gpu_hours=round(off["gpu_hours"] - on["gpu_hours"], 2),
                                        saved_by_the_stops_gpu_hours=round(saved_by_stops, 2),
                                        false_stops=len(false), stops=len(stopped))
            print("%s (%g GPU-hours): off %d runs %.1f GPU-h %s; on %d runs %.1f GPU-h %s; %d stopped (%.1f GPU-h "
                  "saved by the stops themselves), %d would have won; SIMULATED" % (
                      model, budget, off["runs"], off["gpu_hours"], off["shipped_gain"], on["runs"], on["gpu_hours"],
                      on["shipped_gain"], len(stopped), saved_by_stops, len(false)))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
