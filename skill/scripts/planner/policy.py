"""The planner's decisions: pure functions of a ``State`` (no I/O, no clock, no process; seeded).

Signatures (stable; a benchmark drives them with a simulated evaluator)::

    propose(state: State) -> Action
    options(state: State) -> list[Option]          # the exploration candidates, in the order propose takes them
    diagnose(prediction: Prediction, measured: Measured = None) -> dict[str, float]   # bottleneck -> share
    state_for(recipe, baseline=None, *, leader, tried=(), band=0.01, band_established=True,
              baseline_runs_needed=0, budget_left=inf, run_cost=1.0, lineage=(), measured=None, seed=0,
              hardware=None, gate_rules=None, config=None, baseline_runs=(), excluded=None) -> State

``Action.kind`` is one of ``repeat_baseline``, ``candidate`` (``lever``, ``alternative``, ``hypothesis``),
``confirm`` (``run``), ``gate`` (``run``), ``retry`` (``run``: relaunch a run whose failure class is worth
one rerun), ``leave_one_out`` (``change``, ``alternative``: the change that removes it from the leader,
``hypothesis``) and ``stop`` (``reason``, ``evidence``: run ids). ``Action.as_tuple()`` gives
``("repeat_baseline",)``, ``("candidate", lever, alternative, hypothesis)``, ``("confirm", run)``,
``("gate", run)``, ``("retry", run)``, ``("leave_one_out", change)`` or ``("stop", reason, evidence)``.

The policy (README.md in this folder has the whole of it):

1. the baseline until the noise band is established (a stop when the baseline keeps failing or the band is
   over 25%; between 5% and 25% only changes larger than the band can count, and the campaign goes on);
2. a candidate that beats the leader is gated, then confirmed (``gate`` before ``confirm``: a gate-failed
   recipe is never confirmed); a run whose failure class is transient is rerun once;
3. exploration, one change against the current leader, under the projection's own error: its leave-one-out
   median absolute error of tokens/s/GPU (``projection/params.json`` "loo" "by_kind", projection/README.md:
   3.4% over the dense rows, 8.2% over the MoE rows; ``Config.error_median_dense``/``error_median_moe``) is
   read as a lognormal factor on each configuration's projection, of sd ``lognormal_sd(median)`` (0.051
   dense, 0.121 MoE; MoE when the leader has ``--num-experts``). A modelled option (the projection reads one of its
   lever's flags: ``projection.config.READS``) of predicted gain g is taken while
   ``P(true gain > band) = 1 - Phi((ln(1 + band) - ln(1 + g)) / sd)`` is at least ``Config.min_probability``
   (0.2), ordered by its expected improvement over the leader ``E[max(0, (1 + g) F - 1)]`` (the lognormal call
   price at strike 1). Levers the projection does not read get a quarter of the diagnosed share of the
   bottlenecks they address (the catalog's *Addresses*), need that share to clear the band, and come after
   the modelled ones. Never an alternative that returns a lever to a value a kept change of the lineage moved
   away from; a rejection from an older leader is re-tested when its predicted gain under the new leader is
   larger than it was, the stalest first. Exploration goes on while the budget holds the option's run and its
   confirmation, each at its own predicted cost (``run_cost`` x its projected step time over the leader's,
   never below ``run_cost``), plus the leave-one-out still owed;
4. leave-one-out on the final stack (every change of the leader's lineage but the last), each at its own
   predicted cost, skipping a removal the projection predicts to lose far more than the band
   (``P(true removal gain > -band) < min_probability``: the change's gain is already measured by the lineage);
5. stop with evidence: no option left with ``P(gain > band) >= min_probability``, or a budget that cannot hold
   another useful run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Dict, List, Optional, Sequence

from attune.campaign.ranking import band_text

from .odds import expected_improvement, lognormal_sd, probability_above
from .space import Alternative, Lever, Prediction

__all__ = ["Measured", "Tried", "Change", "Config", "State", "Option", "Action", "propose", "options", "diagnose",
           "state_for", "runs_left", "VERDICTS", "project_lineage", "error_sd", "lognormal_sd",
           "probability_above", "expected_improvement"]

# Tried.verdict: running (launched, not finalized), beats (beats the leader: needs gate and confirmation),
# kept, rejected, hurt (as ``attune lesson`` says), failed (no score: failure holds the class).
VERDICTS = ("running", "beats", "kept", "rejected", "hurt", "failed", "superseded")
NEVER_AGAIN = ("nan_loss", "config_error")  # failure classes no new leader changes
# Without a projection (no hardware known) the diagnosis is unknown: SKILL.md's order for that case, the
# communication-overlap levers first, then what spends measured headroom, then the rest in the catalog's order.
# slime's own levers lead on a slime recipe (the space offers them only there): an RL step's padding of uneven
# samples and its rollout engines come before the pretraining layout's overlaps
BLIND_ORDER = ("dynamic-batch-size", "rollout-engine-tp", "sglang-mem-fraction", "slime-offload",
               "log-probs-max-tokens", "overlap-grad-reduce", "overlap-param-gather", "tp-comm-overlap",
               "micro-batch-size", "full-recompute", "selective-recompute", "virtual-pipeline")


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the leader's log measured (``attune metrics``), when it has it."""
    tokens_per_s_per_gpu: Optional[float] = None
    step_s: Optional[float] = None
    max_allocated_gib: Optional[float] = None
    max_reserved_gib: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Tried:
    """One tested change: ``lever`` and ``alternative`` (its name), against ``parent`` (a run id), as ``run``."""
    lever: str
    alternative: str
    parent: str
    run: str
    verdict: str
    gain: Optional[float] = None  # measured against the parent
    predicted_gain: Optional[float] = None  # what the projection said when it was tried
    failure: Optional[str] = None  # the failure class of a failed run
    gate: Optional[str] = None  # pass | fail | None
    confirmed: bool = False  # the recipe has its paired confirmation
    retried: bool = False  # a rerun of a failed run was launched
    loo: bool = False  # a leave-one-out candidate
    order: int = 0  # when it was tried (larger: later)
    repeat_of: Optional[str] = None  # ahead of the leader, not conclusive: the run the ranking asks to repeat


