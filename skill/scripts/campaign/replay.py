"""``attune verify --replay``: every ``result`` and ``gate`` row of the ledger derived again from its evidence.

The hash chains (``attune verify``) show that no row changed after it was written; they cannot show that a row
says what its run gave, since a row appended through the library chains like any other. The replay does: each
``result`` row is derived again by ``finalize.derive`` from the run's raw log, read where finalize reads it
(``runs.ended_log``: the run directory on the local backend, through the log pod on KubeRay), and each ``gate``
row by the gate itself (``correctness.gate``) from the run directories it compared and the rules. The first row,
in ledger order, whose recorded fields differ from what its evidence gives is named with the field and both
values; a row whose evidence is gone (a log, a recipe, a run directory) is named with the file expected.
``attune report`` runs the replay as its first pre-ship check (``preship``), so no recipe ships from a campaign
that fails it.

What the evidence determines, and so what is compared (exactly: values the same code computes from the same
inputs are bit-identical):

* a ``result`` row: every field (each step's time, loss and counts, the global batch, sequence length and GPUs,
  the log's SHA-256, ``cpu``, the warnings, the status and the failure) with the exit code the backend still
  reports (a local run's ``exit.json``). Where the backend no longer reports one (every KubeRay run once it is
  torn down, a local run torn down or lost), a row recorded ``finished`` is derived with exit code 0, the only one
  a run finishes with, and compared in full; a row recorded failed or timed out is compared on what its log alone
  gives (``LOG_FIELDS``), since its status and failure were also read from facts of the moment it was finalized
  (the exit code, the scheduler's events, how long the run had been quiet) that nothing keeps. A closed launch
  (class ``submit_failed``) must have no metrics and no log. The run's recipe must still hash to its launch row's
  ``recipe_sha256``: it gives the sequence length.
* a ``gate`` row: the verdict, the reference run, every value of its summary (the statistics, the checks, the
  changes and their classes, the rules' SHA-256s, the steps) and its reasons, from the gate run again on the
  ledger as it stood before the row (which fixes the reference and the reruns), over the steps the row records,
  with the extra repeat directories and the overrides file its ``gate.json`` names (else ``ATTUNE_GATE_RULES``).
  Replayed after the result rows of the runs it compares, so on KubeRay it reads the logs just fetched again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Optional

from attune.core import measure
from attune.core.errors import AttuneError
from attune.core.schema import ENVELOPE

from . import backends, finalize, runs
from .runview import SUBMIT_FAILED

# what a failed or timed-out run's log alone determines, where its exit code is no longer known
LOG_FIELDS = ("run", "metrics", "log_sha256", "cpu", "warnings")
# the order a result row's fields are compared in: the first difference named is the one that matters most
RESULT_ORDER = ("run", "status", "metrics", "failure", "log_sha256", "cpu", "warnings")
GATE_ORDER = ("run", "against", "verdict", "checks", "reasons", "replays")


class _Text(str):
    """A value a message shows as it is, never equal to one read from a row (a field that is absent, a row the
    evidence does not give at all)."""


_MISSING = _Text("absent")


@dataclasses.dataclass(frozen=True)
class Mismatch:
    """The first row its evidence does not give: which row, which field, and the two values."""

    seq: int
    kind: str
    run: str
    field: str  # a path into the row (``metrics.step_ms[4]``), or ``evidence`` when the evidence is missing
    recorded: object
    derived: object
    evidence: str  # the file(s) the row was derived from, or the one that is missing
    note: str = ""

    @classmethod
    def of(cls, row: dict, field: str, recorded, derived, evidence: str, note: str = "") -> "Mismatch":
        return cls(row["seq"], row["kind"], row["run"], field, recorded, derived, evidence, note)

    def text(self) -> str:
        where = "ledger seq %d (%s row of run %s)" % (self.seq, self.kind, self.run)
        if self.field == "evidence":  # ``derived`` says what is wrong with it
            return "%s: its evidence %s: %s%s" % (where, self.derived, self.evidence, self.note and " (%s)" % self.note)
        return "%s: %s: recorded %s, re-derived %s from %s%s" % (
            where, self.field, _show(self.recorded), _show(self.derived), self.evidence,
            self.note and " (%s)" % self.note)

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        for key in ("recorded", "derived"):
            out[key] = str(out[key]) if isinstance(out[key], _Text) else out[key]
        return out


@dataclasses.dataclass(frozen=True)
class Replay:
    """How many rows of each kind were re-derived, and the first that was not."""

    results: int
    gates: int
    mismatch: Optional[Mismatch] = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def summary(self) -> str:
        counted = "%s and %s" % (_rows(self.results, "result"), _rows(self.gates, "gate"))
        if self.mismatch is not None:
            return "FAILED after %s re-derived: %s" % (counted, self.mismatch.text())
        return "%s re-derived from their evidence" % counted

    def as_dict(self) -> dict:
        return {"ok": self.ok, "result_rows": self.results, "gate_rows": self.gates,
                "mismatch": self.mismatch.as_dict() if self.mismatch else None}


def replay(campaign, settings) -> Replay:
    """Derive every ``result`` and ``gate`` row of ``campaign`` again from its evidence, in ledger order; stop at
    the first that differs from what it records (``Replay.mismatch``). ``settings``: the campaign's (its backend
    reads the logs). The chains are not checked here: ``attune verify`` checks them first."""
    rows = campaign.ledger.rows()
    backend = backends.get(settings.backend, settings)
    launches = {}
    counts = {"result": 0, "gate": 0}
    for index, row in enumerate(rows):
        kind = row["kind"]
        if kind == "launch":
            launches.setdefault(row["run"], row)  # the earliest, as the ranking uses
            continue
        if kind == "result":
            found = _result(campaign, settings, backend, row, launches.get(row["run"]))
        elif kind == "gate":
            found = _gate(campaign, settings, row, rows[:index])
        else:
            continue
        if found is not None:
            return Replay(counts["result"], counts["gate"], found)
        counts[kind] += 1
    return Replay(counts["result"], counts["gate"])


# ------------------------------------------------------------------------------------------- result rows
def _result(campaign, settings, backend, row: dict, launch: Optional[dict]) -> Optional[Mismatch]:
    run = row["run"]
    run_dir = campaign.run_dir(run)
    recorded = _payload(row)
    if launch is None:
        return Mismatch.of(row, "run", run, _MISSING, "the ledger", "no launch of run %s comes before it" % run)
    log, unavailable = runs.ended_log(backend, run_dir)
    where = _where(campaign, backend, settings, run, log)
    has_log = unavailable is None and log.is_file()
    if (recorded.get("failure") or {}).get("class") == SUBMIT_FAILED:  # a closed launch: the job never started
        if has_log:
            return Mismatch.of(row, "failure.class", SUBMIT_FAILED, _Text("a run that logged"), where,
                               "the run has a log, so its submission did not fail")
        ran = [name for name in ("metrics", "log_sha256") if name in recorded]
        return Mismatch.of(row, ran[0], recorded[ran[0]], _MISSING, "the backend",
                           "a launch whose submission failed never ran") if ran else None
    if "log_sha256" in recorded and not has_log:
        return Mismatch.of(row, "evidence", recorded["log_sha256"], _Text("is missing"), where,
                           unavailable or "the row records log_sha256 %s" % recorded["log_sha256"][:16])
    recipe = run_dir / "recipe.yaml"
    problem = None if launch.get("recipe_path") else _recipe_problem(recipe, launch["recipe_sha256"])
    if problem:  # (a recipe kept elsewhere, recipe_path, is checked before it ships: preship)
        return Mismatch.of(row, "evidence", launch["recipe_sha256"], _Text(problem[0]), _relative(campaign, recipe),
                           problem[1])
    try:
        seq_length, shape = runs.seq_length(run_dir), runs.slime_shape(run_dir)
    except AttuneError as exc:
        return Mismatch.of(row, "evidence", None, _Text("is unusable"), _relative(campaign, recipe), str(exc))
    status = backend.status(run_dir)
    known = status.state in ("succeeded", "failed") and status.exit_code is not None
    whole = known or recorded.get("status") == "finished"  # else: what the log alone gives (LOG_FIELDS)
    facts = finalize.RunFacts(run=run, log_path=log, exit_code=status.exit_code if known else (0 if whole else None),
                              started=0.0, ended=0.0, gpus=launch["gpus"], seq_length=seq_length,
                              slime=shape,
                              events=(unavailable,) if unavailable else (), hang_after_s=settings.hang_after_s,
                              backend_message=status.message if known else None)
    derived = _json(finalize.derive(facts))
    if not whole:
        recorded = {key: value for key, value in recorded.items() if key in LOG_FIELDS}
        derived = {key: value for key, value in derived.items() if key in LOG_FIELDS}
    found = _first_difference(recorded, derived, order=RESULT_ORDER)
    if found is None:
        return None
    path, old, new = found
    return Mismatch.of(row, path, old, new, where if has_log else "no log (%s)" % where,
                       _score_note(row, derived, settings.window) if path.startswith("metrics") else "")


def _recipe_problem(path: Path, expected: str) -> Optional[tuple]:
    """``(what, why)`` when the run's recipe is not the one its launch row hashed; None when it is."""
    if not path.is_file():
        return "is missing", "it gives the sequence length"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        return "was changed", "SHA-256 %s, but the launch row recorded %s" % (digest[:16], expected[:16])
    return None


