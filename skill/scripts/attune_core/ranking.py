"""Rank a campaign from its ledger rows alone (measurement.md §4-§6).

Ranking is a pure function of the set of rows: shuffling the rows gives the same result, because
every ordering it uses comes from row content (launch time, then run id), never file position.

* A **recipe** is identified by ``recipe_sha256``; runs with the same recipe are repeats of it.
* A recipe's **score** is the median tokens/s/GPU of its rankable runs.
* The **noise band** is the largest relative range, ``(max - min) / median`` of tokens/s/GPU,
  among recipes with at least two rankable runs, and never below the floor. It is established once
  the baseline has ``baseline_repeats`` rankable runs; until then no candidate can lead. People read
  it as ``±`` half that range with the full range named (``band_text``); the rules below use the full
  range.
* A candidate recipe is **eligible** to lead when its gate passed (no gate of any of its runs
  failed) and it has at least two rankable runs (the run and its paired confirmation).
* The **leader** starts as the baseline; eligible recipes are taken in increasing score, and each
  one whose score beats the current leader's by more than the band becomes the leader.
* The recipes on the leader's lineage between the baseline and the leader are **kept**.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import json
import statistics
from typing import Optional

from .chainlog import ENVELOPE, loads
from .measure import RunScore, score_run


SUBMIT_FAILED = "submit_failed"  # the failure class of a launch whose submission failed (runs.launch)


@dataclasses.dataclass(slots=True)
class RunView:
    run: str
    purpose: str
    recipe: str
    launch_ts: str
    gpus: int
    backend: str
    parent: Optional[str] = None
    change: object = None
    hypothesis: str = ""
    lever: str = ""
    simulated: bool = False
    cpu: bool = False  # a real program on a CPU (the ``cpu`` pod hook): a measurement, but not of a GPU
    expected_gpu_hours: Optional[float] = None
    recipe_path: str = ""
    profiled: bool = False  # launched through the ``profiler`` pod hook (the launch row's ``pod_hooks``)
    projected: Optional[float] = None  # tokens/s/GPU the projection expected (the launch row's ``projection``)
    status: str = "running"  # result status once finalized
    failure: Optional[dict] = None
    score: Optional[RunScore] = None
    gate: Optional[str] = None  # "pass", "fail" or None
    gate_reasons: tuple = ()
    result_ts: str = ""
    result_seq: int = -1  # the ledger row of its result

    @property
    def finalized(self) -> bool:
        return self.status != "running"

    @property
    def never_ran(self) -> bool:
        """Its submission failed: it holds no GPU time, counts against no budget and sets no purpose."""
        return (self.failure or {}).get("class") == SUBMIT_FAILED

    @property
    def tokens(self) -> Optional[float]:
        return self.score.tokens_per_s_per_gpu if self.score and self.score.rankable else None


class RecipeView(object):
    """A recipe and its runs (in launch order), with the values ranking derives from them.

    Built once every run is scored; nothing changes afterwards, so the values are computed once.
    """

    def __init__(self, sha: str, runs: list, is_baseline: bool = False):
        self.sha = sha
        self.runs = runs
        self.is_baseline = is_baseline
        self.rankable = [run for run in runs if run.tokens is not None]
        values = [run.tokens for run in self.rankable]
        self.score = _median(values) if values else None
        self.spread = (max(values) - min(values)) / self.score if len(values) >= 2 else None
        ran = [run for run in runs if not run.never_ran] or runs
        originals = [run for run in ran if run.purpose in ("baseline", "candidate")] or ran
        self.first = originals[0]  # the run that introduced the recipe
        verdicts = {run.gate for run in runs if run.gate}
        self.gate = "fail" if "fail" in verdicts else ("pass" if "pass" in verdicts else None)
        self.simulated = any(run.simulated for run in runs)
        self.cpu = any(run.cpu for run in runs)


@dataclasses.dataclass
class Ranking:
    runs: list
    recipes: dict
    baseline: Optional[RecipeView]
    leader: Optional[RecipeView]
    band: float
    band_basis: str
    band_established: bool
    repeats_needed: int
    stop: Optional[dict]
    warnings: list
    pending: list = dataclasses.field(default_factory=list)
    by_id: dict = dataclasses.field(default_factory=dict)
    noise_floor: float = 0.01
    baseline_repeats: int = 3

    @property
    def band_half_width(self) -> float:
        """Half the band's full range: the ``±`` people read (``band_text``)."""
        return self.band / 2

    @functools.cached_property
    def kept(self) -> frozenset:
        """``recipe_sha256`` of every recipe the leader builds on: its lineage without the baseline and itself."""
        return frozenset(recipe.sha for recipe in self.lineage(self.leader)[:-1] if not recipe.is_baseline)

    def run(self, run_id: str) -> Optional[RunView]:
        return self.by_id.get(run_id)

    def recipe_of(self, run_id: Optional[str]) -> Optional[RecipeView]:
        run = self.run(run_id) if run_id else None
        return self.recipes.get(run.recipe) if run else None

    @property
    def in_flight(self) -> list:
        return [run for run in self.runs if not run.finalized]

    def relative(self, value: Optional[float], reference: Optional[RecipeView]) -> Optional[float]:
        ref = reference.score if reference else None
        if value is None or not ref:
            return None
        return (value - ref) / ref

    def lineage(self, recipe: Optional[RecipeView]) -> list:
        """The recipes from the baseline to ``recipe`` through each first run's parent."""
        chain = []
        seen = set()
        while recipe is not None and recipe.sha not in seen:
            seen.add(recipe.sha)
            chain.append(recipe)
            if recipe.is_baseline:
                break
            recipe = self.recipe_of(recipe.first.parent)
        return list(reversed(chain))

    def run_status(self, run: RunView) -> str:
        """One phrase for the leaderboard's status column."""
        if not run.finalized:
            return "running"
        if run.status != "finished":
            return run.score.why if run.score else "run %s" % run.status
        if run.score is None or not run.score.rankable:
            return "not rankable: %s" % (run.score.why if run.score else "no score")
        recipe = self.recipes[run.recipe]
        if recipe is self.leader:
            return "leader" if not recipe.is_baseline else "baseline (leader)"
        if recipe.is_baseline:
            return "baseline"
        if recipe.sha in self.kept:
            return "kept (the leader builds on it)"
        if recipe.gate == "fail":
            return "gate failed"
        if not self.band_established:
            return "scored; band not yet established"
        lead = self.leader.score if self.leader else None
        if lead and recipe.score > lead * (1 + self.band):
            missing = []
            if len(recipe.rankable) < 2:
                missing.append("confirmation")
            if recipe.gate is None:
                missing.append("gate")
            return "beats leader; needs %s" % " and ".join(missing)
        if lead and recipe.score >= lead * (1 - self.band):
            return "within band of leader"
        return "slower than leader"


