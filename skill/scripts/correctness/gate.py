"""``attune gate``: run directories in, one verdict out (PROTOCOL.md is the rulebook).

A run directory holds the rendered recipe (``recipe.yaml``, a RayJob, or ``local.json``, the local
backend's job) and the run's ``log.txt``; so the gate judges runs from any source, inside a
campaign or not. The verdict passes only when every part passes:

1. the checks: the candidate logged every compared step, with a finite loss, no skipped iteration
   the baseline did not skip, the same data rows (``rows_sha256``) and the same topology;
2. the configuration check: every changed argument and environment variable is placement or an
   allowlisted swap (``config_check``);
3. the convergence check: the calibrated check decides; Megatron-Bridge's verdict on the same
   steps is reported beside it (``convergence``); a slime run's gradient norm is a second curve, judged against
   the baseline's reruns.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Optional

from attune.core import files, logparse, slime
from attune.core.command import Command
from attune.core.errors import InputError
from attune.core.recipe import Recipe

from . import config_check, convergence
from .rules import Rules

DEFAULT_STEPS = (1, 20)
_ROWS_SHA = re.compile(r"rows_sha256[=:\s]+([0-9a-f]{64})\b")
_WORLD = re.compile(r"using world size:\s*(\d+)")
_HEAD_BYTES = 4 << 20  # startup lines (world size, data rows) are near the top of a log


@dataclasses.dataclass
class RunDir:
    """What the gate reads from one run directory."""

    path: Path
    args: dict
    env: dict
    gpus: Optional[int]  # from the recipe; None for a local job
    steps: dict  # step -> {"loss": float (NaN when not a number or missing), "skipped": int, "nan": int}
    world_size: Optional[int]
    rows_sha256: Optional[str]
    warnings: list
    slime: bool = False  # its steps are slime's ``step N:`` records (train/loss, else train/pg_loss)

    @property
    def last_step(self) -> int:
        return max(self.steps) if self.steps else 0


def _loss(value) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def load_run(path, role: str = "run") -> RunDir:
    """Read ``recipe.yaml`` (or ``local.json``) and ``log.txt`` from ``path``; ``InputError`` when unusable."""
    directory = Path(path)
    if not directory.is_dir():
        raise InputError("%s %s: not a directory. Fix: give a run directory holding recipe.yaml (or local.json) "
                         "and log.txt" % (role, directory))
    gpus = None
    if (directory / "recipe.yaml").is_file():
        recipe = Recipe.load(directory / "recipe.yaml")
        args, env, gpus = recipe.args(), recipe.env(), recipe.gpus() or None
    elif (directory / "local.json").is_file():
        text = files.read_text(directory / "local.json", "local job file", "give the file the local backend wrote")
        try:
            job = json.loads(text)
            command = Command(job["command"])
            env = {str(k): str(v) for k, v in (job.get("env") or {}).items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError("%s: not a local job file with a `command` (%s). Fix: give the file the local backend "
                             "wrote" % (directory / "local.json", exc))
        args = command.args()
        env = dict(command.prefix_env(), **env)
    else:
        raise InputError("%s %s: has neither recipe.yaml nor local.json. Fix: give the run's directory "
                         "(runs/<id>/ in a campaign)" % (role, directory))
    log = directory / "log.txt"
    if not log.is_file():
        raise InputError("%s %s: has no log.txt. Fix: finalize the run first, or copy its log there" % (role, directory))
    parsed = logparse.parse_file(log, complete=True)  # a finished run's log
    refused = logparse.refusal(parsed)
    if refused:
        raise InputError("%s: %s, so not a training log. Fix: give the %s's run directory with the log its run "
                         "wrote" % (log, refused, role))
    warnings = list(parsed.get("warnings", []))
    records, start = logparse.last_run(parsed)
    if start:
        warnings.append("%s restarts at line %d; only its last run is compared" % (log, start["line_no"]))
    steps = {}
    for record in records:
        steps[record["step"]] = {"loss": _loss(record["lm_loss"]), "skipped": record["skipped"] or 0,
                                 "nan": record["nan"] or 0}
    slime_steps = [record for record in parsed.get("perf", ()) if record.get("line_type") == "step"]
    if not steps and slime_steps:  # slime numbers its optimizer steps from 0; the gate's steps count from 1
        for record in slime_steps:
            data = record.get("data") or {}
            steps[record["index"] + 1] = {"loss": _loss(data.get("train/loss", data.get("train/pg_loss"))),
                                          "skipped": 0, "nan": 0, "grad_norm": _loss(data.get("train/grad_norm"))}
    with open(log, "r", encoding="utf-8", errors="replace") as handle:
        head = handle.read(_HEAD_BYTES)
    world = _WORLD.search(head)
    rows = _ROWS_SHA.search(head)
    rows_sha = rows.group(1) if rows else (env.get("ATTUNE_ROWS_SHA256") or "").strip().lower() or None
    return RunDir(path=directory, args=args, env=env, gpus=gpus, steps=steps,
                  world_size=int(world.group(1)) if world else None, rows_sha256=rows_sha, warnings=warnings,
                  slime=bool(slime_steps) and not records)


def _check(passed: bool, detail: str) -> dict:
    return {"passed": passed, "detail": detail}


def _checks(baseline: RunDir, candidate: RunDir, window: list) -> dict:
    checks = {}
    missing = [s for s in window if s not in candidate.steps]
    short = candidate.last_step < window[-1]
    checks["length"] = _check(not short, "the candidate logged steps up to %d; the window ends at %d"
                              % (candidate.last_step, window[-1]))
    checks["steps"] = _check(not missing, "missing step(s) %s" % _steps_text(missing) if missing
                             else "every step of %d-%d logged" % (window[0], window[-1]))
    bad = [s for s in window if s in candidate.steps
           and (not math.isfinite(candidate.steps[s]["loss"]) or candidate.steps[s]["nan"])]
    checks["finite_loss"] = _check(not bad, "loss not a finite number (NaN, inf or missing) at step(s) %s"
                                   % _steps_text(bad) if bad else "finite loss at every logged step")
    skipped = [s for s in window if s in candidate.steps and candidate.steps[s]["skipped"]
               and not (s in baseline.steps and baseline.steps[s]["skipped"])]
    checks["skipped"] = _check(not skipped, "skipped iteration(s) at step(s) %s that the baseline did not skip"
                               % _steps_text(skipped) if skipped else "no skipped iteration the baseline did not skip")
    if baseline.rows_sha256 and candidate.rows_sha256:
        same = baseline.rows_sha256 == candidate.rows_sha256
        checks["data"] = _check(same, "rows_sha256 %s (baseline %s)" % (candidate.rows_sha256[:16],
                                                                         baseline.rows_sha256[:16]))
    elif baseline.rows_sha256 or candidate.rows_sha256:
        checks["data"] = _check(False, "only the %s records its rows_sha256: the data cannot be shown to be the same"
                                % ("baseline" if baseline.rows_sha256 else "candidate"))
    else:
        checks["data"] = _check(True, "neither run records a rows_sha256 (the data flags are compared by the "
                                      "configuration check)")
    topology = []
    if baseline.gpus and candidate.gpus and baseline.gpus != candidate.gpus:
        topology.append("%d GPUs in the recipe against the baseline's %d" % (candidate.gpus, baseline.gpus))
    if baseline.world_size and candidate.world_size and baseline.world_size != candidate.world_size:
        topology.append("world size %d in the log against the baseline's %d" % (candidate.world_size,
                                                                                baseline.world_size))
    checks["topology"] = _check(not topology, "; ".join(topology) or "the same GPUs as the baseline")
    return checks


def _steps_text(steps: list) -> str:
    return ", ".join(str(s) for s in steps[:10]) + (" and %d more" % (len(steps) - 10) if len(steps) > 10 else "")


def run_gate(baseline_dir, candidate_dir, repeat_dirs=(), steps=None, rules: Rules = None) -> dict:
    """The gate's verdict as plain data (PROTOCOL.md §5 lists the fields). ``steps`` (first, last) defaults to
    ``DEFAULT_STEPS``, and for a slime baseline to every optimizer step it logged (PROTOCOL.md §4.4)."""
    rules = rules or Rules()
    baseline = load_run(baseline_dir, "baseline")
    candidate = load_run(candidate_dir, "candidate")
    repeats = [load_run(path, "repeat") for path in repeat_dirs]
    if baseline.slime and slime.shape_of(baseline.args).mode != "train_only":
        raise InputError("baseline %s: a slime run of the whole loop trains on rollouts of its own, so its loss is no "
                         "reference for another run's. Fix: gate its train-only replay: save its rollouts "
                         "(--save-debug-rollout-data), freeze them (`attune rows from-slime`), and gate runs that load "
                         "them (--load-debug-rollout-data; PROTOCOL.md §4.4)" % baseline.path)
    if steps is None:
        steps = (1, max(2, baseline.last_step)) if baseline.slime else DEFAULT_STEPS
    first, last = steps
    window = [s for s in sorted(baseline.steps) if first <= s <= last]
    if not window or window[-1] < last:
        raise InputError("baseline %s: logged steps %s; the gate compares steps %d-%d. Fix: give a baseline that "
                         "ran at least %d steps with --log-interval 1, or pass --steps"
                         % (baseline.path / "log.txt", "%d-%d" % (min(baseline.steps), baseline.last_step) if baseline.steps
                            else "none", first, last, last))
    base_loss = [baseline.steps[s]["loss"] for s in window]
    if not all(math.isfinite(v) for v in base_loss):
        raise InputError("baseline %s: its loss is not finite at every step of %d-%d; it cannot be the reference. "
                         "Fix: gate against a healthy baseline run" % (baseline.path, first, last))
    checks = _checks(baseline, candidate, window)
    config = config_check.check(baseline, candidate, rules)
    reasons = [name + ": " + check["detail"] for name, check in checks.items() if not check["passed"]]
    reasons += config["reasons"]
    result = {"verdict": None, "reasons": reasons, "checks": checks, "config": config,
              "baseline": str(baseline.path), "candidate": str(candidate.path),
              "repeats": [str(r.path) for r in repeats],
              "rules": {"path": rules.path, "sha256": rules.sha256, "overrides": rules.overrides_path,
                        "overrides_sha256": rules.overrides_sha256},
              "warnings": baseline.warnings + candidate.warnings + [w for r in repeats for w in r.warnings]}
    aligned = [candidate.steps[s]["loss"] if s in candidate.steps else float("nan") for s in window]
    bridge = convergence.bridge_validate(aligned, base_loss)
    conv = {"steps": [window[0], window[-1]], "bridge": bridge}
    if checks["steps"]["passed"] and checks["finite_loss"]["passed"]:
        rerun_losses = []
        for rerun in repeats:
            if all(s in rerun.steps and math.isfinite(rerun.steps[s]["loss"]) for s in window):
                rerun_losses.append([rerun.steps[s]["loss"] for s in window])
            else:
                result["warnings"].append("repeat %s does not have a finite loss at every step of %d-%d; not used"
                                          % (rerun.path, window[0], window[-1]))
        calibrated = convergence.calibrated(window, aligned, base_loss, rerun_losses,
                                            exact_change=config["exact_only"], same_init=config["same_init"])
        conv["calibrated"] = calibrated
        conv["passed"] = calibrated["passed"]
        reasons += ["convergence: " + reason for reason in calibrated["reasons"]]
        if baseline.slime:
            conv["grad_norm"] = _grad_norm(window, baseline, candidate, repeats, calibrated["same_init"], result)
            reasons += ["convergence: " + reason for reason in (conv["grad_norm"] or {}).get("reasons", ())]
            conv["passed"] = conv["passed"] and (conv["grad_norm"] or {}).get("passed") is not False
        if not bridge["passed"] and calibrated["passed"]:
            result["warnings"].append("Megatron-Bridge validate_convergence alone would fail this candidate (%s); the "
                                      "calibrated check passes it (PROTOCOL.md §4.1)" % ", ".join(bridge["failed_metrics"]))
    else:
        conv["calibrated"] = None
        conv["passed"] = False
    result["convergence"] = conv
    result["verdict"] = "pass" if not reasons else "fail"
    return result


def _grad_norm(window: list, baseline: RunDir, candidate: RunDir, repeats: list, same_init: bool, result: dict):
    """The gradient-norm check of a slime run (``convergence.grad_norm_check``), or None, with a warning, where the
    baseline or the candidate does not log a finite ``train/grad_norm`` at every compared step."""
    def curve(run):
        values = [run.steps[s].get("grad_norm", float("nan")) if s in run.steps else float("nan") for s in window]
        return values if all(math.isfinite(v) for v in values) else None

    base, cand = curve(baseline), curve(candidate)
    if base is None or cand is None:
        result["warnings"].append("the %s does not log a finite train/grad_norm at every step of %d-%d: the gradient "
                                  "norm is not compared" % ("baseline" if base is None else "candidate", window[0],
                                                            window[-1]))
        return None
    reruns = [values for values in (curve(rerun) for rerun in repeats) if values is not None]
    checked = convergence.grad_norm_check(window, cand, base, reruns, same_init)
    if checked["passed"] is None:
        result["warnings"].append("gradient norm not judged: %s (PROTOCOL.md §4.4)" % checked["threshold_basis"][
            len("not judged: "):])
    return checked


def _summary(result: dict) -> dict:
    """What the ledger's gate row keeps of a verdict (gate.json keeps everything)."""
    conv = result["convergence"]
    calibrated = conv.get("calibrated") or {}
    summary = {"config": result["config"]["passed"], "bridge": conv["bridge"]["passed"],
               "calibrated": calibrated.get("passed"),
               "level": (calibrated.get("level") or {}).get("value"),
               "progress": (calibrated.get("progress") or {}).get("value"),
               "drift": (calibrated.get("drift") or {}).get("value"),
               "widening": (calibrated.get("widening") or {}).get("value"),
               "same_init": calibrated.get("same_init"),
               "deterministic": calibrated.get("deterministic"), "exact_required": calibrated.get("exact_required"),
               "checks": {name: check["passed"] for name, check in result["checks"].items()},
               "changes": [{"name": c["name"], "class": c["class"]} for c in result["config"]["changes"]],
               "overrides_used": result["config"]["overrides_used"], "rules_sha256": result["rules"]["sha256"],
               "overrides_sha256": result["rules"]["overrides_sha256"], "steps": conv["steps"]}
    if conv.get("grad_norm"):  # a slime run's second curve (only where it was compared)
        summary["grad_norm"] = {"value": conv["grad_norm"]["value"], "passed": conv["grad_norm"]["passed"]}
    return summary


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What a campaign's gate of ``run`` compares: ``against`` is the reference baseline run (the gate row's
    ``against``); ``baseline``, ``candidate`` and ``reruns`` are the runs whose directories are compared, the same
    runs or, for a whole-loop slime campaign, their train-only replays (``replays`` then names them)."""
    against: str
    baseline: str
    candidate: str
    reruns: tuple
    replays: Optional[dict] = None


def campaign_inputs(rows: list, run: str, campaign) -> Inputs:
    """What a campaign's gate of ``run`` compares, from the ledger ``rows`` as they stood when it was gated: the
    reference (the earliest finished baseline run) and the runs of the reference's recipe that are its reruns
    (the other finished runs of that recipe, in launch order). In a whole-loop slime campaign each run is
    represented by its first finished train-only replay on the reference replay's dump (PROTOCOL.md §4.4)."""
    from attune.core.errors import CheckFailed

    launches = {row["run"]: row for row in rows if row["kind"] == "launch"}
    finished = {row["run"] for row in rows if row["kind"] == "result" and row["status"] == "finished"}
    if run not in launches:
        raise InputError("run %s was never launched in campaign %s. Fix: `attune status` lists its runs"
                         % (run, campaign.id))
    if launches[run]["purpose"] == slime.REPLAY_PURPOSE:
        raise InputError("run %s is the train-only replay of run %s: gate the run it replays (`attune gate --run %s`), "
                         "which compares this replay" % (run, launches[run].get("parent"), launches[run].get("parent")))
    if run not in finished:
        raise CheckFailed("run %s has no finished result: finalize it first (a failed run cannot pass the gate)" % run)
    ordered = sorted(launches.values(), key=lambda row: (row["ts"], row["run"]))
    baselines = [row for row in ordered if row["purpose"] == "baseline" and row["run"] in finished]
    if not baselines:
        raise CheckFailed("campaign %s has no finished baseline run to gate against. Fix: launch and finalize the "
                          "baseline first" % campaign.id)
    reference = baselines[0]
    reruns = tuple(row["run"] for row in ordered if row["recipe_sha256"] == reference["recipe_sha256"]
                   and row["run"] in finished and row["run"] not in (reference["run"], run))
    if not _whole_loop(campaign.run_dir(reference["run"])):
        return Inputs(reference["run"], reference["run"], run, reruns)
    replays = [row for row in ordered if row["purpose"] == slime.REPLAY_PURPOSE and row["run"] in finished]

    def first_replay(of, sha=None):
        return next((row for row in replays if row.get("parent") == of
                     and (sha is None or row.get("rows_sha256") == sha)), None)

    base = first_replay(reference["run"])
    fix = ("Fix: freeze the baseline's rollouts (its --save-debug-rollout-data files: `attune rows from-slime`, then "
           "`attune rows to-slime`), then `attune launch --replay-of RUN --rollouts FILE` (its attune_dump.json) "
           "for %s and finalize it")
    if base is None:
        raise CheckFailed("run %s is a whole-loop slime run: it is gated on its train-only replay against the "
                          "baseline's, and baseline run %s has no finished replay. %s"
                          % (run, reference["run"], fix % ("%s and %s" % (reference["run"], run))))
    own = first_replay(run, base.get("rows_sha256"))
    if own is None:
        raise CheckFailed("run %s is a whole-loop slime run: it is gated on its train-only replay on the rollouts the "
                          "baseline's replay %s trained (rows_sha256 %s), and it has no finished one. %s"
                          % (run, base["run"], (base.get("rows_sha256") or "none")[:16], fix % run))
    recipe_of = {row["run"]: row["recipe_sha256"] for row in ordered}
    rerun_replays = tuple(row["run"] for row in replays if row["run"] not in (base["run"], own["run"])
                          and row.get("rows_sha256") == base.get("rows_sha256")
                          and recipe_of.get(row.get("parent")) == reference["recipe_sha256"] and row["parent"] != run)
    return Inputs(reference["run"], base["run"], own["run"], rerun_replays,
                  {"baseline": base["run"], "candidate": own["run"], "reruns": list(rerun_replays)})


