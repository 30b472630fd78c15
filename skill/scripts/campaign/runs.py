"""The run lifecycle: launch, poll, finalize, teardown, recorded in the ledger.

A launch row is appended before the backend is asked to start the run, so no run ever holds
GPUs without a record; a submission that fails is finalized at once as failed, class submit_failed, charging
nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Optional

from attune.core import envpolicy, files, legality, logparse, slime, workload
from attune.core.chainlog import parse_ts
from attune.core.errors import AttuneError, CheckFailed, InputError
from attune.core.recipe import Recipe
from attune.core.triage import CLASSES

from . import backends, budget as budget_mod, podhooks, snapshot as snapshot_mod
from .candidates import RECORD, allocate_run, launch_fields, load_baseline, projected, read_record
from .finalize import RunFacts, finalize as finalize_run
from .ledger import Campaign
from .runview import SUBMIT_FAILED

HANG_AFTER_S = 900.0
SIMULATED_PROGRAMS = ("sim_megatron.py", "sim_slime.py")  # simulate/: the simulated Megatron-LM and slime workloads
PENDING_AFTER_S = 1800.0


PROFILE_HOOKS = [{"name": "profiler"}, {"name": "gpu_facts"}]


def _merge_hooks(own: list, extra: list) -> list:
    """A candidate's hooks, then the launch's; a hook named again takes the later arguments."""
    merged = {}
    for hook in list(own) + list(extra):
        merged[hook["name"]] = hook
    return list(merged.values())


def _launch_rows(campaign: Campaign, rows: list = None) -> dict:
    rows = campaign.ledger.rows() if rows is None else rows
    return {row["run"]: row for row in rows if row["kind"] == "launch"}


def _first_baseline(launches: dict, never_ran: set = frozenset()) -> Optional[str]:
    baselines = sorted((row["ts"], row["run"]) for row in launches.values()
                       if row["purpose"] == "baseline" and row["run"] not in never_ran)
    return baselines[0][1] if baselines else None


def _never_ran(rows: list) -> set:
    """The runs whose submission failed (a closed launch: no GPU time, no budget, no purpose), as
    ``runview.RunView.never_ran`` reads them."""
    return {row["run"] for row in rows
            if row["kind"] == "result" and (row.get("failure") or {}).get("class") == SUBMIT_FAILED}


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a launch submits: its purpose and parent, the recipe's text (whose bytes ``recipe_sha256`` hashes)
    and where it was read, and the candidate record it launches (``{}`` for other runs)."""
    purpose: str
    parent: Optional[str]
    text: str
    recipe_path: object
    record: dict = dataclasses.field(default_factory=dict)
    repeat_of: Optional[str] = None  # the run whose recipe it runs again (a repeat, confirmation or profile)
    rows_sha256: Optional[str] = None  # the data it trains on, where the plan knows it (a replay's frozen dump)


def launch_baseline(campaign: Campaign, settings, expected_gpu_hours: float = None, gpu: str = None,
                    pod_hooks: list = None) -> dict:
    """Launch the baseline (``ATTUNE_BASELINE_YAML``): the first time purpose ``baseline``, after that a repeat of it."""
    recipe = workload.enforce(load_baseline(settings))
    legality.require(recipe, gpu, what="the baseline")
    first = _first_baseline(_launch_rows(campaign), _never_ran(campaign.ledger.rows()))
    plan = Plan("repeat" if first else "baseline", first, recipe.render(), settings.baseline_yaml)
    return _submit(campaign, settings, plan, expected_gpu_hours, gpu, pod_hooks)


def launch_candidate(campaign: Campaign, settings, run: str, expected_gpu_hours: float = None, gpu: str = None,
                     pod_hooks: list = None) -> dict:
    """Launch the candidate ``run`` that ``attune candidate new`` wrote (its recipe and record); ``pod_hooks``
    (records from ``podhooks.parse``) add to its own and override them by name."""
    ledger_rows = campaign.ledger.rows()
    launches, never_ran = _launch_rows(campaign, ledger_rows), _never_ran(ledger_rows)
    if run in never_ran:
        raise InputError("run %s was launched and its submission failed (class %s): a run id is used once. Fix: "
                         "write the candidate again with `attune candidate new` and launch that" % (run, SUBMIT_FAILED))
    if run in launches:
        raise InputError("run %s was launched already; repeat it with --repeat-of %s" % (run, run))
    path = campaign.run_dir(run) / RECORD
    if not path.is_file():
        raise InputError("run %s has no candidate record (%s). Fix: write it with `attune candidate new`"
                         % (run, path))
    record = read_record(path)
    first = _first_baseline(launches, never_ran)
    parent = first if record["parent"] == "baseline" else record["parent"]
    if parent is None:
        raise InputError("launch the baseline first (`attune launch --baseline`): the candidate's parent is it")
    recipe_path = campaign.run_dir(run) / "recipe.yaml"
    plan = Plan("candidate", parent, _recipe_text(recipe_path), recipe_path, record)
    return _submit(campaign, settings, plan, expected_gpu_hours, gpu, pod_hooks, run=run)


