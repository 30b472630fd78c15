"""The verbs of runs: candidate, project, launch, poll, finalize, teardown, kube, topology."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

from attune.campaign import ledger as campaign_mod, podhooks
from attune.core.errors import EXIT_CHECK_FAILED, EXIT_OK, CheckFailed, InputError

from .base import campaign_dir, campaign_settings, emit, verb

FINALIZE_POLL_S = 2.0  # finalize --wait: seconds between looks at the run


def _candidate_arguments(p) -> None:
    p.add_argument("action", choices=["new"], help="new: write a candidate")
    p.add_argument("--parent", required=True, help="a run id, or baseline")
    p.add_argument("--set", action="append", metavar="ARG[=VALUE]",
                   help="set a Megatron argument (a flag without =VALUE is a boolean flag)")
    p.add_argument("--unset", action="append", metavar="ARG", help="remove a Megatron argument")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="set an environment variable")
    p.add_argument("--unset-env", action="append", metavar="NAME", help="remove an environment variable")
    p.add_argument("--leave-out", metavar="RUN",
                   help="the leave-one-out of RUN, a change on the parent's lineage: the settings it changed "
                        "set back to what its parent had (instead of --set/--unset/--env/--unset-env)")
    p.add_argument("--lever", required=True, help="the one lever this candidate tries (levers.md)")
    p.add_argument("--hypothesis", required=True,
                   help="what the change should move (which bottleneck number) and by about how much")
    p.add_argument("--gpu", help="GPU model (h100, b200, ...) for the rules that depend on it")
    p.add_argument("--pod-hook", action="append", metavar="NAME[:KEY=VALUE,...]",
                   help="run the candidate through this in-pod hook (scripts/pod_hooks/README.md); repeatable")
    p.add_argument("--force", action="store_true",
                   help="write the candidate even when the projection says it does not fit in GPU memory")
    p.add_argument("--gate-will-fail", action="store_true",
                   help="write the candidate even though the gate's configuration check will fail it against the "
                        "baseline (it can never lead or ship: a fault check)")
    p.add_argument("--draft", action="store_true",
                   help="make every check and answer the record (run null) without writing anything or using a "
                        "run id")


@verb("candidate", "candidate new: write a one-change candidate (recipe and record) under runs/<id>/ after "
                   "checking the workload and Megatron's legality rules", arguments=_candidate_arguments)
def cmd_candidate(args) -> int:
    from attune.campaign import candidates
    campaign = campaign_mod.Campaign(campaign_dir(args))
    campaign.require_ledger()
    settings = campaign.settings(config_file=args.config)
    given = (args.set or (), args.unset or (), args.env or (), args.unset_env or ())
    # a variable the baseline recipe sets is the user's own knob: a candidate may change it (core/envpolicy.py)
    baseline_env = candidates.load_baseline(settings).env() if args.env or args.unset_env else None
    changes = candidates.parse_changes(*given, baseline_env=baseline_env) if any(given) or not args.leave_out else []
    record = candidates.new(campaign, settings, args.parent, changes, args.lever, args.hypothesis, args.gpu,
                            podhooks.parse(args.pod_hook), force=args.force, leave_out_of=args.leave_out,
                            gate_will_fail=args.gate_will_fail, draft=args.draft)
    emit(args, record, candidates.text(record, campaign))
    return EXIT_OK


def _project_arguments(p) -> None:
    p.add_argument("recipe", metavar="RECIPE",
                   help="a RayJob YAML (a campaign's runs/RUN/recipe.yaml, or any recipe)")
    p.add_argument("--hardware", help="GPU type: A100, H100, H200, B200, B300, GB200, GB300, MI300X, MI325X, "
                                      "MI355X (default: the recipe's ATTUNE_SIM_HARDWARE)")
    p.add_argument("--gpus", type=int, help="total GPUs (default: the recipe's worker groups)")
    p.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the hardware's)")
    p.add_argument("--sweep", action="store_true",
                   help="project every legal layout of the recipe's model on the GPUs (TP, PP, VP, CP, EP, ETP, "
                        "micro-batch, recompute) and print the fastest that fit, with the error band")
    p.add_argument("--top", type=int, default=10, metavar="N", help="with --sweep: how many layouts to print (10)")
    p.add_argument("--against", metavar="RECIPE",
                   help="another recipe (the parent, the baseline): list each change from it to RECIPE with "
                        "whether the projection models it (`changes[].modelled`; default: the candidate record "
                        "beside RECIPE, when there is one)")


@verb("project", "the analytic projection of a recipe: memory per GPU against HBM with its breakdown, step time "
                 "(compute, communication, bubble), tokens/s/GPU, TFLOP/s and MFU (exit 1 when it does not fit)",
                 arguments=_project_arguments, config=False)
def cmd_project(args) -> int:
    from attune.core.recipe import Recipe
    from attune.projection import api
    path = Path(args.recipe)
    recipe = Recipe.load(path)
    env = recipe.env()
    hardware = args.hardware or env.get("ATTUNE_SIM_HARDWARE")
    if not hardware:
        raise InputError("%s: no hardware: give --hardware (H100, B200, MI300X, ...)" % path)
    gpus = args.gpus or (int(env["ATTUNE_SIM_GPUS"]) if env.get("ATTUNE_SIM_GPUS", "").isdigit() else recipe.gpus())
    if gpus <= 0:
        recipe.require_gpus()
    if args.sweep:
        from attune.projection import sweep
        if args.top < 1:
            raise InputError("--top %d: give at least 1" % args.top)
        result = sweep.sweep(recipe.args(), gpus, hardware, args.gpus_per_node, top=args.top)
        emit(args, result, sweep.text(result))
        return EXIT_OK if result["best"] else EXIT_CHECK_FAILED
    out = api.project(recipe.args(), gpus, hardware, args.gpus_per_node)
    out["changes"] = _changes_modelled(path, recipe, args.against)
    text = api.text(out, path)
    if out["changes"] is not None:
        text += "\n" + _changes_text(out["changes"])
    emit(args, out, text)
    return EXIT_OK if out["memory"]["fits"] else EXIT_CHECK_FAILED


def _changes_modelled(path: Path, recipe, against: Optional[str]) -> Optional[list]:
    """Each change from ``against`` (else the change the candidate record beside ``path`` holds) to ``recipe``,
    with ``modelled``: whether the projection reads it. For a change it does not read the projection's number is
    the parent's: no effect modelled, not a predicted zero. None when there is nothing to compare with."""
    from attune.campaign import candidates
    from attune.core.recipe import Recipe, diff
    if against:
        change = diff(Recipe.load(Path(against)), recipe)
    else:
        beside = path.parent / candidates.RECORD
        if not beside.is_file():
            return None
        change = candidates.read_record(beside).get("change") or []
    missing = set(candidates.not_modelled(change))
    return [dict(item, modelled=not (item.get("arg") in missing or item.get("env") in missing)) for item in change]


