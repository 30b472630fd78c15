"""Fit the simulated workload's noise and loss models to Megatron-LM's golden curves.

Usage::

    python3 skill/scripts/simulate/fit_golden.py [GOLDEN_DIR] [--json]

``GOLDEN_DIR`` (default ``$ATTUNE_CORPUS_DIR/megatron_golden``, ``ATTUNE_CORPUS_DIR`` defaulting to
``../shared/data`` beside the repository; the curves are read in place, never copied) holds the ``dev_dgx_gb200`` developer set
of Megatron-LM's functional-test golden values (its ``SOURCE.md`` describes them): per case, ``lm loss``
and ``iteration-time`` per step with the exact flags. This script prints every number the simulator
uses (``model.FIT`` holds a copy; ``tests/test_simulate.py`` checks the two agree when the data is
there). Needs numpy; nothing else. Exit codes: 0 ok, 2 the folder is missing or unreadable.

What is fitted, and from what (README.md in this folder explains the models):

* step time, from the ``iteration-time`` series of the cases that ran on 8 GPUs (the ``_1node``
  copies ran on contended single nodes and are left out): the first logged step's excess in seconds
  (a lognormal), the next step's excess (linear in the steady step time), the per-step jitter (robust
  standard deviation of ``log(t / median)`` over steps 5-20) and rare slow steps; the run-to-run offset
  from the ``ckpt-resume`` cases whose second run's golden comes from the same commit (a real rerun of
  the same configuration);
* loss, from ``lm loss``: the shape of the curve (a stretched exponential fitted to the 2000-step
  case), the initial loss against ``ln(vocab)``, the step-to-step wiggle that every run of one data
  order shares, and four levels of run-to-run difference fitted to pairs of cases with the same model
  and data at the same world size, classed by the project's gate rules: reruns (only determinism
  settings differ), same-weights placement changes, placement changes that re-draw the initial
  weights, and numeric changes.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: load the attune package from this tree (attune.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import attune  # noqa: F401,E402

import numpy as np  # noqa: E402

from attune.correctness import convergence  # noqa: E402
from attune.correctness.rules import Rules  # noqa: E402

DEFAULT_DIR = Path(os.environ.get("ATTUNE_CORPUS_DIR") or Path(__file__).resolve().parents[3].parent / "shared" / "data") \
    / "megatron_golden"
GPT2_VOCAB = 50257  # the golden cases' GPT-2 BPE vocabulary
STEADY = (5, 20)  # steps whose median is a case's steady step time
WINDOW = 20  # the gate's window: steps 1-20
MC_DRAWS = 20000
SLOW_STEP_SDS = 5.0  # a step this many robust standard deviations above its case's median is a slow step


def load_cases(directory: Path) -> dict:
    cases = {}
    for path in sorted(directory.glob("*.json")):
        if path.name in ("index.json", "cross_group_pairs.json"):
            continue
        cases[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    return cases


def _series(metric: dict) -> dict:
    return {int(k): float(v) for k, v in (metric or {}).get("values", {}).items() if v != "nan"}


def _robust_sd(values) -> float:
    center = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - center) for v in values)


def fit_step_time(cases: dict) -> dict:
    """Warm-up, jitter, slow steps and run-to-run offset from the iteration-time series."""
    first, second, jitter, devs = [], [], [], []
    for name, case in cases.items():
        times = _series(case["metrics"].get("iteration-time"))
        if name.endswith("_1node") or not times or any(s not in times for s in range(2, STEADY[1] + 1)):
            continue
        steady = statistics.median(times[s] for s in range(STEADY[0], STEADY[1] + 1))
        first.append(times[2] - steady)  # the first logged step (the CI drops step 1)
        second.append((steady, times[3] - steady))
        logs = [math.log(times[s] / steady) for s in range(STEADY[0], STEADY[1] + 1)]
        sd = _robust_sd(logs)
        jitter.append(sd)
        devs += [value / sd for value in logs if sd > 0]
    log_first = [math.log(value) for value in first]
    steady_times = np.array([s for s, _ in second])
    excess = np.array([e for _, e in second])
    slope, intercept = np.polyfit(steady_times, excess, 1)
    spikes = [d for d in devs if d > SLOW_STEP_SDS]
    offsets = []
    for name, case in cases.items():
        check = case.get("resume_vs_first_run_lm_loss") or {}
        rerun = (case.get("resume_second_run_metrics") or {}).get("iteration-time")
        if not rerun or not check.get("goldens_same_commit") or check.get("second_run_golden_older"):
            continue
        one, two = _series(case["metrics"]["iteration-time"]), _series(rerun)
        half = int(case["MODEL_ARGS"]["--train-iters"]) // 2
        steps = [s for s in two if s in one and s >= half + STEADY[0]]
        offsets.append(math.log(statistics.median(two[s] for s in steps) / statistics.median(one[s] for s in steps)))
    return {
        "cases": len(first),
        "first_step_excess_s": {"median": round(math.exp(statistics.median(log_first)), 2),
                                "log_sd": round(statistics.pstdev(log_first), 3),
                                "range": [round(min(first), 2), round(max(first), 2)]},
        "second_step_excess": {"intercept_s": round(float(intercept), 4), "per_step_s": round(float(slope), 4)},
        "jitter_log_sd": round(statistics.median(jitter), 4),
        "slow_step": {"probability": round(len(spikes) / len(devs), 4),
                      "median_sds": round(statistics.median(spikes), 2),
                      "log_sd_sds": round(statistics.pstdev([math.log(d) for d in spikes]), 3)},
        "run_offset": {"pairs": len(offsets), "log_ratios": [round(x, 4) for x in offsets],
                       "log_sd": round(math.sqrt(sum(x * x for x in offsets) / max(1, len(offsets)) / 2), 4)},
    }


def shape(steps, c, k, floor, delay):
    """The loss relative to step 1: flat for ``delay`` steps (the learning-rate warm-up barely moves
    it), then a stretched exponential down towards ``floor``."""
    return floor + (1.0 - floor) * np.exp(-(np.maximum(0.0, steps - 1.0 - delay) / c) ** k)


def _best_shape(steps, rel, weights, c_grid, k_grid, delays):
    best = None
    for delay in delays:
        lag = np.maximum(0.0, steps - 1.0 - delay)
        g = np.exp(-(lag[None, None, :] / c_grid[:, None, None]) ** k_grid[None, :, None])
        a = 1.0 - g  # rel = floor * a + g: least squares in floor for each (c, k)
        floor = np.sum(weights * (rel - g) * a, axis=2) / np.maximum(np.sum(weights * a * a, axis=2), 1e-30)
        err = np.sqrt(np.sum(weights * (floor[:, :, None] * a + g - rel) ** 2, axis=2) / np.sum(weights))
        i, j = np.unravel_index(np.argmin(err), err.shape)
        if best is None or err[i, j] < best[0]:
            best = (float(err[i, j]), float(c_grid[i]), float(k_grid[j]), float(floor[i, j]), float(delay))
    return best


def fit_loss_shape(cases: dict) -> dict:
    """``L(s) / L(1)`` (``shape``) fitted jointly to the median of the 100-step curves (steps 1-100)
    and the longest finite curve (steps 101 on), each region weighted equally; the initial loss
    against ln(vocab); the step-to-step wiggle every run of one data order shares."""
    hundred = []
    for name, case in cases.items():
        loss = _series(case["metrics"]["lm loss"])
        if name.endswith("_1node") or case.get("lm_loss_all_zero") or any(s not in loss for s in range(1, 101)):
            continue
        hundred.append([loss[s] / loss[1] for s in range(1, 101)])
    head = np.median(np.array(hundred), axis=0)
    longest = max(cases, key=lambda n: len(_series(cases[n]["metrics"]["lm loss"])))
    loss = _series(cases[longest]["metrics"]["lm loss"])
    tail_steps = np.array([s for s in sorted(loss) if s > 100], dtype=float)
    steps = np.concatenate([np.arange(1.0, 101.0), tail_steps])
    rel = np.concatenate([head, np.array([loss[int(s)] for s in tail_steps]) / loss[1]])
    weights = np.concatenate([np.full(100, 1.0 / 100), np.full(len(tail_steps), 1.0 / len(tail_steps))])
    err, c, k, floor, delay = _best_shape(steps, rel, weights, np.exp(np.linspace(np.log(20), np.log(3000), 60)),
                                          np.arange(0.5, 3.01, 0.1), np.arange(0.0, 20.5, 1.0))
    err, c, k, floor, delay = _best_shape(steps, rel, weights, np.linspace(c * 0.9, c * 1.1, 41),
                                          np.arange(max(0.3, k - 0.1), k + 0.101, 0.01), [delay])
    fitted = shape(np.arange(1.0, 101.0), c, k, floor, delay)
    initial, wiggle = [], []
    for case in cases.values():
        loss = _series(case["metrics"]["lm loss"])
        if case.get("lm_loss_all_zero") or any(s not in loss for s in range(1, WINDOW + 1)):
            continue
        initial.append(loss[1] / math.log(GPT2_VOCAB))
        ratio = np.array([loss[s] for s in range(1, WINDOW + 1)]) / (loss[1] * fitted[:WINDOW])
        wiggle.append(float(np.std(np.diff(ratio)) / math.sqrt(2)))
    return {"fitted_on": "median of %d 100-step curves (steps 1-100) + %s (steps 101-%d)"
                         % (len(hundred), longest, int(tail_steps[-1])),
            "c": round(c, 1), "k": round(k, 2), "floor": round(floor, 4), "delay": delay, "rms": round(err, 5),
            "rms_steps_1_100": round(float(np.sqrt(np.mean((fitted - head) ** 2))), 5),
            "initial_over_ln_vocab": round(statistics.median(initial), 4),
            "wiggle_sd": round(statistics.median(wiggle), 6)}


def golden_pairs(directory: Path, cases: dict, rules: Rules) -> dict:
    """Level and progress (the gate's statistics) over steps 1-20 for in-group pairs at one world
    size, by what differs: ``rerun``, ``order`` (same-weights placement), ``init`` (placement that
    re-draws the initial weights) and ``numeric``."""
    index = json.loads((directory / "index.json").read_text(encoding="utf-8"))
    out = {"rerun": [], "order": [], "init": [], "numeric": []}
    for group in index["groups"]:
        for pair in group["pairs"]:
            if (pair.get("other_diff") or {}).get("ci_world_size"):
                continue
            curves = []
            for name in (pair["a"], pair["b"]):
                loss = _series(cases[name]["metrics"]["lm loss"])
                curves.append([loss.get(s) for s in range(1, WINDOW + 1)])
            if any(v is None or v == 0.0 for v in curves[0] + curves[1]):
                continue
            diff = pair["MODEL_ARGS_diff"]
            names = set(diff.get("added", {})) | set(diff.get("removed", {})) | set(diff.get("changed", {}))
            classes, init = set(), False
            for name in names:
                rule = rules.get("arg", name)
                classes.add(rule.cls if rule else "numeric")
                init = init or bool(rule and rule.init)
            if classes & {"numeric", "fixed"}:
                kind = "numeric"
            elif not classes:
                kind = "rerun"
            else:
                kind = "init" if init else "order"
            a, b = curves
            progress = convergence.progress_series(b, a)
            out[kind].append((max(convergence.level_series(b, a)),
                              statistics.median(progress[-max(1, len(progress) // 3):])))
    return out


def _mc_stats(sd_offset: float, sd_walk: float, draws: int = MC_DRAWS) -> tuple:
    """Median level and progress of pairs under the offset + random-walk model (fixed seed)."""
    rng = np.random.default_rng(12345)
    offset = rng.normal(0.0, math.sqrt(2) * sd_offset, size=(draws, 1))
    steps = rng.normal(0.0, math.sqrt(2) * sd_walk, size=(draws, WINDOW - 1))
    walk = np.concatenate([np.zeros((draws, 1)), np.cumsum(steps, axis=1)], axis=1)
    level = np.max(np.abs(offset + walk), axis=1)
    tail = np.abs(walk[:, -max(1, WINDOW // 3):])
    return float(np.median(level)), float(np.median(np.median(tail, axis=1)))


def fit_noise_level(pairs: list) -> dict:
    """``sd_offset`` and ``sd_walk`` (relative loss) whose pair medians match the golden ones."""
    level = float(np.median([p[0] for p in pairs]))
    progress = float(np.median([p[1] for p in pairs]))
    _, unit_progress = _mc_stats(0.0, 1.0)
    sd_walk = progress / unit_progress
    low, high = 0.0, max(level, 1e-9) * 2
    for _ in range(40):
        mid = (low + high) / 2
        if _mc_stats(mid, sd_walk, 4000)[0] < level:
            low = mid
        else:
            high = mid
    return {"pairs": len(pairs), "golden_median_level": float("%.3g" % level),
            "golden_median_progress": float("%.3g" % progress),
            "sd_offset": float("%.3g" % low), "sd_walk": float("%.3g" % sd_walk)}


def fit(directory=DEFAULT_DIR) -> dict:
    directory = Path(directory)
    cases = load_cases(directory)
    pairs = golden_pairs(directory, cases, Rules())
    return {"data": str(directory), "step_time": fit_step_time(cases), "loss_shape": fit_loss_shape(cases),
            "loss_noise": {kind: fit_noise_level(found) for kind, found in pairs.items()}}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in argv
    argv = [a for a in argv if a != "--json"]
    directory = Path(argv[0]) if argv else DEFAULT_DIR
    if not (directory / "index.json").is_file():
        print("fit_golden: %s has no index.json. Fix: give the megatron_golden folder" % directory, file=sys.stderr)
        return 2
    result = fit(directory)
    print(json.dumps(result, indent=None if as_json else 2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
