#!/usr/bin/env python3
"""How often the leader rule crowns a change that does nothing (not a test: it measures, it never fails on
a number).

    .venv/bin/python bench/noop_bench.py [--campaigns 1000] [--levers 1,5,10] [--seed 0]

Each campaign is SIMULATED: the baseline's ``--baseline-repeats`` runs (3, SKILL.md), then K candidates that
change nothing, each run twice (the run and its paired confirmation, the least a candidate needs to be
eligible to lead), every one passing the gate. Every run's per-iteration step times come from the simulated
workload's noise model (``simulate.model.step_times``: a run-to-run offset, per-step jitter, the occasional
slow step and the warm-up of iterations 1-2, fitted to real Megatron-LM runs; simulate/README.md), all with
the same true step time, so any leader but the baseline is a false win. The campaign's ledger rows (launch,
result with the metrics ``finalize`` writes, gate) go through the project's own ranking
(``attune_core.ranking.build``: the scoring window, the noise band and the leader rule that ``status`` and
the reports use).

It prints, per K: the share of campaigns whose leader is a no-op (the per-campaign false-win rate, with a
95% Wilson interval), the share of single candidate comparisons that would lead alone (K = 1 is one
comparison), and what the rule costs: runs per campaign and GPU-hours at ``--gpus`` GPUs and ``--step-s``
seconds a step over ``--steps`` iterations plus ``--startup-s`` a run (stated, not measured).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "skill" / "scripts"))

from attune_core import ranking  # noqa: E402
from simulate import model  # noqa: E402

STEPS = 20
GBS, SEQ = 256, 4096


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _metrics(seconds: list, gpus: int) -> dict:
    return {"global_batch_size": GBS, "seq_length": SEQ, "gpus": gpus, "iter": list(range(1, len(seconds) + 1)),
            "step_ms": [s * 1000.0 for s in seconds], "loss": [10.0 - 0.01 * i for i in range(len(seconds))],
            "skipped": [0] * len(seconds), "nan": [0] * len(seconds)}


def campaign_rows(seed: int, campaign: int, levers: int, repeats: int, gpus: int, step_s: float) -> list:
    """The ledger rows of one simulated campaign: baseline repeats, then ``levers`` no-op candidates x 2."""
    rows, seq = [], 0
    plan = [("baseline", "baseline", "b%d" % i) for i in range(repeats)]
    for lever in range(levers):
        plan += [("candidate", "noop-%d" % lever, "c%d-%d" % (lever, i)) for i in range(2)]
    for index, (purpose, recipe, run) in enumerate(plan):
        ts = "2026-12-02T%02d:%02d:00Z" % (index // 60, index % 60)
        run_id = "r%03d-%s" % (index, run)
        rows.append({"kind": "launch", "seq": seq, "ts": ts, "run": run_id, "purpose": purpose,
                     "recipe_sha256": _sha(recipe), "gpus": gpus, "backend": "simulated", "simulated": True})
        seq += 1
        seconds = model.step_times(STEPS, step_s, "noop-bench/%d/%d/%s" % (seed, campaign, run_id))
        rows.append({"kind": "result", "seq": seq, "ts": ts, "run": run_id, "status": "finished",
                     "metrics": _metrics(seconds, gpus), "simulated": True})
        seq += 1
        if purpose == "candidate":
            rows.append({"kind": "gate", "seq": seq, "ts": ts, "run": run_id, "verdict": "pass", "reasons": []})
            seq += 1
    return rows


def wilson(hits: int, n: int, z: float = 1.96) -> tuple:
    if not n:
        return (0.0, 1.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def measure(campaigns: int, levers: int, seed: int, repeats: int, gpus: int, step_s: float) -> dict:
    false_wins = 0
    single = 0
    single_total = 0
    for c in range(campaigns):
        rows = campaign_rows(seed, c, levers, repeats, gpus, step_s)
        result = ranking.build(rows, baseline_repeats=repeats)
        if result.leader is not None and not result.leader.is_baseline:
            false_wins += 1
        base = result.baseline.score if result.baseline else None
        for recipe in result.recipes.values():  # each candidate alone against the baseline, by the final band
            if recipe.is_baseline or base is None or recipe.score is None:
                continue
            single_total += 1
            single += recipe.score > base * (1 + result.band)
    return {"campaigns": campaigns, "false_wins": false_wins, "single": single, "single_total": single_total,
            "runs": repeats + 2 * levers}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=1000)
    parser.add_argument("--levers", default="1,5,10", help="numbers of no-op candidates per campaign")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-repeats", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--startup-s", type=float, default=300.0, help="a run's start-up (stated, not measured)")
    args = parser.parse_args(argv)
    run_hours = args.gpus * (STEPS * args.step_s + args.startup_s) / 3600.0
    print("data: SIMULATED step times (simulate.model noise fit); the project's ranking decides the leader")
    print("rule: today's (noise band = the widest (max - min) / median over recipes with 2+ runs, floor 1%%; a "
          "candidate with 2+ runs leads when its median beats the leader's by more than the band); baseline "
          "repeats %d" % args.baseline_repeats)
    print("cost basis: %d GPUs x (%d steps x %.1f s + %.0f s start-up) = %.2f GPU-hours a run (stated)" % (
        args.gpus, STEPS, args.step_s, args.startup_s, run_hours))
    for levers in [int(k) for k in args.levers.split(",")]:
        got = measure(args.campaigns, levers, args.seed, args.baseline_repeats, args.gpus, args.step_s)
        lo, hi = wilson(got["false_wins"], got["campaigns"])
        slo, shi = wilson(got["single"], got["single_total"])
        print("K=%d: campaigns crowning a no-op %d/%d = %.1f%% (95%% CI %.1f-%.1f%%); single comparisons beating "
              "the baseline by the campaign's final band %d/%d = %.1f%% (%.1f-%.1f%%); runs a campaign %d, %.1f GPU-hours" % (
                  levers, got["false_wins"], got["campaigns"], 100.0 * got["false_wins"] / got["campaigns"],
                  100 * lo, 100 * hi, got["single"], got["single_total"],
                  100.0 * got["single"] / max(1, got["single_total"]), 100 * slo, 100 * shi, got["runs"],
                  got["runs"] * run_hours), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
