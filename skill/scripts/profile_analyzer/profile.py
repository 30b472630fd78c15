"""``attune profile``: trace files in, per-rank numbers, an aggregate and a ranked diagnosis out.

Usage: attune profile TRACE_OR_DIR... [--steps A:B] [--recipe FILE] [--json]
       attune profile --diff A B [--steps A:B] [--json]   (diff.py)
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional

from attune.core.errors import InputError

from . import analyze, collect, diagnose

SUFFIXES = (".json", ".json.gz")


def trace_files(paths) -> list:
    """The trace files named, with directories expanded to the traces directly in them."""
    out = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
            if not found:
                raise InputError("%s: no .json or .json.gz trace in this directory. Fix: give the folder the profiler "
                                 "wrote (tensorboard_trace_handler), or the trace files" % path)
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise InputError("%s: no such trace file or directory" % path)
    return out


def parallel_layout(recipe_path, world_size: Optional[int]) -> dict:
    """TP/PP/VP/CP/EP, data parallelism and micro-batches from a recipe (RayJob YAML or local.json),
    and the ideal 1F1B bubble fraction of a step: (pp - 1) / (vp * m + pp - 1)."""
    from attune.core import files
    from attune.core.command import Command
    from attune.core.recipe import Recipe

    path = Path(recipe_path)
    json_job = path.suffix == ".json"
    text = files.read_text(path, "local job file" if json_job else "RayJob YAML recipe",
                           "give the run's recipe.yaml (a RayJob YAML) or local.json")
    gpus = None
    if json_job:
        try:
            args = Command(json.loads(text)["command"]).args()
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError("%s: not a local job file with a `command` (%s). Fix: give the run's recipe.yaml or "
                             "local.json" % (path, files.one_line(exc)))
    else:
        recipe = Recipe(text, str(path))
        args, gpus = recipe.args(), recipe.gpus() or None

    def num(flag, default):
        try:
            return int(args.get(flag, default))
        except (TypeError, ValueError):
            return default
    tp, pp, cp = num("--tensor-model-parallel-size", 1), num("--pipeline-model-parallel-size", 1), \
        num("--context-parallel-size", 1)
    ep = num("--expert-model-parallel-size", 1)
    layers = num("--num-layers", 0)
    per_stage = num("--num-layers-per-virtual-pipeline-stage", 0)
    vp = num("--num-virtual-stages-per-pipeline-rank", 0) or (layers // (pp * per_stage) if per_stage and pp else 1)
    world = gpus or world_size
    dp = world // (tp * pp * cp) if world else None
    mbs, gbs = num("--micro-batch-size", 1), num("--global-batch-size", 0)
    micro = gbs // (mbs * dp) if gbs and dp and mbs else None
    ideal = (pp - 1) / (vp * micro + pp - 1) if micro and pp > 1 else (0.0 if pp == 1 else None)
    return {"tp": tp, "pp": pp, "vp": vp, "cp": cp, "ep": ep, "dp": dp, "world_size": world,
            "micro_batch_size": mbs, "global_batch_size": gbs or None, "micro_batches": micro,
            "sequence_parallel": bool(args.get("--sequence-parallel")), "ideal_bubble": ideal}


def _aggregate(ranks: list) -> dict:
    def stat(values):
        values = [v for v in values if v is not None]
        if not values:
            return None
        return {"mean": round(sum(values) / len(values), 2), "min": min(values), "max": max(values)}
    tb = [r["temporal_breakdown"] for r in ranks]
    out = {"ranks": len(ranks),
           "idle_pctg": stat([t["idle_pctg"] for t in tb]), "compute_pctg": stat([t["compute_pctg"] for t in tb]),
           "non_compute_pctg": stat([t["non_compute_pctg"] for t in tb]),
           "overlap_pctg": stat([r["communication"]["overlap_pctg"] for r in ranks])}
    by_step = {}
    for r in ranks:
        for s in r["steps"]:
            by_step.setdefault(s["step"], {})[r["rank"]] = s["step_time_us"]
    common = {n: times for n, times in by_step.items() if len(times) == len(ranks)}
    out["step_time_us"] = {n: round(statistics.median(times.values()), 1) for n, times in sorted(by_step.items())}
    if len(ranks) > 1 and common:
        spreads, slowest = {}, {}
        for n, times in sorted(common.items()):
            median = statistics.median(times.values())
            spreads[n] = round((max(times.values()) - min(times.values())) / median, 4) if median else None
            worst = max(times, key=times.get)
            slowest[worst] = slowest.get(worst, 0) + 1
        valid = [v for v in spreads.values() if v is not None]
        out["stragglers"] = {"step_time_spread": spreads, "step_time_spread_max": max(valid) if valid else None,
                             "slowest_rank_counts": slowest,
                             "note": "step times are compared per step number, never by clock, so skewed clocks "
                                     "across ranks do not matter"}
    return out


def window_steps(trace, step_name_count: int) -> Optional[list]:
    """The ProfilerStep numbers whose GPU work the analysis window holds, by the window's rule
    (``analyze.Timeline``): the steps that start before the last ProfilerStep starts when the trace set
    has two or more step names, and only those in ``--steps`` when given; None when the window is not
    cut by steps (every GPU activity: fewer than two step names and no ``--steps``)."""
    numbers, cut = sorted(trace.steps), False
    if step_name_count >= 2 and trace.step_starts:
        last = max(trace.step_starts)
        numbers, cut = [n for n in numbers if trace.steps[n][0] < last], True
    if trace.selected_steps is not None:
        first, end = trace.selected_steps
        numbers, cut = [n for n in numbers if first <= n <= end], True
    return numbers if cut else None


def run(paths, steps: Optional[tuple] = None, recipe=None, partial: bool = True) -> dict:
    """Analyze the traces in ``paths``. With ``partial`` False a trace that ends early is refused
    (``InputError``) instead of read up to the cut."""
    files = trace_files(paths)
    traces = []
    for path in files:
        trace = collect.load(path, steps)
        if trace.refusal:
            raise InputError("%s: not a torch.profiler trace (%s). Fix: give the .json or .json.gz files the "
                             "profiler wrote (tensorboard_trace_handler)" % (path, trace.refusal))
        if trace.truncated and not partial and trace.events:
            raise InputError("%s: the trace ends early, cut short after %d events: a profile of it would leave out "
                             "whatever came after the cut. Fix: capture it again (the profiler writes the file when "
                             "its last step ends), or pass --partial to analyze the events before the cut"
                             % (path, trace.events))
        traces.append(trace)
    if not any(trace.events for trace in traces):
        first = traces[0]
        raise InputError("%s%s: no trace event in %s (%s). Fix: give traces of a profiled step" % (
            first.path, " and %d more" % (len(traces) - 1) if len(traces) > 1 else "",
            "them" if len(traces) > 1 else "it",
            "it ends before its first event" if first.truncated else "its traceEvents array is empty"))
    warnings = [w for t in traces for w in t.warnings]
    seen = {}
    kept = []
    for trace in traces:
        if trace.rank in seen:
            warnings.append("%s and %s both hold rank %d; the second is left out" % (seen[trace.rank], trace.path,
                                                                                  trace.rank))
            continue
        seen[trace.rank] = trace.path
        kept.append(trace)
    step_names = len(set().union(*[t.step_names for t in kept])) if kept else 0
    ranks = []
    for trace in sorted(kept, key=lambda t: t.rank):
        ranks.append(analyze.rank_summary(trace, step_names))
        ranks[-1]["window_steps"] = window_steps(trace, step_names)
    world = next((t.world_size for t in kept if t.world_size), None)
    parallel = parallel_layout(recipe, world) if recipe else None
    aggregate = _aggregate(ranks)
    if ranks and not any(r["temporal_breakdown"]["kernel_time_us"] for r in ranks):
        warnings.append("no GPU kernel in the traces (a CPU-only run, or CUDA activity not recorded): step times "
                        "only, no GPU-time breakdown and no diagnosis")
    if parallel:
        aggregate["parallel"] = parallel
    return {"files": [str(f) for f in files], "partial": any(t.truncated for t in kept),
            "diagnosis": diagnose.diagnose(ranks, aggregate, parallel), "facts": diagnose.facts(ranks) if ranks else [],
            "aggregate": aggregate, "ranks": ranks,
            "warnings": warnings}
