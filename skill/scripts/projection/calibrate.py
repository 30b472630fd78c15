"""Fit the projection's efficiencies on the published measurements and report leave-one-out error.

    cd skill/scripts && ../../.venv/bin/python -m attune.projection.calibrate            # fit, write params.json
    ../../.venv/bin/python -m attune.projection.calibrate --check                         # refit, compare, write nothing
    ../../.venv/bin/python -m attune.projection.calibrate --excluded                      # why each row is left out

**Parameters** (``timing.THETA``; each is 1/efficiency, seconds for the two overheads, or tokens for
``attn_s0``, the attention kernels' fixed work per query tile). Thirteen
global values ``u`` (log scale) and, per GPU family, offsets ``v`` for the four that plausibly differ by
GPU generation: ``gemm_bf16``, ``gemm_lp`` (FP8), ``attn`` and ``comm``. A family's value is
``exp(u + v_family)``; ``expert``, ``gemm_bytes``, ``elem``, ``moe_elem``, ``attn_s0``, ``launch``, ``moe``,
``a2a`` and ``a2a_nccl`` are shared. Never per row.

**Fit**: Levenberg-Marquardt on ``r_i = log(predicted step time / measured step time)`` (the measured
step time is ``gbs * seq / (tokens/s/GPU * GPUs)``), with Gaussian priors that keep unidentified
parameters where physics puts them: ``u ~ N(log PRIOR, 1)`` (weak) and ``v ~ N(0, 0.35)`` (a family
strays from the cross-GPU value only as far as its rows demand), and a Cauchy-robust data term with
scale 0.15 (``Problem.residuals``), so a few rows of old software releases cannot steer the fit. The
model is piecewise linear in the parameters, so a forward-difference Jacobian is exact within a
regime.

**Leave-one-out**: each usable row is predicted from a fit on all the other rows (warm-started from
the full fit), and the error is ``(predicted - measured) / measured`` in tokens/s/GPU. Also reported,
more pessimistic: leave-one-model-out, where every row of the model (e.g. all 23 Llama-3.1-405B rows
from five releases) is left out together, and leave-one-release-out, where every row of one published
table (one software release: Megatron-Bridge 26.04.01, NeMo 25.02, ...) is left out together, so what
a release changed shows as error rather than being fitted. Each summary gives the median apart for
dense and MoE models (``by_kind``).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import hashlib
import json
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from . import api, config, dataset, hardware as hw, memory, timing

PER_FAMILY = ("gemm_bf16", "gemm_lp", "attn", "comm")
SIGMA_R, SIGMA_U, SIGMA_V = 0.15, 1.0, 0.35
# A family's FP8/FP4 GEMM offset is its BF16 GEMM offset plus this much more (one GPU's low-precision and BF16
# GEMMs run on the same SMs, clocks and power limit): a GPU whose rows are all in one precision still has the other
SIGMA_LP = 0.15
SCHEMA = 1
# seconds, tokens or factors (step0, sink, trend), reported as they are; the rest as efficiencies (1/theta)
RAW = ("launch", "moe", "attn_s0", "step0", "sink", "trend")


class Problem:
    """The usable rows as stacked features, their measured step times and GPU families."""

    def __init__(self, rows: list):
        self.rows = rows
        feats, self.memory = [], []
        for row in rows:
            gpu = hw.get(row.gpu)
            job = config.parse(row.args, row.gpus, gpu.name, gpu.gpus_per_node)
            feats.append(timing.features(job, gpu, gpu.gpus_per_node))
            self.memory.append(memory.memory(job, gpu))
        self.F = timing.stack(feats)
        # the newest software among the rows is the fit's reference (age 0): every projection is for it
        self.newest = max(row.software for row in rows)
        self.F["age"] = np.array([self.newest - row.software for row in rows])
        self.families = sorted({hw.get(row.gpu).family for row in rows})
        self.fam = np.array([self.families.index(hw.get(row.gpu).family) for row in rows])
        tokens_per_step = np.array([float(row.args["--global-batch-size"]) * float(row.args["--seq-length"])
                                    for row in rows])
        self.measured = np.array([row.tokens_per_s_per_gpu for row in rows])
        self.step = tokens_per_step / (self.measured * np.array([row.gpus for row in rows]))
        self.u0 = np.log(np.array([api.PRIOR[name] for name in timing.THETA]))
        self.n_u, self.n_v = len(timing.THETA), len(PER_FAMILY) * len(self.families)
        scale = np.full((len(PER_FAMILY), len(self.families)), SIGMA_V)
        scale[PER_FAMILY.index("gemm_lp")] = SIGMA_LP
        self.v_scale = scale.ravel()

    def subset(self, mask: np.ndarray) -> "Problem":
        sub = object.__new__(Problem)
        sub.__dict__.update(self.__dict__)
        sub.rows = [row for row, keep in zip(self.rows, mask) if keep]
        sub.memory = [m for m, keep in zip(self.memory, mask) if keep]
        sub.F = {key: value[mask] for key, value in self.F.items()}
        sub.fam, sub.measured, sub.step = self.fam[mask], self.measured[mask], self.step[mask]
        return sub

    def theta(self, p: np.ndarray, fam: Optional[np.ndarray] = None) -> dict:
        fam = self.fam if fam is None else fam
        u, v = p[:self.n_u], p[self.n_u:].reshape(len(PER_FAMILY), len(self.families))
        out = {}
        for j, name in enumerate(timing.THETA):
            log = np.full(len(fam), u[j])
            if name in PER_FAMILY:
                log = log + v[PER_FAMILY.index(name)][fam]
            if name == "gemm_lp":
                log = log + v[PER_FAMILY.index("gemm_bf16")][fam]
            out[name] = np.exp(log)
        return out

    def residuals(self, p: np.ndarray) -> np.ndarray:
        """Scaled residuals whose sum of squares is the objective: the data term is Cauchy-robust,
        ``sqrt(log(1 + z^2))`` with ``z = log(predicted / measured) / SIGMA_R`` (a row off by a factor
        of two pulls like one off by 25%, not eight times harder), then the two priors."""
        predicted = timing.step_time(self.F, self.theta(p))["step"]
        z = np.log(predicted / self.step) / SIGMA_R
        data = np.sign(z) * np.sqrt(np.log1p(z * z))
        return np.concatenate([data, (p[:self.n_u] - self.u0) / SIGMA_U, p[self.n_u:] / self.v_scale])


def fit(problem: Problem, start: Optional[np.ndarray] = None, iterations: int = 60) -> np.ndarray:
    """Levenberg-Marquardt minimum of the sum of squared residuals."""
    p = np.concatenate([problem.u0, np.zeros(problem.n_v)]) if start is None else start.copy()
    r = problem.residuals(p)
    cost, damping, eps = r @ r, 1e-2, 1e-5
    for _ in range(iterations):
        J = np.empty((r.size, p.size))
        for j in range(p.size):
            step = p.copy()
            step[j] += eps
            J[:, j] = (problem.residuals(step) - r) / eps
        A, g = J.T @ J, J.T @ r
        improved = False
        while damping < 1e8:
            delta = np.linalg.solve(A + damping * np.diag(np.diag(A) + 1e-9), -g)
            trial = p + delta
            r_trial = problem.residuals(trial)
            c_trial = r_trial @ r_trial
            if c_trial < cost:
                improved = cost - c_trial > 1e-10 * cost
                p, r, cost, damping = trial, r_trial, c_trial, max(damping / 3, 1e-7)
                break
            damping *= 4
        if not improved:
            break
    return p


def predict(problem: Problem, p: np.ndarray) -> np.ndarray:
    """Predicted tokens/s/GPU of every row."""
    step = timing.step_time(problem.F, problem.theta(p))["step"]
    return problem.measured * problem.step / step


def leave_out(problem: Problem, p_full: np.ndarray, groups: np.ndarray, only=None) -> np.ndarray:
    """Tokens/s/GPU of each row predicted by a fit without its group (``only``: row indices to do)."""
    out = np.full(len(problem.rows), np.nan)
    todo = range(len(problem.rows)) if only is None else only
    cache = {}
    for i in todo:
        group = groups[i]
        if group not in cache:
            keep = groups != group
            cache[group] = fit(problem.subset(keep), p_full)
        out[i] = predict(problem.subset(np.arange(len(problem.rows)) == i), cache[group])[0]
    return out


def _kind(row) -> str:
    """``moe`` for a row whose model has experts, else ``dense`` (the two are reported apart)."""
    return "moe" if int(float(row.args.get("--num-experts") or 0)) > 0 else "dense"


MIN_CELL_ROWS = 3  # a GPU and kind with fewer rows has no median of its own


def _by_gpu_kind(rows: list, absolute: np.ndarray) -> dict:
    """``{gpu: {kind: median abs error}}`` where a GPU has at least ``MIN_CELL_ROWS`` rows of that kind."""
    out = {}
    for gpu in sorted({r.gpu for r in rows}):
        for kind in sorted({_kind(r) for r in rows}):
            cell = absolute[[r.gpu == gpu and _kind(r) == kind for r in rows]]
            if len(cell) >= MIN_CELL_ROWS:
                out.setdefault(gpu, {})[kind] = round(float(np.median(cell)), 2)
    return out


def summary(problem: Problem, predicted: np.ndarray) -> dict:
    error = (predicted - problem.measured) / problem.measured * 100
    absolute = np.abs(error)
    order = np.argsort(-absolute)
    rows = [{"row_id": row.row_id, "source": row.source_id, "model": row.model, "gpu": row.gpu, "gpus": row.gpus,
             "precision": row.precision, "measured": round(float(m), 1), "predicted": round(float(q), 1),
             "error_pct": round(float(e), 2), "converted": row.converted, "assumed": list(row.assumed)}
            for row, m, q, e in zip(problem.rows, problem.measured, predicted, error)]
    return {"median_abs_pct": round(float(np.median(absolute)), 2),
            "p90_abs_pct": round(float(np.percentile(absolute, 90)), 2),
            "mean_abs_pct": round(float(np.mean(absolute)), 2), "max_abs_pct": round(float(absolute.max()), 2),
            "within_10_pct": int((absolute <= 10).sum()), "rows": len(rows),
            "by_gpu": {gpu: round(float(np.median(absolute[[r.gpu == gpu for r in problem.rows]])), 2)
                       for gpu in sorted({r.gpu for r in problem.rows})},
            "by_kind": {kind: round(float(np.median(absolute[[_kind(r) == kind for r in problem.rows]])), 2)
                        for kind in sorted({_kind(r) for r in problem.rows})},
            "by_gpu_kind": _by_gpu_kind(problem.rows, absolute),
            "worst": [rows[i] for i in order[:10]], "table": rows}


def memory_check(problem: Problem) -> dict:
    """Every usable row ran, so each should fit: how many the (uncalibrated) memory model agrees on."""
    over = [{"row_id": row.row_id, "model": row.model, "gpu": row.gpu, "total_gib": round(m["total_gib"], 1),
             "usable_gib": round(m["usable_gib"], 1)} for row, m in zip(problem.rows, problem.memory) if not m["fits"]]
    return {"rows": len(problem.rows), "projected_to_fit": len(problem.rows) - len(over), "not_fitting": over}


def params_dict(problem: Problem, p: np.ndarray) -> tuple:
    """(global theta, {family: theta}) as plain floats."""
    u = {name: float(np.exp(p[j])) for j, name in enumerate(timing.THETA)}
    families = {}
    for f, family in enumerate(problem.families):
        theta = problem.theta(p, fam=np.array([f]))
        families[family] = {name: float(theta[name][0]) for name in timing.THETA}
    return u, families


def run(csv_path: Path = dataset.CSV, loo: bool = True, superseded: bool = False) -> dict:
    """Fit and (optionally) leave-one-out: the content of params.json (``superseded``: include the
    rows of earlier releases, for comparison only)."""
    rows, excluded = dataset.load(csv_path, superseded)
    problem = Problem(rows)
    p = fit(problem)
    u, families = params_dict(problem, p)
    result = {
        "schema_version": SCHEMA,
        "fit_date": datetime.date.today().isoformat(),
        "data": {"path": "projection/data/published_throughput.csv",
                 "sha256": hashlib.sha256(Path(csv_path).read_bytes()).hexdigest(),
                 "settings_path": "projection/data/%s" % dataset.SETTINGS.name,
                 "settings_sha256": hashlib.sha256(dataset.SETTINGS.read_bytes()).hexdigest()},
        "rows_used": len(rows), "row_ids": [row.row_id for row in rows],
        "rows_excluded": dict(sorted(collections.Counter(reason for reason, *_ in excluded.values()).items())),
        "prior": dict(api.PRIOR), "sigma": {"residual": SIGMA_R, "global": SIGMA_U, "family": SIGMA_V,
                                                       "family_lowp_over_bf16": SIGMA_LP},
        # projections are for the newest software among the rows (kernel time of older software: th_trend per year)
        "software_reference": "%d-%02d" % (int(problem.newest + 1e-6), round((problem.newest % 1) * 12) + 1),
        "global": u, "families": families,
        "efficiency": {family: {name: (theta[name] if name in RAW else 1 / theta[name])
                                for name in timing.THETA} for family, theta in families.items()},
        "in_sample": {key: value for key, value in summary(problem, predict(problem, p)).items()
                      if key not in ("table", "worst")},
        "memory_check": memory_check(problem),
    }
    if loo:
        result["loo"] = summary(problem, leave_out(problem, p, np.arange(len(rows))))
        models = np.array([row.model for row in rows])
        lomo = summary(problem, leave_out(problem, p, models))
        result["leave_one_model_out"] = {key: value for key, value in lomo.items() if key != "table"}
        releases = np.array([row.source_id for row in rows])  # one published table (software release) each
        loro = summary(problem, leave_out(problem, p, releases))
        result["leave_one_release_out"] = {key: value for key, value in loro.items() if key != "table"}
    return result


def same_fit(a: dict, b: dict, rtol: float = 1e-6) -> list:
    """Differences between two params dicts' fitted values (empty when they agree)."""
    problems = []
    if a.get("row_ids") != b.get("row_ids"):
        problems.append("the usable rows differ")
    for scope in ("global",):
        for name in timing.THETA:
            if not np.isclose(a[scope][name], b[scope][name], rtol=rtol):
                problems.append("%s.%s: %r != %r" % (scope, name, a[scope][name], b[scope][name]))
    if sorted(a["families"]) != sorted(b["families"]):
        problems.append("families differ")
    else:
        for family in a["families"]:
            for name in timing.THETA:
                if not np.isclose(a["families"][family][name], b["families"][family][name], rtol=rtol):
                    problems.append("families.%s.%s differs" % (family, name))
    return problems