def _whole_loop(run_dir: Path) -> bool:
    """Whether the run in ``run_dir`` is a slime run of the whole loop (by its recipe)."""
    path = run_dir / "recipe.yaml"
    if not path.is_file():
        return False
    recipe = Recipe.load(path)
    args = recipe.args()
    return slime.is_slime(recipe.command.program, args) and slime.shape_of(args).mode == "whole_loop"


def row_payload(result: dict) -> dict:
    """The ``gate`` ledger row's payload for a campaign's verdict (``result`` from ``run_gate`` with its ``run`` and
    ``against``): what ``gate_campaign_run`` records and ``attune verify --replay`` derives again."""
    payload = {"run": result["run"], "verdict": result["verdict"], "against": result["against"],
               "checks": _summary(result), "reasons": result["reasons"]}
    if result.get("replays"):  # a whole-loop slime run: the replays compared in its place
        payload["replays"] = result["replays"]
    return payload


def gate_campaign_run(campaign, settings, run: str, extra_repeats=(), steps=None, rules_file=None) -> dict:
    """Gate a finalized run of ``campaign`` against its baseline; write ``runs/<run>/gate.json`` and a
    ``gate`` ledger row. The reference is the earliest finished baseline run; the other finished runs
    of the baseline's recipe are its reruns."""

    inputs = campaign_inputs(campaign.ledger.rows(), run, campaign)
    rules = Rules(overrides=rules_file or getattr(settings, "gate_rules", "") or None)
    result = run_gate(campaign.run_dir(inputs.baseline), campaign.run_dir(inputs.candidate),
                      [campaign.run_dir(r) for r in inputs.reruns] + list(extra_repeats), steps, rules)
    result["run"], result["against"] = run, inputs.against
    if inputs.replays:
        result["replays"] = inputs.replays
    files.atomic_write(campaign.run_dir(run) / "gate.json",
                       (json.dumps(result, indent=2, sort_keys=True, default=str) + "\n").encode("utf-8"))
    row = campaign.append("gate", **row_payload(result))
    result["ledger_seq"] = row["seq"]
    return result