def band_text(full_range: float) -> str:
    """The band as every page and screen writes it: ``±`` half its range, then the full range by name
    (``±1.48% (full range 2.96%)``). A change counts only when it exceeds the full range."""
    return "±%.2f%% (full range %.2f%%)" % (full_range * 50, full_range * 100)


def _median(values: list) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.median(values)


def _content_key(row: dict):
    """Order rows by time, then content: never by their position in the file."""
    payload = {key: value for key, value in row.items() if key not in ENVELOPE or key == "ts"}
    return (row["ts"], json.dumps(payload, sort_keys=True))


def _sort_key(run: RunView):
    return (run.launch_ts, run.run)


def score_results(rows, window=(5, 19)) -> dict:
    """Score every result row: ``{seq: RunScore}`` (what ``build`` needs from the metrics)."""
    return {row["seq"]: score_run(row["status"], row.get("metrics"), window, row.get("failure"))
            for row in rows if row.get("kind") == "result"}


def score_ledger_bytes(data: bytes, window=(5, 19), first_seq: int = 0) -> dict:
    """``score_results`` straight from the ledger file's bytes (run in a child process while the
    parent verifies the same bytes). Only rows this module's writer encoded (``"kind":"result"``)
    are scored here; ``build`` scores any other itself."""
    out = {}
    for index, line in enumerate(data.split(b"\n")[:-1], first_seq):
        if b'"kind":"result"' in line:
            try:
                row = loads(line)
            except ValueError:
                continue
            if type(row) is dict and row.get("kind") == "result" and row.get("seq") == index:
                out[index] = score_run(row.get("status"), row.get("metrics"), window, row.get("failure"))
    return out


