"""Rank a campaign from its ledger rows alone (measurement.md §4-§6).

Ranking is a pure function of the set of rows: shuffling the rows gives the same result, because
every ordering it uses comes from row content (launch time, then run id), never file position.

* A **recipe** is identified by ``recipe_sha256``; runs with the same recipe are repeats of it.
* A run is the unit of measurement: its value is ``x = ln(tokens/s/GPU)`` (the steps inside a run are not
  independent). A recipe's **score** is the geometric mean of its rankable runs, ``exp(mean x)``.
* The **leader test** (``Ranking.compare``): candidate C beats reference R when the difference of the mean
  ``x``, ``d``, exceeds both ``ln(1 + floor)`` and ``t(1 - level, df) * sd * sqrt(1/n_C + 1/n_R)``, with ``sd``
  pooled over the runs of the baseline, R and C only (one noisy candidate never widens another's test) and
  ``df`` their runs minus one each. The level is the campaign's false-win rate split over the candidates it
  tested (at least ``MIN_CANDIDATES``) and, within a candidate, over its looks (its 2nd, 3rd, ... run) as
  ``6 / (pi^2 k^2)``: whatever the number of repeats, a no-op leads with probability at most the rate.
* The test is established once the baseline has ``baseline_repeats`` rankable runs; until then no
  candidate can lead. ``band`` is what a 2-run candidate needs over the leader now (for people and the
  planner); every gain is shown with its 95% interval (``gain_text``).
* A candidate recipe is **eligible** to lead when its gate passed (no gate of any of its runs
  failed) and it has at least two rankable runs (the run and its paired confirmation).
* The **leader** starts as the baseline; eligible recipes are taken in increasing score, and each
  one that passes the leader test against the current leader becomes the leader.
* The recipes on the leader's lineage between the baseline and the leader are **kept**.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from typing import Optional

from attune.core import state
from attune.core.stats import t_quantile

from .leader_test import INTERVAL, MIN_CANDIDATES, as_gain, least_share, look_level, moments, need_log, pooled
from .runview import RunView, content_key, merge, sort_key

MAX_RUNS = 6  # a close candidate is repeated up to this many runs (``pending``); beyond, the noise is the issue
NOISY_SD = 0.025  # a run-to-run sd above this (a range of about 5% over 3 runs): measurement is the bottleneck


class RecipeView(object):
    """A recipe and its runs (in launch order), with the values ranking derives from them.

    Built once every run is scored; nothing changes afterwards, so the values are computed once.
    """

    def __init__(self, sha: str, runs: list, is_baseline: bool = False):
        self.sha = sha
        self.runs = runs
        self.is_baseline = is_baseline
        self.rankable = [run for run in runs if run.tokens is not None]
        self.n, self.mean_log, self.ss = moments([run.tokens for run in self.rankable])
        self.score = math.exp(self.mean_log) if self.n else None
        ran = [run for run in runs if not run.never_ran] or runs
        originals = [run for run in ran if run.purpose in ("baseline", "candidate")] or ran
        self.first = originals[0]  # the run that introduced the recipe
        # a whole-loop run's train-only replays (purpose replay): the gate's evidence, not a recipe tried
        self.replay = all(run.purpose == "replay" for run in runs)
        verdicts = {run.gate for run in runs if run.gate}
        self.gate = "fail" if "fail" in verdicts else ("pass" if "pass" in verdicts else None)
        self.simulated = any(run.simulated for run in runs)
        self.cpu = any(run.cpu for run in runs)


@dataclasses.dataclass(frozen=True)
class Gain:
    """One recipe against another: the estimate, its 95% interval and the leader test's verdict."""
    estimate: float  # exp(d) - 1: the ratio of geometric means, minus one
    low: Optional[float]  # the 95% interval, None without a repeat to measure noise
    high: Optional[float]
    runs: int
    reference_runs: int
    sd: Optional[float]  # pooled sd of ln(tokens/s/GPU) (baseline, reference and recipe)
    df: int
    need: Optional[float]  # the least gain that passes the test at this look (None below 2 runs or without df)
    level: Optional[float]  # the look's one-sided level
    wins: bool  # passes the leader test (the recipe beats the reference)
    loses: bool  # the reference passes it against the recipe, at the same level

    @property
    def interval_text(self) -> str:
        return gain_text(self)


