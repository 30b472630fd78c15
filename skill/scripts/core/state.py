"""The campaign's state as its ledger states it: the budget left with what runs in flight reserve, whether a
stop is valid, the leader, and what is pending before any ranking (measurement.md §7).

One set of rules for every reader: ``attune budget`` and ``attune status`` (through ``budget.state`` and the
ranking's pending actions), ``attune stop`` before it records one, and the harness's Stop hook, which reads the
ledger itself (``read``). Standard library only and Python 3.7 syntax, since the hook imports it.

A run is its first ``launch`` row; a ``result`` row finalizes it; a result whose failure class is
``submit_failed`` never ran (it holds no GPU time and counts against no budget). Runs launched and not
finalized are in flight and reserve their ``expected_gpu_hours`` (GPU-hour budget) or one run (run budget).
"""

import collections
import json

SUBMIT_FAILED = "submit_failed"  # a launch whose submission failed never ran
LEDGER = "ledger.jsonl"
GPU_LOG = "gpu_hours.jsonl"

Run = collections.namedtuple("Run", "run finalized never_ran expected_gpu_hours launch_ts")


def read_rows(path):
    """The JSON objects of a JSON-lines file, skipping what does not parse; [] when it cannot be read. The
    chains are the integrity check's business: this is the reading that stays fast and never raises."""
    rows = []
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
    except (IOError, OSError):
        pass
    return rows


def number(value):
    """``value`` as a float, or None where it is not a number."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def runs_of(rows):
    """The campaign's runs in launch order (``Run``), from its ledger rows."""
    first, results = collections.OrderedDict(), {}
    for row in rows:
        kind, run = row.get("kind"), row.get("run")
        if kind == "launch" and run not in first:
            first[run] = row
        elif kind == "result":
            results[run] = row
    out = []
    for run, launch in first.items():
        result = results.get(run)
        failure = (result or {}).get("failure")
        never_ran = isinstance(failure, dict) and failure.get("class") == SUBMIT_FAILED
        out.append(Run(run, result is not None, never_ran, number(launch.get("expected_gpu_hours")),
                       launch.get("ts")))
    return out


def budget_kind(env):
    """``(kind, limit)`` from the settings as text (``AUTOTUNE_GPUH_BUDGET`` first, then ``AUTOTUNE_BUDGET``):
    kind ``gpu_hours`` or ``runs``, or ``(None, None)`` when neither is a number."""
    gpu_hours = number(env.get("AUTOTUNE_GPUH_BUDGET"))
    if gpu_hours is not None:
        return "gpu_hours", gpu_hours
    runs = number(env.get("AUTOTUNE_BUDGET"))
    if runs is not None:
        return "runs", runs
    return None, None


def budget(kind, limit, gpu_seconds, runs):
    """The budget: ``{"kind", "unit", "limit", "spent", "reserved", "left", "exhausted", "gpu_hours_spent",
    "in_flight", "unknown_reservations"}``. GPU-hours are spent from the GPU-hour log's total
    (``gpu_seconds``); runs are spent by every finalized run that ran. ``left`` is the limit less what was
    spent and what runs in flight reserve; the budget is exhausted when nothing is left. Without a limit
    (``kind`` None) nothing is reserved and nothing is ever exhausted."""
    gpu_hours = gpu_seconds / 3600.0
    in_flight = tuple(run.run for run in runs if not run.finalized)
    unknown = ()
    if kind == "gpu_hours":
        unknown = tuple(run.run for run in runs if not run.finalized and run.expected_gpu_hours is None)
        reserved = sum(run.expected_gpu_hours or 0.0 for run in runs if not run.finalized)
        spent, unit = gpu_hours, "GPU-hours"
    elif kind == "runs":
        reserved = float(len(in_flight))
        spent, unit = float(sum(1 for run in runs if run.finalized and not run.never_ran)), "runs"
    else:
        reserved, spent, unit = 0.0, gpu_hours, "GPU-hours"
    left = None if limit is None else limit - spent - reserved
    return {"kind": kind, "unit": unit, "limit": limit, "spent": spent, "reserved": reserved, "left": left,
            "exhausted": left is not None and left <= 0, "gpu_hours_spent": gpu_hours, "in_flight": in_flight,
            "unknown_reservations": unknown}