class MergeConflict(Exception):
    """A row that only the whole set of rows can place (a second launch or result of a run, or a row for
    a run with no launch row): an incremental merge gives up and the caller ranks from every row."""


def merge(rows, window=(5, 19), scores=None, runs=None) -> tuple:
    """Fold the ``launch``, ``result`` and ``gate`` rows into one ``RunView`` per run.

    Returns ``(runs, stop_rows, warnings)``. With ``runs`` (the views of rows merged before, as the view
    cache keeps them) the rows are merged into those views, and any row whose placement depends on rows
    no longer at hand raises ``MergeConflict``; the result is then exactly what merging every row at once
    gives, because a run's views take each field from its one launch, its one result and the union of its
    gates."""
    incremental = runs is not None
    runs = runs if incremental else {}
    warnings = []
    by_kind = {"launch": [], "result": [], "gate": [], "stop": []}
    for row in rows:
        bucket = by_kind.get(row["kind"])
        if bucket is not None:
            bucket.append(row)
    launches = {}
    for row in by_kind["launch"]:
        run_id = row["run"]
        if run_id in launches or (incremental and run_id in runs):
            if incremental:
                raise MergeConflict("run %s is launched more than once" % run_id)
            warnings.append("run %s is launched more than once; the earliest launch is used" % run_id)
            if _content_key(row) >= _content_key(launches[run_id]):
                continue
        launches[run_id] = row
    for run_id, row in launches.items():
        runs[run_id] = RunView(
            run=run_id, purpose=row["purpose"], recipe=row["recipe_sha256"], launch_ts=row["ts"],
            gpus=row["gpus"], backend=row["backend"], parent=row.get("parent"), change=row.get("change"),
            hypothesis=row.get("hypothesis", ""), lever=row.get("lever", ""),
            simulated=bool(row.get("simulated", False)), cpu=bool(row.get("cpu", False)),
            expected_gpu_hours=row.get("expected_gpu_hours"),
            recipe_path=row.get("recipe_path", ""),
            profiled=any(hook.get("name") == "profiler" for hook in row.get("pod_hooks") or ()),
            projected=(row.get("projection") or {}).get("tokens_per_s_per_gpu"))
    results = {}
    for row in by_kind["result"]:
        run_id = row["run"]
        previous = results.get(run_id)
        if incremental and (previous is not None or run_id not in runs or runs[run_id].finalized):
            raise MergeConflict("run %s has a result the new rows alone cannot place" % run_id)
        if previous is not None:
            warnings.append("run %s has more than one result; the latest is used" % run_id)
            if _content_key(row) <= _content_key(previous):
                continue
        results[run_id] = row
    for run_id, row in results.items():
        run = runs.get(run_id)
        if run is None:
            warnings.append("result for run %s, which has no launch row; ignored" % run_id)
            continue
        run.status = row["status"]
        run.failure = row.get("failure")
        run.result_ts = row["ts"]
        run.result_seq = row["seq"]
        run.simulated = run.simulated or bool(row.get("simulated", False))
        run.cpu = run.cpu or bool(row.get("cpu", False))
        score = scores.get(row["seq"]) if scores is not None else None
        run.score = score if score is not None else score_run(row["status"], row.get("metrics"), window,
                                                                 row.get("failure"))
        if run.purpose == "profile" and run.score.rankable:  # the profiler slows the steps it records
            run.score = RunScore(False, "profile run: not scored (the profiler slows the steps it records)")
        elif run.profiled and run.score.rankable:  # whatever its purpose
            run.score = RunScore(False, "launched through the profiler pod hook: not scored (the profiler slows "
                                        "the steps it records)")
    gates = {}
    for row in by_kind["gate"]:
        gates.setdefault(row["run"], []).append(row)
    for run_id, gate_rows in gates.items():
        run = runs.get(run_id)
        if run is None:
            if incremental:
                raise MergeConflict("gate for run %s, which has no launch row" % run_id)
            warnings.append("gate for run %s, which has no launch row; ignored" % run_id)
            continue
        verdicts = {row["verdict"] for row in gate_rows}
        if run.gate:
            verdicts.add(run.gate)
        run.gate = "fail" if "fail" in verdicts else "pass"
        run.gate_reasons = tuple(sorted(set(run.gate_reasons).union(
            reason for row in gate_rows for reason in row.get("reasons", []))))
    return runs, by_kind["stop"], warnings