def launch_repeat(campaign: Campaign, settings, source: str, confirm: bool = False, profile: bool = False,
                  expected_gpu_hours: float = None, gpu: str = None, pod_hooks: list = None) -> dict:
    """Launch ``source``'s recipe again: a repeat, its paired confirmation (``confirm``), or a profile run
    (``profile``: through the ``profiler`` and ``gpu_facts`` hooks; never ranked)."""
    option = "profile-of" if profile else "repeat-of"
    if source not in _launch_rows(campaign):
        raise InputError("--%s %s: the ledger has no launch of that run" % (option, source))
    recipe_path = campaign.run_dir(source) / "recipe.yaml"
    purpose = "profile" if profile else "confirm" if confirm else "repeat"
    plan = Plan(purpose, source, _recipe_text(recipe_path), recipe_path,
                {"pod_hooks": PROFILE_HOOKS} if profile else {}, repeat_of=source)
    return _submit(campaign, settings, plan, expected_gpu_hours, gpu, pod_hooks)


def launch_replay(campaign: Campaign, settings, source: str, rollouts, expected_gpu_hours: float = None,
                  gpu: str = None, pod_hooks: list = None) -> dict:
    """Launch the train-only replay of the whole-loop slime run ``source`` (purpose ``replay``, never ranked): its
    recipe training on the frozen dump whose manifest is ``rollouts`` (``attune rows to-slime``), which is what
    the gate compares for a whole-loop run (correctness/PROTOCOL.md §4.4). The dump's rows_sha256 is recomputed
    from its files before anything is launched."""
    from attune.data import rollout as rollout_mod
    if source not in _launch_rows(campaign):
        raise InputError("--replay-of %s: the ledger has no launch of that run" % source)
    recipe_path = campaign.run_dir(source) / "recipe.yaml"
    recipe = Recipe(_recipe_text(recipe_path), str(recipe_path))
    if not slime.is_slime(recipe.command.program, recipe.args()):
        raise InputError("--replay-of %s: not a slime run; a replay trains a slime run's recipe on frozen rollouts"
                         % source)
    manifest = Path(rollouts)
    if not rollout_mod.is_manifest(manifest):
        raise InputError("--rollouts %s: not a dump manifest. Fix: give the %s `attune rows to-slime` wrote"
                         % (manifest, rollout_mod.MANIFEST))
    sha, info = rollout_mod.dump_sha256(manifest)
    if info["recorded_sha256"] and info["recorded_sha256"] != sha:
        raise InputError("%s: its files hash to rows_sha256 %s, not the %s it records: the dump changed. Fix: write "
                         "it again with `attune rows to-slime`" % (manifest, sha, info["recorded_sha256"]))
    if settings.backend == "local":  # the run reads a copy the agent cannot change after it was checked
        manifest = _frozen_dump(campaign, manifest, sha)
    template = str(manifest.resolve().parent / ("%s.pt" % rollout_mod.TEMPLATE_KEY))
    replayed = recipe.apply(slime.replay_changes(recipe.args(), template, info["rollouts"], sha))
    plan = Plan(slime.REPLAY_PURPOSE, source, replayed.render(), recipe_path, repeat_of=source, rows_sha256=sha)
    return _submit(campaign, settings, plan, expected_gpu_hours, gpu, pod_hooks)


