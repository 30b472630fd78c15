"""The three search methods, each driven through the simulated evaluator (``evaluator.Evaluator``) under one
GPU-hour budget, and what each one ships.

Every method runs its campaign through ``Campaign``: its runs are ranked by the project's own ranking
(``attune.campaign.ranking.assemble``: the leader test over the baseline's three runs, confirmation, repeats of
a close candidate), and the ranking's leader is what ships. No method ships on a weaker rule than another.

* ``run_planner``: a driver loop around ``planner.policy.propose`` (the State from ``policy.state_for``),
  as ``planner/agent.py`` drives it; it follows the ranking's pending confirmations and repeats itself.
* ``run_random``: uniform random combinations on the baseline, one candidate run each.
* ``run_tpe``: optuna's TPESampler over the same categorical dimensions.

Random and TPE: three baseline runs first (what the ranking needs to measure the noise); every lever of
``space(baseline)`` is a dimension whose values are "keep" and the lever's alternatives; a combination applies
the chosen alternatives to the baseline in the catalog's order (a later lever's companion change can
overwrite an earlier one's flag, as ``candidate new`` would) and is launched only if it passes what
``candidate new --gpu`` checks for any agent: ``planner.space.check`` against the baseline (workload, Megatron
legality, the projection's model asserts, the gate's classes) and the projection's memory pre-filter (a
combination projected not to fit is refused). A refused combination is counted, costs nothing, and the
method draws again (TPE is told the trial failed). A launched combination is a candidate run, gated at no
cost as the planner's are (every alternative passed the gate's configuration check); after it, the method
does what the ranking asks (confirm a winner from one run, repeat a close candidate, ``methods.pending``)
while the budget holds a run. A combination that ran already is not run again: TPE is told its measurement
so far. A trial is started only while the budget holds it and one more run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "skill" / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from attune.campaign import lessons as lessons_mod, ranking as ranking_mod  # noqa: E402
from attune.core import workload as workload_mod  # noqa: E402
from attune.core.errors import AttuneError, CheckFailed  # noqa: E402
from attune.core.measure import not_rankable  # noqa: E402
from attune.core.recipe import Recipe, diff  # noqa: E402
from attune.planner import policy, space as space_mod  # noqa: E402

from .evaluator import Evaluator, canonical  # noqa: E402

EARLY_STOP = False  # ATTUNE_EARLY_STOP: search_bench.py --early-stop sets it
NOISE_FLOOR = 0.01  # ATTUNE_NOISE_FLOOR's default
BASELINE_REPEATS = 3  # ATTUNE_BASELINE_REPEATS's default
MAX_DRAWS = 3000  # illegal draws in a row before a model-free method gives up
MAX_STALE = 200  # proposals in a row that had run already before a model-free method gives up
KEEP = "keep"


# ------------------------------------------------------------------------------------------ bookkeeping
@dataclasses.dataclass
class Trace:
    method: str
    budget: float
    spent: float = 0.0
    launches: int = 0
    ooms: int = 0
    oom_gpu_hours: float = 0.0
    illegal: int = 0
    timeline: list = dataclasses.field(default_factory=list)  # (GPU-hours spent, true tokens of the incumbent)
    launched: list = dataclasses.field(default_factory=list)  # (GPU-hours spent, true tokens) of scored runs
    shipped: Optional[str] = None  # canonical text of the shipped configuration
    shipped_recipe: object = None
    shipped_measured: Optional[float] = None  # what the method measured for it (median/mean of its runs)
    baseline_measured: Optional[float] = None
    stop: str = ""
    notes: list = dataclasses.field(default_factory=list)
    stops: int = 0  # candidates stopped early
    stop_saved: float = 0.0  # GPU-hours the stops saved (each run's full cost less what it used)
    false_stops: int = 0  # stopped runs whose full run would have cleared the need they were stopped on

    def record(self, ev: Evaluator, recipe, run, incumbent) -> None:
        self.spent += run.cost
        self.launches += 1
        if run.failure == "oom":
            self.ooms += 1
            self.oom_gpu_hours += run.cost
        elif run.ok:
            self.launched.append((self.spent, ev.truth(recipe).tokens))
        self.timeline.append((self.spent, ev.truth(incumbent).tokens if incumbent is not None else None))


def _sha(recipe: Recipe) -> str:
    return hashlib.sha256(canonical(recipe).encode()).hexdigest()[:16]


def _gpu(recipe: Recipe) -> Optional[str]:
    return recipe.env().get("ATTUNE_SIM_HARDWARE")


def _projected_cost(ev: Evaluator, recipe: Recipe) -> float:
    pred = space_mod.project_recipe(recipe)
    step = pred.step_s if pred is not None and pred.ok else 0.0
    return ev.gpus * (ev.startup_s + 20 * step) / 3600.0


# ------------------------------------------------------------------------------------------ the campaign rule
class Campaign(object):
    """One method's runs as the campaign's ranking reads them (``attune.campaign.ranking.assemble``): every method
    launches through here, so all are ranked, confirmed, repeated and shipped by the same leader test."""

    def __init__(self, ev: Evaluator, baseline: Recipe, budget: float, seed: int, method: str):
        self.ev, self.baseline, self.budget, self.seed = ev, workload_mod.enforce(baseline), budget, seed
        self.gpu = _gpu(self.baseline)
        self.trace = Trace(method, budget)
        self.recipes = {}  # sha -> Recipe
        self.runs = {}  # run id -> RunView
        self.cost = {}  # run id -> GPU-hours
        self.memory = {}  # run id -> max reserved GiB
        self.order = {}  # run id -> launch index

    def _launch(self, recipe: Recipe, purpose: str, parent=None, lever="", leave_out="") -> str:
        sha = _sha(recipe)
        self.recipes.setdefault(sha, recipe)
        run_id = "r%03d" % (len(self.runs) + 1)
        result = self.ev.launch(recipe, "%s|%d|%s" % (self.trace.method, self.seed, run_id))
        if EARLY_STOP and purpose == "candidate" and not leave_out and result.ok and result.step_ms:
            result = self._early_stop(result)
        score = result.score if result.ok else not_rankable("run %s: %s" % (
            "stopped early" if result.failure == "stopped_early" else "failed", result.failure))
        self.runs[run_id] = ranking_mod.RunView(
            run=run_id, purpose=purpose, recipe=sha, launch_ts="%06d" % len(self.runs), gpus=self.ev.gpus,
            backend="simulated", parent=parent, lever=lever, leave_out=leave_out, simulated=True,
            status="finished" if result.ok else ("stopped_early" if result.failure == "stopped_early" else "failed"),
            failure=None if result.ok else {"class": result.failure}, score=score)
        self.order[run_id] = len(self.runs)
        self.cost[run_id] = result.cost
        self.memory[run_id] = result.max_reserved_gib
        rank = self.ranking()
        lead = self.recipes[rank.leader.sha] if rank.leader is not None else None
        self.trace.record(self.ev, recipe, result, lead)
        return run_id

    def _early_stop(self, result):
        """``earlystop.rule`` after each scored iteration of the run (the planner looks while it runs): the run as
        stopped at the first iteration it fires, charged for the iterations it ran; as it was otherwise."""
        from attune.campaign import earlystop
        rank = self.ranking()
        leader = rank.leader
        if leader is None or not rank.band_established or rank.noise_sd is None:
            return result
        ev, times = self.ev, result.step_ms
        logs = []
        for index in range(4, 19):  # iterations 5..19, the scoring window
            logs.append(math.log(ev.gbs * ev.seq / (times[index] / 1000.0) / ev.gpus))
            found = earlystop.rule(logs, leader.score, leader.n, rank.noise_sd, rank.noise_df, rank.share,
                                   rank.noise_floor)
            if found is None:
                continue
            used = ev.gpus * (ev.startup_s + sum(times[:index + 1]) / 1000.0) / 3600.0
            self.trace.stops += 1
            self.trace.stop_saved += result.cost - used
            if result.tokens / leader.score - 1 >= found["need"]:
                self.trace.false_stops += 1
            return dataclasses.replace(result, ok=False, failure="stopped_early", cost=used, score=None)
        return result

    def ranking(self):
        return ranking_mod.assemble(dict(self.runs), [], [], noise_floor=NOISE_FLOOR,
                                    baseline_repeats=BASELINE_REPEATS)

    def ship(self) -> Trace:
        """The ranking's leader ships (the baseline when nothing leads)."""
        rank = self.ranking()
        lead = rank.leader
        self.trace.shipped_recipe = self.recipes[lead.sha] if lead is not None else self.baseline
        self.trace.shipped_measured = lead.score if lead is not None else None
        self.trace.baseline_measured = rank.baseline.score if rank.baseline is not None else None
        self.trace.shipped = canonical(workload_mod.enforce(self.trace.shipped_recipe))
        return self.trace


