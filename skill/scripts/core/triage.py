"""Failure triage: why a run failed, with the line that shows it (failure_triage.md).

The inputs are what a finished or stuck run leaves: its parsed log (``logparse``), its exit code,
the Kubernetes events of its pods, the backend's own message about the job (a RayJob's
``status.message``) and how long it has made no progress. The first class whose evidence is present
wins, in the order of ``CLASSES``: a cause before its consequences (a pod that never scheduled has no
log; an OOM is usually followed by a crash traceback; an NCCL timeout is often the symptom of one rank
dying of OOM, so OOM is looked for first; a rank that failed argument validation leaves the others
waiting). An ``oom`` also says which memory ran out (``memory``: ``gpu`` or ``host``), and its advice
follows it (``MEMORY``): GPU memory levers cannot help a host that ran out of RAM.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterable, Optional

from .logformats import is_crash
from .logparse import failure_kind, last_run

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
    "oom": ("GPU or host memory ran out; `memory` says which (gpu or host)",
            "reject the change as infeasible at this shape; the advice follows the memory that ran out (MEMORY)"),
    "config_error": ("Megatron refused the configuration (its argument or config validation raised: an assertion, "
                     "or a RuntimeError, ValueError or other exception, on batch, parallel sizes or environment)",
                     "fix the candidate: the legality check should have caught it; record the rule"),
    "nccl_timeout": ("a collective waited past its timeout (a rank died, hung or was too slow)",
                     "look for an OOM or crash on another rank first; then rerun once: a repeat timeout rejects "
                     "the change"),
    "nan_loss": ("the loss or gradient norm became NaN or infinite, or iterations were counted as NaN",
                 "reject the change as numerically unsafe; never rank the run"),
    "hang": ("no new iteration for longer than the hang limit while the job was running",
             "tear the run down; rerun once; a second hang rejects the change"),
    "crash": ("the process ended with an error that none of the classes above explains",
              "read the evidence line and the log around it; rerun once if it looks transient"),
}

# memory -> (what it means, what the agent does next) for an ``oom``. Every lever, flag and setting named
# here is in the lever catalog (levers.md) or the settings, and the host levers are those whose catalog
# entry says they hold host memory (test_triage.py checks both).
MEMORY = {
    "gpu": ("GPU memory ran out (torch's CUDA out of memory, or an allocation that failed inside NCCL, cuBLAS, cuDNN "
            "or Transformer Engine)",
            "reject the change as infeasible at this shape; note the memory it tried to allocate; try the GPU memory "
            "levers (`selective-recompute`, `activation-offload`, a smaller `--micro-batch-size`, "
            "`expandable-segments` when reserved is far above allocated; for slime's rollout engine "
            "`--sglang-mem-fraction-static`) only as candidates of their own"),
    "host": ("host (CPU) memory ran out: Ray's memory monitor killed a worker, the container was OOMKilled, the "
             "Linux OOM killer sent SIGKILL, torch's CPU allocator failed, or the local backend's memory limit was "
             "reached",
             "reject the change as infeasible on this host; GPU memory levers (recompute, a smaller micro-batch) "
             "cannot help. Try, only as candidates of their own, less host memory: `--optimizer-cpu-offload` off or "
             "a smaller `--optimizer-offload-fraction` (optimizer state on the host), "
             "`--fine-grained-activation-offloading` off (its pinned host buffers), with `--manual-gc` a smaller "
             "`--manual-gc-interval`; or more memory for the run: a human raises the worker pods' "
             "`resources.limits.memory` in the baseline recipe, or `ATTUNE_LOCAL_MEMORY_MB` on the local backend"),
}
GPU_MEMORY_KINDS = ("oom",)
HOST_MEMORY_KINDS = ("ray_oom", "oomkilled", "host_oom")
SIGKILL_EXIT_CODES = (-9, 137)  # the process's own -9, or 128 + 9 as a shell or container reports it

_UNSCHEDULABLE = re.compile(r"FailedScheduling|Insufficient nvidia\.com/gpu|\d+/\d+ nodes are available|"
                            r"Unschedulable")
_IMAGE_PULL = re.compile(r"ErrImagePull|ImagePullBackOff|Failed to pull image|InvalidImageName")
# A configuration rule in an exception's message: a divisibility in any of the ways Megatron, Megatron-Core
# and Bridge phrase it, a companion flag or environment variable, an unsupported combination.
_CONFIG = re.compile(r"divisible by|(?:is|be) not divisible|needs? to be divisible|(?:be|is not|not) an? "
                     r"(?:integer |even )?multiple of|must divide|should divide|\bdivides\b|%\s*\S+\s*==\s*0|"
                     r"CUDA_DEVICE_MAX_CONNECTIONS|"
                     r"error: unrecognized arguments|error: argument|requires? (?:setting|--)|"
                     r"not supported (?:with|by|for|when)|cannot be used with|must be (?:set|enabled|specified)")
# A parallel size, batch or model shape named with a constraint on it: how Megatron's validation words the
# rest of its rules ("Cannot use sequence parallelism without tensor parallelism", "pipeline-model-parallel
# size should be greater than 2 with interleaved schedule"). Only before the first iteration (validation
# runs at start-up): mid-training, such a message is too weak a sign.
_QUANTITY = re.compile(r"(?i)(?:tensor|pipeline|context|expert|data|sequence|virtual)[ _-]?(?:model[ _-]?)?"
                       r"parallel|\b[tpcde]p[ _-]?size\b|world[ _-]?size|micro[ _-]?batch|global[ _-]?batch|"
                       r"num[ _-]?layers|number of layers|attention[ _-]?heads|query[ _-]?groups|"
                       r"seq(?:uence)?[ _-]?length|hidden[ _-]?size|num[ _-]?(?:moe[ _-]?)?experts")
_CONSTRAINT = re.compile(r"(?i)\b(?:must|should|needs? to|requires?|required|only one|cannot|can ?not|not supported|"
                         r"not compatible|incompatible|greater than|less than|at least|at most|not equal|"
                         r"equal to)\b|!=|==|>=|<=")
# How the rest of Megatron's validation words a rule about flags ("--overlap-param-gather only supported with
# distributed optimizer", "fp4 and fp8 cannot be used simultaneously", "Must use --overlap-param-gather with
# --overlap-grad-reduce"): only before the first iteration, where an error is the configuration's or the
# environment's.
_RULE = re.compile(r"(?i)only (?:be )?(?:supported|available|valid|works?|applicable|tested|allowed)\b|"
                   r"(?:is|are) not (?:yet )?(?:supported|allowed|valid|compatible)|does(?: not|n't) (?:yet )?"
                   r"(?:support|work)|do not (?:use|set|support)|not (?:yet )?supported|cannot be (?:used|enabled|set|"
                   r"combined|done)|can ?not be used|must (?:be used|use|have|be)\b|should (?:be|not be) (?:set|used|"
                   r"specified|true|false|enabled|disabled)|\bmust use\b|is required\b|\brequires?\b|"
                   r"mutually exclusive|incompatible|not compatible|conflicts? with|no longer valid|only one of|"
                   r"can only (?:be|specify|use)|invalid (?:choices?|value|pattern|configuration)|please (?:use|set)|"
                   r"disable \S+ when|should be (?:greater|smaller|less|larger|positive|non-negative|between|either|"
                   r"one of)|\bonly supports?\b|supported only|\bcannot use\b|happen only|only (?:across|for|when|if)\b|"
                   r"should equal|must also|cannot (?:be both|work with)|no support for|is deprecated|\bunsupported\b|"
                   r"not tested with|needs? to (?:include|be|use)|\binvalid\b|has to be|no more than one|mismatch")
# Exceptions that say the program, its environment or the network is broken, not the configuration, wherever
# raised (NCCL's set-up failing inside initialize_model_parallel is one).
_NOT_CONFIG = re.compile(r"\b(?:ImportError|ModuleNotFoundError|AttributeError|NameError|SyntaxError|"
                         r"IndentationError|FileNotFoundError|PermissionError|OSError|ConnectionError|"
                         r"DistBackendError|DistNetworkError|DistStoreError)\b|NCCL error|CUDA error|"
                         r"unhandled (?:cuda|system) error")
_VALIDATION_SPAN = 60  # lines: a validation frame explains the first exception within this many lines after it


@dataclasses.dataclass(frozen=True)
class Triage:
    cls: str
    evidence: str  # the line (or event) that shows it
    line_no: Optional[int]  # in the log; None for evidence from events, the backend or the exit code
    source: str  # "log", "events", "backend", "exit_code" or "progress"
    meaning: str
    next_step: str
    memory: Optional[str] = None  # an oom's memory: "gpu" or "host"

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        if out["memory"] is None:
            del out["memory"]
        return out


def _make(cls, evidence, line_no, source, memory=None) -> Triage:
    meaning, next_step = MEMORY[memory] if cls == "oom" else CLASSES[cls]
    return Triage(cls, evidence.strip(), line_no, source, meaning, next_step, memory)


def _is_bad(value) -> bool:
    return isinstance(value, str) and value in ("nan", "inf", "-inf")


def _message_failures(message: Optional[str]) -> list:
    """Failure records from the backend's message about the job (a RayJob's ``status.message``, which
    holds the tail of the driver's log when the job failed)."""
    out = []
    for line in (message or "").splitlines():
        kind = failure_kind(line)
        if kind is not None:
            out.append({"kind": kind, "line_no": None, "line": line})
    return out