def _score_note(row: dict, derived: dict, window) -> str:
    """The tokens/s/GPU the recorded and the derived metrics score to, as the ranking scores them."""
    def score(status, metrics, failure):
        result = measure.score_run(status, metrics, window, failure)
        return "%.1f" % result.tokens_per_s_per_gpu if result.rankable else "none (%s)" % result.why
    recorded = score(row["status"], row.get("metrics"), row.get("failure"))
    again = score(derived.get("status", row["status"]), derived.get("metrics"),
                  derived.get("failure", row.get("failure")))
    return "" if recorded == again else "tokens/s/GPU: recorded %s, the evidence gives %s" % (recorded, again)


def _where(campaign, backend, settings, run: str, log: Path) -> str:
    remote = getattr(backend, "remote_log", None)
    if remote is not None:  # KubeRay: the log as the log pod sees it, never the local copy alone
        return "%s (through log pod %s)" % (remote(run), settings.log_pod)
    return _relative(campaign, log)


def _relative(campaign, path: Path) -> str:
    try:
        return str(Path(path).relative_to(campaign.dir))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------------------------- gate rows
def _gate(campaign, settings, row: dict, before: list) -> Optional[Mismatch]:
    from attune.correctness import gate as gate_mod
    from attune.correctness.rules import Rules

    run = row["run"]
    recorded = _payload(row)
    try:
        inputs = gate_mod.campaign_inputs(before, run, campaign)
    except AttuneError as exc:
        return Mismatch.of(row, "verdict", row["verdict"], _Text("no gate row"), "the ledger before it", str(exc))
    record = _gate_record(campaign.run_dir(run) / "gate.json")
    extras = [path for path in record.get("repeats") or ()
              if isinstance(path, str) and not _is_run_dir(path, inputs.reruns)]
    overrides = (record.get("rules") or {}).get("overrides") or getattr(settings, "gate_rules", "") or None
    steps = (recorded.get("checks") or {}).get("steps")
    steps = tuple(steps) if _is_steps(steps) else gate_mod.DEFAULT_STEPS
    dirs = [campaign.run_dir(name) for name in (inputs.baseline, inputs.candidate) + tuple(inputs.reruns)]
    evidence = ", ".join([_relative(campaign, path) for path in dirs] + extras)
    try:
        rules = Rules(overrides=overrides)
        result = gate_mod.run_gate(dirs[0], dirs[1], dirs[2:] + extras, steps, rules)
    except AttuneError as exc:
        return Mismatch.of(row, "evidence", row["verdict"], _Text("is missing or unusable"), evidence, str(exc))
    result["run"], result["against"], result["replays"] = run, inputs.against, inputs.replays
    found = _first_difference(recorded, _json(gate_mod.row_payload(result)), order=GATE_ORDER)
    if found is None:
        return None
    path, old, new = found
    rules_text = "rules %s%s" % (rules.path, " + %s" % rules.overrides_path if rules.overrides_path else "")
    return Mismatch.of(row, path, old, new, "%s and %s, steps %d-%d" % (evidence, rules_text, steps[0], steps[1]))