@dataclasses.dataclass
class Ranking:
    runs: list
    recipes: dict
    baseline: Optional[RecipeView]
    leader: Optional[RecipeView]
    band: float  # the least gain over the leader a 2-run candidate needs now (never below the floor)
    band_basis: str
    band_established: bool
    repeats_needed: int
    stop: Optional[dict]
    warnings: list
    pending: list = dataclasses.field(default_factory=list)  # what is needed next, as lines (``actions``' texts)
    actions: list = dataclasses.field(default_factory=list)  # the same as fields: action, run, text (``_pending``)
    by_id: dict = dataclasses.field(default_factory=dict)
    noise_floor: float = 0.01
    baseline_repeats: int = 3
    false_win_rate: float = 0.05
    tested: int = 0  # candidate recipes with a rankable run and no failed gate: what the rate is split over
    noise_sd: Optional[float] = None  # pooled over the baseline and the leader
    noise_df: int = 0
    dropped: tuple = ()  # (kept recipe sha, removal recipe sha): changes the leave-one-out left out of the leader
    _gains: dict = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def share(self) -> float:
        """Each candidate's part of the campaign's false-win rate."""
        return self.false_win_rate / max(self.tested, MIN_CANDIDATES)

    def compare(self, recipe: RecipeView, reference: Optional[RecipeView] = None) -> Optional[Gain]:
        """``recipe`` against ``reference`` (default the baseline): None when either has no rankable run."""
        reference = reference if reference is not None else self.baseline
        if recipe is None or reference is None or not recipe.n or not reference.n:
            return None
        key = (recipe.sha, reference.sha)
        if key not in self._gains:  # RESULTS.md asks of most recipes twice or more
            self._gains[key] = self._compare(recipe, reference)
        return self._gains[key]

    def _compare(self, recipe: RecipeView, reference: RecipeView) -> Gain:
        d = recipe.mean_log - reference.mean_log
        sd, df = pooled((self.baseline, reference, recipe))
        low = high = need = level = None
        wins = loses = False
        if sd is not None:
            half = t_quantile(0.5 + INTERVAL / 2, df) * sd * math.sqrt(1.0 / recipe.n + 1.0 / reference.n)
            low, high = math.expm1(d - half), math.expm1(d + half)
            if recipe.n >= 2:
                level = look_level(self.share, recipe.n)
                need = as_gain(need_log(self.share, recipe.n, reference.n, sd, df, self.noise_floor),
                               self.noise_floor)
                wins = self.share > least_share(d, recipe.n, reference.n, sd, df, self.noise_floor)
                loses = self.share > least_share(-d, recipe.n, reference.n, sd, df, self.noise_floor)
        return Gain(math.expm1(d), low, high, recipe.n, reference.n, sd, df, need, level, wins, loses)

    @property
    def band_half_width(self) -> float:
        """Kept for readers of ``rank --json``: half the least gain a 2-run candidate needs."""
        return self.band / 2

    @functools.cached_property
    def kept(self) -> frozenset:
        """``recipe_sha256`` of every recipe the leader builds on: its lineage without the baseline and itself."""
        left_out = {kept for kept, _removal in self.dropped}
        return frozenset(recipe.sha for recipe in self.lineage(self.leader)[:-1]
                         if not recipe.is_baseline and recipe.sha not in left_out)

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
        return _lineage(recipe, self.recipes, self.by_id)

    def leave_outs(self, recipe: RecipeView) -> list:
        """The leave-one-out candidates measured of ``recipe``'s kept change: ``[(removal, stack), ...]``, each
        a recipe whose first run says ``leave_out`` of ``recipe``'s first run, with the stack it was removed
        from (its parent's recipe, on the leader's lineage)."""
        on = {r.sha for r in self.lineage(self.leader)}
        out = []
        for removal in self.recipes.values():
            kept = self.recipe_of(removal.first.leave_out) if removal.first.leave_out else None
            stack = self.recipe_of(removal.first.parent)
            if kept is recipe and stack is not None and stack.sha in on:
                out.append((removal, stack))
        return sorted(out, key=lambda pair: (pair[0].first.launch_ts, pair[0].sha))

    def ahead(self, recipe: RecipeView, reference: Optional[RecipeView]) -> tuple:
        """``(gain, verdict)`` of ``recipe`` against ``reference`` in words: ``wins``, ``loses``, ``ahead`` (above
        the floor, not yet conclusive), ``behind`` (below minus the floor, not conclusive) or ``level``. A recipe
        of one run is tested as if confirmed at the same mean: what a 2-run candidate needs (``band``)."""
        gain = self.compare(recipe, reference)
        if gain is None:
            return None, "level"
        if gain.need is None:  # one run: no look yet
            if gain.estimate > self.band:
                return gain, "wins"
            if gain.estimate < -self.band:
                return gain, "loses"
        elif gain.wins or gain.loses:
            return gain, "wins" if gain.wins else "loses"
        if gain.estimate > self.noise_floor:
            return gain, "ahead"
        return gain, "behind" if gain.estimate < -self.noise_floor else "level"

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
        for kept, removal in self.dropped:
            if recipe.sha == kept:
                return "left out: the stack is as fast without it (leave-one-out %s)" % self.recipes[removal].first.run
        if recipe.gate == "fail":
            return "gate failed"
        if not self.band_established:
            return "scored; noise not yet measured"
        _gain, verdict = self.ahead(recipe, self.leader)
        if verdict == "wins":
            missing = []
            if len(recipe.rankable) < 2:
                missing.append("confirmation")
            if recipe.gate is None:
                missing.append("gate")
            return "beats leader; needs %s" % " and ".join(missing) if missing else "beats leader"
        if verdict == "ahead":
            return "ahead of leader, not conclusive"
        if verdict == "loses":
            return "slower than leader"
        return "within noise of leader"


