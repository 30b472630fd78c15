"""attune: the one command-line interface of an ATTUNE campaign.

Usage: python3 skill/scripts/attune.py <verb> [--campaign DIR] [--json] ...

Verbs are thin: each parses its arguments, calls one library function, prints the result and
returns an exit code. Every verb takes ``--campaign DIR`` (default ``$ATTUNE_CAMPAIGN_DIR``, else
the current directory). Stdout is an interface: ``key: value`` lines, or one JSON object with
``--json``; diagnostics go to stderr.

Exit codes: 0 ok, 1 check failed, 2 usage or bad input, 3 integrity.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

from . import budget as budget_mod
from . import campaign as campaign_mod
from . import chart as chart_mod
from . import podhooks
from . import ranking as ranking_mod
from . import report as report_mod
from . import results as results_mod
from . import settings as settings_mod
from . import snapshot as snapshot_mod
from . import status as status_mod
from .background import Background, BackgroundError
from .errors import EXIT_CHECK_FAILED, EXIT_OK, AttuneError, CheckFailed, InputError, IntegrityError

VERBS = {}
FINALIZE_POLL_S = 2.0  # finalize --wait: seconds between looks at the run
# An argument that names a file or folder a verb reads has one of these metavars (a test finds them all
# and feeds each one files it cannot read); an output the verb writes is OUT.
INPUT_METAVARS = ("FILE", "DIR", "LOG", "RECIPE", "TRACE")


def verb(name, help_text):
    def wrap(func):
        VERBS[name] = (func, help_text)
        return func
    return wrap


def _emit(args, data: dict, text: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _dir(args) -> Path:
    return campaign_mod.resolve_dir(args.campaign)


def _snapshot(args, use_cache: bool = False):
    return snapshot_mod.take(_dir(args), config_file=getattr(args, "config", None), use_cache=use_cache,
                             save_cache=not getattr(args, "dry_run", False))


# ---------------------------------------------------------------------------------------- verbs
@verb("init", "create a campaign directory: freeze the settings and write the first ledger row")
def cmd_init(args) -> int:
    settings = settings_mod.load(config_file=args.config)
    created = campaign_mod.init(_dir(args), settings, args.campaign_id, note=args.note)
    data = {"campaign": created.id, "dir": str(created.dir), "settings_sha256": settings.sha256()}
    _emit(args, data, "campaign: %s\ndir: %s\nsettings_sha256: %s" % (data["campaign"], data["dir"],
                                                                     data["settings_sha256"]))
    return EXIT_OK


@verb("settings", "validate and print the settings (the campaign's frozen copy when it has one)")
def cmd_settings(args) -> int:
    if args.example:
        sys.stdout.write(settings_mod.render_example())
        return EXIT_OK
    loaded = settings_mod.for_campaign(_dir(args), config_file=args.config)
    if args.check_files:
        loaded.check_files()
    values = loaded.as_env()
    _emit(args, values, "".join("%s: %s\n" % item for item in values.items()))
    return EXIT_OK


@verb("doctor", "check that the campaign can run before it spends anything: the baseline, its image, the agent CLI, "
                "the kube context, namespace, RayJob CRD, access, log pod and a server-side dry run, the rows; one "
                "line per check with its fix (exit 1 when one fails)")
def cmd_doctor(args) -> int:
    from . import doctor as doctor_mod
    report = doctor_mod.run(settings_mod.for_campaign(_dir(args), config_file=args.config))
    _emit(args, report.as_dict(), "\n".join(report.lines()))
    if not report.ok:
        print("attune doctor: failed: %s" % ", ".join(report.failed), file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK


@verb("verify", "check the hash chains of ledger.jsonl and gpu_hours.jsonl; name the first bad row; --replay also "
                "derives every result row again from its run's log and every gate row from its run directories and "
                "the rules, and names the first row its evidence does not give")
def cmd_verify(args) -> int:
    campaign = campaign_mod.Campaign(_dir(args))
    campaign.require_ledger()
    reports = [campaign.ledger.verify(), campaign.gpu_log.verify()]
    # the two files must belong to one campaign, as every verb that reads them requires (snapshot._check)
    mismatch = snapshot_mod.campaign_mismatch(*(r.parsed[0]["campaign"] if r.parsed else None for r in reports))
    data = {"ok": all(r.ok for r in reports) and not mismatch, "ledger": reports[0].as_dict(),
            "gpu_hours": reports[1].as_dict()}
    lines = []
    for report in reports:
        lines.append("%s: %s" % (Path(report.path).stem.replace(".jsonl", ""), report.summary()))
        lines += ["warning: %s" % text for text in report.warnings]
    if mismatch:
        data["campaign_mismatch"] = mismatch
        lines.append("campaign: %s" % mismatch)
    replayed = None
    if args.replay and data["ok"]:  # rows are derived again only from a chain that holds
        from . import replay as replay_mod
        replayed = replay_mod.replay(campaign, campaign.settings())
        data["replay"] = replayed.as_dict()
        data["ok"] = replayed.ok
        lines.append("replay: %s" % replayed.summary())
    lines.append("ok: %s" % ("yes" if data["ok"] else "no"))
    _emit(args, data, "\n".join(lines))
    if not data["ok"]:
        for report in reports:
            if not report.ok:
                print("attune verify: %s" % report.summary(), file=sys.stderr)
        if mismatch:
            print("attune verify: %s" % mismatch, file=sys.stderr)
        if replayed is not None and not replayed.ok:
            print("attune verify --replay: %s" % replayed.mismatch.text(), file=sys.stderr)
        return IntegrityError.exit_code
    return EXIT_OK


@verb("rank", "regenerate RESULTS.md (and the throughput chart) from the ledger")
def cmd_rank(args) -> int:
    directory = _dir(args)
    chart_job = None
    if not args.no_chart and not args.dry_run:
        # The chart is drawn on the second core; matplotlib loads there while the ledger is read.
        chart_job = Background(chart_mod.draw, directory / campaign_mod.CHART, wants_message=True,
                               prepare=chart_mod.preload_plotting)
    try:
        snap = _snapshot(args, use_cache=True)
    except BaseException:
        if chart_job is not None:
            chart_job.cancel()
        raise
    ranking = snap.ranking
    rows, last_ts = snap.row_count, snap.last_ts
    recorded = None
    if not args.dry_run:
        recorded = _record_leader(snap)
        if recorded is not None:
            rows, last_ts = rows + 1, recorded["ts"]
    chart, note = None, "disabled with --no-chart"
    if chart_job is not None:
        chart_job.send(chart_mod.chart_data(ranking))
        chart = campaign_mod.CHART
    campaign_note = snap.genesis.get("note", "")
    text = results_mod.render(ranking, snap.budget, snap.campaign.id, rows, last_ts, chart, note, campaign_note)
    if chart_job is not None:
        try:
            note = chart_job.result()
        except BackgroundError as exc:
            note = "drawing failed (%s)" % str(exc).strip().splitlines()[-1]
            print("attune rank: chart %s" % note, file=sys.stderr)
        if note is not None:
            chart = None
            text = results_mod.render(ranking, snap.budget, snap.campaign.id, rows, last_ts, None, note,
                                      campaign_note)
    if args.dry_run:
        sys.stdout.write(text)
        snap.finish()
        return EXIT_OK
    report_mod.atomic_write(directory / campaign_mod.RESULTS, text.encode("utf-8"))
    lead = ranking.leader
    data = {"results": str(directory / campaign_mod.RESULTS), "chart": chart and str(directory / chart),
            "leader": lead.first.run if lead else None, "tokens_per_s_per_gpu": lead.score if lead else None,
            "band": ranking.band, "band_basis": ranking.band_basis,
            "gain_vs_baseline": ranking_mod.gain_dict(ranking.compare(lead, ranking.baseline)) if lead else None,
            "leader_recorded": recorded is not None}
    _emit(args, data, "results: %s\nchart: %s\nleader: %s\nband: %s%s" % (
        data["results"], data["chart"] or "not drawn (%s)" % note, data["leader"] or "none",
        ranking_mod.band_text(ranking.band), "\nleader_recorded: yes" if recorded else ""))
    snap.finish()
    return EXIT_OK


def _record_leader(snap):
    """Append a ``leader`` row when the leader's recipe differs from the last one recorded."""
    lead = snap.ranking.leader
    if lead is None or lead.score is None:
        return None
    previous = snap.leader_rows[-1] if snap.leader_rows else None
    if previous is not None and previous["recipe_sha256"] == lead.sha:
        return None
    return snap.campaign.append("leader", run=lead.first.run, recipe_sha256=lead.sha,
                                tokens_per_s_per_gpu=lead.score, band=snap.ranking.band,
                                gain=ranking_mod.gain_text(snap.ranking.compare(lead)),
                                previous=previous["run"] if previous else None)


