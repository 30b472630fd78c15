"""The simulated evaluator: the "true" throughput and memory of a configuration, and what a run of it
measures and costs. The methods see only ``Evaluator.launch``'s ``Run``; the hidden factors stay here.

    true tokens/s/GPU = projection x exp(sd_t * z_t)         z_t: SHA-256 stream of (noise seed, truth key)
    true step         = projection step / exp(sd_t * z_t)
    true memory       = projection memory x exp(sd_m * z_m)  z_m: another stream of the same key
    OOM               = true memory > the projection's usable memory (HBM x 0.95)

``sd_t`` comes from the projection's own leave-one-out error (``projection/params.json``, ``loo.table``):
the median absolute relative error ``m`` of the dense rows (MoE rows for an MoE workload) is converted to
the lognormal sd for which the median of ``|exp(sd Z) - 1|`` is ``m``: Phi(ln(1+m)/sd) - Phi(ln(1-m)/sd) = 1/2
(``planner.policy.lognormal_sd``; for small ``m`` this is ``ln(1+m)/0.6745``). With ``spread="within"`` the sd is
instead the spread of the LOO log errors around their (model, GPU) group means (the part of the error that
differs between configurations of one model on one GPU), a sensitivity variant. ``sd_m`` is a stated 5%
(memory is uncalibrated: no usable row publishes peak memory).

The truth key (``truth_key``): ``config`` (default) is every argument and environment variable of the
recipe after ``workload.enforce``, so each distinct configuration draws its own factor, including those that
differ only in a setting the projection does not model (an NCCL variable): such a lever moves the truth by
the full spread. ``projected`` keys the factor on the projection's parsed ``Job`` only: settings the
projection does not read then change nothing, in truth as in the projection (a sensitivity variant).

The truth (``truth``). ``own`` is the above: the planner's own model times an independent factor, the world
the planner's exploration rule assumes (kept as a reference, not as evidence). Three truths are not built
from the planner's model; in each, a setting the projection does not read has no effect at all (the
truth is a function of the projection's parsed ``Job``), and memory is the projection's times the same
5% factor keyed on that job:

* ``params``: **per-workload errors in the projection's efficiency parameters**. Each of the ten fitted
  efficiencies of the workload's GPU family (``projection.api.theta_for``) is multiplied by
  ``exp(THETA_SD z)``, z drawn per (noise seed, workload, parameter), ``THETA_SD`` = 0.10 (a stated
  assumption: the fit's own residual prior is 0.15, its between-family spread 0.35); the true step time is
  ``projection.timing.step_time`` of the job's features under those efficiencies. The error is systematic:
  under one seed every configuration of the workload with more exposed communication (say) is off the
  same way, which a model-free method can find and the planner's projection cannot see.
* ``interact``: ``params`` times a **pairwise interaction** ``exp(INTERACT_SD z)`` for every pair of the
  projection-read settings changed from the baseline (z drawn per noise seed, workload and pair),
  ``INTERACT_SD`` = 0.03: two changes that each help can together help less, or more.
* ``residual``: ``params`` times a per-job factor with the **within-(model, GPU) spread** of the
  projection's leave-one-out log errors (sd 0.0388 dense, 0.2153 MoE): what differs between
  configurations of one model on one GPU after the per-workload parameter error.

A run (``launch``): ``simulate.model.step_times(20, true step, run key)`` (the simulator's fitted run-to-run
offset, per-step jitter, slow steps and warm-up, imported, not copied), scored by
``attune.core.measure.score_run`` (median of iterations 5-19), so measured tokens/s/GPU = GBS x seq /
(median x GPUs). Peak reserved memory is reported as the true memory. Cost: GPUs x (startup + sum of the 20
step times) / 3600 GPU-hours, with startup ``simulate.sim_megatron.STARTUP_S`` (initialization and data
loading before iteration 1 on the simulator's clock); an OOM run dies in iteration 1 and costs GPUs x
startup / 3600. Illegal configurations never reach ``launch`` (the methods check first).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "skill" / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from attune.core import workload as workload_mod  # noqa: E402
from attune.core.measure import score_run  # noqa: E402
from attune.core.recipe import Recipe  # noqa: E402
from attune.planner import space as space_mod  # noqa: E402
from attune.planner.policy import lognormal_sd  # noqa: E402
from attune.simulate import noise as sim_model  # noqa: E402
from attune.simulate.sim_megatron import STARTUP_S  # noqa: E402

STEPS = 20
MEMORY_SD = 0.05
TRUTH_KEYS = ("config", "projected")
SPREADS = ("loo", "within")
TRUTHS = ("own", "params", "interact", "residual")
THETA_SD = 0.10  # per-workload log-error of each fitted efficiency (``params`` and the truths built on it)
INTERACT_SD = 0.03  # log-sd of each pairwise interaction (``interact``)


@functools.lru_cache(maxsize=1)
def error_stats() -> dict:
    """From ``params.json``'s leave-one-out table: per kind (dense, moe) the rows, the median absolute error,
    the lognormal sd it converts to, and the within-(model, GPU) sd of the log errors."""
    from attune.projection import api as proj_api, dataset
    params = proj_api.load_params()
    rows = {row.row_id: row for row in dataset.load(superseded=True)[0]}
    table = params["loo"]["table"]
    out = {}
    for kind in ("dense", "moe"):
        mine = [r for r in table if ("--num-experts" in rows[r["row_id"]].args) == (kind == "moe")]
        median_abs = statistics.median(abs(r["error_pct"]) / 100 for r in mine)
        groups = defaultdict(list)
        for r in mine:
            groups[(r["model"], r["gpu"])].append(-math.log(1 + r["error_pct"] / 100))  # log(measured/predicted)
        squares, dof = 0.0, 0
        for values in groups.values():
            if len(values) >= 2:
                mean = sum(values) / len(values)
                squares += sum((v - mean) ** 2 for v in values)
                dof += len(values) - 1
        out[kind] = {"rows": len(mine), "median_abs": median_abs, "sd_loo": lognormal_sd(median_abs),
                     "sd_within": math.sqrt(squares / dof) if dof else float("nan"), "within_dof": dof,
                     "within_groups": sum(1 for v in groups.values() if len(v) >= 2)}
    out["fit_date"] = params.get("fit_date")
    return out


@dataclasses.dataclass(frozen=True)
class Truth:
    key: str
    tokens: float  # true tokens/s/GPU (0 when the projection refuses the layout)
    step_s: float
    memory_gib: float
    usable_gib: float
    oom: bool
    projected_tokens: float
    factor: float
    error: str = ""


@dataclasses.dataclass(frozen=True)
class Run:
    """What a launch measured: all a method may see."""
    ok: bool
    failure: Optional[str]  # "oom" or None
    tokens: Optional[float]  # measured tokens/s/GPU (median of iterations 5-19)
    step_s: Optional[float]
    max_reserved_gib: Optional[float]
    cost: float  # GPU-hours
    score: object = None  # attune.core.measure.RunScore
    step_ms: Optional[list] = None  # the 20 iterations' times, for early stopping


def canonical(recipe: Recipe) -> str:
    """Every argument and variable, sorted (what makes a configuration this configuration). The simulator's
    run identity (ATTUNE_SIM_SEED) is not part of it."""
    args = sorted((k, "" if v is True else str(v)) for k, v in recipe.args().items())
    env = sorted((k, v) for k, v in recipe.env().items() if k != "ATTUNE_SIM_SEED")
    return json.dumps([args, env, recipe.gpus()])


def _normal(*key) -> float:
    return sim_model.Stream(*key).normal()


class Evaluator(object):
    """One workload under one noise seed (the hidden factors and the run-to-run noise)."""

    def __init__(self, baseline_text: str, moe: bool, noise_seed: int, *, truth_key: str = "config",
                 spread: str = "loo", memory_sd: float = MEMORY_SD, startup_s: float = STARTUP_S,
                 truth: str = "own", workload: str = ""):
        if truth not in TRUTHS:
            raise ValueError("truth must be one of %s, not %r" % (", ".join(TRUTHS), truth))
        self.baseline = workload_mod.enforce(Recipe(baseline_text, "baseline"))
        self.noise_seed = noise_seed
        self.truth_kind, self.workload = truth, workload
        stats = error_stats()["moe" if moe else "dense"]
        self.sd = stats["sd_loo"] if spread == "loo" else stats["sd_within"]
        if truth == "residual":
            self.sd = stats["sd_within"]
        if truth != "own":
            truth_key = "projected"
        self.memory_sd = memory_sd
        self.startup_s = startup_s
        self.truth_key = truth_key
        env = self.baseline.env()
        self.gpus = int(env.get("ATTUNE_SIM_GPUS") or self.baseline.gpus())
        self.gbs = int(self.baseline.args()["--global-batch-size"])
        self.seq = int(self.baseline.args()["--seq-length"])
        self._truth = {}
        self.launches = 0

    # ------------------------------------------------------------------ hidden
    def _key(self, recipe: Recipe, canon: str) -> str:
        if self.truth_key == "config":
            return canon
        from attune.projection import config as proj_config
        env = recipe.env()
        per_node = env.get("ATTUNE_SIM_GPUS_PER_NODE", "")
        try:
            job = proj_config.parse(recipe.args(), self.gpus, env.get("ATTUNE_SIM_HARDWARE"),
                                    int(per_node) if per_node.isdigit() else 8)
        except Exception:  # the projection refuses it: key on the text
            return canon
        return repr(dataclasses.replace(job, warnings=()))

    def truth(self, recipe) -> Truth:
        recipe = workload_mod.enforce(space_mod.as_recipe(recipe))
        canon = canonical(recipe)
        found = self._truth.get(canon)
        if found is not None:
            return found
        key = hashlib.sha256(self._key(recipe, canon).encode()).hexdigest()
        pred = space_mod.project_recipe(recipe)
        if pred is None or not pred.ok:
            found = Truth(key, 0.0, math.inf, math.inf, 0.0, False, 0.0, 1.0,
                          error=pred.error if pred is not None else "no hardware")
        elif self.truth_kind != "own":
            step = self._true_step(recipe) / self._interaction(recipe)
            if self.truth_kind == "residual":
                step /= math.exp(self.sd * _normal("bench-truth", self.noise_seed, key))
            factor = pred.step_s / step
            memory = pred.memory_gib * math.exp(self.memory_sd * _normal("bench-memory", self.noise_seed, key))
            found = Truth(key, pred.tokens_per_s_per_gpu * factor, step, memory, pred.usable_gib,
                          memory > pred.usable_gib, pred.tokens_per_s_per_gpu, factor)
        else:
            factor = math.exp(self.sd * _normal("bench-truth", self.noise_seed, key))
            memory = pred.memory_gib * math.exp(self.memory_sd * _normal("bench-memory", self.noise_seed, key))
            found = Truth(key, pred.tokens_per_s_per_gpu * factor, pred.step_s / factor, memory, pred.usable_gib,
                          memory > pred.usable_gib, pred.tokens_per_s_per_gpu, factor)
        self._truth[canon] = found
        return found

    def _true_step(self, recipe: Recipe) -> float:
        """The projection's step time of ``recipe`` under this workload's true (perturbed) efficiencies."""
        import numpy as np
        from attune.projection import api as proj_api, config as proj_config, hardware as proj_hw, timing
        env = recipe.env()
        gpu = proj_hw.get(env["ATTUNE_SIM_HARDWARE"])
        per_node = env.get("ATTUNE_SIM_GPUS_PER_NODE", "")
        per_node = int(per_node) if per_node.isdigit() else gpu.gpus_per_node
        job = proj_config.parse(recipe.args(), self.gpus, gpu.name, per_node)
        theta = proj_api.theta_for(gpu, proj_api.load_params())[0]
        true = {name: value * math.exp(THETA_SD * _normal("bench-theta", self.noise_seed, self.workload, name))
                for name, value in theta.items()}
        features = timing.stack([timing.features(job, gpu, per_node)])
        return float(timing.step_time(features, {name: np.array([value]) for name, value in true.items()})["step"][0])

    def _interaction(self, recipe: Recipe) -> float:
        """``interact``: the product of the pairwise factors of the projection-read settings changed from the
        baseline (1 for the other truths)."""
        if self.truth_kind != "interact":
            return 1.0
        from attune.core.recipe import diff
        from attune.projection import config as proj_config
        changed = sorted(json.dumps(record, sort_keys=True) for record in diff(self.baseline, recipe)
                         if record.get("arg") in proj_config.READS)
        log = 0.0
        for i, first in enumerate(changed):
            for second in changed[i + 1:]:
                log += INTERACT_SD * _normal("bench-interact", self.noise_seed, self.workload, first, second)
        return math.exp(log)

    # ------------------------------------------------------------------ visible
    def launch(self, recipe, run_key: str) -> Run:
        """Run ``recipe`` once (``run_key`` names the run: its noise). Never called for illegal recipes."""
        truth = self.truth(recipe)
        self.launches += 1
        if truth.error:
            raise ValueError("launch of a configuration the projection refuses (%s): the caller must check "
                             "legality first" % truth.error)
        if truth.oom:
            return Run(False, "oom", None, None, None, self.gpus * self.startup_s / 3600.0)
        times = sim_model.step_times(STEPS, truth.step_s, "bench|%s|%s|%s" % (self.noise_seed, truth.key, run_key))
        metrics = {"iter": list(range(1, STEPS + 1)), "step_ms": [t * 1000.0 for t in times],
                   "loss": [0.0] * STEPS, "skipped": [0] * STEPS, "nan": [0] * STEPS,
                   "global_batch_size": self.gbs, "seq_length": self.seq, "gpus": self.gpus}
        score = score_run("finished", metrics)
        cost = self.gpus * (self.startup_s + sum(times)) / 3600.0
        return Run(True, None, score.tokens_per_s_per_gpu, score.step_time_s, truth.memory_gib, cost, score,
                   metrics["step_ms"])

    def expected_cost(self, recipe=None) -> float:
        """The true cost of one successful run of ``recipe`` (default the baseline) without noise."""
        truth = self.truth(recipe if recipe is not None else self.baseline)
        return self.gpus * (self.startup_s + STEPS * truth.step_s) / 3600.0