def _frozen_dump(campaign: Campaign, manifest: Path, sha: str) -> Path:
    """The dump of ``manifest`` copied into the campaign's records (``.attune/dumps/<rows_sha256>/``, which the agent
    cannot write) and checked again there: a dump in ``scratch/`` could be changed between its check and the run's
    reading it. Returns the copy's manifest."""
    from attune.data import rollout as rollout_mod
    target = campaign.dir / ".attune" / "dumps" / sha
    copied = target / rollout_mod.MANIFEST
    if not copied.is_file():
        staging = Path(files.make_temp_folder(target.parent))
        for entry in rollout_mod.read_manifest(manifest)["files"] + [{"file": manifest.name}]:
            if Path(entry["file"]).name != entry["file"]:
                raise InputError("%s: lists %r, not a file beside it. Fix: write the dump again with `attune rows "
                                 "to-slime`" % (manifest, entry["file"]))
            source = manifest.parent / entry["file"]
            files.refuse_link(source)
            files.atomic_write(staging / Path(entry["file"]).name, source.read_bytes())
        os.replace(str(staging), str(target))
    again, _info = rollout_mod.dump_sha256(copied)
    if again != sha:
        raise InputError("%s: the copy of the dump hashes to rows_sha256 %s, not the %s checked: the dump changed "
                         "while it was copied. Fix: write it again with `attune rows to-slime` and launch again"
                         % (manifest, again, sha))
    return copied


def check_in_flight(in_flight, limit) -> None:
    """Refuse a launch beyond ``ATTUNE_MAX_IN_FLIGHT`` runs in flight at once (launched, not finalized):
    ``CheckFailed``, exit 1, naming the runs that hold the places."""
    limit = int(limit or 1)
    if len(in_flight) >= limit:
        raise CheckFailed("launch refused: %d run(s) in flight (%s) and ATTUNE_MAX_IN_FLIGHT is %d. Fix: follow "
                          "them to their end (`attune poll RUN`, then `attune finalize RUN`), or run more at once "
                          "with a higher ATTUNE_MAX_IN_FLIGHT" % (len(in_flight), ", ".join(in_flight), limit))


def _submit(campaign: Campaign, settings, plan: Plan, expected_gpu_hours, gpu, pod_hooks, run: str = None) -> dict:
    """The one submit step of every launch: the environment policy (``envpolicy.check_launch``), hooks, budget,
    backend and rows checked before anything is written, then the launch row, then the job; a submission that fails
    closes its launch at once, charging nothing."""
    recipe = Recipe(plan.text, str(plan.recipe_path)).require_gpus()
    # what the job runs beyond the baseline (runtime_env code, a variable that loads code, a path the agent wrote):
    # refused on every backend before anything is written or started
    envpolicy.check_launch(campaign.dir, recipe, load_baseline(settings),
                           "run %s" % run if run else "the %s" % plan.purpose,
                           campaign.run_dir(run) if run else None,
                           set_by_attune={"ATTUNE_ROWS_SHA256": plan.rows_sha256} if plan.rows_sha256 else None)
    record = plan.record
    campaign_hooks = podhooks.parse(settings.pod_hooks.split(), where="ATTUNE_POD_HOOKS")
    hooks = _merge_hooks(campaign_hooks + list(record.get("pod_hooks") or []), pod_hooks or [])
    if hooks:  # checked before anything is written
        podhooks.check(hooks)
        podhooks.scripts_dir(settings)
    if any(hook["name"] == "profiler" for hook in hooks) and Path(recipe.command.program).name in SIMULATED_PROGRAMS:
        raise CheckFailed("%s runs the SIMULATED workload (%s), which runs no torch.profiler: a profile run would "
                          "spend GPU-hours and find no trace. Fix: read the bottleneck from `attune project` (the "
                          "step's compute, exposed communication per kind and bubble) and from the run's metrics"
                          % (plan.repeat_of or run or "the recipe", Path(recipe.command.program).name))
    snap = snapshot_mod.take(campaign.dir)
    if plan.purpose == "confirm" and snap.ranking.recipe_of(plan.repeat_of).gate == "fail":
        raise CheckFailed("run %s's recipe failed the correctness gate: it can never lead, so a confirmation would "
                          "spend budget on nothing. Fix: try another candidate" % plan.repeat_of)
    budget_mod.check_launch(snap.budget, expected_gpu_hours)
    check_in_flight(snap.budget.in_flight, settings.max_in_flight)
    # the backend is reached and the recipe checked against its rules before anything is written: a backend that
    # cannot be used (an unknown kube context) or a recipe it refuses leaves no launch row and uses no run id
    backend = backends.get(settings.backend, settings)
    backend.check(recipe)
    rows = None
    if settings.rows_path:  # every run trains on the declared rows, read where the run reads them
        from attune.campaign.rows_check import check_rows
        rows = check_rows(settings)
    if not run:
        run, directory = allocate_run(campaign, settings.run_prefix)
        files.write_text(directory / "recipe.yaml", plan.text)
    payload = {"run": run, "purpose": plan.purpose,
               "recipe_sha256": hashlib.sha256(plan.text.encode("utf-8")).hexdigest(), "gpus": recipe.gpus(),
               "backend": settings.backend}
    if Path(recipe.command.program).name in SIMULATED_PROGRAMS:  # every output marks such a run SIMULATED
        payload["simulated"] = True
    if any(hook["name"] == "cpu" for hook in hooks):  # a real program on a CPU: every output marks it cpu
        payload["cpu"] = True
    projection = record.get("projection")
    if projection is None and plan.purpose in ("baseline", "repeat", "confirm"):
        try:  # what the projection expected, beside what the run will measure (RESULTS.md compares them)
            projection = projected(recipe, gpu)
        except InputError:
            projection = None
    submitted = podhooks.wrap(recipe, hooks, settings, run, campaign.run_dir(run))
    # the job knows which run it is (the simulated workload's `ATTUNE_SIM_SEED: auto` is this id); not in the
    # recipe the ledger hashes, so two runs of one recipe stay one recipe
    try:
        submitted = submitted.apply([{"op": "set", "env": "ATTUNE_RUN_ID", "value": run}])
    except InputError:  # a recipe with no runtimeEnvYAML env_vars to hold it runs without it
        pass
    if rows:  # the job checks the rows it reads itself too (data/MEGATRON.md)
        submitted = submitted.apply([{"op": "set", "env": "ATTUNE_ROWS_PATH", "value": settings.rows_path},
                                     {"op": "set", "env": "ATTUNE_ROWS_SHA256", "value": rows}])
    fields = dict({"parent": plan.parent}, **launch_fields(record))  # a candidate's change, lever, hypothesis
    fields.update(expected_gpu_hours=expected_gpu_hours, pod_hooks=hooks or None, rows_sha256=rows or plan.rows_sha256,
                  projection=projection)
    payload.update((key, value) for key, value in fields.items() if value is not None)
    row = campaign.append("launch", **payload)
    try:
        backend.submit(run, submitted.with_name(run), campaign.run_dir(run))
    except Exception as exc:  # the launch row exists: close it at once, charging nothing
        meaning, next_step = CLASSES[SUBMIT_FAILED]
        evidence = "submission failed: %s" % (" ".join(str(exc).split()) or type(exc).__name__)
        campaign.append("result", run=run, status="failed",
                        failure={"class": SUBMIT_FAILED, "evidence": evidence[:2000], "line_no": None,
                                 "source": "backend", "meaning": meaning, "next_step": next_step})
        raise CheckFailed("run %s could not be submitted (%s); its launch is closed as %s: nothing is charged and "
                          "its reservation is released. Fix: %s" % (run, evidence[len("submission failed: "):][:500],
                                                                    SUBMIT_FAILED, next_step))
    return row