def _memory(failures: list, exit_code: Optional[int], events: list):
    """``(evidence, line_no, source, memory)`` of an out-of-memory, or None. The first memory failure in the log
    wins, except a GPU one printed after an NCCL timeout: that is a consequence of the timeout (a rank that
    aborts its communicators frees and reallocates), not its cause."""
    timeout_at = next((f["line_no"] for f in failures if f["kind"] == "nccl_timeout" and f["line_no"]), None)
    for failure in failures:
        source = "log" if failure["line_no"] is not None else "backend"
        if failure["kind"] in GPU_MEMORY_KINDS:
            if timeout_at is not None and failure["line_no"] is not None and failure["line_no"] > timeout_at:
                continue
            return failure["line"], failure["line_no"], source, "gpu"
        if failure["kind"] in HOST_MEMORY_KINDS:
            return failure["line"], failure["line_no"], source, "host"
    for event in events:  # an OOM on one rank makes the others time out: the OOM is the cause
        if "OOMKilled" in event:
            return event, None, "events", "host"
    if exit_code in SIGKILL_EXIT_CODES:  # SIGKILLed, and the shell said "Killed": the kernel's OOM killer
        for failure in reversed(failures):
            if failure["kind"] == "killed":
                return failure["line"], failure["line_no"], "log" if failure["line_no"] else "backend", "host"
    return None