@dataclasses.dataclass(frozen=True)
class Change:
    """One step of the leader's lineage: ``lever``/``alternative`` introduced by ``run``; ``undo`` is the
    change that removes it from the current leader (None when that is not a legal candidate); ``predicted``
    the projection of the leader with it removed (``undo.child``), when known: the leave-one-out's predicted
    loss and cost."""
    lever: str
    alternative: str
    run: str
    undo: Optional[Alternative] = None
    gain: Optional[float] = None
    predicted: Optional[Prediction] = None
    removed: tuple = ()  # the arguments and variables the change took out of its parent's recipe


@dataclasses.dataclass(frozen=True)
class Config:
    clear_factor: float = 1.0  # a predicted gain must exceed band x clear_factor
    unmodelled_fraction: float = 0.25  # share of its bottleneck an unmodelled lever is expected to remove
    noisy_band: float = 0.05  # above it, measurement is the bottleneck for small levers (ranking.NOISY_BAND)
    # above it, no change can be told from a rerun: the campaign stops. Between the two it goes on, since a change
    # larger than the band still counts (measured: real Megatron-LM on a shared 2-core CPU has an 8-13% band and
    # levers of +20% to +67%, bench/README.md)
    unusable_band: float = 0.25
    max_baseline_failures: int = 2
    retry_classes: tuple = ("nccl_timeout", "hang", "lost", "unschedulable")  # failure classes worth one rerun
    retest_margin: float = 0.5  # a re-test needs a predicted gain larger by this many bands than before
    recent_evidence: int = 6  # candidates against the leader named as a stop's evidence
    # The projection's own error (projection/README.md, params.json "loo" "by_kind": leave-one-out median absolute
    # error of tokens/s/GPU, dense and MoE rows), read as a lognormal factor on every configuration's projection.
    error_median_dense: float = dataclasses.field(default_factory=lambda: projection_error("dense"))
    error_median_moe: float = dataclasses.field(default_factory=lambda: projection_error("moe"))
    min_probability: float = 0.2  # an option is worth a run while P(true gain > band) is at least this