def build(rows, window=(5, 19), noise_floor=0.01, baseline_repeats=3, scores=None) -> Ranking:
    """Rank the campaign described by ``rows`` (ledger rows, in any order).

    ``scores`` is ``score_results(rows, window)`` when the caller computed it already (in
    parallel); it must come from these very rows."""
    runs, stops, warnings = merge(rows, window, scores)
    return assemble(runs, stops, warnings, noise_floor, baseline_repeats)


def assemble(runs: dict, stops: list, warnings: list, noise_floor=0.01, baseline_repeats=3) -> Ranking:
    """Rank merged runs (``merge``): recipes, noise band, baseline and leader."""
    warnings = list(warnings)
    stop = max(stops, key=_content_key) if stops else None
    ordered = sorted(runs.values(), key=_sort_key)
    grouped = {}
    for run in ordered:
        grouped.setdefault(run.recipe, []).append(run)
    recipes = {sha: RecipeView(sha, group) for sha, group in grouped.items()}
    baseline_shas = sorted({run.recipe for run in ordered if run.purpose == "baseline"})
    baseline = None
    if len(baseline_shas) > 1:
        warnings.append("baseline runs have %d different recipes; the earliest is the baseline" % len(baseline_shas))
    if baseline_shas:
        first = min((run for run in ordered if run.purpose == "baseline"), key=lambda run: (run.never_ran,
                                                                                             _sort_key(run)))
        baseline = recipes[first.recipe]
        baseline.is_baseline = True

    band, basis = noise_floor, "the %.2f%% floor" % (noise_floor * 100)
    for recipe in sorted(recipes.values(), key=lambda r: r.sha):
        spread = recipe.spread
        if spread is not None and spread > band:
            band = spread
            basis = "%d runs of %s (%s)" % (len(recipe.rankable), recipe.first.run,
                                            "baseline" if recipe.is_baseline else "candidate")
    have = len(baseline.rankable) if baseline else 0
    established = baseline is not None and have >= baseline_repeats
    leader = baseline if baseline is not None and baseline.score is not None else None
    if established and leader is not None:
        eligible = [r for r in recipes.values()
                    if not r.is_baseline and r.gate == "pass" and len(r.rankable) >= 2]
        for recipe in sorted(eligible, key=lambda r: (r.score, r.first.launch_ts, r.sha)):
            if recipe.score > leader.score * (1 + band):
                leader = recipe
    ranking = Ranking(runs=ordered, recipes=recipes, baseline=baseline, leader=leader, band=band,
                      band_basis=basis, band_established=established,
                      repeats_needed=max(0, baseline_repeats - have), stop=stop, warnings=warnings,
                      by_id=runs, noise_floor=noise_floor, baseline_repeats=baseline_repeats)
    ranking.pending = _pending(ranking)
    return ranking