@verb("status", "one screen: budget, leader, band, runs in flight, last results, next steps, stop state")
def cmd_status(args) -> int:
    snap = _snapshot(args, use_cache=True)
    info = status_mod.collect(snap)
    _emit(args, info, status_mod.render(info, snap.budget.describe()))
    snap.finish()
    return EXIT_OK


@verb("budget", "print GPU-hours (or runs) spent, reserved and left; --need H checks a launch")
def cmd_budget(args) -> int:
    snap = _snapshot(args)
    state = snap.budget
    data = state.as_dict()
    text = "budget: %s\nspent: %.4f\nreserved: %.4f\nleft: %.4f\nunit: %s\ngpu_hours_spent: %.4f" % (
        state.describe(), state.spent, state.reserved, state.left, state.unit, state.gpu_hours_spent)
    if args.need is not None:
        try:
            budget_mod.check_launch(state, args.need)
            data["launch"] = "allowed"
        except CheckFailed as exc:
            data["launch"] = "refused"
            _emit(args, data, text + "\nlaunch: refused")
            raise exc
        text += "\nlaunch: allowed"
    _emit(args, data, text)
    return EXIT_OK


@verb("stop", "record a stop with its evidence: the runs considered and why nothing left can clear the band")
def cmd_stop(args) -> int:
    snap = _snapshot(args)
    ranking = snap.ranking
    if not args.reason.strip():
        raise InputError("--reason is empty. Fix: say why nothing left is expected to clear the band")
    unknown = [run for run in args.evidence if ranking.run(run) is None]
    if unknown:
        raise InputError("--evidence names run(s) the ledger does not have: %s. Fix: give run ids from "
                         "`attune status` or RESULTS.md" % ", ".join(unknown))
    unfinished = [run for run in args.evidence if not ranking.run(run).finalized]
    if unfinished or ranking.in_flight:
        raise CheckFailed("runs are still in flight (%s). Fix: finalize or tear them down before recording a stop"
                          % ", ".join(run.run for run in ranking.in_flight))
    row = snap.campaign.append("stop", reason=args.reason.strip(), evidence=list(args.evidence))
    _emit(args, {"stop": row}, "stop: recorded at %s (seq %d)" % (row["ts"], row["seq"]))
    return EXIT_OK


@verb("note", "append a free-text note to the ledger")
def cmd_note(args) -> int:
    campaign = campaign_mod.Campaign(_dir(args))
    snapshot_mod.verify(campaign)
    payload = {"text": args.text}
    if args.run:
        payload["run"] = args.run
    row = campaign.append("note", **payload)
    _emit(args, {"note": row}, "note: recorded at %s (seq %d)" % (row["ts"], row["seq"]))
    return EXIT_OK


@verb("lesson", "append the lesson of a tested candidate to the campaign's levers.md (runs, result vs parent with "
                "the band, gate and verdict from the ledger; the sentence is yours) and note it in the ledger")
