"""The convergence check: the candidate's loss against the baseline's, step by step.

Two verdicts on the same steps (PROTOCOL.md §3-§4):

* ``bridge``: Megatron-Bridge's ``validate_convergence`` (scripts/performance/utils/evaluate.py)
  with the thresholds its launcher applies, reported for comparability. Its known holes (NaN or
  missing candidate values pass every check; a 10% tolerance at loss above 2) are left as they are
  here and closed by the gate's own checks.
* ``calibrated``: the candidate may differ from the baseline no more than a legitimate rerun
  does. Four statistics, each against the larger of its floor and ``RERUN_MULTIPLIER`` times what
  the baseline's own reruns show: the *level* (relative loss difference, largest over the
  window), the *progress* (difference of the loss change since the first compared step,
  relative to the baseline's loss, signed and averaged over the last third of the window), the
  *drift* (the size of the same difference, largest over the window) and the *widening* (how much
  the gap between the curves grew from the first steps to the last third). Where the reruns
  are bitwise identical (a deterministic setup) and every change is scheduling-only, the loss must
  be reproduced exactly.

A slime run has a second curve, its per-step ``train/grad_norm`` (``grad_norm_check``): a change that scales the
gradients (a reduction that sums where it should average, a loss scaled twice) leaves an Adam-trained loss almost
where it was and moves the gradient norm. It is judged only against the baseline's own reruns (no golden curve
logs one to set a floor on).

Every number a verdict depends on is in ``TOLERANCES``.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence

import numpy as np

TOLERANCES = {
    # Megatron-Bridge validate_convergence: function defaults, with the two its CLI overrides
    # (scripts/performance/argument_parser.py: --final_loss_tolerance 0.05, --skip_first_percent_loss 0.20).
    "bridge.correlation_threshold": 0.95,
    "bridge.high_loss_tolerance": 0.10,  # golden > 2.0
    "bridge.medium_loss_tolerance": 0.05,  # 0.5 < golden <= 2.0
    "bridge.low_loss_tolerance": 0.02,  # golden <= 0.5
    "bridge.final_loss_tolerance": 0.05,
    "bridge.max_outlier_ratio": 0.10,
    "bridge.outlier_threshold": 3.0,  # standard deviations
    "bridge.skip_first_percent_loss": 0.20,
    # Calibrated (PROTOCOL.md §4): floors from legitimate same-math changes on Megatron-LM's own
    # golden curves, and how far beyond the measured rerun spread a candidate may go. These are for
    # runs whose initial weights differ (a layout change re-drew them): the level (mostly the offset
    # the re-draw brings) 3 x, the progress and the drift (how differently the runs learn) about
    # 1.5 x the largest legitimate difference measured there (0.69%, 0.10% and 0.23%); the widening
    # 2 x its largest there (0.085%: runs whose weights were drawn apart come closer as they learn,
    # so the gap between them does not grow).
    "calibrated.level_floor": 0.02,
    "calibrated.progress_floor": 0.0016,
    "calibrated.drift_floor": 0.0035,
    "calibrated.widening_floor": 0.0017,
    "calibrated.rerun_multiplier": 3.0,
    # The loss of the first iteration is the initial weights' loss on the first batch, before any
    # update: when the candidate's equals the baseline's to this relative difference, both runs
    # started from the same weights, whatever the change's class says (Megatron draws tensor-parallel
    # shards from one full tensor with --use-cpu-initialization, for example).
    "calibrated.same_weights_first_step": 1e-6,
    # When no change re-draws the initial weights, both runs start from the same weights: any
    # difference is the training's own divergence, which grows with how far training moved.
    "calibrated.same_init.level_floor": 0.001,
    "calibrated.same_init.progress_floor": 0.0003,
    "calibrated.same_init.progress_fraction": 0.02,
    # The gradient norm (slime's train/grad_norm): its largest relative difference from the baseline's over the
    # window, against this multiple of its reruns' largest, and never below the loss level's floor for the same
    # initialisation (so a deterministic rerun does not demand bitwise equality of a scheduling change).
    "calibrated.grad_norm.rerun_multiplier": 3.0,
}


def _finite(values) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def bridge_validate(current: Sequence[float], golden: Sequence[float], tolerances: dict = TOLERANCES) -> dict:
    """Megatron-Bridge's ``validate_convergence`` on aligned per-step values (NaN where missing),
    step for step as the reference describes it, including its handling of NaN."""
    t = tolerances
    cur = np.asarray(current, dtype=float)
    gold = np.asarray(golden, dtype=float)
    skip = int(len(gold) * t["bridge.skip_first_percent_loss"])
    cur, gold = cur[skip:], gold[skip:]
    failed, metrics = [], {}
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        corr = float(np.corrcoef(cur, gold)[0, 1]) if len(cur) >= 2 else float("nan")
        metrics["correlation"] = {"value": corr, "threshold": t["bridge.correlation_threshold"],
                                  "rule": "fails when below"}
        if corr < t["bridge.correlation_threshold"]:
            failed.append("correlation")
        denom = np.where(gold == 0, np.abs(cur), np.abs(gold))
        rel = np.abs(cur - gold) / denom
        tol = np.where(gold > 2.0, t["bridge.high_loss_tolerance"],
                       np.where(gold > 0.5, t["bridge.medium_loss_tolerance"], t["bridge.low_loss_tolerance"]))
        fraction = float(np.sum(rel > tol)) / len(rel) if len(rel) else 0.0
        metrics["point_wise_tolerance"] = {"value": fraction, "threshold": t["bridge.max_outlier_ratio"],
                                           "max_rel_diff": _num(np.nanmax(rel)) if len(rel) else None,
                                           "rule": "fraction of steps beyond the loss-magnitude tolerance; fails when above"}
        if fraction > t["bridge.max_outlier_ratio"]:
            failed.append("point_wise_tolerance")
        final = float(abs(cur[-1] - gold[-1]) / gold[-1]) if len(cur) else float("nan")
        metrics["final_loss"] = {"value": final, "threshold": t["bridge.final_loss_tolerance"],
                                 "rule": "fails when above"}
        if final > t["bridge.final_loss_tolerance"]:
            failed.append("final_loss")
        resid = cur - gold
        spread = np.std(resid)
        count = int(np.sum(np.abs(resid - np.mean(resid)) > t["bridge.outlier_threshold"] * spread))
        ratio = count / len(resid) if len(resid) else 0.0
        metrics["outliers"] = {"value": ratio, "threshold": t["bridge.max_outlier_ratio"],
                               "rule": "fraction of residuals beyond 3 sigma; fails when above"}
        if ratio > t["bridge.max_outlier_ratio"]:
            failed.append("outliers")
    for metric in metrics.values():
        metric["value"] = _num(metric["value"])
    return {"passed": not failed, "failed_metrics": failed, "skipped_first_steps": skip, "metrics": metrics}


def _num(value) -> Optional[float]:
    value = float(value)
    return value if math.isfinite(value) else None


def level_series(values: Sequence[float], base: Sequence[float]) -> list:
    return [abs(c - b) / abs(b) if b else abs(c - b) for c, b in zip(values, base)]


def signed_progress_series(values: Sequence[float], base: Sequence[float]) -> list:
    """Per step: the difference of the loss change since the first step, relative to the baseline's loss (positive
    where the candidate's loss fell less)."""
    c0, b0 = values[0], base[0]
    return [((c - c0) - (b - b0)) / abs(b) if b else (c - c0) - (b - b0) for c, b in zip(values, base)]


