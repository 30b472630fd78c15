"""The three search methods, each driven through the simulated evaluator (``evaluator.Evaluator``) under one
GPU-hour budget, and what each one ships.

* ``run_planner``: a driver loop around ``planner.policy.propose`` (the State from ``policy.state_for``),
  with the campaign's ranking (``attune_core.ranking.assemble``: the noise band from the baseline repeats,
  the leader = a gated, confirmed recipe that beats the current leader by more than the band). It ships the
  leader when the policy stops or the budget is spent.
* ``run_random``: uniform random combinations on the baseline, one run each.
* ``run_tpe``: optuna's TPESampler over the same categorical dimensions.

Random and TPE: trial 0 is the baseline (one run); every lever of ``space(baseline)`` is a dimension whose
values are "keep" and the lever's alternatives; a combination applies the chosen alternatives to the
baseline in the catalog's order (a later lever's companion change can overwrite an earlier one's flag, as
``candidate new`` would) and is launched only if it passes ``planner.space.check`` against the baseline
(the checks every alternative of the space passed: workload, Megatron legality, the projection's model
asserts, the gate's classes); a failing combination is counted as an illegal proposal, costs nothing, and
the method draws again (TPE is told the trial failed). Both keep room in the budget for one confirmation:
at the end the best measured configuration is re-run and shipped if the mean of its two runs beats the
baseline's run by more than the noise floor (1%, ``ATTUNE_NOISE_FLOOR``'s default), else the baseline
ships.
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

from attune_core import lessons as lessons_mod, ranking as ranking_mod  # noqa: E402
from attune_core import workload as workload_mod  # noqa: E402
from attune_core.errors import AttuneError  # noqa: E402
from attune_core.measure import not_rankable  # noqa: E402
from attune_core.recipe import Recipe, diff  # noqa: E402
from planner import policy, space as space_mod  # noqa: E402

from .evaluator import Evaluator, canonical  # noqa: E402

NOISE_FLOOR = 0.01  # ATTUNE_NOISE_FLOOR's default
BASELINE_REPEATS = 3  # ATTUNE_BASELINE_REPEATS's default
MAX_DRAWS = 3000  # illegal draws in a row before a model-free method gives up
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


# ------------------------------------------------------------------------------------------ the planner
class PlannerDriver(object):
    """Implements every ``policy.Action`` with the evaluator; one campaign. The State is rebuilt at every step
    from the runs as ``planner/agent.py`` rebuilds it from the ledger (``history`` and ``build``): the ranking's
    leader, band and pending winners; a candidate's verdict ``beats`` while the ranking lists it as pending
    (gate/confirm), else the lesson's (``attune_core.lessons.verdict``: kept, rejected, hurt; an OOM is hurt with
    failure ``oom``); its predicted gain from the projections of it and its parent; ``run_cost`` the largest
    baseline charge plus 25% (half an hour of every GPU before the first, capped at what is left); the
    lineage with ``space.leave_one_out`` for each change; a candidate whose recipe already ran is excluded."""

    def __init__(self, ev: Evaluator, baseline: Recipe, budget: float, seed: int, max_actions: int = 400):
        self.ev, self.baseline, self.budget, self.seed = ev, workload_mod.enforce(baseline), budget, seed
        self.gpu = _gpu(self.baseline)
        self.trace = Trace("planner", budget)
        self.recipes = {}  # sha -> Recipe
        self.runs = {}  # run id -> RunView
        self.cost = {}  # run id -> GPU-hours
        self.memory = {}  # run id -> max reserved GiB
        self.name = {}  # candidate run id -> the alternative's name
        self.loo = set()  # candidate runs that are leave-one-outs
        self.order = {}  # run id -> launch index
        self.excluded = {}
        self.max_actions = max_actions
        self._spaces = {}  # leader sha -> State from state_for (levers and projections)
        self._projected = {}  # sha -> projected tokens/s/GPU
        self.actions = []

    # -------------------------------------------------------------- runs and ranking
    def _launch(self, recipe: Recipe, purpose: str, parent=None, lever="", leave_out="") -> str:
        sha = _sha(recipe)
        self.recipes.setdefault(sha, recipe)
        run_id = "r%03d" % (len(self.runs) + 1)
        result = self.ev.launch(recipe, "planner|%d|%s" % (self.seed, run_id))
        score = result.score if result.ok else not_rankable("run failed: %s" % result.failure)
        self.runs[run_id] = ranking_mod.RunView(
            run=run_id, purpose=purpose, recipe=sha, launch_ts="%06d" % len(self.runs), gpus=self.ev.gpus,
            backend="simulated", parent=parent, lever=lever, leave_out=leave_out, simulated=True,
            status="finished" if result.ok else "failed",
            failure=None if result.ok else {"class": result.failure}, score=score)
        self.order[run_id] = len(self.runs)
        self.cost[run_id] = result.cost
        self.memory[run_id] = result.max_reserved_gib
        rank = self.ranking()
        lead = self.recipes[rank.leader.sha] if rank.leader is not None else None
        self.trace.record(self.ev, recipe, result, lead)
        return run_id

    def ranking(self):
        rank = ranking_mod.assemble(dict(self.runs), [], [], noise_floor=NOISE_FLOOR,
                                    baseline_repeats=BASELINE_REPEATS)
        return rank

    def _projection(self, sha: str) -> Optional[float]:
        if sha not in self._projected:
            pred = space_mod.project_recipe(self.recipes[sha])
            self._projected[sha] = pred.tokens_per_s_per_gpu if pred is not None and pred.ok else None
        return self._projected[sha]

    # -------------------------------------------------------------- state, as agent.py builds it
    def _pending(self, rank) -> dict:
        """``{recipe sha: the run to repeat or None}`` for the recipes the ranking lists as winners to gate or
        confirm, or as ahead of the leader but not conclusive (``ranking._pending``: ``repeat`` the recipe with
        fewer runs, up to ``ranking.MAX_RUNS``)."""
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

    def tried(self, rank) -> list:
        pending = self._pending(rank)
        out = []
        for run_id, run in self.runs.items():
            if run.purpose != "candidate":
                continue
            recipe = rank.recipes[run.recipe]
            failure = (run.failure or {}).get("class")
            gain = None
            if run.recipe in pending:
                verdict = "beats"
            else:
                verdict, _text = lessons_mod.verdict(rank, run)
                gain = rank.relative(recipe.score, rank.recipe_of(run.parent))
            before, after = self._projection(rank.run(run.parent).recipe), self._projection(run.recipe)
            predicted = after / before - 1 if before and after else None
            confirms = [r for r in recipe.runs if r.purpose == "confirm"]
            retried = any(r.purpose == "repeat" and r.parent == run_id for r in self.runs.values())
            out.append(policy.Tried(lever=run.lever, alternative=self.name[run_id], parent=run.parent, run=run_id,
                                    verdict=verdict, gain=gain, predicted_gain=predicted, failure=failure,
                                    gate=recipe.gate, confirmed=bool(confirms), retried=retried,
                                    loo=run_id in self.loo, order=self.order[run_id],
                                    repeat_of=pending.get(run.recipe)))
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
            state.levers, state.leader_prediction, state.predictions = \
                base.levers, base.leader_prediction, base.predictions
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
                    why = space_mod.check(leader_recipe, child, self.baseline, self.gpu, None)
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
        rank = self.ranking()
        lead = rank.leader
        self.trace.shipped_recipe = self.recipes[lead.sha] if lead is not None else self.baseline
        self.trace.shipped_measured = lead.score if lead is not None else None
        self.trace.baseline_measured = rank.baseline.score if rank.baseline is not None else None
        self.trace.shipped = canonical(workload_mod.enforce(self.trace.shipped_recipe))
        return self.trace


def run_planner(ev: Evaluator, baseline: Recipe, budget: float, seed: int) -> Trace:
    driver = PlannerDriver(ev, baseline, budget, seed)
    trace = driver.run()
    trace.notes.append("actions: " + " ".join("%s=%d" % (k, driver.actions.count(k))
                                              for k in sorted(set(driver.actions))))
    return trace


# ------------------------------------------------------------------------------------------ model-free methods
def dimensions(baseline: Recipe) -> list:
    """``[(lever, {name: Alternative})]`` for every lever of ``space(baseline)``: the shared search space."""
    levers = space_mod.space(baseline, baseline, gpu=_gpu(baseline))
    return [(lever, {alt.name: alt for alt in lever.alternatives}) for lever in levers]


def compose(baseline: Recipe, dims: list, choice: dict) -> tuple:
    """(recipe, why-not) for a combination ``{lever id: alternative name or KEEP}``; why-not is empty when
    it may launch, ``"baseline"`` when it changes nothing."""
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
    return recipe, space_mod.check(baseline, recipe, baseline, _gpu(baseline), None)


class _ModelFree(object):
    def __init__(self, name: str, ev: Evaluator, baseline: Recipe, budget: float, seed: int, dims: list):
        self.ev, self.baseline, self.budget, self.seed, self.dims = ev, workload_mod.enforce(baseline), budget, \
            seed, dims
        self.trace = Trace(name, budget)
        self.measured = {}  # canonical -> [tokens]
        self.recipes = {}  # canonical -> Recipe
        self.n = 0
        self.est = None

    def incumbent(self) -> Recipe:
        base = canonical(self.baseline)
        best, best_value = base, statistics.mean(self.measured[base]) if self.measured.get(base) else -math.inf
        for key, values in self.measured.items():
            if values and statistics.mean(values) > best_value:
                best, best_value = key, statistics.mean(values)
        return self.recipes.get(best, self.baseline)

    def launch(self, recipe: Recipe):
        key = canonical(recipe)
        self.recipes.setdefault(key, recipe)
        self.n += 1
        result = self.ev.launch(recipe, "%s|%d|%d" % (self.trace.method, self.seed, self.n))
        if result.ok:
            self.measured.setdefault(key, []).append(result.tokens)
        self.trace.record(self.ev, recipe, result, self.incumbent())
        return result

    def room(self) -> bool:
        """Room for one more trial and the final confirmation."""
        return self.trace.spent + 2 * self.est <= self.budget

    def finish(self) -> Trace:
        base = canonical(self.baseline)
        base_value = statistics.mean(self.measured[base]) if self.measured.get(base) else None
        candidates = [(statistics.mean(v), k) for k, v in self.measured.items() if k != base and v]
        shipped = self.baseline
        if candidates:
            value, key = max(candidates)
            if base_value is None or value > base_value:
                self.launch(self.recipes[key])  # the confirmation (room() kept the budget for it)
                mean = statistics.mean(self.measured[key])
                if base_value is None or mean > base_value * (1 + NOISE_FLOOR):
                    shipped = self.recipes[key]
        self.trace.shipped_recipe = shipped
        self.trace.shipped = canonical(shipped)
        self.trace.shipped_measured = statistics.mean(self.measured[self.trace.shipped]) \
            if self.measured.get(self.trace.shipped) else None
        self.trace.baseline_measured = base_value
        # the incumbent after the confirmation is what ships
        if self.trace.timeline:
            self.trace.timeline[-1] = (self.trace.timeline[-1][0], self.ev.truth(shipped).tokens)
        return self.trace


def run_random(ev: Evaluator, baseline: Recipe, budget: float, seed: int, dims: list) -> Trace:
    method = _ModelFree("random", ev, baseline, budget, seed, dims)
    rng = random.Random("random-search|%d" % seed)
    first = method.launch(method.baseline)
    method.est = first.cost if first.ok else _projected_cost(ev, method.baseline)
    while method.room():
        for _ in range(MAX_DRAWS):
            choice = {lever.id: rng.choice([KEEP] + list(alts)) for lever, alts in dims}
            recipe, why = compose(method.baseline, dims, choice)
            if why and why != "baseline":
                method.trace.illegal += 1
                continue
            break
        else:
            method.trace.stop = "%d illegal draws in a row" % MAX_DRAWS
            break
        method.launch(recipe)
    else:
        method.trace.stop = "budget"
    return method.finish()


def run_tpe(ev: Evaluator, baseline: Recipe, budget: float, seed: int, dims: list) -> Trace:
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    method = _ModelFree("tpe", ev, baseline, budget, seed, dims)
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    space = {lever.id: CategoricalDistribution([KEEP] + list(alts)) for lever, alts in dims}
    study.enqueue_trial({lever.id: KEEP for lever, _ in dims})
    first = True
    while first or method.room():
        for _ in range(MAX_DRAWS):
            trial = study.ask(space)
            recipe, why = compose(method.baseline, dims, trial.params)
            if why and why != "baseline":
                method.trace.illegal += 1
                study.tell(trial, state=TrialState.FAIL)
                continue
            break
        else:
            method.trace.stop = "%d illegal draws in a row" % MAX_DRAWS
            break
        result = method.launch(recipe)
        if first:
            method.est = result.cost if result.ok else _projected_cost(ev, method.baseline)
            first = False
        if result.ok:
            study.tell(trial, result.tokens)
        else:
            study.tell(trial, state=TrialState.FAIL)
    else:
        method.trace.stop = "budget"
    return method.finish()