def cmd_lesson(args) -> int:
    from . import lessons
    snap = _snapshot(args)
    text = lessons.entry(snap, args.run, args.text, args.lever)
    if not args.dry_run:
        lessons.append(snap.campaign.dir / "levers.md", text)
        snap.campaign.append("note", run=args.run, text="lesson: " + " | ".join(
            line[2:].replace("**", "") for line in text.splitlines()[1:]))
    _emit(args, {"lesson": text, "written": not args.dry_run}, text.rstrip("\n"))
    return EXIT_OK


@verb("metrics", "parse a training log (Megatron-LM, Megatron-Bridge, Megatron-DeepSpeed, NeMo, slime) into a "
                 "summary of its steps, memory, timers, slime records, failures and crash lines, in bounded memory "
                 "at any size (exit 2 for a file that is empty, mostly binary, or holds no record and no failure; "
                 "stray bytes in a log are replaced)")
def cmd_metrics(args) -> int:
    from . import logview  # imported where used: status and rank start faster without it
    logview.show(Path(args.log), args.exit_code, args.complete, logview.step_range(args.steps), args.json,
                 sys.stdout)
    return EXIT_OK


@verb("candidate", "candidate new: write a one-change candidate (recipe and record) under runs/<id>/ after "
                   "checking the workload and Megatron's legality rules")
def cmd_candidate(args) -> int:
    from . import candidates
    campaign = campaign_mod.Campaign(_dir(args))
    campaign.require_ledger()
    settings = campaign.settings(config_file=args.config)
    given = (args.set or (), args.unset or (), args.env or (), args.unset_env or ())
    changes = candidates.parse_changes(*given) if any(given) or not args.leave_out else []
    record = candidates.new(campaign, settings, args.parent, changes, args.lever, args.hypothesis, args.gpu,
                            podhooks.parse(args.pod_hook), force=args.force, leave_out_of=args.leave_out)
    lines = ["run: %s" % record["run"], "recipe: %s" % (campaign.run_dir(record["run"]) / "recipe.yaml"),
             "parent: %s" % record["parent"], "lever: %s" % record["lever"], "gpus: %d" % record["gpus"]]
    lines += ["leave_out: %s" % record["leave_out"]] if "leave_out" in record else []
    lines += ["change: %s" % results_mod.describe_change(item) for item in record["change"]]
    lines += ["pod_hook: %s" % podhooks.describe(hook) for hook in record.get("pod_hooks", ())]
    if "projection" in record:
        proj = record["projection"]
        lines.append("projection: %.1f tokens/s/GPU on %s, memory %s%s" % (
            proj["tokens_per_s_per_gpu"], proj["hardware"], candidates.describe_memory(proj),
            "" if proj["fits"] else " (DOES NOT FIT: launched only because of --force)"))
    gate = record["gate_config"]
    lines += ["gate_class: %s %s" % (item["name"], item["class"]) for item in gate["changes"]]
    lines += ["warning: the gate will fail this candidate, so it can never lead or ship: %s" % reason
              for reason in gate["reasons"]]
    _emit(args, record, "\n".join(lines))
    return EXIT_OK


def _settings(args, campaign):
    campaign.require_ledger()
    return campaign.settings(config_file=getattr(args, "config", None))


def _check_config(args) -> None:
    """Read ``--config`` where this form of a verb needs no settings: a file given is never ignored unread."""
    if getattr(args, "config", None) is not None:
        settings_mod.parse_env_file(args.config)


@verb("project", "the analytic projection of a recipe: memory per GPU against HBM with its breakdown, step time "
                 "(compute, communication, bubble), tokens/s/GPU, TFLOP/s and MFU (exit 1 when it does not fit)")
def cmd_project(args) -> int:
    from projection.api import project
    from .recipe import Recipe
    path = Path(args.recipe)
    recipe = Recipe.load(path)
    env = recipe.env()
    hardware = args.hardware or env.get("ATTUNE_SIM_HARDWARE")
    if not hardware:
        raise InputError("%s: no hardware: give --hardware (H100, B200, MI300X, ...)" % path)
    gpus = args.gpus or (int(env["ATTUNE_SIM_GPUS"]) if env.get("ATTUNE_SIM_GPUS", "").isdigit() else recipe.gpus())
    if gpus <= 0:
        recipe.require_gpus()
    out = project(recipe.args(), gpus, hardware, args.gpus_per_node)
    mem, time_ = out["memory"], out["time"]
    layout = " ".join("%s=%s" % item for item in out["layout"].items())
    lines = ["recipe: %s" % path, "hardware: %s x %d (%d per node)" % (out["hardware"], out["gpus"], out["gpus_per_node"]),
             "layout: %s" % layout,
             "memory: %.1f GiB of %.1f GiB usable (%.0f GiB HBM): %s" % (
                 mem["total_gib"], mem["usable_gib"], mem["hbm_gib"], "fits" if mem["fits"] else "DOES NOT FIT"),
             "memory_breakdown_gib: %s" % ", ".join("%s %.2f" % item for item in mem["breakdown_gib"].items()),
             "step_s: %.4f (compute %.4f, exposed communication %.4f, bubble %.4f)" % (
                 time_["step_s"], time_["compute_s"], time_["exposed_comm_s"], time_["bubble_s"]),
             "tokens_per_s_per_gpu: %.1f" % out["tokens_per_s_per_gpu"],
             "model_tflops_per_gpu: %.1f" % out["model_tflops_per_gpu"], "mfu: %.3f" % out["mfu"],
             "calibrated: %s" % out["params"].get("calibrated")]
    lines += ["warning: %s" % warning for warning in out["warnings"]]
    _emit(args, out, "\n".join(lines))
    return EXIT_OK if mem["fits"] else EXIT_CHECK_FAILED


@verb("launch", "launch a candidate (RUN), the baseline (--baseline) or a repeat (--repeat-of RUN [--confirm]); "
                "the launch row is written first, and a launch that does not fit the budget is refused")
