"""The campaign's runs as its ledger rows state them: one ``RunView`` per run, folded from its ``launch``,
``result`` and ``gate`` rows (``merge``), whole or onto the views a cache kept, and its result scored."""

from __future__ import annotations

import dataclasses
import json
from typing import Optional

from attune.core import state
from attune.core.chainlog import ENVELOPE, loads
from attune.core.measure import RunScore, score_run

SUBMIT_FAILED = state.SUBMIT_FAILED  # the failure class of a launch whose submission failed (runs.launch)


@dataclasses.dataclass(slots=True)
class RunView:
    run: str
    purpose: str
    recipe: str
    launch_ts: str
    gpus: int
    backend: str
    parent: Optional[str] = None
    change: object = None
    hypothesis: str = ""
    lever: str = ""
    leave_out: str = ""  # a leave-one-out candidate: the candidate run whose change it removes (measurement.md §5)
    simulated: bool = False
    cpu: bool = False  # a real program on a CPU (the ``cpu`` pod hook): a measurement, but not of a GPU
    expected_gpu_hours: Optional[float] = None
    recipe_path: str = ""
    profiled: bool = False  # launched through the ``profiler`` pod hook (the launch row's ``pod_hooks``)
    projected: Optional[float] = None  # tokens/s/GPU the projection expected (the launch row's ``projection``)
    status: str = "running"  # result status once finalized
    failure: Optional[dict] = None
    score: Optional[RunScore] = None
    gate: Optional[str] = None  # "pass", "fail" or None
    gate_reasons: tuple = ()
    result_ts: str = ""
    result_seq: int = -1  # the ledger row of its result

    @property
    def finalized(self) -> bool:
        return self.status != "running"

    @property
    def never_ran(self) -> bool:
        """Its submission failed: it holds no GPU time, counts against no budget and sets no purpose."""
        return (self.failure or {}).get("class") == SUBMIT_FAILED

    @property
    def tokens(self) -> Optional[float]:
        return self.score.tokens_per_s_per_gpu if self.score and self.score.rankable else None


def content_key(row: dict):
    """Order rows by time, then content: never by their position in the file."""
    payload = {key: value for key, value in row.items() if key not in ENVELOPE or key == "ts"}
    return (row["ts"], json.dumps(payload, sort_keys=True))


def sort_key(run: RunView):
    return (run.launch_ts, run.run)


def score_results(rows, window=(5, 19)) -> dict:
    """Score every result row: ``{seq: RunScore}`` (what ``build`` needs from the metrics)."""
    return {row["seq"]: score_run(row["status"], row.get("metrics"), window, row.get("failure"))
            for row in rows if row.get("kind") == "result"}


def score_ledger_bytes(data: bytes, window=(5, 19), first_seq: int = 0) -> dict:
    """``score_results`` straight from the ledger file's bytes (run in a child process while the
    parent verifies the same bytes). Only rows this module's writer encoded (``"kind":"result"``)
    are scored here; ``build`` scores any other itself."""
    out = {}
    for index, line in enumerate(data.split(b"\n")[:-1], first_seq):
        if b'"kind":"result"' in line:
            try:
                row = loads(line)
            except ValueError:
                continue
            if type(row) is dict and row.get("kind") == "result" and row.get("seq") == index:
                out[index] = score_run(row.get("status"), row.get("metrics"), window, row.get("failure"))
    return out


class MergeConflict(Exception):
    """A row that only the whole set of rows can place (a second launch or result of a run, or a row for
    a run with no launch row): an incremental merge gives up and the caller ranks from every row."""