def pct(value: Optional[float]) -> str:
    return "%+.2f%%" % (value * 100) if value is not None else "n/a"


def gain_text(gain: Optional[Gain]) -> str:
    """A gain as every page and screen writes it: ``+4.21% (95% CI +1.10% to +7.40%; 3 vs 2 runs)``."""
    if gain is None:
        return "n/a"
    if gain.low is None:
        return "%s (no interval: no repeat yet; %d vs %d runs)" % (pct(gain.estimate), gain.runs, gain.reference_runs)
    return "%s (95%% CI %s to %s; %d vs %d runs)" % (pct(gain.estimate), pct(gain.low), pct(gain.high), gain.runs,
                                                     gain.reference_runs)


def gain_dict(gain: Optional[Gain]) -> Optional[dict]:
    """A gain for JSON (``status --json``, ``rank --json``, ``past_tuning_project.json``): fractions."""
    if gain is None:
        return None
    return {"estimate": gain.estimate, "low": gain.low, "high": gain.high, "confidence": INTERVAL,
            "runs": gain.runs, "reference_runs": gain.reference_runs, "passes_leader_test": gain.wins,
            "text": gain_text(gain)}


def band_text(need: float) -> str:
    """What a candidate must beat, as every page and screen writes it: ``+3.92% over the leader with 2 runs``."""
    return "%s over the leader with 2 runs" % pct(need)


def _lineage(recipe, recipes: dict, runs: dict) -> list:
    chain = []
    seen = set()
    while recipe is not None and recipe.sha not in seen:
        seen.add(recipe.sha)
        chain.append(recipe)
        if recipe.is_baseline:
            break
        parent = runs.get(recipe.first.parent) if recipe.first.parent else None
        recipe = recipes.get(parent.recipe) if parent is not None else None
    return list(reversed(chain))