def cmd_launch(args) -> int:
    from . import runs as runs_mod
    campaign = campaign_mod.Campaign(_dir(args))
    settings = _settings(args, campaign)
    row = runs_mod.launch(campaign, settings, run=args.run, baseline=args.baseline, repeat_of=args.repeat_of,
                          confirm=args.confirm, expected_gpu_hours=args.expected_gpu_hours, gpu=args.gpu,
                          pod_hooks=podhooks.parse(args.pod_hook), profile_of=args.profile_of)
    lines = ["run: %s" % row["run"], "purpose: %s" % row["purpose"], "gpus: %d" % row["gpus"],
             "backend: %s" % row["backend"]]
    lines += ["pod_hook: %s" % podhooks.describe(hook) for hook in row.get("pod_hooks", ())]
    _emit(args, {"launch": row}, "\n".join(lines))
    return EXIT_OK


@verb("poll", "the state of a launched run as its backend reports it")
def cmd_poll(args) -> int:
    from . import runs as runs_mod
    campaign = campaign_mod.Campaign(_dir(args))
    status = runs_mod.poll(campaign, _settings(args, campaign), args.run)
    _emit(args, status.as_dict(), "\n".join("%s: %s" % item for item in status.as_dict().items()))
    return EXIT_OK


@verb("finalize", "record an ended run: parse its log, score it, charge its GPU time, triage a failure "
                  "(exit 1 while it still runs; a hung run is torn down)")
def cmd_finalize(args) -> int:
    from . import runs as runs_mod
    campaign = campaign_mod.Campaign(_dir(args))
    settings = _settings(args, campaign)
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
    _emit(args, {"result": row}, "run: %s\nstatus: %s%s" % (row["run"], row["status"], "\nfailure: %s%s: %s" % (
        failure.get("class"), " (%s memory)" % failure["memory"] if failure.get("memory") else "",
        failure.get("evidence", "")[:200]) if failure else ""))
    return EXIT_OK


@verb("teardown", "stop a run and confirm it is gone")
def cmd_teardown(args) -> int:
    from . import runs as runs_mod
    campaign = campaign_mod.Campaign(_dir(args))
    status = runs_mod.teardown(campaign, _settings(args, campaign), args.run)
    _emit(args, status.as_dict(), "run: %s\nstate: %s" % (args.run, status.state))
    return EXIT_OK


@verb("kube", "read-only inspection of the campaign's own cluster objects: get (a run's RayJob status), pods, "
              "events, logs (a pod's log) and exec (a read-only program in a run's pod or the log pod)")
def cmd_kube(args) -> int:
    from . import kube as kube_mod
    campaign = campaign_mod.Campaign(_dir(args))
    inspector = kube_mod.Inspector(campaign, _settings(args, campaign))
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
        _emit(args, data, text)
        return EXIT_OK if data["exit_code"] in (0, None) else EXIT_CHECK_FAILED
    _emit(args, data, text)
    return EXIT_OK


@verb("topology", "did the run get the nodes and GPUs it asked for, and is it comparable with the baseline "
                  "(exit 1 when not)")
def cmd_topology(args) -> int:
    from . import runs as runs_mod
    campaign = campaign_mod.Campaign(_dir(args))
    summary = runs_mod.topology(campaign, _settings(args, campaign), args.run)
    got = summary["got"]
    lines = ["run: %s" % args.run, "asked: %s" % json.dumps(summary["asked"], sort_keys=True),
             "got: %s" % json.dumps(got, sort_keys=True),
             "log: %s" % (summary["log"] or "none (no log facts)")]
    lines += ["problem: %s" % problem for problem in summary["problems"]]
    lines += ["not_comparable: %s" % item for item in summary["not_comparable"]]
    _emit(args, summary, "\n".join(lines))
    if summary["problems"] or summary["not_comparable"]:
        raise CheckFailed("run %s: %s" % (args.run, "; ".join(summary["problems"] + summary["not_comparable"])))
    return EXIT_OK


@verb("gate", "the correctness gate: is the candidate's configuration legal and does its loss follow the "
              "baseline's (exit 1 when it fails)")
def cmd_gate(args) -> int:
    from correctness import gate as gate_mod
    from correctness.rules import Rules
    if args.coverage:
        if args.run or args.baseline or args.candidate:
            raise InputError("--coverage reads a checkout's argument definitions; it gates no run. Fix: give "
                             "--coverage alone, or --run / --baseline and --candidate without it")
        return _gate_coverage(args, Rules(overrides=args.rules or None))
    steps = _steps(args.steps)
    if args.run:
        if args.baseline or args.candidate:
            raise InputError("--run gates a campaign's run against its baseline; --baseline and --candidate are "
                             "for run directories outside a campaign. Fix: give one or the other")
        campaign = campaign_mod.Campaign(_dir(args))
        if args.rules:
            raise InputError("--rules %s: a campaign's gate runs on its frozen rules (ATTUNE_GATE_RULES), so that "
                             "every verdict of the campaign is judged alike. Fix: drop --rules" % args.rules)
        runs_dir = (campaign.dir / "runs").resolve()
        for repeat in args.repeat or ():
            if Path(repeat).resolve().parent != runs_dir:
                raise InputError("--repeat %s: not a run of this campaign (runs/RUN); a campaign's gate calibrates "
                                 "on the campaign's own reruns of its baseline. Fix: name runs/RUN" % repeat)
        result = gate_mod.gate_campaign_run(campaign, _settings(args, campaign), args.run, args.repeat or (), steps)
    else:
        if not (args.baseline and args.candidate):
            raise InputError("give --run RUN (a campaign's run) or both --baseline DIR and --candidate DIR")
        _check_config(args)
        result = gate_mod.run_gate(args.baseline, args.candidate, args.repeat or (), steps,
                                   Rules(overrides=args.rules or None))
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
    from correctness.convergence import STATISTICS
    for name in STATISTICS:
        if calibrated.get(name):
            stat = calibrated[name]
            lines.append("%s: %.4g%% (threshold %.4g%%, %s)" % (name, stat["value"] * 100, stat["threshold"] * 100,
                                                            stat["threshold_basis"]))
    lines += ["reason: %s" % reason for reason in result["reasons"]]
    lines += ["warning: %s" % warning for warning in result["warnings"]]
    _emit(args, result, "\n".join(lines))
    return EXIT_OK if result["verdict"] == "pass" else EXIT_CHECK_FAILED