def launch_text(row: dict) -> str:
    """A launch row as ``attune launch`` prints it."""
    lines = ["run: %s" % row["run"], "purpose: %s" % row["purpose"], "gpus: %d" % row["gpus"],
             "backend: %s" % row["backend"]]
    lines += ["pod_hook: %s" % podhooks.describe(hook) for hook in row.get("pod_hooks", ())]
    return "\n".join(lines)


def poll(campaign: Campaign, settings, run: str) -> backends.Status:
    if run not in _launch_rows(campaign):
        raise InputError("the ledger has no launch of run %s" % run)
    return backends.get(settings.backend, settings).status(campaign.run_dir(run))


def finalize(campaign: Campaign, settings, run: str, hang_after_s: float = HANG_AFTER_S,
             pending_after_s: float = PENDING_AFTER_S) -> Optional[dict]:
    """Finalize a run that ended. A run that hangs, or stays pending past ``pending_after_s``
    (it cannot be scheduled), is torn down first. None while it is still running normally."""
    launches = _launch_rows(campaign)
    if run not in launches:
        raise InputError("the ledger has no launch of run %s" % run)
    backend = backends.get(settings.backend, settings)
    run_dir = campaign.run_dir(run)
    status = backend.status(run_dir)
    quiet = stopped = None
    events = ()
    if not status.done:
        waited = time.time() - parse_ts(launches[run]["ts"]).replace(tzinfo=datetime.timezone.utc).timestamp()
        if status.state == "pending" and waited > pending_after_s:
            events = tuple(backend.events(run)) or ("Unschedulable: still pending %.0f s after launch (limit %.0f s)"
                                                    % (waited, pending_after_s),)
        elif status.seconds_without_progress is not None and status.seconds_without_progress > hang_after_s:
            quiet = status.seconds_without_progress
        elif status.state == "running" and getattr(settings, "early_stop", False):
            stopped = _early_stop(campaign, settings, backend, run, launches[run])
            if stopped is None:
                return None
        else:
            return None
        status = backend.teardown(run_dir)
    else:
        events = tuple(backend.events(run))
    seq = seq_length(run_dir)
    log, unavailable = ended_log(backend, run_dir)
    if unavailable:
        events = events + (unavailable,)
    started, ended = status.started or status.ended or 0.0, status.ended or status.started or 0.0
    simulated = simulated_seconds(log) if launches[run].get("simulated") else None
    if simulated is None and stopped is not None and launches[run].get("simulated"):
        simulated = logged_seconds(log)  # stopped early: the simulated time of the iterations it printed
    if simulated is not None:  # charged for the time the simulated run stands for, not the seconds it took here
        ended = started + simulated
    facts = RunFacts(run=run, log_path=log, exit_code=status.exit_code, started=started, ended=ended,
                     gpus=launches[run]["gpus"], seq_length=seq, slime=slime_shape(run_dir), events=events,
                     seconds_without_progress=quiet,
                     hang_after_s=hang_after_s, backend_message=status.message, early_stop=stopped)
    row = finalize_run(campaign, facts)
    if status.state != "torn_down":  # the run is recorded: release what it still holds
        backend.teardown(run_dir)
    return row