def pending(rank) -> dict:
    """``{recipe sha: the run to repeat or None}`` for the recipes the ranking lists as winners to gate or
    confirm (None), or as ahead of the leader but not conclusive (``ranking._pending``: ``repeat`` the recipe
    with fewer runs, up to ``ranking.MAX_RUNS``)."""
    lead = rank.leader
    if not rank.band_established or lead is None:
        return {}
    out = {}
    for r in rank.recipes.values():
        if r.is_baseline or r is lead or r.gate == "fail" or r.score is None:
            continue
        _gain, verdict = rank.ahead(r, lead)
        if verdict == "wins":
            out[r.sha] = None
        elif verdict == "ahead" and len(r.rankable) >= 2 and r.n < ranking_mod.MAX_RUNS:
            out[r.sha] = lead.first.run if lead.n < r.n else r.first.run
    return out


# ------------------------------------------------------------------------------------------ the planner
class PlannerDriver(Campaign):
    """Implements every ``policy.Action`` with the evaluator; one campaign. The State is rebuilt at every step
    from the runs as ``planner/agent.py`` rebuilds it from the ledger (``history`` and ``build``): the ranking's
    leader, band and pending winners; a candidate's verdict ``beats`` while the ranking lists it as pending
    (gate/confirm), else the lesson's (``attune.campaign.lessons.verdict``: kept, rejected, hurt; an OOM is hurt with
    failure ``oom``); its predicted gain from the projections of it and its parent; ``run_cost`` the largest
    baseline charge plus 25% (half an hour of every GPU before the first, capped at what is left); the
    lineage with ``space.leave_one_out`` for each change; a candidate whose recipe already ran is excluded."""

    def __init__(self, ev: Evaluator, baseline: Recipe, budget: float, seed: int, max_actions: int = 400):
        super().__init__(ev, baseline, budget, seed, "planner")
        self.name = {}  # candidate run id -> the alternative's name
        self.loo = set()  # candidate runs that are leave-one-outs
        self.excluded = {}
        self.max_actions = max_actions
        self._spaces = {}  # leader sha -> State from state_for (levers and projections)
        self._projected = {}  # sha -> projected tokens/s/GPU
        self.actions = []

    def _projection(self, sha: str) -> Optional[float]:
        if sha not in self._projected:
            pred = space_mod.project_recipe(self.recipes[sha])
            self._projected[sha] = pred.tokens_per_s_per_gpu if pred is not None and pred.ok else None
        return self._projected[sha]

    # -------------------------------------------------------------- state, as agent.py builds it
    def tried(self, rank) -> list:
        waiting = pending(rank)
        out = []
        for run_id, run in self.runs.items():
            if run.purpose != "candidate":
                continue
            recipe = rank.recipes[run.recipe]
            failure = (run.failure or {}).get("class")
            gain = None
            if run.recipe in waiting:
                verdict = "beats"
            elif run.status == "stopped_early":  # as agent.py reads it: a result that did not finish
                verdict = "failed"
            else:
                try:
                    verdict, _text, _gain = lessons_mod.verdict(rank, run)
                except CheckFailed:  # it beats its parent but not the leader, ungated: `attune lesson` refuses it,
                    verdict = "rejected"  # and agent.py reads a run with no lesson as rejected
                gain = rank.relative(recipe.score, rank.recipe_of(run.parent))
            before, after = self._projection(rank.run(run.parent).recipe), self._projection(run.recipe)
            predicted = after / before - 1 if before and after else None
            confirms = [r for r in recipe.runs if r.purpose == "confirm"]
            retried = any(r.purpose == "repeat" and r.parent == run_id for r in self.runs.values())
            out.append(policy.Tried(lever=run.lever, alternative=self.name[run_id], parent=run.parent, run=run_id,
                                    verdict=verdict, gain=gain, predicted_gain=predicted, failure=failure,
                                    gate=recipe.gate, confirmed=bool(confirms), retried=retried,
                                    loo=run_id in self.loo, order=self.order[run_id],
                                    repeat_of=waiting.get(run.recipe)))
        return out

    def run_cost(self, rank) -> float:
        charges = [self.cost[r.run] for r in rank.runs if r.recipe == (rank.baseline.sha if rank.baseline else None)]
        if charges:
            return max(charges) * 1.25
        return min(self.ev.gpus * 0.5, max(self.budget - self.trace.spent, 1e-6))

    def state(self, rank) -> policy.State:
        lead_view = rank.leader
        base_sha = _sha(self.baseline)
        baseline_runs = tuple(r.run for r in rank.runs if r.recipe == base_sha)
        failures = sum(1 for r in rank.runs if r.recipe == base_sha and r.tokens is None)
        tried = self.tried(rank)
        leader = lead_view.first.run if lead_view is not None else None
        state = policy.State(
            leader=leader, baseline_runs=baseline_runs, baseline_failures=failures,
            baseline_runs_needed=rank.repeats_needed, band=rank.band, band_established=rank.band_established,
            budget_left=max(0.0, self.budget - self.trace.spent), run_cost=self.run_cost(rank), tried=tried,
            excluded=dict(self.excluded), seed=self.seed)
        if leader is not None and rank.band_established:
            recipe = self.recipes[lead_view.sha]
            base = self._spaces.get(lead_view.sha)
            if base is None:
                base = policy.state_for(recipe, self.baseline, leader=leader, seed=self.seed, hardware=self.gpu)
                self._spaces[lead_view.sha] = base
            steps = [r.score.step_time_s for r in lead_view.rankable]
            memory = [self.memory[r.run] for r in lead_view.rankable if self.memory.get(r.run)]
            state.leader_measured = policy.Measured(tokens_per_s_per_gpu=lead_view.score,
                                                    step_s=statistics.median(steps),
                                                    max_reserved_gib=max(memory) if memory else None)
            levers = base.levers
            if hasattr(self.ev, "allowed"):  # a measured table: only the alternatives it measured
                levers = [dataclasses.replace(lever, alternatives=tuple(
                    alt for alt in lever.alternatives if self.ev.allowed(lever.id, alt.name))) for lever in levers]
                levers = [lever for lever in levers if lever.alternatives]
            state.levers, state.leader_prediction, state.predictions = \
                levers, base.leader_prediction, base.predictions
            state.lineage = policy.project_lineage(self.lineage(rank, leader, recipe, tried), self.gpu)
            state.moe = "--num-experts" in recipe.args()
        return state

    def lineage(self, rank, leader: str, leader_recipe: Recipe, tried: list) -> list:
        by_run = {t.run: t for t in tried}
        chain, run, seen = [], leader, set()
        while run in self.runs and self.runs[run].purpose == "candidate" and run not in seen:
            seen.add(run)
            chain.append(run)
            run = self.runs[run].parent
        out = []
        for run in reversed(chain):
            view, item = self.runs[run], by_run.get(run)
            name = item.alternative if item else run
            undo = space_mod.leave_one_out(leader_recipe, self.recipes[self.runs[view.parent].recipe],
                                           self.recipes[view.recipe], view.lever, "undo:" + name, self.baseline,
                                           gpu=self.gpu)
            out.append(policy.Change(lever=view.lever, alternative=name, run=run, undo=undo,
                                     gain=item.gain if item else None))
        return out

    # -------------------------------------------------------------- the loop
    def run(self) -> Trace:
        for _ in range(self.max_actions):
            if self.trace.spent >= self.budget:
                self.trace.stop = "budget spent"
                break
            rank = self.ranking()
            state = self.state(rank)
            action = policy.propose(state)
            self.actions.append(action.kind)
            if action.kind == "stop":
                self.trace.stop = action.reason
                break
            if action.kind == "repeat_baseline":
                self._launch(self.baseline, "baseline")
            elif action.kind in ("candidate", "leave_one_out"):
                alt = action.alternative
                leader_recipe = self.recipes[rank.leader.sha]
                try:
                    child = space_mod.apply(leader_recipe, alt)
                    why = space_mod.check(leader_recipe, child, self.baseline, self.gpu, None) or \
                        _unmeasured(self.ev, child)
                except AttuneError as exc:
                    why = str(exc)
                if why:  # never expected: the space holds checked alternatives only
                    self.trace.illegal += 1
                    self.excluded[alt.key] = why
                    self.trace.notes.append("illegal %s: %s" % (alt.name, why))
                    continue
                if _sha(child) in self.recipes:  # agent.py: never the same recipe twice
                    self.excluded[alt.key] = "the same recipe ran already"
                    continue
                run_id = self._launch(child, "candidate", parent=state.leader, lever=alt.lever,
                                      leave_out=action.change.run if action.kind == "leave_one_out" else "")
                self.name[run_id] = alt.name
                if action.kind == "leave_one_out":
                    self.loo.add(run_id)
            elif action.kind == "gate":
                # The gate passes: every alternative of the space changes placement only and passed the gate's
                # configuration check; the simulated loss of a placement change stays inside its floors.
                self.runs[action.run].gate = "pass"
            elif action.kind == "confirm":
                first = self.runs[action.run]
                self._launch(self.recipes[first.recipe], "confirm", parent=action.run, lever=first.lever)
            elif action.kind == "repeat":
                first = self.runs[action.run]
                self._launch(self.recipes[first.recipe], "repeat", parent=action.run, lever=first.lever)
            elif action.kind == "retry":
                first = self.runs[action.run]
                self._launch(self.recipes[first.recipe], "repeat", parent=action.run, lever=first.lever)
            else:
                raise ValueError("unknown action %r" % action.kind)
        else:
            self.trace.stop = "driver action limit"
        return self.ship()