def _gate_coverage(args, rules) -> int:
    """The arguments a Megatron-LM or slime checkout defines that no rule classes (exit 1 when any)."""
    from correctness import inventory
    root = Path(args.coverage)
    if (root / "megatron" / "training" / "arguments.py").is_file():
        stack = "megatron"
    elif (root / "slime").is_dir():
        stack = "slime"
    else:
        raise InputError("%s: neither a Megatron-LM checkout (megatron/training/arguments.py) nor a slime checkout "
                         "(slime/). Fix: give the folder that holds megatron/ or slime/" % root)
    try:
        names = inventory.read_arguments(stack, root)
    except inventory.InventoryError as exc:
        raise InputError(str(exc))
    missing = inventory.unclassed(rules, names)
    result = {"checkout": str(root), "stack": stack, "arguments": len(names), "unclassed": missing,
              "rules": rules.path, "overrides": rules.overrides_path}
    lines = ["%s checkout %s: %d arguments, %d without a class in the gate's rules%s" % (
        stack, root, len(names), len(missing), " (they count as numeric)" if missing else "")]
    lines += ["unclassed: %s" % name for name in missing]
    if missing:
        lines.append("fix: class each for a campaign in an overrides file (ATTUNE_GATE_RULES; "
                     "correctness/rules/README.md), with its reason, source and justification")
    _emit(args, result, "\n".join(lines))
    return EXIT_CHECK_FAILED if missing else EXIT_OK


@verb("profile", "analyze torch.profiler traces: step time, GPU time breakdown, exposed communication, bubbles, "
                 "launch overhead, memory, stragglers, and a ranked diagnosis (exit 2 for a file that is not a trace, "
                 "or traces without an event; a trace cut short gives a partial result); --diff A B compares two "
                 "runs' traces per step and explains the three largest differences")
def cmd_profile(args) -> int:
    from profile_analyzer import profile as profile_mod
    if args.diff:
        return _profile_diff(args)
    steps = _steps(args.steps) if args.steps else None
    traces, recipe = args.traces, args.recipe
    if args.run:
        from . import runs as runs_mod
        campaign = campaign_mod.Campaign(_dir(args))
        traces = [str(path) for path in runs_mod.traces(campaign, _settings(args, campaign), args.run)] + traces
        recipe = recipe or str(campaign.run_dir(args.run) / "recipe.yaml")
    else:
        _check_config(args)
    if not traces:
        raise InputError("no traces: give trace files or folders, or --run RUN for a run launched with --profile-of")
    result = profile_mod.run(traces, steps, recipe, partial=args.partial)
    agg = result["aggregate"]
    lines = ["traces: %d file(s), %d rank(s)%s" % (len(result["files"]), agg["ranks"],
                                                  " (PARTIAL: a file ended early)" if result["partial"] else "")]
    for r in result["ranks"]:
        tb, comm = r["temporal_breakdown"], r["communication"]
        lines.append("rank %d: idle %s%% compute %s%% non-compute %s%% overlap %s%% exposed comm %.0f us of %.0f us" % (
            r["rank"], tb["idle_pctg"], tb["compute_pctg"], tb["non_compute_pctg"], comm["overlap_pctg"],
            comm["exposed_us"], tb["kernel_time_us"]))
    if agg.get("step_time_us"):
        lines.append("step_time_us: %s" % ", ".join("#%s %.0f" % item for item in agg["step_time_us"].items()))
    for item in result["diagnosis"]:
        lines.append("bottleneck: %s %.1f%% of GPU time (%s)" % (item["bottleneck"], item["share"] * 100,
                                                                 item["family"]))
        lines.append("  evidence: %s" % item["evidence_text"])
        lines.append("  levers: %s" % (", ".join(item["levers"]) or "none in the catalog"))
    if not result["diagnosis"]:
        lines.append("bottleneck: none above %.0f%% of GPU time" % 2)
    for fact in result.get("facts") or []:
        lines.append("fact: %s%s" % (fact["text"], " (levers: %s)" % ", ".join(fact["levers"]) if fact["levers"]
                                     else ""))
    lines += ["warning: %s" % warning for warning in result["warnings"]]
    _emit(args, result, "\n".join(lines))
    return EXIT_OK


def _profile_diff(args) -> int:
    """``attune profile --diff A B``: each side profiled alone, then compared (profile_analyzer/diff.py)."""
    from profile_analyzer import diff as diff_mod
    from profile_analyzer import profile as profile_mod
    if args.traces or args.run or args.recipe:
        raise InputError("--diff A B compares two traces (or folders of per-rank traces) alone: drop %s" % (
            "the other traces %s" % " ".join(args.traces) if args.traces else "--run" if args.run else "--recipe"))
    _check_config(args)
    steps = _steps(args.steps) if args.steps else None
    results = []
    for name, side in zip("AB", args.diff):
        try:
            results.append(profile_mod.run([side], steps, partial=args.partial))
        except InputError as exc:
            raise InputError("--diff %s: %s" % (name, exc))
    result = diff_mod.diff(*results)
    _emit(args, result, diff_mod.render(result))
    return EXIT_OK


def _steps(text):
    if not text:
        return (1, 20)
    try:
        first, last = (int(part) for part in text.split(":"))
    except ValueError:
        first = last = None
    if first is None or not 1 <= first < last:
        raise InputError("--steps %s: expected FIRST:LAST with 1 <= FIRST < LAST, e.g. 1:20" % text)
    return first, last


