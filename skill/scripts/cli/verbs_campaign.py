"""The campaign's own verbs: init, settings, doctor, verify, rank, status, budget, stop, note, lesson, report."""

from __future__ import annotations

import sys
from pathlib import Path

from attune.campaign import (budget as budget_mod, chart as chart_mod, ledger as campaign_mod, ranking as ranking_mod,
                             report as report_mod, results as results_mod, snapshot as snapshot_mod,
                             status as status_mod)
from attune.campaign.background import Background, BackgroundError
from attune.core import files, frozen as frozen_mod, settings as settings_mod
from attune.core.errors import EXIT_CHECK_FAILED, EXIT_OK, CheckFailed, InputError, IntegrityError

from .base import campaign_dir, emit, take_snapshot, verb


def _init_arguments(p) -> None:
    p.add_argument("--campaign-id", help="id for the new campaign (default: <prefix>-<UTC time>)")
    p.add_argument("--note", help="a note on the campaign, shown at the top of RESULTS.md")


@verb("init", "create a campaign directory: freeze the settings and write the first ledger row",
      arguments=_init_arguments)
def cmd_init(args) -> int:
    settings = settings_mod.load(config_file=args.config)
    created = campaign_mod.init(campaign_dir(args), settings, args.campaign_id, note=args.note)
    data = {"campaign": created.id, "dir": str(created.dir), "settings_sha256": settings.sha256()}
    emit(args, data, "campaign: %s\ndir: %s\nsettings_sha256: %s" % (data["campaign"], data["dir"],
                                                                     data["settings_sha256"]))
    return EXIT_OK


def _settings_arguments(p) -> None:
    p.add_argument("--example", action="store_true", help="print config.example.env")
    p.add_argument("--check-files", action="store_true",
                   help="also check that the files exist here (`attune doctor` checks the cluster, the agent "
                        "CLI and the rows too)")


@verb("settings", "validate and print the settings (the campaign's frozen copy when it has one)",
      arguments=_settings_arguments)
def cmd_settings(args) -> int:
    if args.example:
        sys.stdout.write(settings_mod.render_example())
        return EXIT_OK
    loaded = frozen_mod.for_campaign(campaign_dir(args), config_file=args.config)
    if args.check_files:
        loaded.check_files()
    values = loaded.as_env()
    emit(args, values, "".join("%s: %s\n" % item for item in values.items()))
    return EXIT_OK


@verb("doctor", "check that the campaign can run before it spends anything: the baseline, its image, the agent CLI, "
                "the kube context, namespace, RayJob CRD, access, log pod and a server-side dry run, the rows; one "
                "line per check with its fix (exit 1 when one fails)")
def cmd_doctor(args) -> int:
    from attune.campaign import doctor as doctor_mod
    report = doctor_mod.run(frozen_mod.for_campaign(campaign_dir(args), config_file=args.config))
    emit(args, report.as_dict(), "\n".join(report.lines()))
    if not report.ok:
        print("attune doctor: failed: %s" % ", ".join(report.failed), file=sys.stderr)
        return EXIT_CHECK_FAILED
    return EXIT_OK


def _verify_arguments(p) -> None:
    p.add_argument("--replay", action="store_true",
                   help="also derive every result row again from its run's raw log (through the log pod on "
                        "KubeRay) and every gate row from its run directories and the rules; exit 3 naming "
                        "the first row its evidence does not give, or whose evidence is missing")


@verb("verify", "check the hash chains of ledger.jsonl and gpu_hours.jsonl; name the first bad row; --replay also "
                "derives every result row again from its run's log and every gate row from its run directories and "
                "the rules, and names the first row its evidence does not give",
                arguments=_verify_arguments, config=False)
def cmd_verify(args) -> int:
    campaign = campaign_mod.Campaign(campaign_dir(args))
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
        from attune.campaign import replay as replay_mod
        replayed = replay_mod.replay(campaign, campaign.settings())
        data["replay"] = replayed.as_dict()
        data["ok"] = replayed.ok
        lines.append("replay: %s" % replayed.summary())
    lines.append("ok: %s" % ("yes" if data["ok"] else "no"))
    emit(args, data, "\n".join(lines))
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


def _rank_arguments(p) -> None:
    p.add_argument("--no-chart", action="store_true", help="do not draw the chart")
    p.add_argument("--dry-run", action="store_true",
                   help="print RESULTS.md to stdout; write nothing, record nothing")