# what the projection's leave-one-out error was when params.json had no dense/MoE split (its first fits)
_ERROR_WITHOUT_SPLIT = {"dense": 0.040, "moe": 0.223}


def projection_error(kind: str) -> float:
    """The projection's leave-one-out median absolute error of tokens/s/GPU over the published ``kind`` rows
    (``dense`` or ``moe``), as a fraction, from the calibration it projects with (``params.json`` ``loo``
    ``by_kind``); the figures of its first fits where the file has no split."""
    from attune.projection import api
    params = api.load_params() or {}
    value = ((params.get("loo") or {}).get("by_kind") or {}).get(kind)
    return float(value) / 100.0 if isinstance(value, (int, float)) and value > 0 else _ERROR_WITHOUT_SPLIT[kind]


@dataclasses.dataclass
class State:
    leader: Optional[str]  # the leader's run id (the baseline's first run while it leads); None before any
    leader_measured: Measured = Measured()
    baseline_runs: tuple = ()  # run ids of the baseline recipe (evidence)
    baseline_failures: int = 0  # baseline runs that ended without a score
    baseline_runs_needed: int = 0
    band: float = 0.01
    band_established: bool = False
    budget_left: float = math.inf  # in budget units (runs or GPU-hours)
    run_cost: float = 1.0  # units one more run needs
    levers: list = dataclasses.field(default_factory=list)  # space(leader recipe)
    leader_prediction: Optional[Prediction] = None
    predictions: dict = dataclasses.field(default_factory=dict)  # Alternative.key -> Prediction, under the leader
    tried: list = dataclasses.field(default_factory=list)
    lineage: list = dataclasses.field(default_factory=list)  # Change, baseline to leader
    excluded: dict = dataclasses.field(default_factory=dict)  # Alternative.key -> why (refused by candidate new)
    seed: int = 0
    config: Config = Config()
    moe: Optional[bool] = None  # the leader has --num-experts (None: read from the space's recipes)


@dataclasses.dataclass(frozen=True)
class Option:
    lever: Lever
    alternative: Alternative
    gain: float  # expected gain (predicted, or the unmodelled estimate)
    bound: float  # the most it may give: the predicted gain, or the addressed share when unmodelled
    modelled: bool
    share: float  # diagnosed share of the bottlenecks the lever addresses
    memory_gib: Optional[float] = None
    retest_of: Optional[Tried] = None
    why: str = ""
    probability: Optional[float] = None  # P(true gain > band) under the projection's error (modelled options)
    expected: Optional[float] = None  # expected improvement over the leader, E[max(0, true gain)] (modelled)
    cost: Optional[float] = None  # budget units one run of it is predicted to need


@dataclasses.dataclass(frozen=True)
class Action:
    kind: str
    lever: Optional[str] = None
    alternative: Optional[Alternative] = None
    hypothesis: str = ""
    run: Optional[str] = None
    change: Optional[Change] = None
    reason: str = ""
    evidence: tuple = ()
    why: str = ""  # one line: why this action now

    def as_tuple(self) -> tuple:
        if self.kind == "candidate":
            return ("candidate", self.lever, self.alternative, self.hypothesis)
        if self.kind in ("confirm", "gate", "retry", "repeat"):
            return (self.kind, self.run)
        if self.kind == "leave_one_out":
            return ("leave_one_out", self.change)
        if self.kind == "stop":
            return ("stop", self.reason, self.evidence)
        return (self.kind,)


