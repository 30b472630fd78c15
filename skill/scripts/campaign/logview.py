"""What ``attune metrics`` shows of a log: the bounded parse (``logparse``), its triage, the scoring
window's step time, and the steps chosen with ``--steps`` in full.

Memory does not grow with the log: the parse keeps bounded lists and statistics, and the chosen
steps go to a temporary file as they are read and are copied from it to stdout at the end (the
output is still one JSON object with ``--json``, or ``key: value`` lines).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional, TextIO

from attune.core import logparse, triage
from attune.core.errors import InputError
from attune.core.settings import SPEC_BY_ENV

WINDOW = (int(SPEC_BY_ENV["ATTUNE_SCORE_FIRST_STEP"].default), int(SPEC_BY_ENV["ATTUNE_SCORE_LAST_STEP"].default))


def step_range(text: Optional[str]) -> Optional[tuple]:
    """``A:B``, ``A:`` or ``:B`` (iteration numbers as the log prints them, inclusive) as (A, B),
    None for no range; ``InputError`` naming the option otherwise."""
    if text is None:
        return None
    first, sep, last = text.partition(":")
    try:
        bounds = (int(first) if first.strip() else 0, int(last) if last.strip() else None)
    except ValueError:
        bounds = None
    if not sep or bounds is None or bounds[0] < 0 or (bounds[1] is not None and bounds[1] < bounds[0]):
        raise InputError("--steps %s: expected A:B, A: or :B with 0 <= A <= B (iteration numbers as the log prints "
                         "them), e.g. --steps 5:19" % text)
    return bounds


def window(parsed: dict, first: int = WINDOW[0], last: int = WINDOW[1]) -> dict:
    """The last run's scoring window: which of its iterations the log holds and their median step time."""
    steps, _start = logparse.last_run(parsed)
    times = {step["step"]: step["elapsed_ms"] for step in steps if first <= step["step"] <= last}
    missing = [n for n in range(first, last + 1) if n not in times]
    timed = sorted(value for value in times.values() if isinstance(value, float))
    median = None
    if timed and not missing and len(timed) == len(times):
        half = len(timed) // 2
        median = timed[half] if len(timed) % 2 else (timed[half - 1] + timed[half]) / 2.0
    return {"first": first, "last": last, "steps": len(times), "missing": missing, "median_step_ms": median}


def show(path: Path, exit_code: Optional[int], complete: bool, chosen: Optional[tuple], as_json: bool,
         out: TextIO) -> None:
    """Parse ``path`` and write what ``attune metrics`` prints; ``InputError`` for a file that is not a log."""
    if not path.is_file():
        raise InputError("%s: no such log file. Fix: give the path of a run's log" % path)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        on_step = _spooler(spool, chosen) if chosen is not None else None
        parsed = logparse.parse_file(path, complete=complete, on_step=on_step)
        refused = logparse.refusal(parsed)
        if refused:
            raise InputError("%s: %s, so not a training log. Fix: give a run's log (Megatron-LM, Megatron-Bridge, "
                             "Megatron-DeepSpeed, NeMo or slime output)" % (path, refused))
        from .finalize import CRASH_SCAN_BYTES
        log_lines = (path.read_bytes().decode("utf-8", errors="replace").split("\n")
                     if path.stat().st_size <= CRASH_SCAN_BYTES else None)  # as finalize reads them, for the crash line
        found = triage.classify(parsed, exit_code=exit_code, log_lines=log_lines)
        parsed["triage"] = found.as_dict() if found else None
        parsed["window"] = window(parsed)
        spool.seek(0)
        chosen_lines = _chosen(spool, parsed["device"] == "cpu") if chosen is not None else None
        if as_json:
            _write_json(parsed, chosen_lines, out)
        else:
            out.write("\n".join(_text(path, parsed, found)) + "\n")
            for line in chosen_lines or ():
                out.write("step: %s\n" % line)


def _spooler(spool, chosen: tuple):
    low, high = chosen

    def keep(step, write=spool.write):
        if step["step"] >= low and (high is None or step["step"] <= high):
            write(json.dumps(step, sort_keys=True) + "\n")
    return keep


def _chosen(spool, cpu: bool):
    for line in spool:
        line = line.rstrip("\n")
        if cpu:  # a step read before the cpu layer's mark: its TFLOP/s figure is a stub too
            step = json.loads(line)
            step["tflops_per_gpu"] = None
            line = json.dumps(step, sort_keys=True)
        yield line