def text(result: dict) -> str:
    """A gate result (``run_gate``) as ``attune gate`` prints it: the verdict, each check, each change with its
    class, the calibrated statistics against their thresholds, the reasons and the warnings."""
    conv = result["convergence"]
    calibrated = conv.get("calibrated") or {}
    lines = ["verdict: %s" % result["verdict"],
             "config: %s (%d change(s))" % ("pass" if result["config"]["passed"] else "fail",
                                           len(result["config"]["changes"])),
             "bridge: %s%s" % ("pass" if conv["bridge"]["passed"] else "fail",
                               " (%s)" % ", ".join(conv["bridge"]["failed_metrics"]) if conv["bridge"]["failed_metrics"]
                               else ""),
             "calibrated: %s" % ({True: "pass", False: "fail"}.get(calibrated.get("passed"), "not run"))]
    for change in result["config"]["changes"]:
        lines.append("change: %s %s: %s -> %s: %s%s" % (
            change["kind"], change["name"], "unset" if change["old"] is None else change["old"],
            "unset" if change["new"] is None else change["new"], change["class"], " (exact)" if change.get("exact") else ""))
    for name in convergence.STATISTICS:
        if calibrated.get(name):
            stat = calibrated[name]
            lines.append("%s: %.4g%% (threshold %.4g%%, %s)" % (name, stat["value"] * 100, stat["threshold"] * 100,
                                                            stat["threshold_basis"]))
    grad = conv.get("grad_norm")
    if grad and grad.get("threshold") is not None:
        lines.append("grad_norm: %.4g%% (threshold %.4g%%, %s)" % (grad["value"] * 100, grad["threshold"] * 100,
                                                                grad["threshold_basis"]))
    lines += ["reason: %s" % reason for reason in result["reasons"]]
    lines += ["warning: %s" % warning for warning in result["warnings"]]
    return "\n".join(lines)