# ------------------------------------------------------------------------------------------ diagnosis
def diagnose(prediction: Optional[Prediction], measured: Optional[Measured] = None) -> Dict[str, float]:
    """Shares of the step (and of memory) by bottleneck name, from the projection's step-time parts:
    ``pipeline_bubble``, ``exposed_tp_communication``, ``exposed_dp_communication``,
    ``exposed_pipeline_communication``, ``exposed_all_to_all`` (seconds / step), ``compute``,
    ``memory_headroom`` (free / usable memory, from the measured peak when the log has one). Ordered largest
    first. Empty without a projection."""
    if prediction is None or not prediction.ok or prediction.step_s <= 0:
        return {}
    step = prediction.step_s
    exposed = prediction.exposed or {}
    out = {"compute": prediction.compute_s / step, "pipeline_bubble": prediction.bubble_s / step,
           "exposed_tp_communication": (exposed.get("tp", 0.0) + exposed.get("cp", 0.0)) / step,
           "exposed_dp_communication": exposed.get("dp", 0.0) / step,
           "exposed_pipeline_communication": exposed.get("pp", 0.0) / step,
           "exposed_all_to_all": exposed.get("ep", 0.0) / step}
    used = prediction.memory_gib
    if measured is not None and measured.max_reserved_gib:
        used = max(used, measured.max_reserved_gib)
    if prediction.usable_gib > 0:
        out["memory_headroom"] = max(0.0, prediction.usable_gib - used) / prediction.usable_gib
    return dict(sorted(out.items(), key=lambda item: -item[1]))


def runs_left(state: State) -> int:
    if state.run_cost <= 0 or math.isinf(state.budget_left):
        return 10 ** 9
    return int(math.floor(state.budget_left / state.run_cost + 1e-9))


def _tiebreak(seed: int, *parts) -> str:
    return hashlib.sha256(("%d|" % seed + "|".join(str(p) for p in parts)).encode()).hexdigest()


def _memory_ratio(state: State) -> float:
    """Measured peak (reserved) over the projected memory of the leader, when both exist: the projection's
    memory error on this recipe, applied to every alternative (never below 1: it only makes the filter stricter)."""
    lead, measured = state.leader_prediction, state.leader_measured
    if lead is None or not lead.ok or not measured or not measured.max_reserved_gib or lead.memory_gib <= 0:
        return 1.0
    return max(1.0, min(1.5, measured.max_reserved_gib / lead.memory_gib))


def _is_moe(state: State) -> bool:
    if state.moe is not None:
        return state.moe
    for lever in state.levers:
        for alt in lever.alternatives:
            if alt.child is not None:
                return "--num-experts" in alt.child.args()
    return False


def error_sd(state: State) -> float:
    """The lognormal sd of the projection's error for the leader's kind (dense or MoE)."""
    cfg = state.config
    return lognormal_sd(cfg.error_median_moe if _is_moe(state) else cfg.error_median_dense)


def _modelled(state: State, lever: Lever, alt: Alternative, pred: Optional[Prediction]) -> bool:
    """Whether the projection reads the lever's flags (``projection.config.READS``/``READS_ENV``): then its
    prediction is the estimate, even when it equals the leader's."""
    from attune.projection.config import READS, READS_ENV
    lead = state.leader_prediction
    if pred is None or not pred.ok or lead is None or not lead.ok or lead.tokens_per_s_per_gpu <= 0:
        return False
    own = alt.names() & set(lever.flags) or alt.names()
    return any(name in READS if name.startswith("--") else name in READS_ENV for name in own)


def _cost(state: State, pred: Optional[Prediction]) -> float:
    """Budget units one run of a recipe projected as ``pred`` needs: ``run_cost`` (priced on the baseline)
    scaled by its projected step time over the leader's, never below ``run_cost``."""
    lead = state.leader_prediction
    if pred is None or not pred.ok or lead is None or not lead.ok or lead.step_s <= 0 or pred.step_s <= 0:
        return state.run_cost
    return state.run_cost * max(1.0, pred.step_s / lead.step_s)