def run_planner(ev: Evaluator, baseline: Recipe, budget: float, seed: int) -> Trace:
    driver = PlannerDriver(ev, baseline, budget, seed)
    trace = driver.run()
    trace.notes.append("actions: " + " ".join("%s=%d" % (k, driver.actions.count(k))
                                              for k in sorted(set(driver.actions))))
    return trace


# ------------------------------------------------------------------------------------------ model-free methods
def dimensions(baseline: Recipe, allowed=None) -> list:
    """``[(lever, {name: Alternative})]`` for every lever of ``space(baseline)``: the shared search space
    (only the alternatives ``allowed(lever id, name)`` keeps, when given)."""
    levers = space_mod.space(baseline, baseline, gpu=_gpu(baseline))
    out = []
    for lever in levers:
        alts = {alt.name: alt for alt in lever.alternatives if allowed is None or allowed(lever.id, alt.name)}
        if alts:
            out.append((lever, alts))
    return out


def _unmeasured(ev, recipe) -> str:
    """Why the evaluator cannot run ``recipe`` (a measured table's missing cell), or empty."""
    if not hasattr(ev, "allowed"):
        return ""
    try:
        return ev.truth(recipe).error
    except ValueError as exc:
        return str(exc)


def compose(baseline: Recipe, dims: list, choice: dict, ev=None) -> tuple:
    """(recipe, why-not) for a combination ``{lever id: alternative name or KEEP}``; why-not is empty when
    it may launch, ``"baseline"`` when it changes nothing. The checks are ``candidate new --gpu``'s, which
    any agent gets: ``planner.space.check`` and the projection's memory pre-filter (a combination projected
    not to fit is refused before it runs)."""
    recipe = baseline
    try:
        for lever, alts in dims:
            name = choice.get(lever.id, KEEP)
            if name != KEEP:
                recipe = recipe.apply(alts[name].records())
        recipe = workload_mod.enforce(recipe)
    except AttuneError as exc:
        return None, "recipe: " + str(exc).splitlines()[0]
    if not diff(baseline, recipe):
        return recipe, "baseline"
    why = space_mod.check(baseline, recipe, baseline, _gpu(baseline), None)
    if not why:
        pred = space_mod.project_recipe(recipe)
        if pred is not None and pred.ok and not pred.fits:
            why = "memory: projected %.1f GiB, %.1f usable" % (pred.memory_gib, pred.usable_gib)
    if not why and ev is not None:
        why = _unmeasured(ev, recipe)
    return recipe, why


