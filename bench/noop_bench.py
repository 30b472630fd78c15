#!/usr/bin/env python3
"""How often the leader test crowns a change that does nothing, what it costs, and what it finds when a
change is real (not a test: it measures, it never fails on a number).

    .venv/bin/python bench/noop_bench.py [--campaigns 1000] [--levers 1,5,10] [--effects 0.03,0.05] [--seed 0]

Each campaign is SIMULATED: the baseline's ``--baseline-repeats`` runs (3, SKILL.md), then K candidates,
each built on the leader of the moment and run twice (the run and its paired confirmation, the least a
candidate needs to be tested), every one passing the gate. With ``--sequential`` (the default, what
``attune status`` tells the agent) a candidate the test calls ahead but not conclusive is repeated, run by
run, on the recipe ``status`` names (the one with fewer runs), until the test decides or it has 6 runs.
Every run's per-iteration step times come from the simulated workload's noise model
(``simulate.model.step_times``: a run-to-run offset, per-step jitter, the occasional slow step and the
warm-up of iterations 1-2, fitted to real Megatron-LM runs; simulate/README.md). A no-op candidate runs at
its parent's true step time, so in a campaign of no-ops any leader but the baseline is a false win; with
``--effects`` one candidate of the K (the middle one) is truly faster by that fraction, and a campaign
"finds" it when its final leader builds on it. The ledger rows (launch, result with the metrics
``finalize`` writes, gate) go through the project's own ranking (``attune.campaign.ranking.build``: the
scoring window, the leader test and the ``pending`` lines ``status`` prints).

Beside it, on the very same runs, the rule the leader test replaced (a range band: the widest
(max - min) / median over recipes with 2 or more runs, floor 1%; a candidate with 2 runs leads when its
median beats the leader's by more than the band; no repeats).

It prints, per K: the share of campaigns whose leader is a no-op (the per-campaign false-win rate, with a
95% Wilson interval), the share of single comparisons that pass (each no-op's first test, at 2 runs,
against the baseline at the campaign's level), the runs a campaign takes and their GPU-hours at ``--gpus``
GPUs and ``--step-s`` seconds a step over 20 iterations plus ``--startup-s`` a run (a stated basis, not
measured), and with ``--effects`` the share of campaigns that find the real gain.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "skill" / "scripts"))

from attune.campaign import ranking  # noqa: E402
from attune.simulate import noise as model  # noqa: E402

STEPS = 20
GBS, SEQ = 256, 4096


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _metrics(seconds: list, gpus: int) -> dict:
    return {"global_batch_size": GBS, "seq_length": SEQ, "gpus": gpus, "iter": list(range(1, len(seconds) + 1)),
            "step_ms": [s * 1000.0 for s in seconds], "loss": [10.0 - 0.01 * i for i in range(len(seconds))],
            "skipped": [0] * len(seconds), "nan": [0] * len(seconds)}


class Campaign(object):
    """One simulated campaign's ledger rows, built run by run as an agent following ``status`` would."""

    def __init__(self, key: str, gpus: int, step_s: float, repeats: int, rate: float):
        self.key, self.gpus, self.step_s, self.repeats, self.rate = key, gpus, step_s, repeats, rate
        self.rows, self.seq = [], 0
        self.speed = {}  # recipe -> true speed-up over the baseline
        self.recipe_of = {}  # run -> recipe
        self.order = []  # recipes in the order introduced

    def _row(self, row: dict):
        row["seq"] = self.seq
        row["ts"] = "2026-12-02T%02d:%02d:%02d" % (self.seq // 3600, self.seq // 60 % 60, self.seq % 60) + "Z"
        self.seq += 1
        self.rows.append(row)

    def run(self, recipe: str, purpose: str, parent: str = None, gate: bool = False) -> str:
        run_id = "r%03d" % len(self.recipe_of)
        self.recipe_of[run_id] = recipe
        if recipe not in self.order:
            self.order.append(recipe)
        self._row({"kind": "launch", "run": run_id, "purpose": purpose, "recipe_sha256": _sha(recipe),
                   "parent": parent, "gpus": self.gpus, "backend": "simulated", "simulated": True})
        seconds = model.step_times(STEPS, self.step_s / self.speed[recipe], "noop-bench/%s/%s" % (self.key, run_id))
        self._row({"kind": "result", "run": run_id, "status": "finished", "metrics": _metrics(seconds, self.gpus),
                   "simulated": True})
        if gate:
            self._row({"kind": "gate", "run": run_id, "verdict": "pass", "reasons": []})
        return run_id

    def rank(self):
        return ranking.build(self.rows, baseline_repeats=self.repeats, false_win_rate=self.rate)


def play(key: str, levers: int, effect: float, repeats: int, gpus: int, step_s: float, rate: float,
         sequential: bool) -> dict:
    """One campaign; returns what its leader is and what it cost."""
    c = Campaign(key, gpus, step_s, repeats, rate)
    c.speed["baseline"] = 1.0
    for _ in range(repeats):
        c.run("baseline", "baseline")
    real = levers // 2 if effect else None
    singles, extra = [], 0
    for lever in range(levers):
        result = c.rank()
        lead = result.leader
        parent_recipe = next(r for r in c.order if _sha(r) == lead.sha)
        recipe = "lever-%d" % lever
        c.speed[recipe] = c.speed[parent_recipe] * ((1 + effect) if lever == real else 1.0)
        first = c.run(recipe, "candidate", parent=lead.first.run, gate=True)
        c.run(recipe, "confirm", parent=first, gate=True)
        result = c.rank()
        if lever != real and parent_recipe == "baseline":
            gain = result.compare(result.recipes[_sha(recipe)], result.baseline)
            singles.append(gain.wins)
        while sequential:
            todo = [item for item in result.actions if item["action"] == "repeat" and c.recipe_of[item["run"]] == recipe]
            if not todo:
                break
            again = c.recipe_of[todo[0]["repeat_of"]]
            c.run(again, "repeat" if again != recipe else "confirm", parent=todo[0]["repeat_of"])
            extra += 1
            result = c.rank()
    leader_recipe = next(r for r in c.order if _sha(r) == result.leader.sha)
    old = replaced_rule(c, result)
    return {"leader": leader_recipe, "false": leader_recipe != "baseline" and c.speed[leader_recipe] == 1.0,
            "found": effect > 0 and c.speed[leader_recipe] > 1.0,
            "old_false": old != "baseline" and c.speed[old] == 1.0, "old_found": effect > 0 and c.speed[old] > 1.0,
            "runs": len(c.recipe_of), "extra": extra, "singles": singles}


def replaced_rule(c: Campaign, result) -> str:
    """The range-band rule on the scores the ranking gave the baseline's first runs and every candidate's first
    2 (it asked for no repeats)."""
    tokens = {}
    for run in result.runs:  # launch order
        tokens.setdefault(c.recipe_of[run.run], []).append(run.tokens)
    lists = {r: values[:c.repeats if r == "baseline" else 2] for r, values in tokens.items()}
    band = 0.01
    for values in lists.values():
        if len(values) >= 2:
            middle = _median(values)
            band = max(band, (max(values) - min(values)) / middle)
    leader = "baseline"
    for recipe in sorted((r for r in lists if r != "baseline"), key=lambda r: _median(lists[r])):
        if _median(lists[recipe]) > _median(lists[leader]) * (1 + band):
            leader = recipe
    return leader


def _median(values: list) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def wilson(hits: int, n: int, z: float = 1.96) -> tuple:
    if not n:
        return (0.0, 1.0)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _share(hits: int, n: int) -> str:
    lo, hi = wilson(hits, n)
    return "%d/%d = %.1f%% (95%% CI %.1f-%.1f%%)" % (hits, n, 100.0 * hits / max(1, n), 100 * lo, 100 * hi)


def measure(campaigns: int, levers: int, effect: float, args) -> dict:
    got = {"false": 0, "found": 0, "old_false": 0, "old_found": 0, "runs": 0, "extra": 0, "singles": 0,
           "single_total": 0, "campaigns": campaigns}
    for index in range(campaigns):
        one = play("%d/%d/%g/%d" % (args.seed, levers, effect, index), levers, effect, args.baseline_repeats,
                   args.gpus, args.step_s, args.false_win_rate, args.sequential)
        for name in ("false", "found", "old_false", "old_found", "runs", "extra"):
            got[name] += one[name]
        got["singles"] += sum(one["singles"])
        got["single_total"] += len(one["singles"])
    return got


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=1000)
    parser.add_argument("--levers", default="1,5,10", help="numbers of candidates per campaign")
    parser.add_argument("--effects", default="", help="true gains of one candidate per campaign, e.g. 0.03,0.05")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-repeats", type=int, default=3)
    parser.add_argument("--false-win-rate", type=float, default=0.05)
    parser.add_argument("--no-sequential", dest="sequential", action="store_false",
                        help="never repeat a close candidate (2 runs each, as the replaced rule)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--step-s", type=float, default=1.0)
    parser.add_argument("--startup-s", type=float, default=300.0, help="a run's start-up (stated, not measured)")
    args = parser.parse_args(argv)
    run_hours = args.gpus * (STEPS * args.step_s + args.startup_s) / 3600.0
    print("data: SIMULATED step times (simulate.model noise fit); the project's ranking decides the leader")
    print("rule: the leader test (false wins at most %g%% a campaign, split over max(candidates, %d) and each "
          "candidate's looks), %s; baseline repeats %d" % (
              args.false_win_rate * 100, ranking.MIN_CANDIDATES,
              "close candidates repeated as status asks, up to %d runs" % ranking.MAX_RUNS if args.sequential
              else "2 runs a candidate", args.baseline_repeats))
    print("beside it: the replaced range-band rule on the same runs (2 runs a candidate)")
    print("cost basis: %d GPUs x (%d steps x %.1f s + %.0f s start-up) = %.2f GPU-hours a run (stated)" % (
        args.gpus, STEPS, args.step_s, args.startup_s, run_hours))
    effects = [0.0] + [float(e) for e in args.effects.split(",") if e]
    for effect in effects:
        for levers in [int(k) for k in args.levers.split(",")]:
            started = time.monotonic()
            got = measure(args.campaigns, levers, effect, args)
            n = got["campaigns"]
            runs = got["runs"] / n
            old_runs = args.baseline_repeats + 2 * levers
            if effect == 0:
                print("K=%d no-ops: campaigns crowning a no-op %s [replaced rule %s]; single comparisons passing %s; "
                      "runs a campaign %.2f (%.2f repeats) = %.1f GPU-hours [replaced rule %d = %.1f]; %.0f s" % (
                          levers, _share(got["false"], n), _share(got["old_false"], n),
                          _share(got["singles"], got["single_total"]), runs, got["extra"] / n, runs * run_hours,
                          old_runs, old_runs * run_hours, time.monotonic() - started), flush=True)
            else:
                print("K=%d, one true %+.0f%%: campaigns finding it %s [replaced rule %s]; crowning a no-op "
                      "%s [replaced rule %s]; runs a campaign %.2f = %.1f GPU-hours [replaced rule %d]; %.0f s" % (
                          levers, effect * 100, _share(got["found"], n), _share(got["old_found"], n),
                          _share(got["false"], n), _share(got["old_false"], n), runs, runs * run_hours, old_runs,
                          time.monotonic() - started), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