def _write_json(parsed: dict, chosen_lines, out: TextIO) -> None:
    if chosen_lines is None:
        out.write(json.dumps(parsed, indent=2, sort_keys=True, default=str) + "\n")
        return
    body = dict(parsed)
    del body["steps"]
    out.write('{\n  "steps": [')
    sep = "\n    "
    for line in chosen_lines:
        out.write(sep + line)
        sep = ",\n    "
    out.write("\n  ],\n" if sep != "\n    " else "],\n")
    out.write(json.dumps(body, indent=2, sort_keys=True, default=str)[2:] + "\n")


def _slime_lines(parsed: dict) -> list:
    """slime's records by kind, the two ``perf N:`` sides told apart by their keys (core/slime.py), and the train
    side's time and throughput of each rollout kept (measurement.md §3.2 scores them)."""
    from attune.core import slime
    kinds = {}
    train = []
    for record in parsed.get("perf", ()):
        kind = record.get("line_type")
        if kind == "perf":
            kind = "perf_%s" % (slime.perf_side(record.get("data") or {}) or "other")
            if kind == "perf_train":
                train.append(record)
        kinds[kind] = kinds.get(kind, 0) + 1
    if not kinds:
        return []
    lines = ["slime: %s" % ", ".join("%s %d" % item for item in sorted(kinds.items()))]
    for record in train:
        data = record["data"]
        lines.append("slime_rollout %s: actor_train_time %s s, actor_train_tok_per_s %s, step_time %s s" % (
            record.get("index"), data.get("perf/actor_train_time"), data.get("perf/actor_train_tok_per_s"),
            data.get("perf/step_time")))
    return lines


def _text(path: Path, parsed: dict, found) -> list:
    counts, summary = parsed["counts"], parsed["summary"]
    lines = ["log: %s" % path, "format: %s" % (parsed["format"] or "unknown (no record recognised)")]
    if parsed.get("device") == "cpu":
        lines.append("device: cpu (the attune-cpu layer: a real program on a CPU, not a GPU measurement)")
    first, last = summary["first"], summary["last"]
    lines.append("steps: %d%s" % (counts["steps"], " (iterations %d-%d)" % (first["step"], last["step"]) if first else ""))
    if counts["steps"] > len(parsed["steps"]):
        lines.append("steps_kept: %d in full (--steps A:B prints the ones you choose)" % len(parsed["steps"]))
    if summary["runs"] > 1:
        start = summary["last_run_start"]
        lines.append("runs: %d (the last starts at line %d, iteration %d)" % (summary["runs"], start["line_no"],
                                                                             start["step"]))
    times = summary["elapsed_ms"]
    if times["count"]:
        median = ("%.1f" % times["median"]) if times["median"] is not None else times["median_unavailable"]
        lines.append("step_ms: median %s, mean %.1f, min %.1f, max %.1f over %d timed steps"
                     % (median, times["mean"], times["min"], times["max"], times["count"]))
    win = parsed["window"]
    if win["median_step_ms"] is not None:
        lines.append("window: iterations %d-%d of the last run, median step %.1f ms" % (win["first"], win["last"],
                                                                                      win["median_step_ms"]))
    elif first:
        lines.append("window: iterations %d-%d of the last run, no median: %s" % (
            win["first"], win["last"], "%d of them missing" % len(win["missing"]) if win["missing"]
            else "a step without a step time"))
    lines += ["memory_reports: %d" % counts["memory"], "timer_blocks: %d" % counts["timers"],
              "bridge_steps: %d" % counts["bridge_steps"], "slime_records: %d" % counts["perf"]]
    lines += _slime_lines(parsed)
    lines += ["failure: %s at line %d: %s" % (f["kind"], f["line_no"], f["line"].strip()[:200])
              for f in parsed["failures"]]
    if parsed["errors"]:
        last_error = parsed["errors"][-1]
        lines.append("crash_lines: %d (the last at line %d: %s)" % (counts["errors"], last_error["line_no"],
                                                                    last_error["line"].strip()[:200]))
    lines += ["warning: %s" % warning for warning in parsed["warnings"]]
    lines.append("triage: %s" % ("%s (%s): %s" % (found.cls, "line %d" % found.line_no if found.line_no else
                                                   found.source, found.evidence[:200]) if found else "no failure"))
    if found is not None and found.memory:
        lines.append("memory: %s" % found.memory)
    return lines
