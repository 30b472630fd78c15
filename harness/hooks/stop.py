#!/usr/bin/env python3
"""Claude Code Stop hook: the agent may stop only when the campaign is really over.

Reads the Stop event on stdin and answers on stdout (exit 0 always):

* the campaign's records fail the integrity check: the violation is recorded and the stop goes
  through (the launcher then tears the runs down and exits 3);
* no run is in flight, the budget is spent (what runs in flight reserve counted, as ``attune budget``
  counts it) or a valid stop is recorded (a ``stop`` row with a reason whose evidence names finalized
  runs of the campaign, with no launch after it, as ``attune stop`` requires), and ``REPORT.md``
  exists: the stop goes through;
* otherwise ``{"decision": "block", "reason": ...}``: what is left of the budget, the current leader,
  and the next step of the loop, so the agent goes back to tool work.

Finds its campaign through ``ATTUNE_CAMPAIGN_DIR`` (set by the launcher), else ``CLAUDE_PROJECT_DIR``.
Standard library only; runs on Python 3.7. It reads the ledger rows as plain JSON lines (the chains
are the integrity check's business), so it stays fast on long campaigns.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import campaign_files  # noqa: E402

TRUE = ("1", "true", "yes", "on")


def _rows(path):
    rows = []
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict):
                    rows.append(row)
    except (IOError, OSError):
        pass
    return rows


def _float(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


SUBMIT_FAILED = "submit_failed"  # attune_core.ranking.SUBMIT_FAILED: a launch whose submission failed never ran


def campaign_state(directory, settings):
    """Budget, stop and leader as the hook needs them, from the ledger and the GPU-hour log, by the rules of
    ``attune budget`` and ``attune stop`` (``attune_core.budget.state``; a test keeps them equal): what runs in
    flight expect is reserved, so the budget is spent when what was spent and what is reserved reach the limit;
    a stop is valid when its reason is given and its evidence runs are this campaign's and finalized, with no
    launch after it."""
    ledger = _rows(os.path.join(directory, "ledger.jsonl"))
    gpu = _rows(os.path.join(directory, "gpu_hours.jsonl"))
    launched, seen = [], set()
    for row in ledger:
        if row.get("kind") == "launch" and row.get("run") not in seen:  # a run is its first launch row
            seen.add(row.get("run"))
            launched.append(row)
    results = {}
    for row in ledger:
        if row.get("kind") == "result":
            results[row.get("run")] = row
    run_ids = {row.get("run") for row in launched}
    finished = {run for run in results if run in run_ids}
    in_flight_rows = [row for row in launched if row.get("run") not in results]
    gpu_hours = sum(row.get("gpu_seconds", 0) for row in gpu if row.get("kind") == "charge"
                    and isinstance(row.get("gpu_seconds"), (int, float))) / 3600.0
    gpuh_budget = _float(settings.get("AUTOTUNE_GPUH_BUDGET"))
    run_budget = _float(settings.get("AUTOTUNE_BUDGET"))
    if gpuh_budget is not None:
        reserved = sum(_float(row.get("expected_gpu_hours")) or 0.0 for row in in_flight_rows)
        budget = {"unit": "GPU-hours", "limit": gpuh_budget, "spent": gpu_hours, "reserved": reserved}
    elif run_budget is not None:
        ran = [run for run in finished if ((results[run].get("failure") or {}).get("class")) != SUBMIT_FAILED]
        budget = {"unit": "runs", "limit": run_budget, "spent": float(len(ran)), "reserved": float(len(in_flight_rows))}
    else:
        budget = {"unit": "GPU-hours", "limit": None, "spent": gpu_hours, "reserved": 0.0}
    budget["exhausted"] = budget["limit"] is not None and budget["limit"] - budget["spent"] - budget["reserved"] <= 0
    stops = [row for row in ledger if row.get("kind") == "stop"]
    stop, stop_problem = None, None
    if stops:
        last = stops[-1]
        evidence = last.get("evidence") if isinstance(last.get("evidence"), list) else []
        unknown = [run for run in evidence if run not in run_ids]
        unfinished = [run for run in evidence if run in run_ids and run not in results]
        later = [row.get("run") for row in ledger if row.get("kind") == "launch" and row.get("seq", -1) > last.get("seq", -1)]
        if not str(last.get("reason", "")).strip():
            stop_problem = "the recorded stop gives no reason"
        elif not evidence:
            stop_problem = "the recorded stop names no runs as evidence"
        elif unknown:
            stop_problem = "the recorded stop names runs this campaign never launched: %s" % ", ".join(unknown)
        elif unfinished:
            stop_problem = "the recorded stop names runs not finalized: %s" % ", ".join(unfinished)
        elif later:
            stop_problem = "runs were launched after the recorded stop (%s)" % ", ".join(later[:5])
        else:
            stop = last
    leaders = [row for row in ledger if row.get("kind") == "leader"]
    in_flight = [row.get("run") for row in in_flight_rows]
    return {"budget": budget, "stop": stop, "stop_problem": stop_problem,
            "leader": leaders[-1] if leaders else None, "in_flight": in_flight,
            "report": os.path.isfile(os.path.join(directory, "REPORT.md")), "launches": len(launched)}


def over(state):
    """Whether the campaign is over: nothing in flight, the budget spent or a valid stop, and the report written."""
    return bool(not state["in_flight"] and (state["budget"]["exhausted"] or state["stop"]) and state["report"])


def _integrity_problems(directory):
    """Problems from the integrity check, or None when it cannot run here (no record yet)."""
    if not os.path.isfile(os.path.join(directory, campaign_files.INTEGRITY)):
        return None
    try:
        import integrity
    except ImportError:
        return None
    problems = integrity.verify(directory)
    if problems:
        integrity.violation(directory, problems)
    return problems


def decide(directory, settings):
    """``(allow, reason)``."""
    problems = _integrity_problems(directory)
    if problems:
        return True, "integrity violation: %s; the launcher stops the campaign" % problems[0].get("what")
    state = campaign_state(directory, settings)
    budget = state["budget"]
    if over(state):
        return True, "campaign over: %s" % ("budget spent" if budget["exhausted"] else "stop recorded")
    lines = []
    if budget["limit"] is not None:
        lines.append("Budget left: %.2f of %.2f %s%s." % (
            max(0.0, budget["limit"] - budget["spent"] - budget["reserved"]), budget["limit"], budget["unit"],
            " (%.2f reserved by runs in flight)" % budget["reserved"] if budget["reserved"] else ""))
    leader = state["leader"]
    if leader:
        band = _float(leader.get("band")) or 0.0  # what a 2-run candidate needed over it, as the leader row records
        gain = leader.get("gain")  # its gain over the baseline, written by attune_core.ranking.gain_text
        # the notation of attune_core.ranking.band_text (this hook imports no attune_core module; a test keeps them equal)
        lines.append("Leader: %s at %.1f tokens/s/GPU%s (a candidate needed %+.2f%% over the leader with 2 runs)." % (
            leader.get("run"), _float(leader.get("tokens_per_s_per_gpu")) or 0.0,
            ", %s vs baseline" % gain if isinstance(gain, str) and gain else "", band * 100))
    elif state["launches"] == 0:
        lines.append("No run launched yet.")
    if state["in_flight"]:
        lines.append("Next: poll and finalize the runs in flight (%s) with `attune poll` and `attune finalize`, then "
                     "`attune rank`." % ", ".join(state["in_flight"][:5]))
    elif budget["exhausted"] or state["stop"]:
        lines.append("Next: write the final report with `attune report`; then you may stop.")
    else:
        lines.append("Next: `attune status` shows the next step of the loop (diagnose the leader, one change, launch, "
                     "finalize, gate, rank).")
    if state["stop_problem"]:
        lines.append("Your stop is not valid: %s." % state["stop_problem"])
    lines.append("To end early, record `attune stop --reason TEXT --evidence RUN...` (the runs considered and why "
                 "nothing left can pass the leader test), then `attune report`.")
    return False, " ".join(lines)


def main():
    try:
        event = json.loads(sys.stdin.read() or "{}")
    except ValueError:
        event = {}
    directory = campaign_files.campaign_dir()
    if not directory or not os.path.isfile(os.path.join(directory, "ledger.jsonl")):
        sys.stdout.write(json.dumps({"systemMessage": "attune stop hook: no campaign found (ATTUNE_CAMPAIGN_DIR); "
                                                      "not blocking"}) + "\n")
        return 0
    settings = campaign_files.read_settings(directory)
    try:
        allow, reason = decide(directory, settings)
    except Exception as exc:  # a crash would let the stop through unexplained: say what failed instead
        allow, reason = False, "attune stop hook could not read the campaign (%s: %s); run `attune status`" % (
            type(exc).__name__, exc)
    if allow:
        sys.stdout.write(json.dumps({"systemMessage": "attune: " + reason}) + "\n")
    else:
        sys.stdout.write(json.dumps({"decision": "block", "reason": reason}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