class _ModelFree(Campaign):
    """A model-free method's campaign: three baseline runs, then one candidate run per trial (the combination
    applied to the baseline, gated at no cost as the planner's are), and after each trial what the ranking
    asks (confirm a winner, repeat a close one) while the budget holds it. The ranking's leader ships."""

    def __init__(self, name: str, ev: Evaluator, baseline: Recipe, budget: float, seed: int, dims: list):
        super().__init__(ev, baseline, budget, seed, name)
        self.dims = dims
        self.est = None
        self.stale = 0  # proposals in a row that had run already
        self.refused = lambda choice, why: None  # told of each refused proposal (TPE marks the trial failed)

    def tell(self, launched: bool) -> bool:
        """Counts a proposal; False once MAX_STALE in a row had run already (the method proposes nothing new)."""
        self.stale = 0 if launched else self.stale + 1
        if self.stale >= MAX_STALE:
            self.trace.stop = "%d proposals in a row had run already" % MAX_STALE
            return False
        return True

    def start(self) -> None:
        """The baseline's runs: until the ranking has the repeats it needs to measure the noise."""
        self._launch(self.baseline, "baseline")
        run = self.runs["r001"]
        self.est = self.cost["r001"] if run.tokens is not None else _projected_cost(self.ev, self.baseline)
        for _ in range(2 * BASELINE_REPEATS):
            if not self.ranking().repeats_needed or not self.fits():
                break
            self._launch(self.baseline, "baseline")

    def fits(self, runs: int = 1) -> bool:
        return self.trace.spent + runs * self.est <= self.budget

    def room(self) -> bool:
        """Room for one more trial and its confirmation."""
        return self.fits(2)

    def trial(self, recipe: Recipe) -> tuple:
        """``(measured tokens/s/GPU or None, launched)``: run ``recipe`` as a candidate, then settle what the
        ranking asks. A recipe that ran already (the baseline included) is not run again: its measurement so
        far (the geometric mean of its runs) is the answer."""
        sha = _sha(recipe)
        if sha in self.recipes:
            found = self.ranking().recipes.get(sha)
            return (found.score if found is not None else None), False
        run_id = self._launch(recipe, "candidate", parent="r001", lever="combination")
        self.runs[run_id].gate = "pass"
        self.settle()
        return self.runs[run_id].tokens, True

    def settle(self) -> None:
        while self.fits():
            waiting = pending(self.ranking())
            if not waiting:
                return
            sha, again = sorted(waiting.items(), key=lambda item: self.order[self._first(item[0])])[0]
            run = again or self._first(sha)
            view = self.runs[run]
            self._launch(self.recipes[view.recipe], "confirm" if again is None else "repeat", parent=run,
                         lever=view.lever)

    def _first(self, sha: str) -> str:
        return min((r.run for r in self.runs.values() if r.recipe == sha), key=lambda run: self.order[run])