@verb("rank", "regenerate RESULTS.md (and the throughput chart) from the ledger", arguments=_rank_arguments)
def cmd_rank(args) -> int:
    directory = campaign_dir(args)
    if not args.dry_run:  # refused before a leader row or a chart is written: nothing half done
        for record in (campaign_mod.RESULTS,) + (() if args.no_chart else (campaign_mod.CHART,)):
            files.refuse_link(directory / record)
    chart_job = None
    if not args.no_chart and not args.dry_run:
        # The chart is drawn on the second core; matplotlib loads there while the ledger is read.
        chart_job = Background(chart_mod.draw, directory / campaign_mod.CHART, wants_message=True,
                               prepare=chart_mod.preload_plotting)
    try:
        snap = take_snapshot(args, use_cache=True)
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
    files.atomic_write(directory / campaign_mod.RESULTS, text.encode("utf-8"))
    lead = ranking.leader
    data = {"results": str(directory / campaign_mod.RESULTS), "chart": chart and str(directory / chart),
            "leader": lead.first.run if lead else None, "tokens_per_s_per_gpu": lead.score if lead else None,
            "band": ranking.band, "band_basis": ranking.band_basis,
            "gain_vs_baseline": ranking_mod.gain_dict(ranking.compare(lead, ranking.baseline)) if lead else None,
            "leader_recorded": recorded is not None}
    emit(args, data, "results: %s\nchart: %s\nleader: %s\nband: %s%s" % (
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
    snap = take_snapshot(args, use_cache=True)
    info = status_mod.collect(snap)
    emit(args, info, status_mod.render(info, snap.budget.describe()))
    snap.finish()
    return EXIT_OK


def _budget_arguments(p) -> None:
    p.add_argument("--need", type=float, metavar="GPUH",
                   help="check whether a launch expected to take GPUH GPU-hours fits (exit 1 if not)")


@verb("budget", "print GPU-hours (or runs) spent, reserved and left; --need H checks a launch",
      arguments=_budget_arguments)
def cmd_budget(args) -> int:
    snap = take_snapshot(args)
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
            emit(args, data, text + "\nlaunch: refused")
            raise exc
        text += "\nlaunch: allowed"
    emit(args, data, text)
    return EXIT_OK


def _stop_arguments(p) -> None:
    p.add_argument("--reason", required=True, help="why nothing left is expected to clear the band")
    p.add_argument("--evidence", nargs="+", required=True, metavar="RUN", help="the runs considered")


@verb("stop", "record a stop with its evidence: the runs considered and why nothing left can clear the band",
      arguments=_stop_arguments)
def cmd_stop(args) -> int:
    from attune.core import state
    snap = take_snapshot(args)
    runs = [state.Run(run.run, run.finalized, run.never_ran, run.expected_gpu_hours, run.launch_ts)
            for run in snap.ranking.runs]
    problem = state.stop_problem(args.reason, args.evidence, runs)  # the Stop hook's rule for a recorded stop
    if problem and problem[0] == "reason":
        raise InputError("--reason is empty. Fix: say why nothing left is expected to clear the band")
    if problem and problem[0] == "unknown":
        raise InputError("--evidence names run(s) the ledger does not have: %s. Fix: give run ids from "
                         "`attune status` or RESULTS.md" % problem[1].rsplit(": ", 1)[1])
    if problem and problem[0] == "in_flight":
        raise CheckFailed("%s. Fix: finalize or tear them down before recording a stop" % problem[1])
    if problem:
        raise InputError("%s. Fix: name the runs considered with --evidence" % problem[1])
    row = snap.campaign.append("stop", reason=args.reason.strip(), evidence=list(args.evidence))
    emit(args, {"stop": row}, "stop: recorded at %s (seq %d)" % (row["ts"], row["seq"]))
    return EXIT_OK


def _note_arguments(p) -> None:
    p.add_argument("text", help="the note")
    p.add_argument("--run", help="the run the note is about")


@verb("note", "append a free-text note to the ledger", arguments=_note_arguments, config=False)
def cmd_note(args) -> int:
    campaign = campaign_mod.Campaign(campaign_dir(args))
    snapshot_mod.verify(campaign)
    payload = {"text": args.text}
    if args.run:
        payload["run"] = args.run
    row = campaign.append("note", **payload)
    emit(args, {"note": row}, "note: recorded at %s (seq %d)" % (row["ts"], row["seq"]))
    return EXIT_OK


def _lesson_arguments(p) -> None:
    p.add_argument("run", help="the candidate run the lesson is about")
    p.add_argument("--text", required=True,
                   help="the setup (model, GPUs, layout) and what to do differently next time")
    p.add_argument("--lever", help="the lever id (default: the candidate's; 'other: <flag>' outside the catalog)")
    p.add_argument("--dry-run", action="store_true", help="print the entry; write nothing")


@verb("lesson", "append the lesson of a tested candidate to the campaign's levers.md (runs, result vs parent with "
                "the band, gate and verdict from the ledger; the sentence is yours) and note it in the ledger",
                arguments=_lesson_arguments)
def cmd_lesson(args) -> int:
    from attune.campaign import lessons
    snap = take_snapshot(args)
    lesson = lessons.entry(snap, args.run, args.text, args.lever)
    if not args.dry_run:
        lessons.append(snap.campaign.dir / "levers.md", lesson.markdown)
        snap.campaign.append("lesson", **lesson.row())
    emit(args, dict(lesson.row(), lesson=lesson.markdown, written=not args.dry_run), lesson.markdown.rstrip("\n"))
    return EXIT_OK


@verb("report", "write REPORT.md, and recipe.yaml when every pre-ship check passes (exit 1 when refused)")
def cmd_report(args) -> int:
    snap = take_snapshot(args)
    outcome = report_mod.write(snap)
    lines = ["report: %s" % outcome.report_path, "shipped: %s" % ("yes" if outcome.shipped else "no")]
    if outcome.recipe_path:
        lines.append("recipe: %s" % outcome.recipe_path)
    if outcome.withdrawn:
        lines.append("withdrawn: %s" % outcome.withdrawn)
    lines += ["check: %s %s: %s" % ("pass" if ok else "FAIL", name, detail) for name, ok, detail in outcome.checks]
    emit(args, outcome.as_dict(), "\n".join(lines))
    if not outcome.shipped:
        raise CheckFailed("shipping refused: %s" % "; ".join(
            "%s: %s" % (name, detail) for name, ok, detail in outcome.checks if not ok))
    return EXIT_OK