def _changes_text(changes: list) -> str:
    if not changes:
        return "changes: none (the same recipe)"
    lines = ["changes:"]
    for item in changes:
        name = item.get("arg") or item.get("env") or "%s %s" % (item.get("group"), ", ".join(
            key for key in ("replicas", "gpus_per_worker") if key in item))
        value = "(unset)" if item["op"] == "unset" else item.get("value", item.get("replicas",
                                                                                   item.get("gpus_per_worker")))
        lines.append("  %s %s: %s" % (name, value, "modelled" if item["modelled"] else
                                       "NOT modelled (the projection does not read it: its number is the parent's)"))
    return "\n".join(lines)


def _launch_arguments(p) -> None:
    p.add_argument("run", nargs="?", help="a candidate written by `attune candidate new`")
    p.add_argument("--baseline", action="store_true", help="launch the baseline (again: a repeat)")
    p.add_argument("--repeat-of", metavar="RUN", help="launch the same recipe as RUN again")
    p.add_argument("--confirm", action="store_true", help="with --repeat-of: the paired confirmation")
    p.add_argument("--expected-gpu-hours", type=float, metavar="H",
                   help="GPUs x expected hours (needed with a GPU-hour budget)")
    p.add_argument("--gpu", help="GPU model (h100, b200, ...) for the legality rules that depend on it")
    p.add_argument("--profile-of", metavar="RUN",
                   help="launch RUN's recipe again through the profiler and gpu_facts hooks (purpose profile, "
                        "never ranked); set the steps with --pod-hook profiler:start=N,end=M")
    p.add_argument("--pod-hook", action="append", metavar="NAME[:KEY=VALUE,...]",
                   help="also run this launch through an in-pod hook (scripts/pod_hooks/README.md); repeatable")
    p.add_argument("--replay-of", metavar="RUN",
                   help="launch the train-only replay of the whole-loop slime run RUN on the frozen rollouts of "
                        "--rollouts (purpose replay, never ranked): what the gate compares for a whole-loop run")
    p.add_argument("--rollouts", metavar="FILE",
                   help="with --replay-of: the attune_dump.json that `attune rows to-slime` wrote")


