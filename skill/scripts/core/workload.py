"""The fixed-shape workload (measurement.md §2): every run trains the same thing for 20 iterations.

``enforce`` sets the benchmark flags on a recipe (exit after 20 iterations, log interval 1,
throughput logging; the profiler flags only for a run that asks for a profile). ``--train-iters``
is left as the recipe has it, so the learning-rate schedule is the full run's and every run,
baseline or candidate, sees the same first 20 learning rates. ``compare`` refuses a
candidate whose workload differs from the baseline's: sequence length, global batch size, data and
seed are not levers.
"""

from __future__ import annotations

from . import slime
from .recipe import Recipe
from .settings import TRAIN_ITERS

# Arguments that define what is trained; a candidate may not change them.
SHAPE_ARGS = ("--seq-length", "--global-batch-size", "--data-path", "--train-data-path", "--seed",
              "--tokenizer-model", "--split")
BENCHMARK_ARGS = {"--log-interval": "1", "--log-throughput": True, "--exit-interval": str(TRAIN_ITERS)}
PROFILE_ARGS = ("--profile", "--use-pytorch-profiler", "--profile-step-start", "--profile-step-end",
                "--profile-ranks", "--record-memory-history")
# Megatron-LM profiles iterations 10-12 by default; 16-18 lie in the scoring window, past warm-up.
PROFILE_STEPS = ("16", "18")


def enforce(recipe: Recipe, profile: bool = False) -> Recipe:
    """The recipe with the benchmark flags set (and the profiler flags exactly when asked). A slime recipe's
    length is its ``--num-rollout`` (its own loop, not Megatron's iterations): only the profiler flags apply."""
    args = recipe.args()
    if slime.is_slime(recipe.command.program, args):
        changes = []
    else:
        changes = [{"op": "set", "arg": flag, "value": value} for flag, value in BENCHMARK_ARGS.items()]
    if profile:
        changes += [{"op": "set", "arg": "--profile", "value": True},
                    {"op": "set", "arg": "--use-pytorch-profiler", "value": True},
                    {"op": "set", "arg": "--profile-step-start", "value": PROFILE_STEPS[0]},
                    {"op": "set", "arg": "--profile-step-end", "value": PROFILE_STEPS[1]}]
    else:
        changes += [{"op": "unset", "arg": flag} for flag in PROFILE_ARGS if flag in args]
    return recipe.apply(changes)


def compare(baseline: Recipe, candidate: Recipe) -> list:
    """Workload differences between a candidate and the baseline, one line each (empty: same)."""
    problems = []
    before, after = baseline.args(), candidate.args()
    if slime.is_slime(baseline.command.program, before):  # the RL workload's shape (core/slime.py)
        return slime.compare(before, after)
    for flag in SHAPE_ARGS:
        if before.get(flag) != after.get(flag):
            problems.append("%s is %r in the baseline and %r in the candidate: the workload is fixed, it is not "
                            "a lever" % (flag, before.get(flag), after.get(flag)))
    iters = after.get("--train-iters")
    if iters not in (None, True) and iters.isdigit() and int(iters) < TRAIN_ITERS:
        problems.append("--train-iters is %s: a benchmark run needs at least %d iterations" % (iters, TRAIN_ITERS))
    for flag, value in BENCHMARK_ARGS.items():
        if after.get(flag) != value:
            problems.append("%s must be %r for a benchmark run (it is %r); apply workload.enforce"
                            % (flag, value, after.get(flag)))
    return problems