def _value(recipe, name: str):
    return recipe.args().get(name) if name.startswith("--") else recipe.env().get(name)


def _reverses(state: State, alt: Alternative) -> Optional[Change]:
    """The kept change of the lineage whose lever ``alt`` would return to the value it moved away from, or
    one whose removal of an argument ``alt`` would undo by setting it again, whatever its lever (recompute
    back on, by any method, after a kept ``recompute=none``)."""
    if alt.child is None:
        return None
    for change in state.lineage:
        if change.removed and any(_value(alt.child, name) is not None for name in change.removed):
            return change
        undo = change.undo
        if change.lever != alt.lever or undo is None or undo.child is None:
            continue
        if all(_value(alt.child, name) == _value(undo.child, name) for name in undo.names()):
            return change
    return None


def options(state: State) -> List[Option]:
    """Every alternative worth a run against the current leader, best first (see the module docstring)."""
    cfg = state.config
    threshold = state.band * cfg.clear_factor
    shares = diagnose(state.leader_prediction, state.leader_measured)
    ratio = _memory_ratio(state)
    lead = state.leader_prediction
    sd = error_sd(state)
    by_key = {}
    for tried in state.tried:
        by_key.setdefault((tried.lever, tried.alternative), []).append(tried)
    found = []
    for lever in state.levers:
        share = sum(shares.get(name, 0.0) for name in lever.addresses if name != "memory_headroom")
        for alt in lever.alternatives:
            if alt.key in state.excluded:
                continue
            # a run that lost the lead to a sibling alongside it says nothing against the change on the new leader
            history = [t for t in by_key.get(alt.key, []) if t.verdict != "superseded"]
            if any(t.parent == state.leader for t in history):
                continue  # tried against this leader already (or running)
            if any(t.gate == "fail" or t.failure in NEVER_AGAIN for t in history):
                continue  # a reason no new leader changes
            if any(t.verdict == "running" for t in history):
                continue  # in flight (alongside another candidate): its result decides
            # a change that beat an earlier leader but did not become the leader (a sibling run at the same time
            # took the lead) is tried again on top of the new leader: the two may stack
            if _reverses(state, alt) is not None:
                continue  # back to a value the lineage moved away from, with a kept verdict
            pred = state.predictions.get(alt.key)
            if pred is not None and not pred.ok:
                continue  # the projection refuses the layout
            if pred is not None and (not pred.fits or pred.memory_gib * ratio > pred.usable_gib):
                continue  # the memory pre-filter
            modelled = _modelled(state, lever, alt, pred)
            probability = expected = None
            if modelled:
                gain = pred.tokens_per_s_per_gpu / lead.tokens_per_s_per_gpu - 1
                bound = gain
                probability = probability_above(gain, threshold, sd)
                expected = expected_improvement(gain, sd)
                if probability < cfg.min_probability:
                    continue
            elif lead is not None and lead.ok and pred is not None:
                gain, bound = cfg.unmodelled_fraction * share, share
                if bound <= threshold or gain <= 0:
                    continue
            else:  # no projection at all: every lever is a guess; the catalog's order decides
                gain, bound = cfg.unmodelled_fraction * threshold * 2, math.inf
            retest = None
            if history:  # rejected, hurt or failed against an older leader
                last = max(history, key=lambda t: t.order)
                before = last.predicted_gain
                if not modelled or before is None or gain <= before + cfg.retest_margin * state.band:
                    continue
                retest = last  # staleness: how long ago it was last tested
            why = ("predicted %+.1f%%, P(clears the band) %.0f%%, expected improvement %+.1f%%" % (
                       100 * gain, 100 * probability, 100 * expected) if modelled else
                   "not modelled; addresses %.1f%% of the step" % (100 * share) if math.isfinite(bound) else
                   "no projection")
            if retest is not None:
                why += "; re-test of %s (predicted %+.1f%% then)" % (retest.run, 100 * (last.predicted_gain or 0))
            found.append(Option(lever, alt, gain, bound, modelled, share,
                                pred.memory_gib if pred is not None and pred.ok else None, retest, why,
                                probability, expected, _cost(state, pred)))
    if lead is None:  # blind: one alternative per lever, the first its lever lists
        firsts = {}
        for opt in found:
            firsts.setdefault(opt.lever.id, opt)
        found = list(firsts.values())

    def key(opt: Option):
        memory = opt.memory_gib if opt.memory_gib is not None else 0.0
        stale = opt.retest_of.order if opt.retest_of is not None else 10 ** 9
        blind = BLIND_ORDER.index(opt.lever.id) if opt.lever.id in BLIND_ORDER else len(BLIND_ORDER)
        value = opt.expected if opt.expected is not None else opt.gain
        # blind (no projection): the order SKILL.md gives for an unknown bottleneck comes before exactness
        return (0 if opt.modelled else 1, -round(value, 5), stale, blind if lead is None else 0,
                -round(opt.share, 4), round(memory, 1), 0 if opt.lever.exact else 1,
                _tiebreak(state.seed, opt.lever.id, opt.alternative.name))
    return sorted(found, key=key)