@verb("launch", "launch a candidate (RUN), the baseline (--baseline), a repeat (--repeat-of RUN [--confirm]) or a "
                "slime run's train-only replay (--replay-of RUN --rollouts MANIFEST); "
                "the launch row is written first, and a launch that does not fit the budget is refused",
                arguments=_launch_arguments)
def cmd_launch(args) -> int:
    from attune.campaign import runs as runs_mod
    campaign = campaign_mod.Campaign(campaign_dir(args))
    settings = campaign_settings(args, campaign)
    given = [name for name, value in (("RUN", args.run), ("--baseline", args.baseline), ("--repeat-of", args.repeat_of),
                                       ("--profile-of", args.profile_of), ("--replay-of", args.replay_of)) if value]
    if len(given) != 1:
        raise InputError("give exactly one of RUN, --baseline, --repeat-of RUN, --profile-of RUN or --replay-of RUN "
                         "(given: %s)" % (", ".join(given) or "none"))
    if args.confirm and not args.repeat_of:
        raise InputError("--confirm is the paired confirmation of a candidate: give it with --repeat-of RUN")
    if bool(args.rollouts) != bool(args.replay_of):
        raise InputError("--replay-of RUN and --rollouts FILE go together: a replay trains RUN's recipe on the "
                         "frozen rollouts of the dump manifest FILE (`attune rows to-slime` writes it)")
    common = dict(expected_gpu_hours=args.expected_gpu_hours, gpu=args.gpu, pod_hooks=podhooks.parse(args.pod_hook))
    if args.replay_of:
        row = runs_mod.launch_replay(campaign, settings, args.replay_of, args.rollouts, **common)
    elif args.baseline:
        row = runs_mod.launch_baseline(campaign, settings, **common)
    elif args.run:
        row = runs_mod.launch_candidate(campaign, settings, args.run, **common)
    else:
        row = runs_mod.launch_repeat(campaign, settings, args.repeat_of or args.profile_of, confirm=args.confirm,
                                     profile=bool(args.profile_of), **common)
    emit(args, {"launch": row}, runs_mod.launch_text(row))
    return EXIT_OK


def _run_argument(p) -> None:
    p.add_argument("run", help="the run id")


@verb("poll", "the state of a launched run as its backend reports it", arguments=_run_argument)
def cmd_poll(args) -> int:
    from attune.campaign import runs as runs_mod
    campaign = campaign_mod.Campaign(campaign_dir(args))
    status = runs_mod.poll(campaign, campaign_settings(args, campaign), args.run)
    emit(args, status.as_dict(), "\n".join("%s: %s" % item for item in status.as_dict().items()))
    return EXIT_OK


def _finalize_arguments(p) -> None:
    p.add_argument("run", help="the run id")
    p.add_argument("--wait", type=float, metavar="S",
                   help="wait up to S seconds for the run to end before recording it (default: do not wait)")
    p.add_argument("--hang-after", type=float, metavar="S",
                   help="seconds without a log line of the job's own after which a running run is hung (default: ATTUNE_HANG_AFTER_S, 900)")


@verb("finalize", "record an ended run: parse its log, score it, charge its GPU time, triage a failure "
                  "(exit 1 while it still runs; a hung run is torn down)", arguments=_finalize_arguments)
def cmd_finalize(args) -> int:
    from attune.campaign import runs as runs_mod
    campaign = campaign_mod.Campaign(campaign_dir(args))
    settings = campaign_settings(args, campaign)
    hang_after = settings.hang_after_s if args.hang_after is None else args.hang_after
    deadline = time.monotonic() + (args.wait or 0)
    row = runs_mod.finalize(campaign, settings, args.run, hang_after)
    while row is None and time.monotonic() < deadline:  # --wait: until the run ends, at most S seconds
        time.sleep(max(0.0, min(FINALIZE_POLL_S, deadline - time.monotonic())))
        row = runs_mod.finalize(campaign, settings, args.run, hang_after)
    if row is None:
        raise CheckFailed("run %s is still running%s: poll it, and finalize when it has ended (--wait S waits for it)"
                          % (args.run, " after %g s" % args.wait if args.wait else ""))
    failure = row.get("failure") or {}
    data = runs_mod.finalize_answer(campaign, row)
    lines = ["run: %s" % row["run"], "status: %s" % row["status"]]
    if failure:
        lines.append("failure: %s%s: %s" % (failure.get("class"), " (%s memory)" % failure["memory"]
                                            if failure.get("memory") else "", failure.get("evidence", "")[:200]))
    score = data["score"]
    lines.append("tokens_per_s_per_gpu: %s" % ("%.1f" % score["tokens_per_s_per_gpu"] if score["rankable"]
                                               else "none (%s)" % score["why"]))
    lines.append("charged_gpu_hours: %.4f" % data["charge"]["gpu_hours"])
    lines += ["warning: %s" % warning for warning in data["result"]["warnings"]]
    emit(args, data, "\n".join(lines))
    return EXIT_OK