def _removals(recipes: dict, runs: dict) -> dict:
    """``{stack sha: [(removal sha, kept sha), ...]}``: every leave-one-out candidate by the recipe it was
    removed from (its parent's) and the recipe whose change it removes (its ``leave_out`` run's)."""
    out = {}
    for recipe in recipes.values():
        first = recipe.first
        kept, parent = runs.get(first.leave_out) if first.leave_out else None, runs.get(first.parent or "")
        if kept is not None and parent is not None and not recipe.is_baseline:
            out.setdefault(parent.recipe, []).append((recipe.sha, kept.recipe))
    return out


def _interval_low(base, stack, removal) -> Optional[float]:
    """The low end of the 95% interval of ``stack``'s log gain over ``removal``; None without a repeat."""
    sd, df = pooled((base, stack, removal))
    if sd is None:
        return None
    d = stack.mean_log - removal.mean_log
    return d - t_quantile(0.5 + INTERVAL / 2, df) * sd * math.sqrt(1.0 / stack.n + 1.0 / removal.n)


def _leave_out(base, leader, removals: dict, stat_of, gate_passed, lineage_shas) -> tuple:
    """The leave-one-out rule: while a gated leave-one-out candidate of the leader with 2 or more runs removes
    one of the leader's kept changes and the leader's gain over it does not clear its 95% interval (the low end
    at or below zero), the change is left out: that candidate leads (the fastest such, when several). Returns
    the leader. (A removal faster than the stack by the leader test leads by the walk already.)"""
    seen = {leader.sha}
    while True:
        on = lineage_shas(leader.sha)
        best = None
        for removal_sha, kept_sha in removals.get(leader.sha, ()):
            removal = stat_of(removal_sha)
            if kept_sha not in on or kept_sha == base.sha or removal is None or removal.n < 2 or \
                    not gate_passed(removal_sha) or removal_sha in seen:
                continue
            low = _interval_low(base, leader, removal)
            if low is not None and low <= 0 and (best is None or removal.mean_log > best[0].mean_log):
                best = (removal, kept_sha)
        if best is None:
            return leader
        seen.add(best[0].sha)
        leader = best[0]


def _dropped(lineage: list, runs: dict) -> tuple:
    """``((kept sha, removal sha), ...)``: the changes on ``lineage`` that a later recipe of it left out."""
    on = {recipe.sha for recipe in lineage}
    out = []
    for recipe in lineage:
        kept = runs.get(recipe.first.leave_out) if recipe.first.leave_out else None
        if kept is not None and kept.recipe in on and kept.recipe != recipe.sha:
            out.append((kept.recipe, recipe.sha))
    return tuple(out)


def build(rows, window=(5, 19), noise_floor=0.01, baseline_repeats=3, scores=None, false_win_rate=0.05) -> Ranking:
    """Rank the campaign described by ``rows`` (ledger rows, in any order).

    ``scores`` is ``runview.score_results(rows, window)`` when the caller computed it already (in
    parallel); it must come from these very rows."""
    runs, stops, warnings = merge(rows, window, scores)
    return assemble(runs, stops, warnings, noise_floor, baseline_repeats, false_win_rate)


class _Stat(object):
    """A recipe's moments as the walk reads them (``RecipeView`` has the same attributes)."""
    __slots__ = ("sha", "n", "mean_log", "ss", "score", "launch")

    def __init__(self, sha, values, launch):
        self.sha, self.launch = sha, launch
        self.n, self.mean_log, self.ss = moments(values)
        self.score = math.exp(self.mean_log) if self.n else None


