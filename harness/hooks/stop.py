#!/usr/bin/env python3
"""Claude Code Stop hook: the agent may stop only when the campaign is really over.

Reads the Stop event on stdin and answers on stdout (exit 0 always):

* the campaign's records fail the integrity check: the violation is recorded and the stop goes
  through (the launcher then tears the runs down and exits 3);
* no run is in flight, the budget is spent (what runs in flight reserve counted, as ``attune budget``
  counts it) or a valid stop is recorded (a ``stop`` row with a reason whose evidence names runs of the
  campaign, recorded with none in flight and no launch after it, as ``attune stop`` requires), and
  ``REPORT.md`` exists: the stop goes through;
* otherwise ``{"decision": "block", "reason": ...}``: what is left of the budget, the current leader,
  and the next step of the loop, so the agent goes back to tool work.

Finds its campaign through ``ATTUNE_CAMPAIGN_DIR`` (set by the launcher), else ``CLAUDE_PROJECT_DIR``.
Standard library only; runs on Python 3.7. The rules are the kernel's (``attune.core.state``, loaded from
the skill beside this harness after the integrity check passed): it reads the ledger rows as plain JSON
lines (the chains are the integrity check's business), so it stays fast on long campaigns.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import campaign_files  # noqa: E402

TRUE = ("1", "true", "yes", "on")
# the skill beside this harness (in a campaign, its read-only copy .attune/skill): its kernel's ``state`` module
# holds the rules this hook decides by, the rules ``attune budget``, ``attune status`` and ``attune stop`` use
SCRIPTS = os.path.normpath(os.path.join(HERE, "..", "..", "skill", "scripts"))


def _state_module():
    if SCRIPTS not in sys.path:
        sys.path.insert(0, SCRIPTS)  # attune.py there loads the package from that folder and takes it off again
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        from attune.core import state
    finally:
        sys.dont_write_bytecode = saved
    return state


def campaign_state(directory, settings):
    """Budget, stop, leader and what is pending, from the ledger and the GPU-hour log read tolerantly, by the
    rules of ``attune budget``, ``attune status`` and ``attune stop`` (``attune.core.state``), plus whether the
    report is written."""
    out = _state_module().read(directory, settings)
    out["report"] = os.path.isfile(os.path.join(directory, "REPORT.md"))
    return out


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
            max(0.0, budget["left"]), budget["limit"], budget["unit"],
            " (%.2f reserved by runs in flight)" % budget["reserved"] if budget["reserved"] else ""))
    leader = state["leader"]
    if leader:
        number = _state_module().number
        band = number(leader.get("band")) or 0.0  # what a 2-run candidate needed over it, as the leader row records
        gain = leader.get("gain")  # its gain over the baseline, written by attune.campaign.ranking.gain_text
        # the notation of attune.campaign.ranking.band_text (this hook imports no attune module; a test keeps them equal)
        lines.append("Leader: %s at %.1f tokens/s/GPU%s (a candidate needed %+.2f%% over the leader with 2 runs)." % (
            leader.get("run"), number(leader.get("tokens_per_s_per_gpu")) or 0.0,
            ", %s vs baseline" % gain if isinstance(gain, str) and gain else "", band * 100))
    elif state["launches"] == 0:
        lines.append("No run launched yet.")
    if state["in_flight"]:
        lines.append("Next: poll and finalize the runs in flight (%s) with `attune poll` and `attune finalize`, then "
                     "`attune rank`." % ", ".join(state["in_flight"]))
    elif budget["exhausted"] or state["stop"]:
        lines.append("Next: write the final report with `attune report`; then you may stop.")
    else:
        lines.append("Next: `attune status` shows the next step of the loop (diagnose the leader, one change, launch, "
                     "finalize, gate, rank).")
    if state["stop_problem"]:
        lines.append("%s." % (state["stop_problem"][0].upper() + state["stop_problem"][1:]))
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
