"""Failure triage: why a run failed, with the line that shows it (failure_triage.md).

The inputs are what a finished or stuck run leaves: its parsed log (``logparse``), its exit code,
the Kubernetes events of its pods and how long it has made no progress. The first class whose
evidence is present wins, in the order of ``CLASSES``: a cause before its consequences (a pod that
never scheduled has no log; an OOM is usually followed by a crash traceback; an NCCL timeout is
often the symptom of one rank dying of OOM, so OOM is looked for first).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Optional

from .logformats import is_crash

# name -> (what it means, what the agent does next); the order is the order of precedence.
CLASSES = {
    "submit_failed": ("the backend refused the submission (or could not be reached): the job never started",
                      "fix what the evidence names (kube context, permissions, the RayJob the API rejected); nothing "
                      "was charged and the change was not judged; launch it again"),
    "unschedulable": ("the pods never started: the cluster could not place them",
                      "do not retry as is: ask for fewer GPUs or nodes, or wait for capacity; the change is not "
                      "judged"),
    "image_pull": ("the container image could not be pulled",
                   "fix ATTUNE_IMAGE or the registry credentials; no candidate is judged by this run"),
    "oom": ("GPU or host memory ran out (CUDA OOM, Ray's memory killer, a container OOMKilled)",
            "reject the change as infeasible at this shape; note the memory it tried to allocate; try the memory "
            "levers (recompute, offload, smaller micro-batch) only as their own candidates"),
    "nccl_timeout": ("a collective waited past its timeout (a rank died, hung or was too slow)",
                     "look for an OOM or crash on another rank first; then rerun once: a repeat timeout rejects "
                     "the change"),
    "config_error": ("Megatron refused the configuration (an assertion on batch, parallel sizes or environment)",
                     "fix the candidate: the legality check should have caught it; record the rule"),
    "nan_loss": ("the loss or gradient norm became NaN or infinite, or iterations were counted as NaN",
                 "reject the change as numerically unsafe; never rank the run"),
    "hang": ("no new iteration for longer than the hang limit while the job was running",
             "tear the run down; rerun once; a second hang rejects the change"),
    "crash": ("the process ended with an error that none of the classes above explains",
              "read the evidence line and the log around it; rerun once if it looks transient"),
}

_UNSCHEDULABLE = re.compile(r"FailedScheduling|Insufficient nvidia\.com/gpu|\d+/\d+ nodes are available|"
                            r"Unschedulable")
_IMAGE_PULL = re.compile(r"ErrImagePull|ImagePullBackOff|Failed to pull image|InvalidImageName")
_CONFIG = re.compile(r"is not divisible by|must be divisible|CUDA_DEVICE_MAX_CONNECTIONS|"
                     r"error: unrecognized arguments|error: argument|requires? (?:setting|--)|"
                     r"not supported (?:with|by|for|when)|cannot be used with|must be (?:set|enabled|specified)")


@dataclasses.dataclass(frozen=True)
class Triage:
    cls: str
    evidence: str  # the line (or event) that shows it
    line_no: Optional[int]  # in the log; None for evidence from events or the exit code
    source: str  # "log", "events", "exit_code" or "progress"
    meaning: str
    next_step: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _make(cls, evidence, line_no, source) -> Triage:
    meaning, next_step = CLASSES[cls]
    return Triage(cls, evidence.strip(), line_no, source, meaning, next_step)


def _is_bad(value) -> bool:
    return isinstance(value, str) and value in ("nan", "inf", "-inf")


def classify(parsed: dict, exit_code: Optional[int] = None, events: Iterable[str] = (),
             seconds_without_progress: Optional[float] = None, hang_after_s: float = 900.0,
             log_lines: Optional[list] = None) -> Optional[Triage]:
    """The failure class of a run, or None when nothing shows a failure.

    ``parsed`` is ``logparse`` output; ``log_lines`` (optional) lets a crash name its traceback
    line when no failure record did; without them the crash lines the parser kept (``errors``) do."""
    steps = parsed.get("steps", [])
    # A run that exited 0 and logged iterations ran: events (a transient FailedScheduling, a retried
    # image pull) only explain a run that did not.
    ran = exit_code == 0 and bool(steps)
    events = [event for event in events if event and event.strip()] if not ran else []
    for event in events:
        if _UNSCHEDULABLE.search(event):
            return _make("unschedulable", event, None, "events")
    for event in events:
        if _IMAGE_PULL.search(event):
            return _make("image_pull", event, None, "events")
    failures = parsed.get("failures", [])
    for failure in failures:
        if failure["kind"] in ("oom", "ray_oom", "oomkilled"):
            return _make("oom", failure["line"], failure["line_no"], "log")
    for event in events:  # an OOM on one rank makes the others time out: the OOM is the cause
        if "OOMKilled" in event:
            return _make("oom", event, None, "events")
    for failure in failures:
        if failure["kind"] == "nccl_timeout":
            return _make("nccl_timeout", failure["line"], failure["line_no"], "log")
    for failure in failures:
        if failure["kind"] == "argparse" or (failure["kind"] == "assertion" and _CONFIG.search(failure["line"])):
            return _make("config_error", failure["line"], failure["line_no"], "log")
    for step in steps:
        if _is_bad(step.get("lm_loss")) or _is_bad(step.get("grad_norm")) or (step.get("nan") or 0) > 0 or any(
                _is_bad(value) for value in step.get("losses", {}).values()):
            line = (log_lines[step["line_no"] - 1] if log_lines and step["line_no"] <= len(log_lines)
                    else "iteration %d" % step["step"])
            return _make("nan_loss", line, step["line_no"], "log")
    if seconds_without_progress is not None and seconds_without_progress > hang_after_s:
        last = steps[-1:] or [None]
        where = "after iteration %d" % last[0]["step"] if last[0] else "before the first iteration"
        return _make("hang", "no new iteration for %.0f s (limit %.0f s), %s" % (
            seconds_without_progress, hang_after_s, where), None, "progress")
    for failure in failures:
        if failure["kind"] == "assertion":
            return _make("crash", failure["line"], failure["line_no"], "log")
    # exit 0 after the last iteration of the run: it finished, whatever error text it printed after it
    completed = exit_code == 0 and bool(steps) and steps[-1]["step"] >= steps[-1]["train_iters"]
    if log_lines and not completed:
        for number in range(len(log_lines), 0, -1):  # the last error line is the one that ended it
            line = log_lines[number - 1]
            if is_crash(line):
                if exit_code not in (None, 0) or number > len(log_lines) - 200:
                    return _make("crash", line, number, "log")
                break
    elif parsed.get("errors") and not completed:  # a log too large to hold as lines: the parser's crash lines
        last, lines = parsed["errors"][-1], (parsed.get("text") or {}).get("lines") or 0
        if exit_code not in (None, 0) or last["line_no"] > lines - 200:
            return _make("crash", last["line"], last["line_no"], "log")
    if exit_code not in (None, 0):
        return _make("crash", "the process exited with code %d" % exit_code, None, "exit_code")
    return None