def _walk(base, eligible: list, share: float, floor: float, chain: Optional[list] = None,
          leasts: Optional[list] = None) -> tuple:
    """The leader rule: ``eligible`` in increasing score, each that passes the test against the current leader
    leads. Returns ``(chain, leasts)``: the leaders in turn, the baseline first, and for each the share above
    which every step of the chain up to it still passes (a stricter share fails no test that failed, so the
    chain up to ``chain[i]`` holds for any share above ``leasts[i]`` that is not above ``share``). Given a
    ``chain`` (and its ``leasts``) that holds at ``share``, the walk goes on from it over ``eligible``.

    The test is ``least_share``; a candidate whose ``d / se`` lies clearly below the look's quantile (one per
    runs and df at this share, cached) fails it without the distribution function being evaluated."""
    chain, leasts = (list(chain), list(leasts)) if chain else ([base], [0.0])
    bar = math.log1p(floor)
    leader, held_df, held_ss = None, 0, 0.0
    for recipe in eligible:
        if recipe.mean_log - chain[-1].mean_log <= bar:
            continue
        if chain[-1] is not leader:
            leader = chain[-1]
            _sd, held_df = pooled((base, leader))
            held_ss = base.ss + (leader.ss if leader is not base else 0.0)
        df = held_df + recipe.n - 1
        if not df:
            continue
        d = recipe.mean_log - leader.mean_log
        se = math.sqrt((held_ss + recipe.ss) / df) * math.sqrt(1.0 / recipe.n + 1.0 / leader.n)
        if se > 0 and d / se <= t_quantile(1 - look_level(share, recipe.n), df) * (1 - 1e-9):
            continue
        step = least_share(d, recipe.n, leader.n, math.sqrt((held_ss + recipe.ss) / df), df, floor)  # = pooled's
        if share > step:
            chain.append(recipe)
            leasts.append(max(leasts[-1], step))
    return chain, leasts


def _band(base, leader, share: float, floor: float) -> tuple:
    """``(need, sd, df)``: the least gain a 2-run candidate needs over ``leader``, with the noise it rests on
    (the baseline's and the leader's runs, plus the candidate's own repeat's degree of freedom)."""
    sd, df = pooled((base, leader))
    if sd is None:
        return floor, None, 0
    return as_gain(need_log(share, 2, leader.n, sd, df + 1, floor), floor), sd, df


def _tested(recipes) -> int:
    return sum(1 for recipe in recipes if not recipe.is_baseline and recipe.n and recipe.gate != "fail")


def assemble(runs: dict, stops: list, warnings: list, noise_floor=0.01, baseline_repeats=3,
             false_win_rate=0.05) -> Ranking:
    """Rank merged runs (``merge``): recipes, noise, baseline and leader."""
    warnings = list(warnings)
    stop = max(stops, key=content_key) if stops else None
    ordered = sorted(runs.values(), key=sort_key)
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
                                                                                             sort_key(run)))
        baseline = recipes[first.recipe]
        baseline.is_baseline = True
    tested = _tested(recipes.values())
    share = false_win_rate / max(tested, MIN_CANDIDATES)
    have = baseline.n if baseline else 0
    established = baseline is not None and have >= baseline_repeats
    leader = baseline if baseline is not None and baseline.score is not None else None
    if established and leader is not None:
        eligible = [r for r in recipes.values() if not r.is_baseline and r.gate == "pass" and r.n >= 2]
        leader = _walk(baseline, sorted(eligible, key=lambda r: (r.score, r.first.launch_ts, r.sha)), share,
                       noise_floor)[0][-1]
        leader = _leave_out(baseline, leader, _removals(recipes, runs), recipes.get,
                            lambda sha: recipes[sha].gate == "pass",
                            lambda sha: {r.sha for r in _lineage(recipes[sha], recipes, runs)})
    dropped = _dropped(_lineage(leader, recipes, runs), runs) if leader is not None else ()
    band, sd, df = _band(baseline, leader, share, noise_floor) if leader is not None else (noise_floor, None, 0)
    if sd is None:
        basis = "no repeat yet: the %.2f%% floor" % (noise_floor * 100)
    else:
        basis = ("run-to-run sd %.2f%% of tokens/s/GPU from %s (df %d); false wins at most %g%% a campaign over "
                 "%d candidate(s) tested (counted as at least %d): a 2-run candidate's test at level %.3g%%" % (
                     sd * 100, "%d baseline run(s)" % baseline.n + (
                         " and %d of the leader %s" % (leader.n, leader.first.run) if leader is not baseline else ""),
                     df, false_win_rate * 100, tested, MIN_CANDIDATES, look_level(share, 2) * 100))
    ranking = Ranking(runs=ordered, recipes=recipes, baseline=baseline, leader=leader, band=band,
                      band_basis=basis, band_established=established,
                      repeats_needed=max(0, baseline_repeats - have), stop=stop, warnings=warnings,
                      by_id=runs, noise_floor=noise_floor, baseline_repeats=baseline_repeats,
                      false_win_rate=false_win_rate, tested=tested, noise_sd=sd, noise_df=df, dropped=dropped)
    ranking.actions = _pending(ranking)
    ranking.pending = [item["text"] for item in ranking.actions]
    return ranking