def _early_stop(campaign: Campaign, settings, backend, run: str, launch: dict) -> Optional[dict]:
    """``earlystop.decide`` on the run's log so far (None: let it run)."""
    from attune.campaign import earlystop
    run_dir = campaign.run_dir(run)
    try:
        log = backend.log_path(run_dir)
    except CheckFailed:
        return None
    snap = snapshot_mod.take(campaign.dir, use_cache=True)  # a look at every poll: the view cache spares the ledger
    snap.finish()
    return earlystop.decide(snap.ranking, launch, log, settings.window, seq_length(run_dir))


def logged_seconds(log: Path) -> Optional[float]:
    """The seconds the iterations of ``log`` took, as it states them (``elapsed time per iteration``); None with
    none."""
    try:
        steps = logparse.parse_file(log).get("steps", ())
    except (OSError, AttuneError):
        return None
    total = sum(step["elapsed_ms"] or 0.0 for step in steps) / 1000.0
    return total or None


def finalize_answer(campaign: Campaign, row: dict) -> dict:
    """What ``finalize --json`` answers for the result ``row``: the row (with ``warnings``, an empty list when there
    are none), the run's score as ranking reads it (``rankable``, ``why``, ``tokens_per_s_per_gpu``,
    ``step_time_s``; SIMULATED or cpu where the run is) and what it was charged (``gpu_seconds``, ``gpu_hours``)."""
    from attune.campaign import ranking as ranking_mod
    view = ranking_mod.build(campaign.ledger.rows()).run(row["run"])
    score = view.score if view is not None else None
    seconds = budget_mod.gpu_seconds_by_run(campaign.gpu_log.rows()).get(row["run"], 0)
    return {"result": dict(row, warnings=list(row.get("warnings") or [])),
            "score": {"rankable": bool(score and score.rankable), "why": score.why if score else "not in the ledger",
                      "tokens_per_s_per_gpu": score.tokens_per_s_per_gpu if score and score.rankable else None,
                      "step_time_s": score.step_time_s if score and score.rankable else None,
                      "simulated": bool(view.simulated if view is not None else row.get("simulated")),
                      "cpu": bool(view.cpu if view is not None else row.get("cpu"))},
            "charge": {"gpu_seconds": seconds, "gpu_hours": seconds / 3600.0}}


def seq_length(run_dir: Path) -> Optional[int]:
    """The sequence length a run's recipe (``runs/<run>/recipe.yaml``) gives Megatron, which does not print it per
    step; None when the recipe sets none."""
    seq = Recipe.load(run_dir / "recipe.yaml").args().get("--seq-length")
    return int(seq) if isinstance(seq, str) and seq.isdigit() else None


def slime_shape(run_dir: Path) -> Optional[slime.Shape]:
    """The slime workload's mode and GPUs of a run whose recipe runs slime (``core/slime.py``); None otherwise."""
    recipe = Recipe.load(run_dir / "recipe.yaml")
    args = recipe.args()
    return slime.shape_of(args) if slime.is_slime(recipe.command.program, args) else None