def _pct(value: Optional[float]) -> str:
    return "%+.1f%%" % (100 * value) if value is not None else "?"


def hypothesis(state: State, opt: Option) -> str:
    """A falsifiable hypothesis: the mechanism (the bottleneck it addresses), the numbers that should move,
    and the expected gain against the band."""
    alt, lead = opt.alternative, state.leader_prediction
    pred = state.predictions.get(alt.key)
    shares = diagnose(lead, state.leader_measured)
    top = next(((k, v) for k, v in shares.items() if k not in ("compute", "memory_headroom")), None)
    parts = ["%s (%s)" % (alt.name, opt.lever.id)]
    if opt.modelled and lead is not None and pred is not None and pred.step_s == lead.step_s:
        parts.append("the projection reads its flags and predicts no change (step %.2f s)" % lead.step_s)
    if opt.modelled and lead is not None and pred is not None:
        parts.append("projection: step %.2f s -> %.2f s (compute %.2f -> %.2f s, exposed communication %.2f -> "
                     "%.2f s, bubble %.2f -> %.2f s), memory %.1f -> %.1f GiB of %.1f" % (
                         lead.step_s, pred.step_s, lead.compute_s, pred.compute_s, lead.exposed_comm_s,
                         pred.exposed_comm_s, lead.bubble_s, pred.bubble_s, lead.memory_gib, pred.memory_gib,
                         pred.usable_gib))
        measured = state.leader_measured.tokens_per_s_per_gpu if state.leader_measured else None
        expect = "expect %s tokens/s/GPU" % _pct(opt.gain)
        if measured:
            expect += " (%.1f -> about %.1f)" % (measured, measured * (1 + opt.gain))
        if opt.probability is not None:
            expect += ("; with the projection's error (lognormal sd %.3f) P(gain > band) %.0f%%, expected "
                       "improvement %s" % (error_sd(state), 100 * opt.probability, _pct(opt.expected)))
        parts.append(expect)
    elif math.isfinite(opt.bound):
        parts.append("the projection does not model it; it addresses %s, %.1f%% of the step by the projection's "
                     "breakdown; expect at most %s, about %s tokens/s/GPU" % (
                         ", ".join(opt.lever.addresses) or "no diagnosed bottleneck", 100 * opt.share,
                         _pct(opt.bound), _pct(opt.gain)))
    else:
        parts.append("no projection for this recipe: untested lever from the catalog; expect a change beyond the "
                     "band or a rejection")
    parts.append("a candidate needs %s" % band_text(state.band))
    if top is not None:
        parts.append("top bottleneck %s %.1f%% of the step" % (top[0], 100 * top[1]))
    if opt.retest_of is not None:
        parts.append("re-test of %s (%s against %s)" % (opt.retest_of.run, opt.retest_of.verdict,
                                                          opt.retest_of.parent))
    return "; ".join(parts)