def _after_validation(failures: list, index: int):
    """The validation record (a frame in Megatron's argument or config validation, or a divisibility assert's
    source line) of the traceback that ``failures[index]`` ends, or None."""
    line_no = failures[index]["line_no"]
    for earlier in reversed(failures[:index]):
        if earlier["kind"] in ("assertion", "exception") or line_no is None or earlier["line_no"] is None:
            return None
        if line_no - earlier["line_no"] > _VALIDATION_SPAN:
            return None
        if earlier["kind"] == "validation":
            return earlier
    return None


def _config_error(failures: list, first_step_line: Optional[int]):
    """The failure record (and the line to show) of a refused configuration, or None."""
    for index, failure in enumerate(failures):
        kind, line = failure["kind"], failure["line"]
        if kind == "argparse":
            return failure, line
        if kind not in ("assertion", "exception") or _NOT_CONFIG.search(line):
            continue
        if kind == "assertion" and _CONFIG.search(line):
            return failure, line
        at_start = first_step_line is None or (failure["line_no"] or 0) < first_step_line
        if at_start and (_CONFIG.search(line) or _RULE.search(line) or (
                _QUANTITY.search(line) and _CONSTRAINT.search(line))):
            return failure, line
        frame = _after_validation(failures, index)
        if frame is not None:  # a bare ``AssertionError`` says nothing: its assert's source line does
            said = re.search(r"(?:Error|Exception)(?:\([\w.]+\))?: \S", line)
            return (failure, line) if said or '", line ' in frame["line"] else (frame, frame["line"])
    return None