def progress_series(values: Sequence[float], base: Sequence[float]) -> list:
    """Per step: the size of that difference."""
    return [abs(v) for v in signed_progress_series(values, base)]


def _late(series: list) -> list:
    return series[-max(1, len(series) // 3):]


def _late_median(series: list) -> float:
    return float(np.median(_late(series)))


def progress(values: Sequence[float], base: Sequence[float]) -> float:
    """The progress statistic: the size of the signed per-step difference's mean over the last third of the window.
    The batches both runs see are the same, so their step-to-step wiggle is shared and what is left of it in the
    difference is noise around the systematic part; the mean of the signed values lets that noise cancel, where a
    median of sizes would keep it."""
    return abs(float(np.mean(_late(signed_progress_series(values, base)))))


EARLY_STEPS = 3
STATISTICS = ("level", "progress", "drift", "widening")


def widening(level: list) -> tuple:
    """How much the gap between the curves grew: ``(late - early, early, late)``, the median of the level
    series over the last third of the window less its median over the first ``EARLY_STEPS`` steps (negative
    when the gap closed)."""
    early, late = float(np.median(level[:EARLY_STEPS])), _late_median(level)
    return late - early, early, late


def same_weights_measured(steps: Sequence[int], candidate: Sequence[float], baseline: Sequence[float],
                          tolerances: dict = TOLERANCES) -> bool:
    """Whether the first iteration's losses show that both runs started from the same weights: the window
    starts at iteration 1 (its loss is the initial weights' on the first batch, before any update) and
    the two agree to ``calibrated.same_weights_first_step``."""
    if not steps or steps[0] != 1:
        return False
    base = abs(baseline[0]) or 1.0
    return abs(candidate[0] - baseline[0]) / base <= tolerances["calibrated.same_weights_first_step"]


def calibrated(steps: Sequence[int], candidate: Sequence[float], baseline: Sequence[float],
               repeats: Sequence[Sequence[float]] = (), exact_change: bool = False, same_init: bool = False,
               tolerances: dict = TOLERANCES) -> dict:
    """The calibrated check on aligned, finite values (the gate has already failed NaN and gaps).

    ``repeats`` are the baseline's reruns on the same steps; ``exact_change`` is true when every
    change is classed scheduling-only, which must reproduce the loss exactly on a deterministic setup;
    ``same_init`` when no change re-draws the initial weights, which tightens the floors. A change that
    would re-draw them is judged by the same tight floors when the first iteration's losses show the
    weights are the same (``same_weights_measured``)."""
    t = tolerances
    level = level_series(candidate, baseline)
    drift = progress_series(candidate, baseline)
    out = {"steps": [steps[0], steps[-1]],
           "level": {"value": max(level), "step": steps[level.index(max(level))]},
           "progress": {"value": progress(candidate, baseline),
                        "over_steps": [steps[-max(1, len(steps) // 3)], steps[-1]]},
           "drift": {"value": max(drift), "step": steps[drift.index(max(drift))]},
           "widening": dict(zip(("value", "early", "late"), widening(level)),
                            from_steps=[steps[0], steps[min(EARLY_STEPS, len(steps)) - 1]],
                            over_steps=[steps[-max(1, len(steps) // 3)], steps[-1]])}
    usable = [r for r in repeats if len(r) == len(baseline)]
    deterministic = bool(usable) and all(list(r) == list(baseline) for r in usable)
    out["reruns"] = len(usable)
    out["deterministic"] = deterministic
    rerun = {"level": None, "progress": None, "drift": None, "widening": None}
    if usable:
        rerun["level"] = max(max(level_series(r, baseline)) for r in usable)
        rerun["progress"] = max(progress(r, baseline) for r in usable)
        rerun["drift"] = max(max(progress_series(r, baseline)) for r in usable)
        rerun["widening"] = max(max(0.0, widening(level_series(r, baseline))[0]) for r in usable)
    multiplier = t["calibrated.rerun_multiplier"]
    baseline_progress = max(abs(b - baseline[0]) / abs(b) if b else 0.0 for b in baseline)
    out["baseline_progress"] = baseline_progress
    measured = not same_init and same_weights_measured(steps, candidate, baseline, t)
    out["same_init"] = same_init or measured
    out["same_init_basis"] = ("no change re-draws the initial weights" if same_init else
                              "the first iteration's loss is the baseline's to %g: the same initial weights"
                              % t["calibrated.same_weights_first_step"] if measured else
                              "a change re-draws the initial weights")
    for name in STATISTICS:
        if out["same_init"]:
            floor = max(t["calibrated.same_init.%s_floor" % ("progress" if name == "progress" else "level")],
                        t["calibrated.same_init.progress_fraction"] * baseline_progress)
            floor_text = "same-weights floor %.3g" % floor
        else:
            floor = t["calibrated.%s_floor" % name]
            floor_text = "floor %g" % floor
        stat = out[name]
        stat["rerun"] = rerun[name]
        stat["floor"] = floor
        stat["threshold"] = max(floor, multiplier * rerun[name]) if rerun[name] is not None else floor
        stat["threshold_basis"] = (floor_text if rerun[name] is None or multiplier * rerun[name] <= floor
                                   else "%g x the baseline reruns' %.3g" % (multiplier, rerun[name]))
        stat["passed"] = stat["value"] <= stat["threshold"]
    out["exact_required"] = deterministic and exact_change
    reasons = []
    if out["exact_required"]:
        differing = [s for s, c, b in zip(steps, candidate, baseline) if c != b]
        out["exact"] = {"passed": not differing, "first_differing_step": differing[0] if differing else None}
        if differing:
            reasons.append("the baseline's reruns are bitwise identical and every change is scheduling-only, but the "
                           "loss differs from step %d on (%.6g against %.6g)"
                           % (differing[0], candidate[steps.index(differing[0])], baseline[steps.index(differing[0])]))
    for name, words in (("level", "loss differs from the baseline's by %.3g%% at step %d, beyond the %.3g%% a "
                                  "legitimate rerun allows (%s)"),
                        ("progress", "loss change since step %d differs from the baseline's by %.3g%% of the loss "
                                     "(mean of steps %d-%d), beyond %.3g%% (%s)"),
                        ("drift", "loss change since step %d differs from the baseline's by %.3g%% of the loss at "
                                  "step %d, beyond the %.3g%% a legitimate rerun allows (%s)"),
                        ("widening", "loss gap to the baseline widened from %.3g%% (median of steps %d-%d) to %.3g%% "
                                     "(median of steps %d-%d), by %.3g%%, beyond the %.3g%% a legitimate rerun "
                                     "allows (%s)")):
        stat = out[name]
        if stat["passed"]:
            continue
        if name == "level":
            reasons.append(words % (stat["value"] * 100, stat["step"], stat["threshold"] * 100, stat["threshold_basis"]))
        elif name == "drift":
            reasons.append(words % (steps[0], stat["value"] * 100, stat["step"], stat["threshold"] * 100,
                                    stat["threshold_basis"]))
        elif name == "widening":
            reasons.append(words % (stat["early"] * 100, stat["from_steps"][0], stat["from_steps"][1],
                                    stat["late"] * 100, stat["over_steps"][0], stat["over_steps"][1],
                                    stat["value"] * 100, stat["threshold"] * 100, stat["threshold_basis"]))
        else:
            reasons.append(words % (steps[0], stat["value"] * 100, stat["over_steps"][0], stat["over_steps"][1],
                                    stat["threshold"] * 100, stat["threshold_basis"]))
    out["passed"] = not reasons
    out["reasons"] = reasons
    return out


def grad_norm_check(steps: Sequence[int], candidate: Sequence[float], baseline: Sequence[float],
                    repeats: Sequence[Sequence[float]] = (), same_init: bool = False,
                    tolerances: dict = TOLERANCES) -> dict:
    """The gradient-norm curve of a slime run against its baseline's, on aligned finite values: the largest
    relative difference over the window against ``calibrated.grad_norm.rerun_multiplier`` times the largest the
    baseline's reruns show, at least the loss level's floor. Without a rerun nothing calibrates it: ``passed`` is
    None (reported, not deciding)."""
    t = tolerances
    level = level_series(candidate, baseline)
    usable = [r for r in repeats if len(r) == len(baseline)]
    floor = t["calibrated.same_init.level_floor" if same_init else "calibrated.level_floor"]
    out = {"steps": [steps[0], steps[-1]], "value": max(level), "step": steps[level.index(max(level))],
           "reruns": len(usable), "floor": floor}
    if not usable:
        out.update(rerun=None, threshold=None, passed=None,
                   threshold_basis="not judged: no rerun of the baseline logs a gradient norm to calibrate it on",
                   reasons=[])
        return out
    rerun = max(max(level_series(r, baseline)) for r in usable)
    multiplier = t["calibrated.grad_norm.rerun_multiplier"]
    out["rerun"] = rerun
    out["threshold"] = max(floor, multiplier * rerun)
    out["threshold_basis"] = ("floor %g" % floor if multiplier * rerun <= floor
                              else "%g x the baseline reruns' %.3g" % (multiplier, rerun))
    out["passed"] = out["value"] <= out["threshold"]
    out["reasons"] = [] if out["passed"] else [
        "gradient norm differs from the baseline's by %.3g%% at step %d, beyond the %.3g%% its reruns allow (%s)"
        % (out["value"] * 100, out["step"], out["threshold"] * 100, out["threshold_basis"])]
    return out