def table_lines(loo: dict) -> list:
    lines = ["%-10s %-22s %-17s %-6s %5s %-6s %10s %10s %8s" % ("row_id", "source", "model", "gpu", "gpus", "prec",
                                                              "measured", "predicted", "error%")]
    for row in sorted(loo["table"], key=lambda r: -abs(r["error_pct"])):
        lines.append("%-10s %-22s %-17s %-6s %5d %-6s %10.1f %10.1f %+8.1f" % (
            row["row_id"], row["source"], row["model"][:17], row["gpu"], row["gpus"], row["precision"],
            row["measured"], row["predicted"], row["error_pct"]))
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attune.projection.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=api.PARAMS, help="where to write the fit (default: params.json)")
    parser.add_argument("--check", action="store_true", help="refit and compare with --out; write nothing")
    parser.add_argument("--excluded", action="store_true", help="list the rows left out and the rule each fails")
    parser.add_argument("--table", action="store_true", help="print the leave-one-out table")
    parser.add_argument("--all-releases", action="store_true",
                        help="also use superseded rows (earlier releases of the same configuration); report only")
    args = parser.parse_args(argv)
    if args.excluded:
        _, excluded = dataset.load()
        for row_id, (reason, model, gpu, source) in sorted(excluded.items(), key=lambda kv: kv[1]):
            print("%s %-12s %-28s %-10s %s" % (row_id, reason, model, gpu, source))
        return 0
    if args.all_releases:
        result = run(superseded=True)
        if args.table:
            print("\n".join(table_lines(result["loo"])))
        print("rows_used: %d (superseded rows included; nothing written)" % result["rows_used"])
        print("loo_median_abs_pct: %.2f" % result["loo"]["median_abs_pct"])
        print("loo_p90_abs_pct: %.2f" % result["loo"]["p90_abs_pct"])
        print("lomo_median_abs_pct: %.2f" % result["leave_one_model_out"]["median_abs_pct"])
        return 0
    result = run(loo=not args.check)
    if args.check:
        stored = json.loads(args.out.read_text())
        problems = same_fit(stored, result)
        for line in problems:
            print("differs: %s" % line, file=sys.stderr)
        print("check: %s" % ("ok" if not problems else "params.json is stale"))
        return 1 if problems else 0
    args.out.write_text(json.dumps(result, indent=1, sort_keys=False) + "\n")
    loo = result["loo"]
    if args.table:
        print("\n".join(table_lines(loo)))
    print("rows_used: %d" % result["rows_used"])
    print("rows_excluded: %s" % ", ".join("%s %d" % kv for kv in result["rows_excluded"].items()))
    print("loo_median_abs_pct: %.2f" % loo["median_abs_pct"])
    print("loo_p90_abs_pct: %.2f" % loo["p90_abs_pct"])
    print("loo_within_10_pct: %d/%d" % (loo["within_10_pct"], loo["rows"]))
    print("loo_by_kind_median_abs_pct: %s" % loo["by_kind"])
    print("lomo_median_abs_pct: %.2f" % result["leave_one_model_out"]["median_abs_pct"])
    print("loro_median_abs_pct: %.2f (%s)" % (result["leave_one_release_out"]["median_abs_pct"],
                                              result["leave_one_release_out"]["by_kind"]))
    print("in_sample_median_abs_pct: %.2f" % result["in_sample"]["median_abs_pct"])
    print("memory_projected_to_fit: %d/%d" % (result["memory_check"]["projected_to_fit"],
                                              result["memory_check"]["rows"]))
    print("wrote: %s" % args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