def leader_history(ranking: Ranking) -> list:
    """The leader after each run in launch order: ``[(score or None, band, established), ...]``, one per run of
    ``ranking.runs``, each what ranking the runs launched up to it (with their results and gates) gives. The
    last entry is ``ranking.leader``'s score and ``ranking.band``. A run that adds only a tested candidate
    (the common case) changes only the false-win share: the last walk's chain is checked at the new share,
    and the walk is run again only when a step of it no longer passes. A run that moves one eligible recipe
    walks on from the part of the chain below it (it still holds at the new share), not from the baseline."""
    base_sha = ranking.baseline.sha if ranking.baseline is not None else None
    floor, repeats, rate = ranking.noise_floor, ranking.baseline_repeats, ranking.false_win_rate
    values, verdicts, stats = {}, {}, {}
    eligible = []  # sorted (score, first launch, sha) of the eligible recipes so far
    entries = {}  # sha -> its key in eligible
    tested = set()
    base, chain, leasts, share = None, None, [0.0], None
    chain_keys = []  # the key in eligible of each of chain[1:]
    band, band_inputs = floor, None
    entry_now = (None, floor, False)
    removals = _removals(ranking.recipes, ranking.by_id)
    lineages = {}

    def lineage_shas(sha):
        if sha not in lineages:
            lineages[sha] = {r.sha for r in _lineage(ranking.recipes[sha], ranking.recipes, ranking.by_id)}
        return lineages[sha]

    def gate_passed(sha):
        gates = verdicts.get(sha, ())
        return "pass" in gates and "fail" not in gates
    out = []
    for run in ranking.runs:
        tokens, gate = run.tokens, run.gate
        if tokens is None and not gate:  # nothing the leader depends on changed
            out.append(entry_now)
            continue
        sha = run.recipe
        if gate:
            verdicts.setdefault(sha, set()).add(gate)
        own = values.setdefault(sha, [])
        if tokens is not None:
            own.append(tokens)
        stat = stats[sha] = _Stat(sha, own, ranking.recipes[sha].first.launch_ts)
        walk, low = False, None  # low: the least key of eligible this run moved (the walk is the same below it)
        if sha == base_sha:
            base, walk = (stat if stat.n else None), True
        else:
            gates = verdicts.get(sha, ())
            if stat.n and "fail" not in gates:
                tested.add(sha)
            else:
                if sha in tested:
                    walk = True  # fewer tested: a looser share can pass a test that failed
                tested.discard(sha)
            key = entries.pop(sha, None)
            if key is not None:
                del eligible[bisect.bisect_left(eligible, key)]
                low = key
            if stat.n >= 2 and "pass" in gates and "fail" not in gates:
                key = entries[sha] = (stat.score, stat.launch, sha)
                bisect.insort(eligible, key)
                low = key if low is None else min(low, key)
        new_share = rate / max(len(tested), MIN_CANDIDATES)
        established = base is not None and base.n >= repeats
        if base is None:
            chain = None
        elif not established:
            chain, leasts, chain_keys = [base], [0.0], []
        else:
            anew = walk or chain is None or share is None or new_share > share
            below = 0  # how many leaders after the baseline stay: those below ``low``, while they hold
            if not anew:
                below = len(chain_keys) if low is None else bisect.bisect_left(chain_keys, low)
                while below and not new_share > leasts[below]:
                    below -= 1
            if anew or below < len(chain_keys) or low is not None:
                start = bisect.bisect_right(eligible, chain_keys[below - 1]) if below else 0
                chain, leasts = _walk(base, [stats[key[2]] for key in eligible[start:]], new_share, floor,
                                      chain[:below + 1] if below else None, leasts[:below + 1] if below else None)
                chain_keys = [(leader.score, leader.launch, leader.sha) for leader in chain[1:]]
        share = new_share
        leader = chain[-1] if chain else None
        if leader is not None and established and removals:
            leader = _leave_out(base, leader, removals, stats.get, gate_passed, lineage_shas)
        inputs = (share, leader, base)  # the band depends on nothing else (a _Stat is new when its runs change)
        if inputs != band_inputs:
            band = _band(base, leader, share, floor)[0] if leader is not None else floor
            band_inputs = inputs
        entry_now = (leader.score if leader is not None else None, band, established)
        out.append(entry_now)
    return out


