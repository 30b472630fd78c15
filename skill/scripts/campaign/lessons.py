"""``attune lesson``: append what a tested lever change taught to the campaign's ``levers.md``.

The entry follows the catalog's "Appending lessons" format. Only the lesson sentence is the
agent's: the lever, the runs, the result against the parent with the band, the gate and the
verdict all come from the ledger through the ranking (measurement.md), so a lesson can never carry
a number read by eye. ``levers.md`` is append-only (the harness checks its recorded prefix); the
lesson is also recorded in the ledger as a ``lesson`` row (lever, verdict, result, gain, sentence), which
is what the planner reads.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Optional

from attune.core import files, levers as levers_mod
from attune.core.errors import CheckFailed, InputError

from .ranking import band_text, gain_text

HEADING = "# Campaign lessons"
HURT_CLASSES = ("oom", "crash", "nan_loss", "hang", "nccl_timeout")


@dataclasses.dataclass(frozen=True)
class Lesson:
    """One tested change's lesson: what ``levers.md`` gets (``markdown``) and the ``lesson`` ledger row's fields."""
    run: str
    lever: str
    verdict: str  # kept, rejected or hurt
    result: str  # the result against the parent with the band and the gate, as the entry states it
    gain: Optional[float]  # the estimated gain over the parent (a fraction); None when the run has no score
    text: str  # the agent's sentence
    markdown: str

    def row(self) -> dict:
        return {"run": self.run, "lever": self.lever, "verdict": self.verdict, "result": self.result,
                "gain": self.gain, "text": self.text}


def verdict(ranking, run) -> tuple:
    """``(verdict, result text, gain)`` of a finalized candidate run, from the ranking alone."""
    if not run.finalized:
        raise CheckFailed("run %s is still in flight: finalize it first (`attune finalize %s`)" % (run.run, run.run))
    klass = (run.failure or {}).get("class")
    recipe = ranking.recipe_of(run.run)
    if recipe.score is None:
        if klass in HURT_CLASSES:
            return "hurt", "%s (%s); no tokens/s/GPU" % (run.status, klass), None
        if klass == "config_error":
            return "rejected", "config_error: Megatron refused the configuration", None
        raise CheckFailed("run %s was never measured (%s%s): the change was not tried, so there is no lesson yet. "
                          "Fix: relaunch it (`attune launch --repeat-of %s`) or record a note"
                          % (run.run, run.status, ", %s" % klass if klass else "", run.run))
    parent = ranking.recipe_of(run.parent)
    gain, test = ranking.ahead(recipe, parent)
    if gain is None:
        raise CheckFailed("run %s: its parent %s has no score to compare with" % (run.run, run.parent))
    result = "%s tokens/s/GPU vs parent; a candidate needs %s" % (gain_text(gain), band_text(ranking.band))
    gate = recipe.gate
    if test == "wins" and gate is None:
        raise CheckFailed("run %s beats its parent by the leader test but is not gated: gate it first "
                          "(`attune gate --run %s`)" % (run.run, run.run))
    reasons = sorted({reason for r in recipe.runs for reason in r.gate_reasons})
    result += "; gate %s" % ("not run" if gate is None else "pass" if gate == "pass" else
                             "fail: %s" % (reasons[0] if reasons else "see gate.json"))
    if test == "loses":
        return "hurt", result, gain.estimate
    if test == "wins" and gate == "pass":
        return "kept", result, gain.estimate
    return "rejected", result, gain.estimate


def entry(snapshot, run_id: str, text: str, lever: str = None, today: str = None) -> Lesson:
    """The lesson for ``run_id`` (a candidate of this campaign); its entry in the catalog's format."""
    ranking = snapshot.ranking
    run = ranking.run(run_id)
    if run is None:
        raise InputError("the ledger has no run %s" % run_id)
    if run.purpose != "candidate":
        raise InputError("run %s is a %s run: a lesson is about a candidate's lever change. Fix: give the candidate's "
                         "run id" % (run_id, run.purpose))
    text = " ".join((text or "").split())
    if not text:
        raise InputError("--text is empty: say the setup (model, GPUs, layout) and what to do differently next time")
    path = snapshot.campaign.dir / "levers.md"
    text_now = _read(path)
    catalog = levers_mod.catalog_ids(path, text_now)
    lessons = levers_mod.parse_lessons(text_now)
    try:
        lever = levers_mod.lever_name(lever or run.lever, catalog, path)
    except ValueError as exc:
        raise InputError("--lever: %s" % exc)
    done = [item for item in lessons if run_id in item.get("Runs", "").replace(",", " ").split()]
    if done:
        raise InputError("run %s has a lesson already (%s %s): one lesson per tested change"
                         % (run_id, done[0]["date"], done[0]["lever"]))
    found, result, gain = verdict(ranking, run)
    recipe = ranking.recipe_of(run_id)
    if recipe.simulated:  # a lesson from the simulated workload must never pass for a measurement
        result += "; SIMULATED"
    elif recipe.cpu:  # measured, but on a CPU: a GPU's answer may differ
        result += "; cpu"
    runs = ", ".join("%s (%s)" % (r.run, r.purpose) for r in recipe.runs)
    today = today or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    markdown = ("### %s %s (campaign %s)\n- **Runs**: %s\n- **Result**: %s\n- **Verdict**: %s\n- **Lesson**: %s\n"
                % (today, lever, snapshot.campaign.id, runs, result, found, text))
    return Lesson(run_id, lever, found, result, gain, text, markdown)


def _read(path: Path) -> str:
    return files.read_text(path, "lever catalog", "restore the campaign's levers.md from skill/references/levers.md")


def append(path: Path, text: str) -> None:
    """Append ``text`` under ``# Campaign lessons`` (the heading written once), flushed to disk."""
    before = _read(path)
    prefix = "" if before.endswith("\n") else "\n"
    if not any(line.strip() == HEADING for line in before.splitlines()):
        prefix += "\n%s\n" % HEADING
    files.append(path, (prefix + "\n" + text).encode("utf-8"))