def _draw_legal(method: _ModelFree, propose) -> Optional[Recipe]:
    """Draws from ``propose()`` (a combination, or None when the method has no more) until one may launch;
    refusals (illegal, or projected not to fit) cost nothing and are counted."""
    for _ in range(MAX_DRAWS):
        choice = propose()
        recipe, why = compose(method.baseline, method.dims, choice, method.ev)
        if why and why != "baseline":
            method.trace.illegal += 1
            method.refused(choice, why)
            continue
        return recipe
    method.trace.stop = "%d refused draws in a row" % MAX_DRAWS
    return None


def run_random(ev: Evaluator, baseline: Recipe, budget: float, seed: int, dims: list) -> Trace:
    method = _ModelFree("random", ev, baseline, budget, seed, dims)
    rng = random.Random("random-search|%d" % seed)
    method.start()
    while method.room():
        recipe = _draw_legal(method, lambda: {lever.id: rng.choice([KEEP] + list(alts)) for lever, alts in dims})
        if recipe is None or not method.tell(method.trial(recipe)[1]):
            break
    else:
        method.trace.stop = "budget"
    return method.ship()


def run_tpe(ev: Evaluator, baseline: Recipe, budget: float, seed: int, dims: list) -> Trace:
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    method = _ModelFree("tpe", ev, baseline, budget, seed, dims)
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    space = {lever.id: CategoricalDistribution([KEEP] + list(alts)) for lever, alts in dims}
    method.start()
    study.enqueue_trial({lever.id: KEEP for lever, _ in dims})
    asked = {}

    def propose():
        asked["trial"] = study.ask(space)
        return asked["trial"].params

    def refused(choice, why):
        study.tell(asked["trial"], state=TrialState.FAIL)
    method.refused = refused
    first = True
    while method.room():
        recipe = _draw_legal(method, propose)
        if recipe is None:
            break
        trial = asked["trial"]
        value, launched = method.trial(recipe)  # the enqueued baseline first: its runs so far
        if value is not None:
            study.tell(trial, value)
        else:
            study.tell(trial, state=TrialState.FAIL)
        if not method.tell(launched or first):
            break
        first = False
    else:
        method.trace.stop = "budget"
    return method.ship()