@verb("report", "write REPORT.md, and recipe.yaml when every pre-ship check passes (exit 1 when refused)")
def cmd_report(args) -> int:
    snap = _snapshot(args)
    outcome = report_mod.write(snap)
    lines = ["report: %s" % outcome.report_path, "shipped: %s" % ("yes" if outcome.shipped else "no")]
    if outcome.recipe_path:
        lines.append("recipe: %s" % outcome.recipe_path)
    if outcome.withdrawn:
        lines.append("withdrawn: %s" % outcome.withdrawn)
    lines += ["check: %s %s: %s" % ("pass" if ok else "FAIL", name, detail) for name, ok, detail in outcome.checks]
    _emit(args, outcome.as_dict(), "\n".join(lines))
    if not outcome.shipped:
        raise CheckFailed("shipping refused: %s" % "; ".join(
            "%s: %s" % (name, detail) for name, ok, detail in outcome.checks if not ok))
    return EXIT_OK


@verb("rows", "the fixed-length training rows: build (records and a tokenizer to Parquet), from-slime / to-slime "
              "(slime rollout dumps to rows and back), sha (print rows_sha256), check (lengths, dtypes, ids, masks, "
              "boundaries and the hash; exit 1 naming each problem's row and field)")
def cmd_rows(args) -> int:
    # imported where used: pyarrow, transformers and torch are heavy
    from data import check as check_mod, rollout as rollout_mod, rows as rows_mod
    if args.action == "build":
        missing = [flag for flag, value in (("--input", args.input), ("--tokenizer", args.tokenizer),
                                            ("--seq-length", args.seq_length), ("--out", args.out)) if value is None]
        if missing or args.file:
            raise InputError("rows build takes --input FILE --tokenizer DIR --seq-length N --out FILE.parquet "
                             "(missing: %s). Fix: give all four, and no positional FILE" % (", ".join(missing) or "none"))
        summary = rows_mod.build(args.input, args.tokenizer, args.seq_length, args.out, args.overlong,
                                 log=lambda text: print("attune rows: %s" % text, file=sys.stderr))
        counts = summary["counts"]
        lines = ["out: %s" % summary["out"], "tokenizer: %s" % summary["tokenizer"],
                 "tokenizer_sha256: %s" % summary["tokenizer_sha256"], "seq_length: %d" % summary["seq_length"],
                 "overlong: %s" % summary["overlong"]]
        lines += ["%s: %s" % item for item in sorted(counts.items())]
        lines += ["packing_efficiency: %.4f" % summary["packing_efficiency"], "seconds: %.3f" % summary["seconds"],
                  "tokens_per_s: %.1f" % summary["tokens_per_s"], "rows_sha256: %s" % summary["rows_sha256"]]
        _emit(args, summary, "\n".join(lines))
        return EXIT_OK
    if args.action == "from-slime":
        if not args.file or not args.out:
            raise InputError("rows from-slime takes DUMP... --out FILE.parquet (a DUMP: a .pt file slime's "
                             "--save-debug-rollout-data wrote, or its template with {rollout_id}). Fix: give both")
        summary = rollout_mod.from_slime(args.file, args.out, args.seq_length, args.vocab_size, args.pad_token_id)
        lines = ["out: %s" % summary["out"], "source: %s" % summary["source"],
                 "rollout_ids: %s" % " ".join(map(str, summary["rollouts"])), "seq_length: %d" % summary["seq_length"]]
        lines += ["%s: %s" % item for item in sorted(summary["counts"].items())]
        lines.append("rows_sha256: %s" % summary["rows_sha256"])
        _emit(args, summary, "\n".join(lines))
        return EXIT_OK
    if len(args.file) != 1:
        raise InputError("rows %s takes one file: attune rows %s FILE.parquet (or a dump's %s)"
                         % (args.action, args.action, rollout_mod.MANIFEST))
    path = args.file[0]
    if args.action == "to-slime":
        if not args.out:
            raise InputError("rows to-slime takes FILE.parquet --out DIR. Fix: give the folder to write the dump to")
        summary = rollout_mod.to_slime(path, args.out)
        lines = ["out: %s" % summary["out"], "manifest: %s" % summary["manifest"],
                 "rollout_ids: %s" % " ".join(map(str, summary["rollouts"])), "samples: %d" % summary["samples"],
                 "seq_length: %d" % summary["seq_length"], "rows_sha256: %s" % summary["rows_sha256"],
                 "launch: %s" % summary["launch"]]
        if summary["missing_rollouts"]:
            lines.append("note: no rollout %s in the rows: slime reads every id from --start-rollout-id to "
                         "--num-rollout - 1" % ", ".join(map(str, summary["missing_rollouts"])))
        _emit(args, summary, "\n".join(lines))
        return EXIT_OK
    dump = rollout_mod.is_manifest(path)
    if args.action == "sha":
        sha, meta = (rollout_mod.dump_sha256 if dump else rows_mod.rows_sha256)(path)
        _emit(args, {"file": path, "rows_sha256": sha, "seq_length": meta["seq_length"]},
              "file: %s\nrows_sha256: %s" % (path, sha))
        return EXIT_OK
    expect, source = args.expect_sha, "--expect-sha"
    frozen = settings_mod.frozen_path(_dir(args))
    if expect is None and frozen.exists():
        expect, source = settings_mod.for_campaign(_dir(args)).rows_sha256 or None, "ATTUNE_ROWS_SHA256 in %s" % frozen
    if dump:
        result = check_mod.check_dump(path, args.seq_length, expect, source)
    else:
        result = check_mod.check(path, args.seq_length, args.vocab_size, expect, source)
    lines = ["file: %s" % result["file"], "rows: %d" % result["rows"], "seq_length: %d" % result["seq_length"],
             "vocab_size: %s" % result["vocab_size"], "rows_sha256: %s" % result["rows_sha256"],
             "expected_sha256: %s" % ("%s (%s)" % (expect, source) if expect else "none given")]
    lines += ["note: %s" % line for line in result["notes"]]
    lines += ["problem: %s" % line for line in result["problems"]]
    lines.append("ok: %s" % ("yes" if result["ok"] else "no"))
    _emit(args, result, "\n".join(lines))
    if not result["ok"]:
        raise CheckFailed("%s: %d problem(s), listed on stdout; the first: %s"
                          % (path, result["problem_count"], result["problems"][0]))
    return EXIT_OK