def _pending(ranking: Ranking) -> list:
    """What the campaign needs next, each ``{"action", "run", "text", ...}``: the action as a field (``finalize``,
    ``launch_baseline``, ``repeat_baseline``, ``reduce_noise``, ``confirm``, ``repeat`` with ``repeat_of``,
    ``gate``), and the short imperative line ``attune status`` prints. Finalizing and the baseline come first, by
    the rules the Stop hook reads the ledger by (``attune.core.state.pending``)."""
    todo = state.pending([state.Run(run.run, run.finalized, run.never_ran, run.expected_gpu_hours, run.launch_ts)
                          for run in ranking.runs], ranking.baseline is not None)

    def need(action, text, run=None, **extra):
        todo.append(dict({"action": action, "run": run, "text": text}, **extra))
    if ranking.baseline is None:
        return todo
    if ranking.repeats_needed:
        need("repeat_baseline", "repeat the baseline: %d more rankable run(s) needed to measure the noise"
             % ranking.repeats_needed, count=ranking.repeats_needed)
    lead = ranking.leader
    if not ranking.band_established or lead is None:
        return todo
    if ranking.noise_sd is not None and ranking.noise_sd > NOISY_SD:
        need("reduce_noise", "the run-to-run sd is %.2f%% (%s): find why repeats of one recipe differ this much "
             "(contention, stragglers, placement, a step too short to time) before testing candidates: a 2-run "
             "candidate needs %s" % (ranking.noise_sd * 100, ranking.band_basis, band_text(ranking.band)))
    for recipe in sorted(ranking.recipes.values(), key=lambda r: (r.first.launch_ts, r.sha)):
        if recipe.is_baseline or recipe is lead or recipe.gate == "fail" or recipe.score is None:
            continue
        gain, verdict = ranking.ahead(recipe, lead)
        if verdict not in ("wins", "ahead"):
            continue
        first = recipe.first.run
        busy = any(not run.finalized for run in recipe.runs)
        if len(recipe.rankable) < 2 and not busy:
            need("confirm", "confirm %s: %s over the leader from one run; relaunch the same recipe with purpose "
                 "confirm (a candidate is tested from 2 runs)" % (first, pct(gain.estimate)), first)
        elif verdict == "ahead" and not busy and recipe.n < MAX_RUNS:
            again = lead.first.run if lead.n < recipe.n else first
            need("repeat", "repeat %s: %s over the leader is not conclusive (it needs %s at %d runs); launch "
                 "--repeat-of %s, the recipe with fewer runs, to narrow the test"
                 % (first, gain_text(gain), pct(gain.need), recipe.n, again), first, repeat_of=again)
        if recipe.gate is None:
            need("gate", "gate %s: a candidate needs a passing correctness gate to lead" % first, first)
    return todo
