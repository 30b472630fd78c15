"""Finalize a run: from its log and its backend's facts to a result row and a GPU-hour row.

Backend-independent: the backend supplies the log file, the exit code, the start and end times
(its own timestamps, never the agent's) and the GPUs held; this module parses the log, converts
the steps into the ledger's metrics columns, triages a failure, charges GPU time and appends the
rows. Finalizing twice changes nothing: a run that has its result row and its charge is left alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Optional

from attune.core import logparse, slime as slime_mod, triage
from attune.core.measure import encode_float

from .ledger import Campaign


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What the backend knows about a run once it ended (or was torn down)."""

    run: str
    log_path: Path
    exit_code: Optional[int]
    started: float  # seconds since the epoch, from the backend
    ended: float
    gpus: int
    seq_length: Optional[int] = None  # from the recipe (Megatron does not print it per step)
    slime: Optional[slime_mod.Shape] = None  # a slime run's mode and GPUs, from its recipe (core/slime.py)
    events: tuple = ()
    seconds_without_progress: Optional[float] = None
    hang_after_s: float = 900.0
    backend_message: Optional[str] = None  # the backend's message about the ended job (triage reads it)
    early_stop: Optional[dict] = None  # the evidence it was stopped on (earlystop.decide): a stopped_early run


SHORT_STEP_MS = 10.0  # 100 times the 0.1 ms Megatron prints: below it rounding is a 1% effect or more


def metrics_columns(parsed: dict, seq_length: Optional[int], gpus: int) -> tuple:
    """The ledger's ``result.metrics`` from parsed steps, and warnings.

    A log that holds more than one run (a restarted pod) is scored on its last run only: the
    steps from the last place where the iteration number went back. The steps are those the parser
    kept in full (all of any run up to ``logparse.STEPS_KEPT`` steps; the scoring window of a longer
    one, its last steps and its problem steps otherwise: the parse's warnings say so)."""
    warnings = []
    steps, start = logparse.last_run(parsed)
    if start:
        warnings.append("the log restarts at line %d (iteration %d after %d); only the last run is scored"
                        % (start["line_no"], start["step"], start["after_step"]))
    timed = sorted(step["elapsed_ms"] for step in steps if step["elapsed_ms"])
    if timed and timed[len(timed) // 2] < SHORT_STEP_MS:
        warnings.append("the median step takes %.2f ms: Megatron prints it to 0.1 ms, so one printed digit moves "
                        "tokens/s/GPU by %.0f%% or more; the score is dominated by rounding"
                        % (timed[len(timed) // 2], 100 * 0.1 / timed[len(timed) // 2]))
    gbs = next((step["global_batch_size"] for step in reversed(steps) if step["global_batch_size"]), None)

    def loss(value):
        if isinstance(value, str):
            return value
        return None if value is None else encode_float(float(value))
    metrics = {"global_batch_size": gbs, "seq_length": seq_length, "gpus": gpus,
               "iter": [step["step"] for step in steps],
               "step_ms": [step["elapsed_ms"] for step in steps],
               "loss": [loss(step["lm_loss"]) for step in steps],
               "skipped": [step["skipped"] or 0 for step in steps],
               "nan": [step["nan"] or 0 for step in steps]}
    return {key: value for key, value in metrics.items() if value is not None}, warnings


def finalize(campaign: Campaign, facts: RunFacts) -> dict:
    """Append the run's GPU-hour charge and result row (each only once); return the result row."""
    existing = [row for row in campaign.ledger.rows() if row["kind"] == "result" and row["run"] == facts.run]
    charged = any(row["kind"] == "charge" and row["run"] == facts.run and row.get("what") == "run"
                  for row in campaign.gpu_log.rows())
    if not charged:
        campaign.charge(facts.run, facts.gpus, max(0.0, facts.ended - facts.started), what="run")
    if existing:
        return existing[-1]
    return campaign.append("result", **derive(facts))


def derive(facts: RunFacts) -> dict:
    """The payload of the run's ``result`` row: its log parsed and scored into the metrics columns, the log's
    SHA-256, the status and a failure's triage. The one derivation: ``finalize`` records it and ``attune verify
    --replay`` (``replay.py``) computes it again from the same evidence. Reads only the log and ``facts``
    (``started`` and ``ended`` are the charge's, not the row's)."""
    log = Path(facts.log_path)
    parsed, log_sha, lines = {"steps": [], "failures": [], "warnings": ["no log at %s" % log]}, None, None
    if log.is_file():
        parsed = logparse.parse_file(log, complete=True)  # the job ended: its last line is all there is
        data = log.read_bytes() if log.stat().st_size <= CRASH_SCAN_BYTES else None
        log_sha = hashlib.sha256(data).hexdigest() if data is not None else _sha256_file(log)
        if data is not None:  # a small log's lines name a nan_loss step's line; a larger one is triaged from
            lines = data.decode("utf-8", errors="replace").split("\n")  # the parse (its crash lines) alone
    if facts.slime is not None:  # scored per rollout from its perf records (measurement.md §3.2)
        metrics, warnings = slime_mod.metrics_columns(parsed, facts.slime)
    else:
        metrics, warnings = metrics_columns(parsed, facts.seq_length, facts.gpus)
    found = triage.classify(parsed, exit_code=facts.exit_code, events=facts.events,
                            seconds_without_progress=facts.seconds_without_progress,
                            hang_after_s=facts.hang_after_s, log_lines=lines, backend_message=facts.backend_message)
    finished = facts.exit_code == 0 and found is None and bool(metrics.get("iter"))
    payload = {"run": facts.run, "metrics": metrics,
               "status": "finished" if finished else ("timeout" if found and found.cls == "hang" else "failed")}
    if facts.early_stop is not None:  # stopped on purpose: no failure, never ranked (earlystop.py)
        payload["status"], payload["early_stop"] = "stopped_early", facts.early_stop
        found, finished = None, True
    if log_sha:
        payload["log_sha256"] = log_sha
    if parsed.get("device") == "cpu":  # the cpu hook's layer said so in the log
        payload["cpu"] = True
    if not finished:
        failure = found.as_dict() if found else {
            "cls": "crash", "evidence": "exit code %s and %d iterations logged, with no failure line"
            % (facts.exit_code, len(metrics.get("iter", []))), "source": "exit_code"}
        failure["class"] = failure.pop("cls")
        payload["failure"] = failure
    notes = warnings + list(parsed.get("warnings", []))
    if notes:
        payload["warnings"] = notes
    return payload


CRASH_SCAN_BYTES = 8 << 20  # bounds finalize's memory: the lines of a log this size take about 30 MB


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