_PLACEMENT_WAIT = re.compile(r"Waiting for placement group of \d+ GPUs \(elapsed \d+s\)")


def _placement_wait(log_lines) -> Optional[str]:
    """The last line of the log when it is slime's wait for a placement group (the job never got its GPUs)."""
    for line in reversed(log_lines or ()):
        if line.strip():
            return line.strip() if _PLACEMENT_WAIT.search(line) else None
    return None


def classify(parsed: dict, exit_code: Optional[int] = None, events: Iterable[str] = (),
             seconds_without_progress: Optional[float] = None, hang_after_s: float = 900.0,
             log_lines: Optional[list] = None, backend_message: Optional[str] = None) -> Optional[Triage]:
    """The failure class of a run, or None when nothing shows a failure.

    ``parsed`` is ``logparse`` output; ``log_lines`` (optional) lets a crash name its traceback
    line when no failure record did, and without them the crash lines the parser kept (``errors``) do;
    ``backend_message`` is what the backend said about the job (a
    RayJob's ``status.message``), read for failures when the log does not show one. Only the log's last
    run counts (a restarted pod: from the first iteration after the last place the iteration number went
    back), and a run that exited 0 after its last iteration finished, whatever error text it printed (a
    recovered warning, a config print that mentions memory): only a NaN loss fails it."""
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
    # exit 0 after the last iteration of the run: it finished, whatever error text it printed
    completed = exit_code == 0 and bool(steps) and steps[-1]["step"] >= steps[-1]["train_iters"]
    run_steps, run_start = last_run(parsed)
    after = run_start["line_no"] if run_start else 0  # the last run got as far as training: what came before is over
    failures = [] if completed else [f for f in parsed.get("failures", []) if f["line_no"] > after]
    failures += [] if completed else [f for f in _message_failures(backend_message)
                                      if f["kind"] not in ("exception", "validation", "assertion")]
    memory = _memory(failures, exit_code, events)
    if memory is not None:
        evidence, line_no, source, which = memory
        return _make("oom", evidence, line_no, source, which)
    log_failures = [f for f in failures if f["line_no"] is not None]
    progress = [records[0]["line_no"] for records in (run_steps, parsed.get("perf", []),
                                                      parsed.get("bridge_steps", [])) if records]
    config = _config_error(log_failures, min(progress) if progress else None)
    if config is not None:
        return _make("config_error", config[1], config[0]["line_no"], "log")
    for failure in failures:
        if failure["kind"] == "nccl_timeout":
            return _make("nccl_timeout", failure["line"], failure["line_no"],
                         "log" if failure["line_no"] is not None else "backend")
    for step in steps:
        if _is_bad(step.get("lm_loss")) or _is_bad(step.get("grad_norm")) or (step.get("nan") or 0) > 0 or any(
                _is_bad(value) for value in step.get("losses", {}).values()):
            line = (log_lines[step["line_no"] - 1] if log_lines and step["line_no"] <= len(log_lines)
                    else "iteration %d" % step["step"])
            return _make("nan_loss", line, step["line_no"], "log")
    if seconds_without_progress is not None and seconds_without_progress > hang_after_s:
        waiting = _placement_wait(log_lines)
        if waiting is not None:  # slime's driver never got its GPUs: the cluster could not place the job
            return _make("unschedulable", waiting, None, "log")
        last = steps[-1:] or [None]
        where = "after iteration %d" % last[0]["step"] if last[0] else "before the first iteration"
        return _make("hang", "no new iteration for %.0f s (limit %.0f s), %s" % (
            seconds_without_progress, hang_after_s, where), None, "progress")
    for failure in log_failures:
        if failure["kind"] == "assertion":
            return _make("crash", failure["line"], failure["line_no"], "log")
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
