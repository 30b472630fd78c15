"""One-change candidates: a parent recipe plus a small named diff, checked and written to
``runs/<run>/`` before anything launches.

``runs/<run>/recipe.yaml`` is the recipe and ``runs/<run>/candidate.json`` records the parent, the
change, the lever and the hypothesis. The recipe keeps the baseline's ``metadata.name``: runs of
one recipe are byte-identical (their ``recipe_sha256`` is what makes them repeats), and the backend
names the submitted RayJob after the run (``Recipe.with_name``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Optional

from attune.core import envpolicy, files, legality, levers as levers_mod, slime, workload
from attune.core.errors import CheckFailed, InputError
from attune.core.recipe import Recipe, diff

from . import podhooks, results as results_mod
from .ledger import RUNS, Campaign

RECORD = "candidate.json"
# what the launch row of a candidate copies from its record; its pod_hooks are merged with the campaign's and the
# launch's, and its projection carried (runs.launch_candidate); the rest is the run's: purpose, recipe, GPUs, backend
LAUNCH_FIELDS = ("change", "lever", "hypothesis", "leave_out")
RUN_NUMBER = re.compile(r"^r(\d+)$")
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def parse_changes(sets=(), unsets=(), envs=(), unset_envs=(), baseline_env=None) -> list:
    """Command-line changes (``--set ARG=VALUE`` or ``--set ARG``, ``--unset ARG``, ``--env K=V``,
    ``--unset-env K``) as change records. ``ARG`` may be written with or without its leading dashes
    (``--set micro-batch-size=2`` or ``--set=--micro-batch-size=2``). A variable must be on the allowlist
    (``core/envpolicy.py``) or set by the baseline recipe (``baseline_env``, when given)."""
    changes = []

    def flag_name(text, option):
        name = text if text.startswith("--") else "--" + text
        if not re.match(r"^--[A-Za-z0-9][A-Za-z0-9_-]*$", name):
            raise InputError("%s %s: %r is not an argument name (e.g. micro-batch-size)" % (option, text, name))
        return name
    for item in sets:
        flag, sep, value = item.partition("=")
        changes.append({"op": "set", "arg": flag_name(flag, "--set"), "value": value if sep else True})
    for flag in unsets:
        changes.append({"op": "unset", "arg": flag_name(flag, "--unset")})
    for item in envs:
        name, sep, value = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise InputError("--env %s: give NAME=value" % item)
        envpolicy.check_name(name, baseline_env, "--env %s" % item)
        changes.append({"op": "set", "env": name, "value": value})
    for name in unset_envs:
        envpolicy.check_name(name, baseline_env, "--unset-env %s" % name)
        changes.append({"op": "unset", "env": name})
    if not changes:
        raise InputError("a candidate needs one change: --set, --unset, --env or --unset-env")
    return changes


def load_baseline(settings) -> Recipe:
    try:
        return Recipe.load(settings.baseline_yaml).require_gpus()
    except InputError as exc:
        raise InputError("ATTUNE_BASELINE_YAML=%s" % exc)


def _parent(campaign: Campaign, settings, parent: str) -> Recipe:
    if parent == "baseline":
        return workload.enforce(load_baseline(settings))
    path = campaign.run_dir(parent) / "recipe.yaml"
    if not path.is_file():
        raise InputError("--parent %s: no recipe at %s. Fix: give a run id from `attune status`, or baseline"
                         % (parent, path))
    return Recipe.load(path).require_gpus()


def _record(campaign: Campaign, run: str) -> Optional[dict]:
    path = campaign.run_dir(run) / RECORD
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def leave_out(campaign: Campaign, settings, parent: str, kept: str) -> list:
    """The change that removes from ``parent``'s recipe the change candidate run ``kept`` made to its own parent
    (a leave-one-out): the settings ``kept`` touched, set back to what its parent had. ``kept`` must be on
    ``parent``'s lineage (``parent`` itself or one of its ancestors through ``candidate.json``)."""
    record = _record(campaign, kept)
    if record is None:
        raise InputError("--leave-out %s: no candidate.json in %s. Fix: give the candidate run that introduced the "
                         "change (REPORT.md's kept changes, RESULTS.md's rows with status kept)"
                         % (kept, campaign.run_dir(kept)))
    chain, at = [], parent
    while at and at != "baseline" and at not in chain:
        chain.append(at)
        at = (_record(campaign, at) or {}).get("parent")
    if kept not in chain:
        raise InputError("--leave-out %s: it is not a change of %s's stack (its lineage: %s). Fix: give --parent the "
                         "leader and --leave-out a change along its lineage"
                         % (kept, parent, " <- ".join(chain + ["baseline"]) if parent != "baseline" else "baseline"))
    before, after = _parent(campaign, settings, record["parent"]), _parent(campaign, settings, kept)
    undo = diff(after, before)
    if not undo:
        raise InputError("--leave-out %s: its recipe is its parent's: nothing to leave out" % kept)
    return undo


