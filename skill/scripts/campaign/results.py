"""RESULTS.md: the leaderboard, regenerated from the ledger and the GPU-hour log alone.

The page is deterministic for a given set of rows: no clock, no host, nothing but the records.
The throughput-over-runs chart (``chart.py``) is a PNG drawn with matplotlib when it is installed
(the ``plot`` extra); without it the page says so and renders all the same. Tables give each hypothesis one
line (``one_line``); its full text is in the run's ``candidate.json``.
"""

from __future__ import annotations

import json
import statistics
from typing import Optional

from .budget import BudgetState
from .ranking import Ranking, RunView, band_text, gain_text

SIMULATED = "SIMULATED"
CPU = "cpu"  # a run through the cpu pod hook: a real program measured on a CPU, not on a GPU
CPU_NOTE = ("a real Megatron-LM program run on a CPU through the `cpu` start-up layer: its throughput is measured, "
            "but on a CPU, not a GPU, and its memory and TFLOP/s figures are unavailable")


def mark(item) -> str:
    """`` SIMULATED`` or `` cpu`` for a run or recipe that is not a GPU measurement, else ``""``."""
    if getattr(item, "simulated", False):
        return " " + SIMULATED
    if getattr(item, "cpu", False):
        return " " + CPU
    return ""


def cpu_lines(ranking: Ranking) -> list:
    """The note that opens RESULTS.md and REPORT.md when any run ran on a CPU."""
    cpu = [run for run in ranking.runs if run.cpu and not run.simulated]
    if not cpu:
        return []
    return ["**%s**: %d of %d runs are %s. They are marked %s below." % (CPU, len(cpu), len(ranking.runs), CPU_NOTE,
                                                                       CPU), ""]
HYPOTHESIS_CHARS = 80  # a hypothesis in a table: one line of about this many characters


def pct(value: Optional[float]) -> str:
    return "" if value is None else "%+.2f%%" % (value * 100)


def tok(value: Optional[float]) -> str:
    return "" if value is None else "%.1f" % value


def cell(text) -> str:
    """Make text safe for one Markdown table cell."""
    text = str(text)
    if "|" in text or "\\" in text or "\n" in text or "\r" in text:  # rare: test first, it is much cheaper
        text = text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    return text.strip()


def one_line(text, limit: int = HYPOTHESIS_CHARS) -> str:
    """``text`` on one line of at most ``limit`` characters, cut at a word with ``…`` when longer."""
    text = " ".join(str(text or "").split())
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def describe_change(change) -> str:
    """A change against the parent in one line, whatever shape the launch recorded."""
    if change is None or change == [] or change == {}:
        return ""
    if isinstance(change, str):
        return change
    if isinstance(change, list):
        return "; ".join(describe_change(item) for item in change)
    if isinstance(change, dict):
        name = change.get("arg") or change.get("name") or change.get("key") or change.get("env")
        if "op" in change and name:
            value = change.get("value")
            text = "%s %s" % (change["op"], name)
            return text if value is None or value is True else "%s=%s" % (text, value)
        return ", ".join("%s=%s" % (key, json.dumps(value) if not isinstance(value, str) else value)
                         for key, value in sorted(change.items()))
    return json.dumps(change, sort_keys=True)


def _money(value: Optional[float]) -> str:
    return "" if value is None else "$%.2f" % value


def _num(value: float) -> str:
    return "%.3f" % value


def budget_lines(budget: BudgetState) -> list:
    lines = ["| Budget | %s %s (%s) |" % (_num(budget.limit), budget.unit,
                                          "AUTOTUNE_GPUH_BUDGET" if budget.kind == "gpu_hours" else "AUTOTUNE_BUDGET"),
             "| Spent | %s %s |" % (_num(budget.spent), budget.unit)]
    if budget.kind == "runs":
        lines.append("| GPU-hours spent | %s |" % _num(budget.gpu_hours_spent))
    lines.append("| Reserved by runs in flight | %s %s (%d run(s)) |" % (_num(budget.reserved), budget.unit,
                                                                     len(budget.in_flight)))
    lines.append("| Left | %s %s |" % (_num(budget.left), budget.unit))
    if budget.price_usd is None:
        lines.append("| Cost | not computed (ATTUNE_GPU_HOUR_USD is not set) |")
    else:
        left = _money(budget.cost_left_usd) if budget.cost_left_usd is not None else "n/a for a run budget"
        lines.append("| Cost | %s spent, %s left at $%.2f per GPU-hour |" % (_money(budget.cost_spent_usd), left,
                                                                          budget.price_usd))
    return lines