# ---------------------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attune", description=__doc__.split("\n\n")[0],
                                     epilog="Exit codes: 0 ok, 1 check failed, 2 usage or bad input, 3 integrity.")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--campaign", metavar="DIR",
                        help="campaign directory (default: $ATTUNE_CAMPAIGN_DIR, else the current directory)")
    common.add_argument("--json", action="store_true", help="print one JSON object")
    with_config = argparse.ArgumentParser(add_help=False)
    with_config.add_argument("--config", metavar="FILE",
                             help="config.env to read settings from (always read and checked; its values are "
                                  "ignored once the campaign froze its own)")
    # --config only where a verb reads settings: a file given to a verb that would ignore it is refused by argparse
    parents = {name: [common] for name in ("verify", "note", "metrics", "project", "rows")}
    for name, (func, help_text) in VERBS.items():
        p = sub.add_parser(name, help=help_text, description=help_text,
                           parents=parents.get(name, [common, with_config]))
        p.set_defaults(func=func)
        if name == "init":
            p.add_argument("--campaign-id", help="id for the new campaign (default: <prefix>-<UTC time>)")
            p.add_argument("--note", help="a note on the campaign, shown at the top of RESULTS.md")
        elif name == "verify":
            p.add_argument("--replay", action="store_true",
                           help="also derive every result row again from its run's raw log (through the log pod on "
                                "KubeRay) and every gate row from its run directories and the rules; exit 3 naming "
                                "the first row its evidence does not give, or whose evidence is missing")
        elif name == "settings":
            p.add_argument("--example", action="store_true", help="print config.example.env")
            p.add_argument("--check-files", action="store_true",
                           help="also check that the files exist here (`attune doctor` checks the cluster, the agent "
                                "CLI and the rows too)")
        elif name == "rank":
            p.add_argument("--no-chart", action="store_true", help="do not draw the chart")
            p.add_argument("--dry-run", action="store_true",
                           help="print RESULTS.md to stdout; write nothing, record nothing")
        elif name == "budget":
            p.add_argument("--need", type=float, metavar="GPUH",
                           help="check whether a launch expected to take GPUH GPU-hours fits (exit 1 if not)")
        elif name == "stop":
            p.add_argument("--reason", required=True, help="why nothing left is expected to clear the band")
            p.add_argument("--evidence", nargs="+", required=True, metavar="RUN", help="the runs considered")
        elif name == "candidate":
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
        elif name == "launch":
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
        elif name == "project":
            p.add_argument("recipe", metavar="RECIPE",
                           help="a RayJob YAML (a campaign's runs/RUN/recipe.yaml, or any recipe)")
            p.add_argument("--hardware", help="GPU type: A100, H100, H200, B200, B300, GB200, GB300, MI300X, MI325X, "
                                              "MI355X (default: the recipe's ATTUNE_SIM_HARDWARE)")
            p.add_argument("--gpus", type=int, help="total GPUs (default: the recipe's worker groups)")
            p.add_argument("--gpus-per-node", type=int, help="GPUs per node (default: the hardware's)")
        elif name in ("poll", "finalize", "teardown", "topology"):
            p.add_argument("run", help="the run id")
            if name == "finalize":
                p.add_argument("--wait", type=float, metavar="S",
                               help="wait up to S seconds for the run to end before recording it (default: do not wait)")
                p.add_argument("--hang-after", type=float, metavar="S",
                               help="seconds without a log line of the job's own after which a running run is hung (default: ATTUNE_HANG_AFTER_S, 900)")
        elif name == "kube":
            p.add_argument("action", choices=["get", "pods", "events", "logs", "exec"],
                           help="get: the RayJob's status; pods; events; logs: a pod's log; exec: a read-only program")
            p.add_argument("target", help="a run of this campaign (exec: or log-pod, the campaign's log pod)")
            p.add_argument("command", nargs="*", metavar="PROGRAM",
                           help="exec: the program and its arguments, after -- (cat, head, tail, grep, ls, wc, stat, "
                                "du, find, pip show|list|freeze)")
            p.add_argument("--pod", help="logs, exec: which of the run's pods (default: its head pod)")
            p.add_argument("--tail", type=int, default=200, metavar="N", help="logs: the last N lines (default 200)")
        elif name == "lesson":
            p.add_argument("run", help="the candidate run the lesson is about")
            p.add_argument("--text", required=True,
                           help="the setup (model, GPUs, layout) and what to do differently next time")
            p.add_argument("--lever", help="the lever id (default: the candidate's; 'other: <flag>' outside the catalog)")
            p.add_argument("--dry-run", action="store_true", help="print the entry; write nothing")
        elif name == "metrics":
            p.add_argument("log", metavar="LOG", help="the log file (any size: it is read in chunks, and what is "
                                                      "kept of it is bounded)")
            p.add_argument("--exit-code", type=int, help="the run's exit code, for failure triage")
            p.add_argument("--complete", action="store_true",
                           help="the run has ended: also read a last line without its newline (by default that is "
                                "a line still being written, and is held back), all but its last field, which may "
                                "have been cut")
            p.add_argument("--steps", metavar="A:B",
                           help="print the steps numbered A to B (A: or :B for open ends) in full, every one of them; "
                                "without it, --json holds the steps kept in full (all of a short run)")
        elif name == "gate":
            p.add_argument("--run", help="a finalized run of the campaign: gated against the campaign's baseline, "
                                         "with gate.json and a ledger row written")
            p.add_argument("--baseline", metavar="DIR", help="the baseline's run directory (recipe.yaml or "
                                                             "local.json, and log.txt)")
            p.add_argument("--candidate", metavar="DIR", help="the candidate's run directory")
            p.add_argument("--repeat", action="append", metavar="DIR",
                           help="another run of the baseline's recipe: what a legitimate rerun shows (repeatable)")
            p.add_argument("--steps", metavar="FIRST:LAST", help="the steps compared (1:20)")
            p.add_argument("--rules", metavar="FILE",
                           help="your overrides of the argument classes (default: the ATTUNE_GATE_RULES setting)")
            p.add_argument("--coverage", metavar="DIR",
                           help="a Megatron-LM or slime checkout: list the arguments it defines that the rules do not "
                                "class (exit 1 when any); reading Megatron-LM's needs the packages it imports (torch)")
        elif name == "profile":
            p.add_argument("traces", nargs="*", metavar="TRACE", help="trace files (.json or .json.gz), or folders of them")
            p.add_argument("--run", help="a run of the campaign launched through the profiler hook (--profile-of): "
                                         "its traces, fetched through the log pod on KubeRay, and its recipe")
            p.add_argument("--steps", metavar="A:B", help="only ProfilerStep#A to #B")
            p.add_argument("--partial", action="store_true",
                           help="analyze a trace that ends early (cut short) up to the cut, marked PARTIAL, instead of "
                                "refusing it (exit 2)")
            p.add_argument("--recipe", metavar="FILE",
                           help="the run's recipe (RayJob YAML or local.json): parallel layout and micro-batches")
            p.add_argument("--diff", nargs=2, metavar="TRACE",
                           help="compare two runs, A then B, each a trace file or a folder of per-rank traces: step "
                                "time, GPU time breakdown, exposed communication per collective, top kernels, "
                                "launches and idle, per ProfilerStep, with the three largest differences explained")
        elif name == "rows":
            p.add_argument("action", choices=["build", "from-slime", "to-slime", "sha", "check"],
                           help="build: write rows; from-slime: slime rollout dumps to rows; to-slime: rows to slime "
                                "dumps; sha: print rows_sha256; check: verify a rows file")
            p.add_argument("file", nargs="*", metavar="FILE", help="sha, check: the rows file (.parquet) or a dump's attune_dump.json; "
                                                   "to-slime: the rows file; from-slime: the dumps (.pt files, or a "
                                                   "template with {rollout_id})")
            p.add_argument("--input", metavar="FILE", help="build: records, .jsonl or .parquet (messages, or prompt/"
                                                           "response)")
            p.add_argument("--tokenizer", metavar="DIR", help="build: a local Hugging Face tokenizer directory")
            p.add_argument("--seq-length", type=int, metavar="N",
                           help="build: the workload's sequence length; from-slime: the row length (default: the "
                                "longest sample rounded up to a multiple of 128); check: expected (default: the file's)")
            p.add_argument("--out", metavar="OUT", help="build, from-slime: the rows file to write (.parquet); "
                                                         "to-slime: the folder to write the dump to")
            p.add_argument("--overlong", choices=["drop", "truncate"], default="drop",
                           help="build: what to do with a record longer than a row (default drop; both are counted)")
            p.add_argument("--vocab-size", type=int, metavar="V",
                           help="from-slime: the model's vocabulary size, checked and recorded; check: token ids "
                                "must be below V (default: the one recorded in the file)")
            p.add_argument("--pad-token-id", type=int, default=0, metavar="P",
                           help="from-slime: the token that fills a row after its last sample (default 0)")
            p.add_argument("--expect-sha", metavar="HEX",
                           help="check: the expected rows_sha256 (default: the campaign's ATTUNE_ROWS_SHA256)")
        elif name == "note":
            p.add_argument("text", help="the note")
            p.add_argument("--run", help="the run the note is about")
    return parser