def allocate_run(campaign: Campaign, prefix: str) -> tuple:
    """The next run id (prefix + r + number) and its new, empty directory (made atomically)."""
    runs = campaign.dir / RUNS
    files.make_folders(runs)
    numbers = [int(m.group(1)) for name in os.listdir(runs) if name.startswith(prefix)
               for m in [RUN_NUMBER.match(name[len(prefix):])] if m]
    number = max(numbers, default=0) + 1
    while True:
        run = "%sr%03d" % (prefix, number)
        if not K8S_NAME.match(run):
            raise InputError("run id %r is not a valid Kubernetes name; shorten ATTUNE_RUN_PREFIX" % run)
        try:
            (runs / run).mkdir(files.FOLDER_MODE)  # exclusive: a link or folder already there is skipped
            return run, runs / run
        except FileExistsError:  # another process took it
            number += 1


def gate_config(baseline, child, settings) -> dict:
    """What the gate's configuration check will say of ``child`` against the baseline, before any GPU time:
    ``{"passes", "reasons", "changes": [{"name", "kind", "class"}]}``."""
    from types import SimpleNamespace

    from attune.correctness import config_check
    from attune.correctness.rules import Rules
    found = config_check.check(SimpleNamespace(args=baseline.args(), env=baseline.env()),
                               SimpleNamespace(args=child.args(), env=child.env()),
                               Rules(overrides=settings.gate_rules or None))
    return {"passes": found["passed"], "reasons": found["reasons"],
            "changes": [{"name": row["name"], "kind": row["kind"], "class": row["class"]} for row in found["changes"]]}


def projected_full(recipe, hardware: str = None) -> Optional[dict]:
    """``projection.api.project`` of ``recipe`` on ``hardware`` (the recipe's ATTUNE_SIM_HARDWARE when not given), its
    GPU count and GPUs per node as the recipe's environment or worker groups give them; None as ``projected``."""
    hardware = hardware or recipe.env().get("ATTUNE_SIM_HARDWARE")
    if not hardware or slime.is_slime(recipe.command.program, recipe.args()):
        return None
    from attune.projection.api import project
    env = recipe.env()
    per_node = env.get("ATTUNE_SIM_GPUS_PER_NODE")
    gpus = int(env["ATTUNE_SIM_GPUS"]) if env.get("ATTUNE_SIM_GPUS", "").isdigit() else recipe.gpus()
    return project(recipe.args(), gpus, hardware, int(per_node) if per_node and per_node.isdigit() else None)


def projected(recipe, hardware: str = None) -> Optional[dict]:
    """The projection of ``recipe`` on ``hardware`` (the recipe's ATTUNE_SIM_HARDWARE when not given), as the
    ledger keeps it; None when no hardware is known, and for a slime recipe (the projection times a pretraining
    step, not an RL step: rollout, log-probs and training on uneven samples). An illegal layout is an InputError
    naming the rule."""
    out = projected_full(recipe, hardware)
    if out is None:
        return None
    mem = out["memory"]
    return {"hardware": out["hardware"], "gpus": out["gpus"], "tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"],
            "step_s": out["time"]["step_s"], "mfu": out["mfu"], "memory_gib": mem["total_gib"],
            "usable_gib": mem["usable_gib"], "fits": mem["fits"], "breakdown_gib": mem["breakdown_gib"],
            "calibrated": out["params"].get("calibrated")}


