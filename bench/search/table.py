"""A truth from a different model: measured runs of the real CPU Megatron-LM workload, replayed.

``bench/results/megatron_cpu_factorial.json`` (``bench/bench_megatron_cpu.py --factorial``) holds two real runs
of every combination of micro-batch (1/2/4), recompute (full/selective/none), loader workers (default/0) and
distributed optimizer (off/on) of ``harness/recipes/gpt_tiny_cpu.yaml`` (TP 1 x DP 2 over gloo on this
2-core host). Here a launch of a combination replays one of its measured runs, chosen by the run's key
(the measured tokens/s/GPU, its real run-to-run noise, and the run's measured wall time as its cost, in
rank-hours: a "GPU" is a rank); the truth of a combination, for reporting, is the mean of its measured
runs. Nothing comes from the projection, which does not model a CPU.

The space every method searches is the part of the planner's space for this recipe that the table
measured (``ALLOWED``): micro-batch 2 or 4, selective (core attention) recompute, no recompute, the
distributed optimizer (loader workers stay at the recipe's default: no lever changes them). A combination
that changes anything else is refused before it runs, as an illegal one is.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
for path in (REPO / "skill" / "scripts", REPO / "harness"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from attune.core import workload as workload_mod  # noqa: E402
from attune.core.measure import RunScore  # noqa: E402
from attune.core.recipe import Recipe, diff  # noqa: E402

from .evaluator import Run, Truth  # noqa: E402

TABLE = REPO / "bench" / "results" / "megatron_cpu_factorial.json"
ALLOWED = {("micro-batch-size", "micro-batch-size=2"), ("micro-batch-size", "micro-batch-size=4"),
           ("selective-recompute", "recompute=selective/core_attn"), ("full-recompute", "recompute=none"),
           ("distributed-optimizer", "distributed-optimizer=on")}
READ = {"--micro-batch-size", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
        "--recompute-modules", "--use-distributed-optimizer"}
NAME = "gpt_tiny_cpu"


def baseline_text() -> str:
    """The tiny-GPT CPU recipe (its command names a Megatron-LM folder that is never run here)."""
    import megatron_cpu
    return megatron_cpu.recipe_text(Path("/megatron-lm"), python="python3")


def cell(baseline: Recipe, recipe: Recipe) -> str:
    """The factorial's name for ``recipe``'s combination; ValueError when it changes a setting the table did
    not measure."""
    other = sorted({record.get("arg") or record.get("env") or record.get("group") for record in diff(baseline, recipe)}
                   - READ)
    if other:
        raise ValueError("not measured: %s" % ", ".join(str(name) for name in other))
    args = recipe.args()
    granularity = args.get("--recompute-granularity")
    modules = args.get("--recompute-modules")
    if granularity == "selective" and modules not in (None, "core_attn"):
        raise ValueError("not measured: selective recompute of %s" % modules)
    levels = [("mbs", str(args.get("--micro-batch-size", "1")), "1"),
              ("recompute", {"full": "full", "selective": "selective"}.get(granularity, "none"), "full"),
              ("workers", "0" if str(args.get("--num-workers")) == "0" else "default", "default"),
              ("dist-opt", "on" if "--use-distributed-optimizer" in args else "off", "off")]
    return "+".join("%s-%s" % (factor, level) for factor, level, first in levels if level != first) or "baseline"


class TableEvaluator(object):
    """The ``evaluator.Evaluator`` interface over the measured table."""

    moe = False

    def __init__(self, noise_seed: int, table: Path = TABLE):
        data = json.loads(table.read_text(encoding="utf-8"))
        self.runs = {name: [r for r in rows if r.get("tokens_per_s_per_gpu")] for name, rows in data["runs"].items()}
        self.baseline = workload_mod.enforce(Recipe(baseline_text(), NAME))
        self.noise_seed = noise_seed
        self.gpus = self.baseline.gpus()
        self.gbs = int(self.baseline.args()["--global-batch-size"])
        self.seq = int(self.baseline.args()["--seq-length"])
        self.startup_s = 0.0  # the measured wall time includes start-up
        self.launches = 0

    def allowed(self, lever_id: str, alternative: str) -> bool:
        return (lever_id, alternative) in ALLOWED

    def _cell(self, recipe) -> str:
        from attune.planner import space as space_mod
        return cell(self.baseline, workload_mod.enforce(space_mod.as_recipe(recipe)))

    def truth(self, recipe) -> Truth:
        name = self._cell(recipe)
        values = [r["tokens_per_s_per_gpu"] for r in self.runs.get(name, ())]
        if not values:
            return Truth(name, 0.0, math.inf, math.inf, 0.0, False, 0.0, 1.0, error="no measured run of " + name)
        tokens = statistics.mean(values)
        return Truth(name, tokens, self.gbs * self.seq / (tokens * self.gpus), 0.0, math.inf, False, 0.0, 1.0)

    def launch(self, recipe, run_key: str) -> Run:
        name = self._cell(recipe)
        rows = self.runs.get(name)
        if not rows:
            raise ValueError("launch of %s, which the table never measured: the caller must refuse it first" % name)
        self.launches += 1
        index = int(hashlib.sha256(("%s|%s|%s" % (self.noise_seed, name, run_key)).encode()).hexdigest(), 16)
        row = rows[index % len(rows)]
        tokens = row["tokens_per_s_per_gpu"]
        step = self.gbs * self.seq / (tokens * self.gpus)
        score = RunScore(True, "", tokens, step, step, step, step, 0.0, 15)
        return Run(True, None, tokens, step, None, self.gpus * row["wall_s"] / 3600.0, score)

    def expected_cost(self, recipe=None) -> float:
        rows = self.runs.get(self._cell(recipe if recipe is not None else self.baseline), ())
        return self.gpus * statistics.mean(r["wall_s"] for r in rows) / 3600.0 if rows else 0.0