def leader_history(ranking: Ranking) -> list:
    """The leader after each run in launch order: ``[(score or None, band, established), ...]``, one per run of
    ``ranking.runs``, each what ranking the runs launched up to it (with their results and gates) gives. The
    last entry is ``ranking.leader``'s score and ``ranking.band``. Built in one pass: the leader rule's walk
    jumps with ``bisect`` from a leader to the first eligible score above it by more than the band."""
    base = ranking.baseline.sha if ranking.baseline is not None else None
    floor, repeats = ranking.noise_floor, ranking.baseline_repeats
    values, spreads, verdicts = {}, {}, {}
    widest = None  # the recipe whose spread is the band (when above the floor)
    eligible = []  # sorted (score, first launch, sha) of the eligible recipes so far
    scores = []  # their scores, for bisect
    entries = {}  # sha -> its entry in eligible
    band, established, base_score, leader = floor, False, None, None
    entry_now = (leader, band, established)
    out = []
    for run in ranking.runs:
        tokens, gate = run.tokens, run.gate
        if tokens is None and not gate:  # nothing the leader depends on changed
            out.append(entry_now)
            continue
        sha = run.recipe
        moved = False  # whether anything the leader rule reads changed
        if gate:
            verdicts.setdefault(sha, set()).add(gate)
        own = values.setdefault(sha, [])
        if tokens is not None:
            own.append(tokens)
            if len(own) >= 2:
                spreads[sha] = spread = (max(own) - min(own)) / _median(own)
                if sha == widest:  # the widest may have narrowed: look again
                    widest = max(spreads, key=spreads.get)
                elif widest is None or spread > spreads[widest]:
                    widest = sha
                moved = band != max(floor, spreads[widest])
                band = max(floor, spreads[widest])
        if sha == base:
            base_score = _median(own) if own else None
            established = len(own) >= repeats
            moved = True
        else:
            entry = entries.pop(sha, None)
            if entry is not None:
                index = bisect.bisect_left(eligible, entry)
                del eligible[index], scores[index]
                moved = True
            gates = verdicts.get(sha, ())
            if len(own) >= 2 and "pass" in gates and "fail" not in gates:
                entry = entries[sha] = (_median(own), ranking.recipes[sha].first.launch_ts, sha)
                index = bisect.bisect_left(eligible, entry)
                eligible.insert(index, entry)
                scores.insert(index, entry[0])
                moved = True
        if not moved:
            out.append(entry_now)
            continue
        leader = base_score
        if established and leader is not None:
            while True:
                index = bisect.bisect_right(scores, leader * (1 + band))
                if index == len(scores):
                    break
                leader = scores[index]
        entry_now = (leader, band, established)
        out.append(entry_now)
    return out


NOISY_BAND = 0.05  # above this, measurement is the bottleneck: a typical lever moves throughput by a few percent


def _pending(ranking: Ranking) -> list:
    """What the campaign needs next, as short imperative lines (for ``attune status``)."""
    todo = []
    for run in ranking.in_flight:
        todo.append("finalize run %s (launched %s)" % (run.run, run.launch_ts))
    if ranking.baseline is None:
        todo.append("launch the baseline")
        return todo
    if ranking.repeats_needed:
        todo.append("repeat the baseline: %d more rankable run(s) needed for the noise band" % ranking.repeats_needed)
    lead = ranking.leader.score if ranking.leader else None
    if not ranking.band_established or not lead:
        return todo
    if ranking.band > NOISY_BAND:
        todo.append("the noise band is %s, from %s: find why repeats of one recipe differ this much (contention, "
                    "stragglers, placement, a step too short to time) before testing candidates: no lever of a few "
                    "percent can clear it" % (band_text(ranking.band), ranking.band_basis))
    for recipe in sorted(ranking.recipes.values(), key=lambda r: (r.first.launch_ts, r.sha)):
        if recipe.is_baseline or recipe is ranking.leader or recipe.gate == "fail" or recipe.score is None:
            continue
        if recipe.score <= lead * (1 + ranking.band):
            continue
        first = recipe.first.run
        busy = any(not run.finalized for run in recipe.runs)
        if len(recipe.rankable) < 2 and not busy:
            todo.append("confirm %s: it beats the leader by %+.2f%%; relaunch the same recipe with purpose confirm"
                        % (first, (recipe.score / lead - 1) * 100))
        if recipe.gate is None:
            todo.append("gate %s: a candidate needs a passing correctness gate to lead" % first)
    return todo