def ended_log(backend, run_dir: Path) -> tuple:
    """An ended run's log as a local file, through ``backend.log_path`` (on KubeRay, copied out through the log
    pod), and None; or, where there is none to read (the run never started), the path finalize records as
    missing and the event that says why, which triage reads."""
    try:
        return backend.log_path(run_dir), None
    except CheckFailed as exc:
        return run_dir / "log.txt.unavailable", "log unavailable: %s" % exc


def _recipe_text(path: Path) -> str:
    """A run's recipe text as written (its bytes are what ``recipe_sha256`` hashes)."""
    return files.read_text(path, "RayJob YAML recipe", "write the run again with `attune candidate new`")


def simulated_seconds(log: Path) -> Optional[float]:
    """The simulated wall time the SIMULATED workload's last line states (``simulate/sim_megatron.py``,
    ``sim_slime.py``)."""
    try:
        with open(log, "rb") as handle:
            handle.seek(0, 2)
            handle.seek(max(0, handle.tell() - 4096))
            tail = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    found = re.findall(r"ATTUNE simulated wall time: ([0-9.]+) s", tail)
    return float(found[-1]) if found else None


def teardown(campaign: Campaign, settings, run: str) -> backends.Status:
    if run not in _launch_rows(campaign):
        raise InputError("the ledger has no launch of run %s" % run)
    return backends.get(settings.backend, settings).teardown(campaign.run_dir(run))


def topology(campaign: Campaign, settings, run: str) -> dict:
    """What the run asked for and got, where it fell short, and whether it is comparable with the
    first baseline run (whose facts are recorded in its runs/<run>/topology.json)."""
    launches = _launch_rows(campaign)
    if run not in launches:
        raise InputError("the ledger has no launch of run %s" % run)
    from attune.core import topology as topology_mod
    backend = backends.get(settings.backend, settings)
    run_dir = campaign.run_dir(run)
    log = run_dir / "log.txt"
    if not log.is_file():
        try:
            log = backend.log_path(run_dir)
        except CheckFailed:
            log = None
    if log is not None and not log.is_file():  # the local backend names the log the run has not written
        log = None
    summary = topology_mod.summarize(Recipe.load(run_dir / "recipe.yaml"), log,
                                     backend.cluster_facts(run))
    files.write_text(run_dir / "topology.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    baseline = _first_baseline(launches)
    summary["baseline"] = baseline
    summary["not_comparable"] = []
    if baseline and baseline != run and (campaign.run_dir(baseline) / "topology.json").is_file():
        before = json.loads((campaign.run_dir(baseline) / "topology.json").read_text())["got"]
        summary["not_comparable"] = topology_mod.comparable(before, summary["got"])
    return summary


def traces(campaign: Campaign, settings, run: str) -> list:
    """The torch.profiler traces a run's ``profiler`` hook found (pod_hooks.json), as local files: read in
    place on the local backend, copied out through the log pod into ``runs/<run>/traces/`` on KubeRay."""
    launches = _launch_rows(campaign)
    if run not in launches:
        raise InputError("the ledger has no launch of run %s" % run)
    if not any(hook["name"] == "profiler" for hook in launches[run].get("pod_hooks") or ()):
        raise InputError("run %s was not launched through the profiler hook. Fix: `attune launch --profile-of %s`"
                         % (run, run))
    run_dir = campaign.run_dir(run)
    remote = podhooks.out_dir(settings, run, run_dir) + "/pod_hooks.json"
    backend = backends.get(settings.backend, settings)
    kube = settings.backend == "kuberay"
    try:
        path = backend.copy_out(remote, run_dir / "pod_hooks.json") if kube else Path(remote)
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, CheckFailed) as exc:
        raise CheckFailed("run %s: no readable %s (%s): has the run started?" % (run, remote, exc))
    if record.get("status") != "finished":
        raise CheckFailed("run %s is still running (pod_hooks.json says %s): profile it once it has ended"
                          % (run, record.get("status")))
    hook = next((h for h in record.get("hooks", ()) if h.get("name") == "profiler"), {})
    found = (hook.get("facts") or {}).get("traces") or []
    if not found:
        raise CheckFailed("run %s: the profiler hook found no trace (%s%s)" % (
            run, hook.get("status", "not run"), "; " + "; ".join(hook["warnings"]) if hook.get("warnings") else ""))
    if not kube:
        return [Path(name) for name in found]
    local = []
    for n, name in enumerate(found):
        target = run_dir / "traces" / ("%d-%s" % (n, name.rsplit("/", 1)[-1]))
        files.make_folders(target.parent)
        local.append(backend.copy_out(name, target))
    return local