def _loo_todo(state: State) -> List[Change]:
    if len(state.lineage) < 2:
        return []
    done = {(t.lever, t.alternative) for t in state.tried if t.loo and t.parent == state.leader}
    return [change for change in state.lineage[:-1]
            if change.undo is not None and change.undo.key not in done and change.undo.key not in state.excluded]


def _loo_cost(state: State, change: Change) -> float:
    return _cost(state, change.predicted)


def _evidence(state: State) -> tuple:
    against = [t for t in state.tried if t.parent == state.leader and t.verdict != "running"]
    runs = [t.run for t in sorted(against, key=lambda t: t.order)][-state.config.recent_evidence:]
    if state.leader and state.leader not in runs:
        runs.insert(0, state.leader)
    for run in state.baseline_runs:
        if len(runs) >= 2:
            break
        if run not in runs:
            runs.append(run)
    return tuple(runs)


def _stop(state: State, reason: str) -> Action:
    return Action("stop", reason=reason, evidence=_evidence(state), why=reason)


def propose(state: State) -> Action:
    """The next action (see the module docstring and README.md)."""
    cfg = state.config
    left = runs_left(state)
    # 1. the baseline and the band
    if state.leader is None or not state.band_established:
        if state.baseline_failures >= cfg.max_baseline_failures and (state.leader is None or not state.baseline_runs):
            return _stop(state, "the baseline failed %d times: it cannot be measured, so nothing can be compared"
                         % state.baseline_failures)
        if left < 1:
            return _stop(state, "the budget cannot hold another baseline run; the run-to-run noise is not measured")
        return Action("repeat_baseline", why="%d more baseline run(s) to measure the noise"
                      % max(1, state.baseline_runs_needed))
    if state.band > cfg.unusable_band:
        return _stop(state, "a candidate needs %s, over %.0f%%: the measurement, not the recipe, is "
                     "the bottleneck; no change can be told from a rerun" % (band_text(state.band),
                                                                              100 * cfg.unusable_band))
    # 2. winners: gate, then confirm; transient failures: one rerun
    for tried in sorted(state.tried, key=lambda t: t.order):
        if tried.verdict != "beats":
            continue
        if tried.gate is None:
            return Action("gate", run=tried.run, lever=tried.lever,
                          why="%s beats the leader: the gate first" % tried.run)
        if tried.gate == "pass" and not tried.confirmed and left >= 1:
            return Action("confirm", run=tried.run, lever=tried.lever,
                          why="%s beats the leader and passed the gate: its paired confirmation" % tried.run)
        if tried.gate == "pass" and tried.confirmed and tried.repeat_of and left >= 1:
            return Action("repeat", run=tried.repeat_of, lever=tried.lever,
                          why="%s is ahead of the leader, not conclusive: one more run of %s" % (tried.run,
                                                                                           tried.repeat_of))
    for tried in sorted(state.tried, key=lambda t: t.order):
        if tried.verdict == "failed" and tried.failure in cfg.retry_classes and not tried.retried and left >= 2:
            return Action("retry", run=tried.run, lever=tried.lever,
                          why="%s failed with %s: one rerun before rejecting it" % (tried.run, tried.failure))
    # 3. exploration, keeping room for a winner's confirmation and the leave-one-out (each at its own cost)
    todo = _loo_todo(state)
    found = options(state)
    reserve = sum(_loo_cost(state, change) for change in todo)
    budget = state.budget_left if not math.isinf(state.budget_left) else math.inf
    for best in found:
        cost = best.cost if best.cost is not None else state.run_cost
        if budget + 1e-9 >= 2 * cost + reserve and left >= 2:
            return Action("candidate", lever=best.lever.id, alternative=best.alternative,
                          hypothesis=hypothesis(state, best), why=best.why)
    # 4. leave-one-out on the final stack
    todo = [change for change in todo if budget + 1e-9 >= _loo_cost(state, change)]
    if todo and left >= 1:
        change = todo[0]
        gain = "%s" % _pct(change.gain) if change.gain is not None else "its measured gain"
        text = ("Leave-one-out of %s (%s, run %s): remove it from the final stack; hypothesis: the stack loses about "
                "%s tokens/s/GPU; a loss that does not clear its 95%% interval means it does not pull its weight here"
                % (change.alternative, change.lever, change.run, gain))
        return Action("leave_one_out", lever=change.lever, alternative=change.undo, change=change, hypothesis=text,
                      why="leave-one-out of %s" % change.alternative)
    # 5. stop
    if found:
        return _stop(state, "the budget left (%d run(s)) cannot hold a candidate and its confirmation%s; best left: "
                     "%s (%s)" % (left, " and the leave-one-out" if todo else "", found[0].alternative.name,
                                  found[0].why))
    owed = _loo_todo(state)
    if owed:
        return _stop(state, "the budget cannot hold the leave-one-out of %s" % ", ".join(c.alternative for c in owed))
    shares = diagnose(state.leader_prediction, state.leader_measured)
    top = ", ".join("%s %.1f%%" % (k, 100 * v) for k, v in shares.items()
                    if k not in ("compute", "memory_headroom") and v > 0)
    return _stop(state, "nothing left has a meaningful chance to pass the leader test (a candidate needs %s): every alternative of "
                 "the space was tried against leader %s, does not fit, or has P(gain > band) under %.0f%% with the "
                 "projection's error (lognormal sd %.3f)%s%s" % (
                     band_text(state.band), state.leader, 100 * cfg.min_probability, error_sd(state),
                     "; remaining exposed shares: " + top if top else "",
                     "; leave-one-out done" if len(state.lineage) >= 2 else ""))