def merge(rows, window=(5, 19), scores=None, runs=None) -> tuple:
    """Fold the ``launch``, ``result`` and ``gate`` rows into one ``RunView`` per run.

    Returns ``(runs, stop_rows, warnings)``. With ``runs`` (the views of rows merged before, as the view
    cache keeps them) the rows are merged into those views, and any row whose placement depends on rows
    no longer at hand raises ``MergeConflict``; the result is then exactly what merging every row at once
    gives, because a run's views take each field from its one launch, its one result and the union of its
    gates."""
    incremental = runs is not None
    runs = runs if incremental else {}
    warnings = []
    by_kind = {"launch": [], "result": [], "gate": [], "stop": []}
    for row in rows:
        bucket = by_kind.get(row["kind"])
        if bucket is not None:
            bucket.append(row)
    launches = {}
    for row in by_kind["launch"]:
        run_id = row["run"]
        if run_id in launches or (incremental and run_id in runs):
            if incremental:
                raise MergeConflict("run %s is launched more than once" % run_id)
            warnings.append("run %s is launched more than once; the earliest launch is used" % run_id)
            if content_key(row) >= content_key(launches[run_id]):
                continue
        launches[run_id] = row
    for run_id, row in launches.items():
        runs[run_id] = RunView(
            run=run_id, purpose=row["purpose"], recipe=row["recipe_sha256"], launch_ts=row["ts"],
            gpus=row["gpus"], backend=row["backend"], parent=row.get("parent"), change=row.get("change"),
            hypothesis=row.get("hypothesis", ""), lever=row.get("lever", ""), leave_out=row.get("leave_out", ""),
            simulated=bool(row.get("simulated", False)), cpu=bool(row.get("cpu", False)),
            expected_gpu_hours=row.get("expected_gpu_hours"),
            recipe_path=row.get("recipe_path", ""),
            profiled=any(hook.get("name") == "profiler" for hook in row.get("pod_hooks") or ()),
            projected=(row.get("projection") or {}).get("tokens_per_s_per_gpu"))
    results = {}
    for row in by_kind["result"]:
        run_id = row["run"]
        previous = results.get(run_id)
        if incremental and (previous is not None or run_id not in runs or runs[run_id].finalized):
            raise MergeConflict("run %s has a result the new rows alone cannot place" % run_id)
        if previous is not None:
            warnings.append("run %s has more than one result; the latest is used" % run_id)
            if content_key(row) <= content_key(previous):
                continue
        results[run_id] = row
    for run_id, row in results.items():
        run = runs.get(run_id)
        if run is None:
            warnings.append("result for run %s, which has no launch row; ignored" % run_id)
            continue
        run.status = row["status"]
        run.failure = row.get("failure")
        run.result_ts = row["ts"]
        run.result_seq = row["seq"]
        run.simulated = run.simulated or bool(row.get("simulated", False))
        run.cpu = run.cpu or bool(row.get("cpu", False))
        score = scores.get(row["seq"]) if scores is not None else None
        run.score = score if score is not None else score_run(row["status"], row.get("metrics"), window,
                                                                 row.get("failure"))
        if run.purpose == "profile" and run.score.rankable:  # the profiler slows the steps it records
            run.score = RunScore(False, "profile run: not scored (the profiler slows the steps it records)")
        elif run.purpose == "replay" and run.score.rankable:  # another mode's throughput: evidence for the gate
            run.score = RunScore(False, "replay run: not scored (a whole-loop run's train-only replay is the gate's "
                                        "evidence, not its throughput)")
        elif run.profiled and run.score.rankable:  # whatever its purpose
            run.score = RunScore(False, "launched through the profiler pod hook: not scored (the profiler slows "
                                        "the steps it records)")
    gates = {}
    for row in by_kind["gate"]:
        gates.setdefault(row["run"], []).append(row)
    for run_id, gate_rows in gates.items():
        run = runs.get(run_id)
        if run is None:
            if incremental:
                raise MergeConflict("gate for run %s, which has no launch row" % run_id)
            warnings.append("gate for run %s, which has no launch row; ignored" % run_id)
            continue
        verdicts = {row["verdict"] for row in gate_rows}
        if run.gate:
            verdicts.add(run.gate)
        run.gate = "fail" if "fail" in verdicts else "pass"
        run.gate_reasons = tuple(sorted(set(run.gate_reasons).union(
            reason for row in gate_rows for reason in row.get("reasons", []))))
    return runs, by_kind["stop"], warnings