def _gate_record(path: Path) -> dict:
    """The run's ``gate.json``, for what the ledger row does not keep (extra repeats, the overrides file); {}
    when there is none that reads."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_run_dir(path: str, reruns: list) -> bool:
    """A repeat directory that is one of the campaign's reruns (``.../runs/<rerun>``), wherever the campaign was
    when it was gated."""
    named = Path(path)
    return named.parent.name == "runs" and named.name in reruns


def _is_steps(value) -> bool:
    return (isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)
            and 1 <= value[0] < value[1])


# ------------------------------------------------------------------------------------------- comparing
def _payload(row: dict) -> dict:
    return {key: value for key, value in row.items() if key not in ENVELOPE}


def _json(value):
    """``value`` as the ledger gives it back (tuples as lists, and so on): the derived row compares like the
    recorded one."""
    return json.loads(json.dumps(value, allow_nan=False))


def _first_difference(recorded, derived, path: str = "", order=()) -> Optional[tuple]:
    """``(field path, recorded, derived)`` of the first difference, or None: dictionaries key by key (``order``
    first, then the rest sorted), lists item by item, values by type and value."""
    if isinstance(recorded, dict) and isinstance(derived, dict):
        keys = set(recorded) | set(derived)
        for key in [k for k in order if k in keys] + sorted(k for k in keys if k not in order):
            found = _first_difference(recorded.get(key, _MISSING), derived.get(key, _MISSING),
                                      "%s.%s" % (path, key) if path else key)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(derived, list):
        for index in range(max(len(recorded), len(derived))):
            found = _first_difference(recorded[index] if index < len(recorded) else _MISSING,
                                      derived[index] if index < len(derived) else _MISSING, "%s[%d]" % (path, index))
            if found is not None:
                return found
        return None
    if type(recorded) is type(derived) and recorded == derived:
        return None
    return path, recorded, derived


def _rows(count: int, kind: str) -> str:
    return "%d %s row%s" % (count, kind, "" if count == 1 else "s")


def _show(value) -> str:
    text = str(value) if isinstance(value, _Text) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