# ------------------------------------------------------------------------------------------ building a state
def state_for(recipe, baseline=None, *, leader: Optional[str], tried: Sequence[Tried] = (), band: float = 0.01,
              band_established: bool = True, baseline_runs_needed: int = 0, budget_left: float = math.inf,
              run_cost: float = 1.0, lineage: Sequence[Change] = (), measured: Optional[Measured] = None,
              seed: int = 0, hardware: Optional[str] = None, gate_rules: Optional[str] = None,
              config: Optional[Config] = None, baseline_runs: Sequence[str] = (),
              excluded: Optional[dict] = None, baseline_failures: int = 0) -> State:
    """A ``State`` for the leader ``recipe``: its space (``space.space``) and projections (``space.predict``)
    computed here; everything else as given."""
    from . import space as space_mod
    levers = space_mod.space(recipe, baseline, gpu=hardware, gate_rules=gate_rules)
    lead, predictions = space_mod.predict(recipe, levers, hardware)
    lineage = project_lineage(lineage, hardware)
    return State(leader=leader, leader_measured=measured or Measured(), baseline_runs=tuple(baseline_runs),
                 baseline_failures=baseline_failures, baseline_runs_needed=baseline_runs_needed, band=band,
                 band_established=band_established, budget_left=budget_left, run_cost=run_cost, levers=levers,
                 leader_prediction=lead, predictions=predictions, tried=list(tried), lineage=list(lineage),
                 excluded=dict(excluded or {}), seed=seed, config=config or Config(),
                 moe="--num-experts" in space_mod.as_recipe(recipe).args())


def project_lineage(lineage: Sequence[Change], hardware: Optional[str] = None) -> List[Change]:
    """The lineage with ``Change.predicted`` filled in: the projection of each change's ``undo.child``."""
    from . import space as space_mod
    out = []
    for change in lineage:
        if change.predicted is None and change.undo is not None and change.undo.child is not None:
            change = dataclasses.replace(change, predicted=space_mod.project_recipe(change.undo.child, hardware))
        out.append(change)
    return out