def render(ranking: Ranking, budget: BudgetState, campaign_id: str, ledger_rows: int,
           last_ts: str, chart_file: Optional[str], chart_note: str = "", campaign_note: str = "") -> str:
    """The text of RESULTS.md."""
    out = ["# Results: campaign %s" % campaign_id, "",
           "Regenerated by `attune rank` from ledger.jsonl (%d rows, last at %s) and gpu_hours.jsonl. "
           "Do not edit: every rank rewrites it." % (ledger_rows, last_ts or "n/a"), ""]
    if campaign_note:
        out += ["Campaign note: %s" % campaign_note, ""]
    simulated = [run.run for run in ranking.runs if run.simulated]
    if simulated:
        out += ["**%s**: %d of %d runs ran on the simulated workload; their throughput is a model's output, "
                "not a measurement of real hardware. They are marked %s below." % (
                    SIMULATED, len(simulated), len(ranking.runs), SIMULATED), ""]
    out += cpu_lines(ranking)
    base, lead = ranking.baseline, ranking.leader
    out += ["| | |", "|---|---|"]
    if base is None:
        out.append("| Baseline | not launched yet |")
    else:
        out.append("| Baseline | %s: %s tokens/s/GPU (geometric mean of %d rankable run(s))%s |" % (
            base.first.run, tok(base.score) or "no rankable run", len(base.rankable), _sim(base)))
    if lead is None:
        out.append("| Leader | none yet |")
    else:
        out.append("| Leader | %s: %s tokens/s/GPU, %s vs baseline (%d rankable run(s), gate %s)%s |" % (
            lead.first.run, tok(lead.score), gain_text(ranking.compare(lead, base)),
            len(lead.rankable), "n/a (baseline)" if lead.is_baseline else lead.gate, _sim(lead)))
    band = "a candidate needs %s (more runs need less); %s" % (band_text(ranking.band), ranking.band_basis)
    if not ranking.band_established:
        band += "; not yet established: %d more baseline run(s) needed" % ranking.repeats_needed
    out.append("| Leader test | %s |" % band)
    finalized = sum(1 for run in ranking.runs if run.finalized)
    out.append("| Runs | %d launched, %d finalized, %d in flight |" % (len(ranking.runs), finalized,
                                                                       len(ranking.in_flight)))
    out += budget_lines(budget)
    if ranking.stop:
        out.append("| Stop | recorded %s: %s (evidence: %s) |" % (
            ranking.stop["ts"], cell(ranking.stop["reason"]), ", ".join(ranking.stop["evidence"])))
    out += ["", "## Runs", ""]
    if any(run.hypothesis for run in ranking.runs):
        out += ["Each hypothesis is cut to one line; its full text is in `runs/<run>/candidate.json` (and the "
                "run's launch row in ledger.jsonl).", ""]
    out += ["| run | purpose | parent | change | hypothesis | tokens/s/GPU | vs baseline | vs parent | band | gate | status |",
            "|---|---|---|---|---|---:|---:|---:|---|---|---|"]
    for run in ranking.runs:
        out.append(_run_row(ranking, run))
    out += projection_lines(ranking)
    out += ["", "## Throughput over runs", ""]
    if chart_file:
        out.append("![tokens/s/GPU of every run in launch order by purpose, failed runs with their class, the best "
                   "so far and the noise band around it](%s)" % chart_file)
    else:
        out.append("Chart not drawn: %s" % (chart_note or "disabled"))
    if ranking.warnings:
        out += ["", "## Warnings", ""] + ["- %s" % cell(text) for text in ranking.warnings]
    return "\n".join(out) + "\n"


def projection_lines(ranking: Ranking) -> list:
    """Projected against measured tokens/s/GPU for the runs the projection scored before they ran."""
    rows = [run for run in ranking.runs if run.projected and run.tokens is not None]
    if not rows:
        return []
    errors = sorted(abs(run.tokens / run.projected - 1) for run in rows)
    out = ["", "## Projection against measurement", "",
           "Median absolute error %s over %d run(s) (`skill/scripts/projection/README.md`)."
           % (pct(statistics.median(errors)).lstrip("+"), len(rows))
           + (" SIMULATED runs print the projection plus the simulator's noise, so their error says nothing about "
              "the projection's accuracy." if any(run.simulated for run in rows) else ""), "",
           "| run | projected tokens/s/GPU | measured | error |", "|---|---:|---:|---:|"]
    out += ["| %s%s | %s | %s | %s |" % (run.run, mark(run), tok(run.projected),
                                         tok(run.tokens), pct(run.tokens / run.projected - 1)) for run in rows]
    return out


def _sim(recipe) -> str:
    return mark(recipe)


def _run_row(ranking: Ranking, run: RunView) -> str:
    value = run.tokens
    parent_recipe = ranking.recipe_of(run.parent)
    if run.purpose in ("repeat", "confirm") and parent_recipe is None:
        parent_recipe = ranking.recipes.get(run.recipe)
    vs_parent = ranking.relative(value, parent_recipe) if parent_recipe and parent_recipe.sha != run.recipe else None
    band = ""
    if vs_parent is not None and ranking.band_established:
        band = "clears" if ranking.ahead(ranking.recipes[run.recipe], parent_recipe)[1] in ("wins", "loses") else "within"
    throughput = tok(value)
    if throughput:
        throughput += mark(run)
    # Purposes and gate verdicts are enums and the numbers are formatted here: the rest is escaped.
    return "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        cell(run.run), run.purpose, cell(run.parent or ""), cell(describe_change(run.change)),
        cell(one_line(run.hypothesis)),
        throughput, pct(ranking.relative(value, ranking.baseline)), pct(vs_parent), band, run.gate or "",
        cell(ranking.run_status(run)))