def _within_lock(parser, args) -> None:
    """Under ``ATTUNE_CAMPAIGN_LOCK`` (the campaign's wrapper, which runs outside the agent's sandbox), a verb
    reads only files inside the campaign and writes only into its ``scratch/``: otherwise the one command out
    of the sandbox would read the kube config or write over a record for it."""
    lock = os.environ.get("ATTUNE_CAMPAIGN_LOCK")
    if not lock or not getattr(args, "verb", None):
        return
    root = Path(lock).expanduser().resolve()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for item in action.choices[args.verb]._actions:
        if item.dest == "campaign":  # resolve_dir refuses another campaign, with its own message
            continue
        kind = "output" if item.metavar == "OUT" else "input" if item.metavar in INPUT_METAVARS else None
        value = getattr(args, item.dest, None) if kind else None
        for given in ([] if value is None else value if isinstance(value, list) else [value]):
            path = Path(os.path.expanduser(str(given)))
            path = (path if path.is_absolute() else Path.cwd() / path).resolve()
            inside = root / "scratch" if kind == "output" else root
            if path != inside and inside not in path.parents:
                raise InputError("%s %s: outside %s; this campaign's attune %s only %s. Fix: %s" % (
                    "/".join(item.option_strings) or item.dest, given, inside, "writes" if kind == "output" else
                    "reads", "into its scratch/" if kind == "output" else "files inside the campaign",
                    "write to scratch/" if kind == "output" else "copy the file into scratch/ first"))


def main(argv=None) -> int:
    # A verb builds one large, acyclic structure (every ledger row) and exits: the cyclic garbage
    # collector would only rescan it, a third of the run time on a 100,000-row ledger.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _main(argv)
    finally:
        if collecting:
            gc.enable()


def _main(argv) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    program = None
    if argv[:1] == ["kube"] and "--" in argv:  # kube exec's program: everything after --, whatever its options
        cut = argv.index("--")
        argv, program = argv[:cut], argv[cut + 1:]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, usage errors 2
        return int(exc.code or 0)
    if program is not None:
        args.command = list(args.command or []) + program
    try:
        _within_lock(parser, args)
    except AttuneError as exc:
        for line in exc.lines():
            print("attune %s: %s" % (args.verb, line), file=sys.stderr)
        return exc.exit_code
    try:
        return args.func(args)
    except AttuneError as exc:
        for line in exc.lines():
            print("attune %s: %s" % (args.verb, line), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("attune %s: interrupted" % args.verb, file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