def describe_memory(projection: dict) -> str:
    return "%.1f GiB of %.1f GiB usable (%s)" % (
        projection["memory_gib"], projection["usable_gib"],
        ", ".join("%s %.1f" % item for item in projection["breakdown_gib"].items()))


def new(campaign: Campaign, settings, parent: str, changes: list, lever: str, hypothesis: str,
        gpu: str = None, pod_hooks: list = None, force: bool = False, leave_out_of: str = None,
        gate_will_fail: bool = False, draft: bool = False) -> dict:
    """Check and write a candidate; return its record. Nothing is written when a check fails. With
    ``leave_out_of`` (a candidate run on ``parent``'s lineage) the change is that run's, undone (``leave_out``),
    and ``changes`` must be empty; the record says ``leave_out``.

    A candidate the gate's configuration check will fail against the baseline (it could never lead or ship) is
    refused, unless ``gate_will_fail`` (a fault check that means to spend GPU time on it); one the projection says
    does not fit is refused unless ``force``. ``draft``: every check is made and the record answered (``run`` None,
    ``draft`` true) with nothing written and no run id used, whatever the two verdicts."""
    if not lever or not lever.strip():
        raise InputError("--lever is empty: name the one lever this candidate tries (levers.md)")
    if not hypothesis or not hypothesis.strip():
        raise InputError("--hypothesis is empty: say what the change should move and by about how much")
    catalog_path, catalog_text = levers_mod.campaign_catalog(campaign.dir)
    catalog = levers_mod.catalog_ids(catalog_path, catalog_text)
    try:
        lever = levers_mod.lever_name(lever, catalog, catalog_path)
    except ValueError as exc:
        raise InputError("--lever: %s" % exc)
    if leave_out_of:
        if changes:
            raise InputError("--leave-out computes the change itself: give it without --set, --unset, --env or "
                             "--unset-env")
        changes = leave_out(campaign, settings, parent, leave_out_of)
    base = _parent(campaign, settings, parent)
    child = workload.enforce(base.apply(changes))
    change = diff(base, child)
    if not change:
        raise InputError("the change leaves the recipe as it was: nothing to try")
    baseline = workload.enforce(load_baseline(settings))
    envpolicy.check_changes(change, baseline.env(), campaign.dir)  # an --env, or one a --leave-out undoes
    problems = workload.compare(baseline, child)
    if problems:
        raise InputError("; ".join(problems))
    legality.require(child, gpu, trusted=baseline.args(), what="the candidate", known=known_flags(child))
    projection = projected(child, gpu)
    gate = gate_config(baseline, child, settings)
    if draft:
        record = {"run": None, "draft": True, "parent": parent, "change": change, "lever": lever.strip(),
                  "hypothesis": hypothesis.strip(), "gpus": child.gpus(), "gate_config": gate}
        if leave_out_of:
            record["leave_out"] = leave_out_of
        if projection is not None:
            record["projection"] = dict(projection, not_modelled=not_modelled(change))
        return record
    if not gate["passes"] and not gate_will_fail:
        raise CheckFailed("the gate's configuration check will fail this candidate against the baseline, so it could "
                          "never lead or ship: %s. Nothing written, no run id used. Fix: change only what the gate "
                          "classes placement or swap (`attune candidate new ... --draft` shows each change's "
                          "class), or --gate-will-fail to spend GPU time on it anyway (a fault check)"
                          % "; ".join(gate["reasons"]))
    if projection is not None and not projection["fits"] and not force:
        raise CheckFailed("the projection says the candidate does not fit in GPU memory on %s: %s. Fix: choose a "
                          "lever that fits the headroom, or --force to spend GPU time on it anyway"
                          % (projection["hardware"], describe_memory(projection)))
    run, directory = allocate_run(campaign, settings.run_prefix)
    text = child.render()
    files.write_text(directory / "recipe.yaml", text)
    record = {"run": run, "parent": parent, "change": change, "lever": lever.strip(),
              "hypothesis": hypothesis.strip(), "gpus": child.gpus(),
              "recipe_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    if leave_out_of:
        record["leave_out"] = leave_out_of
    if pod_hooks:
        record["pod_hooks"] = pod_hooks
    record["gate_config"] = gate
    if projection is not None:
        record["projection"] = dict(projection, not_modelled=not_modelled(change))
    files.write_text(directory / RECORD, json.dumps(record, indent=2) + "\n")
    return record


def not_modelled(change: list) -> list:
    """The arguments and environment variables of ``change`` the projection does not read
    (``projection.config.READS``): for them its number is the parent's, which says nothing of their effect."""
    from attune.projection import config as projection_config
    out = []
    for item in change:
        if item.get("arg") and item["arg"] not in projection_config.READS:
            out.append(item["arg"])
        elif item.get("env") and item["env"] not in projection_config.READS_ENV:
            out.append(item["env"])
    return sorted(set(out))


def known_flags(recipe: Recipe):
    """Every flag the recipe's program defines where it ignores the others silently (slime: its own and the
    Megatron-LM flags it passes through, from the gate's argument inventory); None for Megatron-LM, which refuses
    an unknown flag itself."""
    if not slime.is_slime(recipe.command.program, recipe.args()):
        return None
    from attune.correctness import inventory
    return inventory.slime_flags()


def read_record(path) -> dict:
    """A candidate's record (``runs/<run>/candidate.json``), as ``new`` wrote it."""
    text = files.read_text(path, "candidate record", "write the run again with `attune candidate new`")
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise InputError("%s: not JSON (%s), so not a candidate record. Fix: write the run again with `attune "
                         "candidate new`" % (path, exc))
    if not isinstance(record, dict) or not isinstance(record.get("parent"), str):
        raise InputError("%s: not a candidate record (no parent). Fix: write the run again with `attune candidate "
                         "new`" % path)
    return record


def launch_fields(record: dict) -> dict:
    """What the candidate's launch row records of it (``LAUNCH_FIELDS`` it has)."""
    return {key: record[key] for key in LAUNCH_FIELDS if record.get(key) is not None}


def text(record: dict, campaign: Campaign) -> str:
    """A candidate record as ``attune candidate new`` prints it: the run, its recipe, parent, lever and change,
    the projection, the gate's class of each change and what the gate will refuse."""
    if record.get("draft"):
        lines = ["draft: nothing written, no run id used"]
    else:
        lines = ["run: %s" % record["run"], "recipe: %s" % (campaign.run_dir(record["run"]) / "recipe.yaml")]
    lines += ["parent: %s" % record["parent"], "lever: %s" % record["lever"], "gpus: %d" % record["gpus"]]
    lines += ["leave_out: %s" % record["leave_out"]] if "leave_out" in record else []
    lines += ["change: %s" % results_mod.describe_change(item) for item in record["change"]]
    lines += ["pod_hook: %s" % podhooks.describe(hook) for hook in record.get("pod_hooks", ())]
    if "projection" in record:
        proj = record["projection"]
        lines.append("projection: %.1f tokens/s/GPU on %s, memory %s%s" % (
            proj["tokens_per_s_per_gpu"], proj["hardware"], describe_memory(proj),
            "" if proj["fits"] else " (DOES NOT FIT: %s)" % ("written only because of --force" if not record.get("draft")
                                                             else "refused without --force")))
        if proj.get("not_modelled"):
            lines.append("projection_not_modelled: %s (the projection reads none of them: for them its number is the "
                         "parent's, not a prediction)" % ", ".join(proj["not_modelled"]))
    gate = record["gate_config"]
    lines += ["gate_class: %s %s" % (item["name"], item["class"]) for item in gate["changes"]]
    lines += ["warning: the gate will fail this candidate, so it can never lead or ship: %s%s"
              % (reason, "" if record.get("draft") else " (written only because of --gate-will-fail)")
              for reason in gate["reasons"]]
    return "\n".join(lines)
