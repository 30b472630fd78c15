"""``attune status``: one screen that re-orients an agent after a context reset or a crash."""

from __future__ import annotations

import heapq

from .ranking import RecipeView, band_text, gain_dict
from .snapshot import Snapshot

LAST_RESULTS = 5


def _recipe(snapshot: Snapshot, recipe: RecipeView) -> dict:
    if recipe is None:
        return None
    ranking = snapshot.ranking
    return {
        "run": recipe.first.run,
        "recipe_sha256": recipe.sha,
        "tokens_per_s_per_gpu": recipe.score,
        "vs_baseline": ranking.relative(recipe.score, ranking.baseline),
        "gain_vs_baseline": gain_dict(ranking.compare(recipe)) if not recipe.is_baseline else None,
        "rankable_runs": len(recipe.rankable),
        "gate": recipe.gate,
        "simulated": recipe.simulated,
        "cpu": recipe.cpu,
    }


def collect(snapshot: Snapshot) -> dict:
    """Everything ``status`` shows, as plain data (the ``--json`` output)."""
    ranking = snapshot.ranking
    finalized = [run for run in ranking.runs if run.result_seq >= 0]
    last = []
    for run in sorted(heapq.nlargest(LAST_RESULTS, finalized, key=lambda run: run.result_seq),
                      key=lambda run: run.result_seq):
        recipe = ranking.recipes.get(run.recipe)
        # one comparison rule: the run's recipe (the geometric mean of its rankable runs) against the leader's, as
        # the verdict compares them; this run alone beside it
        last.append({"run": run.run, "status": run.status, "tokens_per_s_per_gpu": run.tokens,
                     "vs_leader": ranking.relative(recipe.score, ranking.leader) if recipe and run.tokens else None,
                     "recipe_runs": len(recipe.rankable) if recipe else 0,
                     "run_vs_leader": ranking.relative(run.tokens, ranking.leader),
                     "verdict": ranking.run_status(run), "simulated": run.simulated,
                     "cpu": run.cpu})
    stop = None
    if ranking.stop:
        later = [run.run for run in ranking.runs if run.launch_ts > ranking.stop["ts"]]
        stop = {"ts": ranking.stop["ts"], "reason": ranking.stop["reason"], "evidence": ranking.stop["evidence"],
                "launches_since": later}
    return {
        "campaign": snapshot.campaign.id,
        "dir": str(snapshot.campaign.dir),
        "integrity": {
            "ledger": snapshot.ledger_report.summary() + (
                " (%d of them a prefix the view cache proved unchanged)" % snapshot.reused_rows
                if snapshot.reused_rows else ""),
            "gpu_hours": snapshot.gpu_report.summary(),
            "violation_recorded": snapshot.violation,
        },
        "budget": snapshot.budget.as_dict(),
        "baseline": dict(_recipe(snapshot, ranking.baseline) or {}, role="baseline") if ranking.baseline else None,
        "leader": _recipe(snapshot, ranking.leader),
        # value: the least gain over the leader a 2-run candidate needs now (the leader test, measurement.md §4)
        "band": {"value": ranking.band, "text": band_text(ranking.band), "basis": ranking.band_basis,
                 "noise_sd": ranking.noise_sd, "noise_df": ranking.noise_df,
                 "false_win_rate": ranking.false_win_rate, "candidates_tested": ranking.tested,
                 "established": ranking.band_established, "baseline_runs_needed": ranking.repeats_needed},
        "in_flight": [{"run": run.run, "purpose": run.purpose, "launched": run.launch_ts,
                       "expected_gpu_hours": run.expected_gpu_hours} for run in ranking.in_flight],
        "last_results": last,
        "pending": list(ranking.pending),
        "actions": [dict(item) for item in ranking.actions],
        "stop": stop,
        "warnings": list(ranking.warnings) + snapshot.ledger_report.warnings + snapshot.gpu_report.warnings,
    }


def _fmt_recipe(info) -> str:
    if info is None:
        return "none"
    value = info["tokens_per_s_per_gpu"]
    text = "%s %s tokens/s/GPU" % (info["run"], "%.1f" % value if value is not None else "(no rankable run)")
    if info.get("gain_vs_baseline") and info.get("role") != "baseline":
        text += " (%s vs baseline)" % info["gain_vs_baseline"]["text"]
    text += ", %d rankable run(s)" % info["rankable_runs"]
    if info["simulated"]:
        text += ", SIMULATED"
    elif info.get("cpu"):
        text += ", cpu"
    return text


def render(info: dict, budget_text: str) -> str:
    """``key: value`` lines, greppable."""
    band = info["band"]
    lines = [
        "campaign: %s" % info["campaign"],
        "integrity: %s; %s%s" % (info["integrity"]["ledger"], info["integrity"]["gpu_hours"],
                                 "; VIOLATION RECORDED (no recipe can ship)" if info["integrity"]["violation_recorded"] else ""),
        "budget: %s" % budget_text,
        "baseline: %s" % _fmt_recipe(info["baseline"]),
        "leader: %s" % _fmt_recipe(info["leader"]),
        "band: a candidate needs %s; %s%s" % (band["text"], band["basis"],
                                 "" if band["established"] else "; not established, %d more baseline run(s) needed"
                                 % band["baseline_runs_needed"]),
        "in_flight: %s" % (", ".join("%s (%s, launched %s)" % (r["run"], r["purpose"], r["launched"])
                                     for r in info["in_flight"]) or "none"),
    ]
    for result in info["last_results"]:
        value = result["tokens_per_s_per_gpu"]
        if value is None:
            lines.append("result: %s: %s" % (result["run"], result["verdict"]))
            continue
        lines.append("result: %s %.1f tokens/s/GPU%s: %s" % (
            result["run"], value,
            " (its recipe %+.2f%% vs leader over %d run(s); this run %+.2f%%)" % (
                result["vs_leader"] * 100, result["recipe_runs"], result["run_vs_leader"] * 100)
            if result["vs_leader"] is not None and result["run_vs_leader"] is not None else "",
            result["verdict"]))
    for item in info["pending"]:
        lines.append("next: %s" % item)
    stop = info["stop"]
    if stop is None:
        lines.append("stop: none recorded")
    else:
        lines.append("stop: recorded %s: %s (evidence: %s)%s" % (
            stop["ts"], stop["reason"], ", ".join(stop["evidence"]),
            "; %d launch(es) since" % len(stop["launches_since"]) if stop["launches_since"] else ""))
    for warning in info["warnings"]:
        lines.append("warning: %s" % warning)
    return "\n".join(lines) + "\n"