@verb("teardown", "stop a run and confirm it is gone", arguments=_run_argument)
def cmd_teardown(args) -> int:
    from attune.campaign import runs as runs_mod
    campaign = campaign_mod.Campaign(campaign_dir(args))
    status = runs_mod.teardown(campaign, campaign_settings(args, campaign), args.run)
    emit(args, status.as_dict(), "run: %s\nstate: %s" % (args.run, status.state))
    return EXIT_OK


def _kube_arguments(p) -> None:
    p.add_argument("action", choices=["get", "pods", "events", "logs", "exec"],
                   help="get: the RayJob's status; pods; events; logs: a pod's log; exec: a read-only program")
    p.add_argument("target", help="a run of this campaign (exec: or log-pod, the campaign's log pod)")
    p.add_argument("command", nargs="*", metavar="PROGRAM",
                   help="exec: the program and its arguments, after -- (cat, head, tail, grep, ls, wc, stat, "
                        "du, find, pip show|list|freeze)")
    p.add_argument("--pod", help="logs, exec: which of the run's pods (default: its head pod)")
    p.add_argument("--tail", type=int, default=200, metavar="N", help="logs: the last N lines (default 200)")


@verb("kube", "read-only inspection of the campaign's own cluster objects: get (a run's RayJob status), pods, "
              "events, logs (a pod's log) and exec (a read-only program in a run's pod or the log pod)",
              arguments=_kube_arguments)
def cmd_kube(args) -> int:
    from attune.campaign import kube as kube_mod
    campaign = campaign_mod.Campaign(campaign_dir(args))
    inspector = kube_mod.Inspector(campaign, campaign_settings(args, campaign))
    if args.action != "exec" and args.command:
        raise InputError("kube %s takes no program (%s). Fix: only kube exec runs one" % (args.action,
                                                                                         " ".join(args.command)))
    if args.action == "get":
        data = inspector.get(args.target)
        text = "\n".join("%s: %s" % item for item in sorted(data["status"].items()))
    elif args.action == "pods":
        data = {"run": args.target, "pods": inspector.pods(args.target)}
        text = "\n".join("%(pod)s  %(phase)s  %(node)s" % pod for pod in data["pods"]) or "no pods"
    elif args.action == "events":
        data = {"run": args.target, "events": inspector.events(args.target)}
        text = "\n".join(data["events"]) or "no events"
    elif args.action == "logs":
        data = inspector.logs(args.target, args.pod, args.tail)
        text = data["log"]
    else:
        log_pod = args.target == "log-pod"
        data = inspector.exec(None if log_pod else args.target, args.command, args.pod, log_pod)
        text = data["stdout"] + (data["stderr"] and "\n" + data["stderr"])
        emit(args, data, text)
        return EXIT_OK if data["exit_code"] in (0, None) else EXIT_CHECK_FAILED
    emit(args, data, text)
    return EXIT_OK


@verb("topology", "did the run get the nodes and GPUs it asked for, and is it comparable with the baseline "
                  "(exit 1 when not)", arguments=_run_argument)
def cmd_topology(args) -> int:
    from attune.campaign import runs as runs_mod
    campaign = campaign_mod.Campaign(campaign_dir(args))
    summary = runs_mod.topology(campaign, campaign_settings(args, campaign), args.run)
    got = summary["got"]
    lines = ["run: %s" % args.run, "asked: %s" % json.dumps(summary["asked"], sort_keys=True),
             "got: %s" % json.dumps(got, sort_keys=True),
             "log: %s" % (summary["log"] or "none (no log facts)")]
    lines += ["problem: %s" % problem for problem in summary["problems"]]
    lines += ["not_comparable: %s" % item for item in summary["not_comparable"]]
    emit(args, summary, "\n".join(lines))
    if summary["problems"] or summary["not_comparable"]:
        raise CheckFailed("run %s: %s" % (args.run, "; ".join(summary["problems"] + summary["not_comparable"])))
    return EXIT_OK