def total_gpu_seconds(gpu_rows):
    """The GPU-hour log's charged GPU-seconds (rows of kind ``charge``)."""
    return sum(row["gpu_seconds"] for row in gpu_rows if row.get("kind") == "charge"
               and isinstance(row.get("gpu_seconds"), (int, float)) and not isinstance(row.get("gpu_seconds"), bool))


# why a stop is not valid, as (code, text): ``attune stop`` refuses codes "reason", "evidence" and "unknown" as bad
# input and "in_flight" as a failed check; a recorded stop is also invalid with code "later"
def stop_problem(reason, evidence, runs, launched_after=()):
    """Why a stop with this reason and evidence, over these runs, is not valid, as ``(code, text)``; None when
    it is: a reason is given, the evidence names runs of the campaign, no run is in flight, and (for a
    recorded stop) no run was launched after it."""
    by_id = dict((run.run, run) for run in runs)
    evidence = list(evidence) if isinstance(evidence, (list, tuple)) else []
    if not isinstance(reason, str) or not reason.strip():
        return "reason", "the stop gives no reason"
    if not evidence:
        return "evidence", "the stop names no runs as evidence"
    unknown = [run for run in evidence if run not in by_id]
    if unknown:
        return "unknown", "the stop names runs this campaign never launched: %s" % ", ".join(map(str, unknown))
    in_flight = [run.run for run in runs if not run.finalized]
    if in_flight:
        return "in_flight", "runs are still in flight: %s" % ", ".join(in_flight)
    if launched_after:
        return "later", "runs were launched after the stop (%s)" % ", ".join(map(str, list(launched_after)[:5]))
    return None


def recorded_stop(rows, runs):
    """``(stop, problem)``: the last ``stop`` row when it is valid, else None with why (None when no stop is
    recorded). Runs launched after the stop make it stale; the runs checked are those launched before it."""
    stops = [row for row in rows if row.get("kind") == "stop"]
    if not stops:
        return None, None
    last = stops[-1]
    seq = last.get("seq", -1)
    before = [row for row in rows if row.get("seq", -1) <= seq] if isinstance(seq, int) else rows
    later = [row.get("run") for row in rows if row.get("kind") == "launch" and isinstance(seq, int)
             and isinstance(row.get("seq"), int) and row["seq"] > seq]
    problem = stop_problem(last.get("reason"), last.get("evidence"), runs_of(before) if later else runs, later)
    if problem:
        return None, "the recorded stop is not valid: " + problem[1]
    return last, None


def leader(rows):
    """The last ``leader`` row, or None."""
    leaders = [row for row in rows if row.get("kind") == "leader"]
    return leaders[-1] if leaders else None


def pending(runs, has_baseline):
    """What the campaign needs before anything the ranking decides, each ``{"action", "run", "text"}``: finalize
    every run in flight, and launch the baseline when there is none."""
    todo = [{"action": "finalize", "run": run.run, "text": "finalize run %s (launched %s)" % (run.run, run.launch_ts)}
            for run in runs if not run.finalized]
    if not has_baseline:
        todo.append({"action": "launch_baseline", "run": None, "text": "launch the baseline"})
    return todo


def read(directory, env):
    """The campaign at ``directory`` as the Stop hook sees it, from its ledger and GPU-hour log read
    tolerantly and its settings as text: ``{"budget", "stop", "stop_problem", "leader", "in_flight",
    "pending", "launches"}``."""
    import os
    rows = read_rows(os.path.join(directory, LEDGER))
    runs = runs_of(rows)
    kind, limit = budget_kind(env)
    stop, problem = recorded_stop(rows, runs)
    has_baseline = any(row.get("kind") == "launch" and row.get("purpose") == "baseline" for row in rows)
    return {"budget": budget(kind, limit, total_gpu_seconds(read_rows(os.path.join(directory, GPU_LOG))), runs),
            "stop": stop, "stop_problem": problem, "leader": leader(rows),
            "in_flight": [run.run for run in runs if not run.finalized], "pending": pending(runs, has_baseline),
            "launches": len(runs)}
