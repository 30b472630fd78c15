"""``attune report``: REPORT.md and the shipped recipe (``recipe.yaml``).

The report compares the baseline with the leader, lists every kept change along the leader's
lineage with its evidence and gate verdict, the rejected levers, GPU-hours and cost (the agent's
own model cost where sessions recorded it), the payback time and the caveats. The leader's
recipe ships as ``recipe.yaml`` only when every pre-ship check passes; otherwise the report says
which failed and any earlier ``recipe.yaml`` is withdrawn (renamed, never deleted).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from attune.core import files

from . import preship, project_summary
from .ledger import REPORT, SHIPPED_RECIPE
from .ranking import gain_text
from .results import CPU, SIMULATED, budget_lines, cell, cpu_lines, describe_change, mark, pct, tok
from .snapshot import Snapshot


@dataclasses.dataclass
class Outcome:
    shipped: bool
    checks: list  # [(name, ok, detail)]
    report_path: str
    recipe_path: Optional[str]
    withdrawn: Optional[str]
    payback_hours: Optional[float]

    def as_dict(self) -> dict:
        return {"shipped": self.shipped, "report": self.report_path, "recipe": self.recipe_path,
                "withdrawn": self.withdrawn, "payback_hours": self.payback_hours,
                "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in self.checks]}


def model_cost(snapshot: Snapshot) -> Optional[float]:
    costs = [row["model_cost_usd"] for row in snapshot.ledger_rows
             if row["kind"] == "session" and "model_cost_usd" in row]
    return sum(costs) if costs else None


def payback_hours(snapshot: Snapshot) -> Optional[float]:
    """Hours of full-scale training at the shipped throughput that recoup the campaign's GPU-hours.

    Each hour on the shipped recipe's N GPUs does the work the baseline needs ``s/b`` hours for,
    saving ``N * (s/b - 1)`` GPU-hours; the campaign spent ``C`` GPU-hours, so payback is
    ``C / (N * (s/b - 1))``. None when there is no gain.
    """
    ranking = snapshot.ranking
    base, lead = ranking.baseline, ranking.leader
    if base is None or lead is None or lead.is_baseline or not base.score or not lead.score:
        return None
    gain = lead.score / base.score - 1
    if gain <= 0:
        return None
    gpus = lead.first.gpus or 1
    return snapshot.budget.gpu_hours_spent / (gpus * gain)


def render(snapshot: Snapshot, checks: list, shipped: bool, payback: Optional[float]) -> str:
    ranking = snapshot.ranking
    base, lead = ranking.baseline, ranking.leader
    out = ["# ATTUNE report: campaign %s" % snapshot.campaign.id, ""]
    note = snapshot.genesis.get("note")
    if note:
        out += ["Campaign note: %s" % note, ""]
    if shipped:
        out.append("**Shipped**: `%s` is the recipe of run %s." % (SHIPPED_RECIPE, lead.first.run))
    else:
        out.append("**Not shipped**: %s." % "; ".join("%s: %s" % (name, detail)
                                                    for name, ok, detail in checks if not ok))
    simulated = sum(1 for run in ranking.runs if run.simulated)
    if simulated:
        out += ["", "**%s**: %d of %d runs ran on the simulated workload; their throughput is a model's output, not "
                "a measurement of real hardware." % (SIMULATED, simulated, len(ranking.runs))]
    cpu = cpu_lines(ranking)
    if cpu:
        out += [""] + cpu[:-1]
    out += ["", "## Outcome", "", "| | |", "|---|---|"]
    out.append("| Baseline | %s |" % (_recipe_text(base) if base else "none"))
    out.append("| Shipped recipe | %s |" % (_recipe_text(lead) if lead and shipped else "none"))
    if base is not None and lead is not None:
        gain = ranking.compare(lead, base)
        if lead is base:
            verdict = "the baseline itself"
        else:
            verdict = "passes the leader test" if gain is not None and gain.wins else "does not pass the leader test"
        out.append("| Gain | %s, %s (%s) |" % (gain_text(gain), verdict, ranking.band_basis))
    stop = ranking.stop
    out.append("| Stop | %s |" % ("%s: %s (evidence: %s)" % (stop["ts"], cell(stop["reason"]), ", ".join(stop["evidence"]))
                                   if stop else "none recorded: the campaign may still be running"))
    out += ["", "## Pre-ship checks", ""]
    out += ["- %s %s: %s" % ("PASS" if ok else "FAIL", name, cell(detail)) for name, ok, detail in checks]
    out += ["", "## Kept changes", ""]
    lineage = ranking.lineage(lead)[1:] if lead is not None else []
    if not lineage:
        out.append("None: the baseline recipe is kept.")
    for recipe in lineage:
        first = recipe.first
        parent = ranking.recipe_of(first.parent)
        evidence = ", ".join("%s %s" % (run.run, tok(run.tokens)) for run in recipe.rankable)
        out += ["### %s: %s" % (first.run, cell(describe_change(first.change)) or "(no change recorded)"), "",
                "- hypothesis: %s" % (cell(first.hypothesis) or "not recorded"),
                "- evidence: %s tokens/s/GPU (geometric mean %s, %s vs parent %s)" % (
                    evidence, tok(recipe.score), gain_text(ranking.compare(recipe, parent)) if parent else "n/a",
                    parent.first.run if parent else "?"),
                "- gate: %s%s" % (recipe.gate or "not run",
                                  " (%s)" % "; ".join(first.gate_reasons) if first.gate_reasons else "")]
        out += ["- left out of the shipped recipe by its leave-one-out %s" % ranking.recipes[removal].first.run
                for kept, removal in ranking.dropped if kept == recipe.sha]
        out.append("")
    out += leave_one_out_lines(snapshot, lead)
    out += ["## Rejected levers", ""]
    kept = {recipe.sha for recipe in ranking.lineage(lead)} if lead is not None else set()
    rejected = [recipe for recipe in ranking.recipes.values() if recipe.sha not in kept and not recipe.replay]
    if not rejected:
        out.append("None.")
    else:
        out += ["| run | lever | change | vs parent | why |", "|---|---|---|---:|---|"]
        for recipe in sorted(rejected, key=lambda r: (r.first.launch_ts, r.first.run)):
            first = recipe.first
            parent = ranking.recipe_of(first.parent)
            out.append("| %s |" % " | ".join(cell(text) for text in (
                first.run, first.lever, describe_change(first.change),
                pct(ranking.relative(recipe.score, parent)), ranking.run_status(first))))
    out += ["", "## GPU-hours and cost", "", "| | |", "|---|---|"] + budget_lines(snapshot.budget)
    agent = model_cost(snapshot)
    out.append("| Agent model cost | %s |" % ("$%.2f (from session rows)" % agent if agent is not None
                                               else "not recorded"))
    out += ["", "## Payback", ""]
    if payback is None:
        out.append("No payback: the shipped recipe is not faster than the baseline.")
    else:
        out.append("%.1f hours of training on the shipped recipe's %d GPUs recoup the campaign's %.3f GPU-hours "
                   "(each hour saves %d x %.2f%% GPU-hours against the baseline). A job on more GPUs pays back "
                   "proportionally sooner." % (payback, lead.first.gpus, snapshot.budget.gpu_hours_spent,
                                               lead.first.gpus, ranking.relative(lead.score, base) * 100))
        if agent is not None and snapshot.settings.gpu_hour_usd:
            price = snapshot.settings.gpu_hour_usd
            with_agent = payback * (1 + agent / (snapshot.budget.gpu_hours_spent * price)) \
                if snapshot.budget.gpu_hours_spent else None
            if with_agent is not None:
                out.append("Counting the agent's model cost at $%.2f per GPU-hour: %.1f hours." % (price, with_agent))
    out += ["", "## Caveats", ""] + ["- %s" % cell(text) for text in _caveats(snapshot, shipped)]
    return "\n".join(out) + "\n"


def leave_one_out_lines(snapshot: Snapshot, lead) -> list:
    """The ``## Leave-one-out`` section: each change of the shipped stack, removed and measured (measurement.md
    §5), or why it was not."""
    ranking = snapshot.ranking
    out = ["## Leave-one-out", ""]
    changes = [recipe for recipe in (ranking.lineage(lead)[1:] if lead is not None else [])
               if not recipe.first.leave_out]
    if not changes:
        return out + ["None: no change to remove.", ""]
    dropped = {kept: ranking.recipes[removal] for kept, removal in ranking.dropped}
    budget = snapshot.budget
    run_cost = lead.first.expected_gpu_hours if budget.kind == "gpu_hours" else 1.0
    affordable = budget.left >= 2 * run_cost if run_cost else not budget.exhausted
    out += ["Each change the shipped recipe holds, removed from its stack and measured; the stack's gain over the "
            "recipe without it, with its 95% interval. A change whose removal does not lose beyond the interval "
            "is left out of the shipped recipe.", "",
            "| change | removal | the stack vs without it | verdict |", "|---|---|---|---|"]
    for recipe in changes:
        change = "%s (%s)" % (cell(describe_change(recipe.first.change)) or "?", recipe.first.run)
        if recipe.sha in dropped:
            removal = dropped[recipe.sha]
            stack = ranking.recipe_of(removal.first.parent)
            gain = ranking.compare(stack, removal)
            out.append("| %s | %s (%d run(s)) | %s | left out of the shipped recipe: as fast without it |" % (
                change, removal.first.run, removal.n, gain_text(gain)))
            continue
        measured = ranking.leave_outs(recipe)
        if measured:
            removal, stack = max(measured, key=lambda pair: (pair[0].n, pair[0].first.launch_ts))
            gain = ranking.compare(stack, removal)
            if gain is not None and gain.low is not None and gain.low > 0:
                verdict = "pulls its weight"
            elif removal.n < 2 or removal.gate != "pass":
                verdict = "not conclusive: the removal needs %s" % " and ".join(
                    part for part, missing in (("a confirmation", removal.n < 2), ("a passing gate",
                                                                                   removal.gate != "pass")) if missing)
            else:
                verdict = "within its interval against %s, not the shipped stack: measure it again" % stack.first.run
            out.append("| %s | %s (%d run(s)) | %s | %s |" % (change, removal.first.run, removal.n, gain_text(gain),
                                                              verdict))
        elif recipe is lead:
            parent = ranking.recipe_of(recipe.first.parent)
            gain = ranking.compare(recipe, parent) if parent is not None else None
            out.append("| %s | its parent %s (%d run(s)) | %s | %s |" % (
                change, parent.first.run if parent else "?", parent.n if parent else 0, gain_text(gain),
                "pulls its weight (the leader test)" if gain is not None and gain.wins else
                "not conclusive against its parent"))
        else:
            out.append("| %s | not measured | n/a | %s |" % (
                change, "not measured: the budget left (%.2f %s) cannot pay for its 2 runs" % (
                    max(0.0, budget.left), budget.unit) if not affordable else
                "not measured: `candidate new --parent %s --leave-out %s`" % (lead.first.run, recipe.first.run)))
    return out + [""]


def _recipe_text(recipe) -> str:
    return "%s: %s tokens/s/GPU (geometric mean of %d run(s))%s" % (
        recipe.first.run, tok(recipe.score) or "n/a", len(recipe.rankable), mark(recipe))


def _caveats(snapshot: Snapshot, shipped: bool) -> list:
    ranking = snapshot.ranking
    out = ["Scores come from %d-iteration benchmark runs of the fixed-shape workload (iterations %d-%d); "
           "throughput over a full training run can differ." % (20, snapshot.settings.score_first_step,
                                                                snapshot.settings.score_last_step)]
    if not ranking.band_established:
        out.append("The noise band is not established: the baseline needs %d more rankable run(s)."
                   % ranking.repeats_needed)
    if ranking.in_flight:
        out.append("Runs still in flight: %s." % ", ".join(run.run for run in ranking.in_flight))
    if snapshot.budget.unknown_reservations:
        out.append("In-flight runs without a GPU-hour estimate: %s." % ", ".join(snapshot.budget.unknown_reservations))
    if model_cost(snapshot) is None:
        out.append("The agent's model cost was not recorded in the ledger.")
    if any(run.simulated for run in ranking.runs):
        out.append("%s runs are not measurements of real hardware." % SIMULATED)
    if any(run.cpu for run in ranking.runs):
        out.append("%s runs measure a real program on a CPU: their gains are this host's, and a GPU's may differ "
                   "in size and sign." % CPU)
    out += ranking.warnings
    return out


def write(snapshot: Snapshot) -> Outcome:
    """Write REPORT.md, and recipe.yaml when every pre-ship check passes."""
    ranking = snapshot.ranking
    lead = ranking.leader
    run = lead.rankable[0] if lead is not None and lead.rankable else None
    context = preship.ShipContext(snapshot=snapshot, recipe=lead, run=run)
    checks = preship.run_all(context)
    shipped = all(ok for _name, ok, _detail in checks)
    payback = payback_hours(snapshot)
    directory = snapshot.campaign.dir
    recipe_path = directory / SHIPPED_RECIPE
    report_path = directory / REPORT
    for target in (recipe_path, str(recipe_path) + ".withdrawn", report_path, directory / project_summary.SUMMARY):
        files.refuse_link(target)  # before writing any: a refusal leaves the three records as they were
    withdrawn = None
    if shipped:
        files.atomic_write(recipe_path, context.recipe_file.read_bytes())
    elif recipe_path.exists():
        withdrawn = str(recipe_path) + ".withdrawn"
        files.replace(recipe_path, withdrawn)
    files.atomic_write(report_path, render(snapshot, checks, shipped, payback).encode("utf-8"))
    files.atomic_write(directory / project_summary.SUMMARY, project_summary.render(snapshot, shipped))
    return Outcome(shipped, checks, str(report_path), str(recipe_path) if shipped else None, withdrawn, payback)


