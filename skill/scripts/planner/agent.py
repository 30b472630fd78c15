#!/usr/bin/env python3
"""The planner agent: runs a campaign through the ``attune`` verbs, as SKILL.md tells an agent to.

    python3 <campaign>/.attune/skill/scripts/planner/agent.py [--session ID] [--campaign DIR]

The launcher (``ATTUNE_AGENT=planner``) starts it in the campaign directory from the campaign's read-only
copy of the skill. Every action is an ``attune`` verb run as a subprocess (``status --json``, ``verify``,
``settings``, ``budget``, ``candidate new``, ``launch``, ``poll``, ``finalize``, ``rank``, ``metrics``, ``gate``,
``lesson``, ``note``, ``stop``, ``report``), decided on exit codes and ``--json`` fields; the decisions are
``planner.policy.propose`` on a state rebuilt at every step from ``status --json``, the ledger (read, never
written) and ``runs/*/candidate.json``. So it resumes after being killed: runs in flight are followed and
finalized first, a candidate written but never launched is launched (or left, when the leader moved), and
nothing already launched is launched again.

It writes ``notes.md`` (the state and a log of what it did and why) and one lesson per tested change
(``attune lesson``). Progress: one line per event on stderr, ending with its UTC time, the time since the
session started and the budget's ETA at this session's burn rate (``planner/progress.py``). Stdout: one JSON
object at the end, shaped like ``claude -p --output-format json``'s result (``session_id``, ``result``,
``is_error``, ``total_cost_usd`` 0, ``terminal_reason``). Exit 0 when the campaign is over (stop recorded or budget spent, and the report
written) or integrity stopped it; 1 on an error (resumable).

Environment: ``ATTUNE_CAMPAIGN_DIR`` (default: the current directory), ``ATTUNE_SESSION_ID``, and the
fault-injection hook ``ATTUNE_PLANNER_FAULT=after-launch:N`` or ``after-candidate:N`` (SIGKILL itself right
after its N-th launch or candidate of this process) or ``exit-after-launch:N`` (end the session with exit 0,
the campaign unfinished, after its N-th launch), for the resume tests. The seed, the GPU model and the widest
band it goes on with are the campaign's settings ``ATTUNE_PLANNER_SEED``, ``ATTUNE_PLANNER_GPU`` and
``ATTUNE_PLANNER_MAX_BAND``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from attune.campaign import localrun  # noqa: E402
from attune.core import slime  # noqa: E402
from attune.planner import policy, progress, space as space_mod  # noqa: E402
from attune.planner.history import History, canon, describe  # noqa: E402
from attune.planner.notes import Notes, fmt, layout_of, now, pct  # noqa: E402
from attune.planner.verbs import Integrity, PlannerError, VerbRunner  # noqa: E402

POLL_S = {"local": 0.1, "ray": 1.0, "kuberay": 90.0}  # a local (simulated) run lasts seconds; poll itself takes ~0.2 s
HANG_AFTER_S = 900.0
MAX_STEPS = 1000  # actions per session: a guard against a loop that makes no progress


class Planner(VerbRunner, Notes, History):
    def __init__(self, directory: Path, session: str = None, out=sys.stderr):
        self.dir = directory
        self.session = session
        self.out = out
        self.python = sys.executable or "python3"
        self.env = dict(os.environ, ATTUNE_CAMPAIGN_DIR=str(directory), PYTHONDONTWRITEBYTECODE="1")
        self.spaces = {}  # parent run -> list[Lever] (this process)
        self.predicted = {}  # leader run -> (its Prediction, {Alternative.key: Prediction})
        self.metrics = {}  # run -> policy.Measured
        self.excluded = {}  # Alternative.key -> why candidate new refused it (this process)
        self.attempts = {}
        self.no_lesson = set()  # candidates `lesson` refused this session
        self.launches = 0
        self.candidates = 0
        fault = os.environ.get("ATTUNE_PLANNER_FAULT", "")
        kind, _, count = fault.partition(":")
        self.fault = (kind, int(count)) if kind in ("after-launch", "after-candidate", "exit-after-launch") \
            and count.isdigit() else None
        self.log_lines = []
        self.last_status = None  # status --json just taken (after a run was followed), not yet used
        self.settings = {}
        self.baseline_text = None
        self.clock = progress.Clock()  # the timing fields of the progress lines

    # ---------------------------------------------------------------- the run lifecycle
    def gpu_args(self) -> list:
        gpu = self.settings.get("ATTUNE_PLANNER_GPU")
        return ["--gpu", gpu] if gpu else []

    def expected_hours(self, status: dict):
        """``--expected-gpu-hours H`` for a GPU-hour budget: the largest charge of a baseline run plus 25%, or
        half an hour of every GPU before the first (capped at what is left)."""
        budget = status["budget"]
        if budget["kind"] != "gpu_hours":
            return None
        charges = self.gpu_charges()
        rows = self.ledger()
        base_sha = next((r["recipe_sha256"] for r in rows if r.get("kind") == "launch" and r.get("purpose") ==
                         "baseline"), None)
        base_runs = [r["run"] for r in rows if r.get("kind") == "launch" and r.get("recipe_sha256") == base_sha]
        seen = [charges[r] for r in base_runs if r in charges] or list(charges.values())
        if seen:
            return round(max(seen) * 1.25, 6)
        gpus = space_mod.as_recipe(self.baseline_text).gpus() if self.baseline_text else 8
        return round(min(gpus * 0.5, max(budget["left"], 1e-6)), 6)

    def launch(self, *args, status: dict = None) -> str:
        status = status or self.status()
        hours = self.expected_hours(status)
        extra = ["--expected-gpu-hours", "%.6g" % hours] if hours is not None else []
        if hours is not None:
            code, _data, _out, err = self.verb("budget", "--need", "%.6g" % hours, "--json")
            if code == 1:
                raise BudgetRefused(err.strip())
        code, data, out, err = self.verb("launch", *(list(args) + extra + self.gpu_args() + ["--json"]))
        if code == 1:
            raise BudgetRefused(err.strip()) if "budget" in err or "launch refused" in err else \
                PlannerError("launch %s refused: %s" % (" ".join(args), err.strip()))
        if code != 0:
            raise PlannerError("launch %s exited %d: %s" % (" ".join(args), code, err.strip()))
        row = data["launch"]
        self.launches += 1
        self.event("launch", run=row["run"], purpose=row["purpose"], lever=row.get("lever"),
                   change=describe(row.get("change")), budget_left_before=self.budget_text(status))
        if self.fault and self.fault[1] <= self.launches and self.fault[0] in ("after-launch", "exit-after-launch"):
            self.write_notes()
            if self.fault[0] == "after-launch":
                os.kill(os.getpid(), signal.SIGKILL)
            raise EarlyExit("ATTUNE_PLANNER_FAULT=%s:%d: ending the session after launch %s"
                            % (self.fault[0], self.fault[1], row["run"]))
        return row["run"]

    def follow(self, run: str) -> dict:
        """Poll until the run has ended, finalize it, rank; return its ``last_results`` entry."""
        interval = POLL_S.get(self.settings.get("ATTUNE_BACKEND"), 90.0)
        # with early stopping, a running candidate is offered to finalize at every look (it stops it or says it runs)
        early = str(self.settings.get("ATTUNE_EARLY_STOP") or "0").lower() in ("1", "true", "yes", "on")
        while True:
            code, poll, _out, err = self.verb("poll", run, "--json")
            if code != 0:
                raise PlannerError("poll %s: %s" % (run, err.strip()))
            quiet = poll.get("seconds_without_progress") or 0
            if poll.get("done") or quiet > float(self.settings.get("ATTUNE_HANG_AFTER_S") or HANG_AFTER_S) or \
                    (early and poll.get("state") == "running"):
                code, data, _out, err = self.verb("finalize", run, "--json")
                if code == 0:
                    break
                if code != 1:
                    raise PlannerError("finalize %s: %s" % (run, err.strip()))
            time.sleep(interval)
        result = data["result"]
        self.must("rank", "--no-chart", "--json")
        status = self.status()
        self.last_status = status  # the next step starts from it
        entry = next((r for r in status["last_results"] if r["run"] == run), {})
        failure = (result.get("failure") or {}).get("class")
        self.event("result", run=run, status=result.get("status"), failure=failure,
                   tokens_per_s_per_gpu=entry.get("tokens_per_s_per_gpu"), vs_leader=pct(entry.get("vs_leader")),
                   verdict=entry.get("verdict"), budget_left=self.budget_text(status))
        for warning in result.get("warnings") or ():
            self.event("warning", run=run, text=warning)
        return entry

    # ---------------------------------------------------------------- housekeeping on every step
    def in_flight(self, status: dict) -> bool:
        busy = [item["run"] for item in status.get("in_flight", ())]
        for run in busy:
            self.event("follow", run=run, why="in flight")
            self.follow(run)
        return bool(busy)

    def orphans(self, status: dict) -> bool:
        """Candidates written (runs/*/candidate.json) but never launched: launch the one against the current
        leader that was the planner's choice; leave the others (noted)."""
        rows = self.ledger()
        launched = {r["run"] for r in rows if r.get("kind") == "launch"}
        launched_shas = {r["recipe_sha256"] for r in rows if r.get("kind") == "launch" and r["purpose"] == "candidate"}
        noted = {r.get("run") for r in rows if r.get("kind") == "note" and "never launched" in str(r.get("text"))}
        leader = (status.get("leader") or {}).get("run")
        acted = False
        runs_dir = self.dir / "runs"
        for path in sorted(runs_dir.glob("*/candidate.json")) if runs_dir.exists() else ():
            run = path.parent.name
            if run in launched or run in noted:
                continue
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if record.get("parent") == leader and record.get("recipe_sha256") not in launched_shas \
                    and not status["budget"]["exhausted"]:
                self.event("resume", run=run, why="candidate written but never launched; its parent still leads")
                try:
                    self.launch(run, status=status)
                except BudgetRefused:
                    return acted
                self.follow(run)
                acted = True
            else:
                self.must("note", "planner: candidate %s was written but never launched; left (its parent %s no longer "
                          "leads, or the same recipe ran already)" % (run, record.get("parent")), "--run", run,
                          "--json")
        return acted

    # ---------------------------------------------------------------- actions
    def do(self, action: policy.Action, status: dict, state: policy.State) -> None:
        # the same action again is progress when it spent something since (another repeat of a close candidate,
        # up to ranking.MAX_RUNS of its recipe); the same action with nothing spent in between is a loop
        spent = (status.get("budget") or {}).get("spent")
        key = (action.kind, action.run, action.lever, action.alternative.name if action.alternative else None, spent)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        if self.attempts[key] > 3:
            raise PlannerError("the same action was proposed %d times without progress: %s" % (self.attempts[key],
                                                                                               key))
        self.event("decide", action=action.kind, run=action.run, lever=action.lever,
                   change=action.alternative.name if action.alternative else None, why=action.why)
        if action.kind == "repeat_baseline":
            run = self.launch("--baseline", status=status)
            self.follow(run)
        elif action.kind == "gate":
            self.replays(action.run)
            code, data, out, err = self.verb("gate", "--run", action.run, "--json")
            if code not in (0, 1):
                raise PlannerError("gate %s: %s" % (action.run, err.strip()))
            if not isinstance(data, dict) or data.get("verdict") not in ("pass", "fail"):
                # exit 1 is also how a verb ends on an unexpected error: no verdict, and gating again would loop
                raise PlannerError("gate %s gave no verdict (exit %d): %s" % (action.run, code,
                                                                           (err or out).strip()[-1000:]))
            reasons = data.get("reasons") or []
            self.event("gate", run=action.run, verdict=data["verdict"], reasons="; ".join(reasons)[:200])
        elif action.kind == "confirm":
            run = self.launch("--repeat-of", action.run, "--confirm", status=status)
            self.follow(run)
        elif action.kind == "repeat":  # the ranking asks for one more run of a close comparison
            run = self.launch("--repeat-of", action.run, status=status)
            self.follow(run)
        elif action.kind == "retry":
            run = self.launch("--repeat-of", action.run, status=status)
            self.follow(run)
        elif action.kind in ("candidate", "leave_one_out"):
            self.candidate(action, status, state)
        else:
            raise PlannerError("unknown action %r" % action.kind)

    def replays(self, run: str) -> None:
        """Before gating a run of a whole-loop slime campaign: the train-only replays the gate compares in its place
        (correctness/PROTOCOL.md §4.4), on the rollouts the baseline saved, frozen once into ``scratch/rollouts``:
        the baseline's two (the reference and a rerun) and the run's own. Nothing for any other campaign."""
        rows = self.ledger()
        launches = [row for row in rows if row.get("kind") == "launch"]
        base = next((row["run"] for row in launches if row.get("purpose") == "baseline"), None)
        if base is None:
            return
        recipe = space_mod.as_recipe(self.recipe_text(base))
        args = recipe.args()
        if not slime.is_slime(recipe.command.program, args) or slime.shape_of(args).mode != "whole_loop":
            return
        template = args.get(slime.SAVE_FLAG)
        if not isinstance(template, str):
            raise PlannerError("the whole-loop baseline %s saves no rollouts (%s): the gate judges a whole-loop run "
                               "on train-only replays of frozen rollouts, so no candidate can be gated"
                               % (base, slime.SAVE_FLAG))
        if not os.path.isabs(template):  # a local run saved them in its own working folder, where it writes
            template = str(self.dir / "runs" / base / localrun.WORK / template)
        folder = self.dir / "scratch" / "rollouts"
        manifest = folder / "dump" / "attune_dump.json"
        if not manifest.is_file():
            self.event("freeze", run=base, why="a whole-loop run is gated on train-only replays of frozen rollouts")
            self.must("rows", "from-slime", template, "--out", folder / "rollouts.parquet", "--json")
            self.must("rows", "to-slime", folder / "rollouts.parquet", "--out", folder / "dump", "--json")
        finished = {row["run"] for row in rows if row.get("kind") == "result" and row.get("status") == "finished"}
        replayed = [row.get("parent") for row in launches if row.get("purpose") == slime.REPLAY_PURPOSE
                    and row["run"] in finished]
        for source in [base] * max(0, 2 - replayed.count(base)) + ([run] if run not in replayed else []):
            self.event("replay", run=source, why="the gate compares its train-only replay")
            self.follow(self.launch("--replay-of", source, "--rollouts", manifest))  # with the budget as it is now

    def candidate(self, action: policy.Action, status: dict, state: policy.State) -> None:
        alt = action.alternative
        leader = state.leader
        # never twice the same thing: a candidate of this change against this leader already written (and not
        # launched) is launched instead of writing another
        child = space_mod.apply(self.recipe_text(leader), alt)  # the very text `candidate new` will write
        sha = hashlib.sha256(child.render().encode("utf-8")).hexdigest()
        same = [r["run"] for r in self.ledger() if r.get("kind") == "launch" and r.get("recipe_sha256") == sha]
        if same:  # never the same recipe twice: it was measured already (as RUN)
            self.excluded[alt.key] = "the same recipe ran already as %s" % same[0]
            self.event("skip", lever=alt.lever, change=alt.name, why=self.excluded[alt.key])
            return
        wanted = canon(space_mod.diff(space_mod.as_recipe(self.recipe_text(leader)), child))
        for path in sorted((self.dir / "runs").glob("*/candidate.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if record.get("parent") == leader and record.get("lever") == alt.lever and \
                    canon(record.get("change")) == wanted:
                launched = {r["run"] for r in self.ledger() if r.get("kind") == "launch"}
                if record["run"] not in launched:
                    run = self.launch(record["run"], status=status)
                    self.follow(run)
                    return
        # a leave-one-out is written by the verb from the change's own run, so the ranking knows what it removes
        change = ("--leave-out", action.change.run) if action.kind == "leave_one_out" else alt.argv()
        code, data, _out, err = self.verb("candidate", "new", "--parent", leader, *change, "--lever", alt.lever,
                                          "--hypothesis", action.hypothesis, *self.gpu_args(), "--json")
        if code != 0:
            why = (err.strip().splitlines() or ["exit %d" % code])[-1]
            self.excluded[alt.key] = why
            self.event("refused", lever=alt.lever, change=alt.name, why=why[:200])
            return
        run = data["run"]  # written: it passes the gate's configuration check (candidate new refuses one that fails)
        self.candidates += 1
        self.event("candidate", run=run, lever=alt.lever, change=alt.describe(), why=action.why)
        if self.fault and self.fault[0] == "after-candidate" and self.candidates >= self.fault[1]:
            self.write_notes()
            os.kill(os.getpid(), signal.SIGKILL)
        run = self.launch(run, status=status)
        together = [run] + self.alongside(leader, alt, run)
        for each in together:
            self.follow(each)

    def alongside(self, leader: str, first: "space_mod.Alternative", run: str) -> list:
        """With ``ATTUNE_MAX_IN_FLIGHT`` above 1, more one-lever candidates against the same ``leader`` launched
        while ``run`` (of ``first``) runs, each the policy's next choice with the ones in flight set aside, until
        that many are in flight, the policy's next step is not a candidate against this leader, or the budget
        cannot hold another reservation. Their runs, in launch order."""
        limit = int(self.settings.get("ATTUNE_MAX_IN_FLIGHT") or 1)
        runs, held = [], {first.key: run}
        while 1 + len(runs) < limit:
            for key, in_flight in held.items():
                self.excluded[key] = "in flight as %s" % in_flight
            try:
                status = self.status()
                state = self.build(status)
                action = policy.propose(state)
            finally:
                for key in held:
                    self.excluded.pop(key, None)
            if action.kind != "candidate" or state.leader != leader or action.alternative.key in held:
                break
            self.event("decide", action="candidate", lever=action.lever, change=action.alternative.name,
                       why="%s (alongside %s)" % (action.why, ", ".join(sorted(held.values()))))
            code, data, _out, err = self.verb("candidate", "new", "--parent", leader, *action.alternative.argv(),
                                              "--lever", action.alternative.lever, "--hypothesis", action.hypothesis,
                                              *self.gpu_args(), "--json")
            if code != 0:
                self.excluded[action.alternative.key] = (err.strip().splitlines() or ["exit %d" % code])[-1]
                self.event("refused", lever=action.alternative.lever, change=action.alternative.name,
                           why=self.excluded[action.alternative.key][:200])
                continue
            self.candidates += 1
            self.event("candidate", run=data["run"], lever=action.alternative.lever,
                       change=action.alternative.describe(), why=action.why)
            try:
                launched = self.launch(data["run"], status=status)
            except BudgetRefused as exc:  # the written candidate is launched later, or noted (orphans)
                self.event("budget", why="not launched alongside: %s" % str(exc)[:200])
                break
            runs.append(launched)
            held[action.alternative.key] = launched
        return runs

    def finish(self, status: dict, action: policy.Action = None) -> str:
        """Record the stop (unless the budget is spent), rank, report."""
        self.settle_lessons(status, final=True)
        status = self.status()
        if status["stop"] is not None and not status["stop"]["launches_since"]:
            reason = "stop recorded: %s" % status["stop"]["reason"]
        elif status["budget"]["exhausted"]:
            reason = "budget spent"
        else:
            action = action or policy.Action("stop", reason="the budget cannot hold another run",
                                             evidence=tuple(r for r in [(status.get("leader") or {}).get("run")] if r))
            code, _data, _out, err = self.verb("stop", "--reason", action.reason, "--evidence", *action.evidence,
                                               "--json")
            if code != 0:
                raise PlannerError("stop: %s" % err.strip())
            self.event("stop", reason=action.reason, evidence=" ".join(action.evidence))
            reason = "stop recorded: %s" % action.reason
        self.must("rank", "--json")
        code, data, _out, err = self.verb("report", "--json")
        shipped = code == 0
        self.event("report", shipped="yes" if shipped else "no (%s)" % (err.strip().splitlines() or ["?"])[-1][:200])
        status = self.status()
        self.write_notes(self.build(status) if status["band"].get("established") else None, status)
        leader = status.get("leader") or {}
        return "%s; leader %s at %s tokens/s/GPU (%s vs baseline); %s" % (
            reason, leader.get("run"), fmt(leader.get("tokens_per_s_per_gpu")), pct(leader.get("vs_baseline")),
            "recipe.yaml shipped" if shipped else "shipping refused")

    # ---------------------------------------------------------------- the session
    def run(self) -> tuple:
        """``(terminal reason, summary)``."""
        try:
            status = self.status()
            self.verb("verify", "--json")
        except Integrity as exc:
            return self.integrity(str(exc))
        if status["integrity"]["violation_recorded"]:
            return self.integrity("a violation is recorded")
        self.settings = self.must("settings", "--json")
        try:
            self.baseline_text = Path(self.settings["ATTUNE_BASELINE_YAML"]).read_text(encoding="utf-8")
        except OSError as exc:
            self.must("note", "settings: ATTUNE_BASELINE_YAML=%s cannot be read here (%s)"
                      % (self.settings["ATTUNE_BASELINE_YAML"], exc))
            return "error", "the baseline recipe cannot be read"
        self.event("start", session=self.session, campaign=status["campaign"], budget_left=self.budget_text(status),
                   seed=self.settings.get("ATTUNE_PLANNER_SEED"))
        if not (self.dir / "notes.md").exists():
            self.settings_checks(status)
        stop = status.get("stop")
        if stop is not None and not stop["launches_since"]:
            if not (self.dir / "REPORT.md").exists():
                return "stop recorded", self.finish(status)
            self.event("over", why="a stop is recorded and REPORT.md exists")
            return "stop recorded", "the campaign is over: %s" % stop["reason"]
        try:
            for _step in range(MAX_STEPS):
                status, self.last_status = self.last_status or self.status(), None
                if self.in_flight(status):
                    continue
                if status["budget"]["exhausted"]:
                    return "budget spent", self.finish(status)
                if self.orphans(status):
                    continue
                self.settle_lessons(status)
                state = self.build(status)
                action = policy.propose(state)
                self.write_notes(state, status)
                if action.kind == "stop":
                    self.event("decide", action="stop", reason=action.reason)
                    return "stop recorded", self.finish(status, action)
                try:
                    self.do(action, status, state)
                except BudgetRefused as exc:
                    self.event("budget", why=str(exc)[:200])
                    status = self.status()
                    if status["budget"]["exhausted"]:
                        return "budget spent", self.finish(status)
                    refused = policy.Action("stop", reason="the budget left (%s) cannot hold another run: %s" % (
                        self.budget_text(status), str(exc)[:200]), evidence=policy._evidence(state))
                    return "stop recorded", self.finish(status, refused)
            raise PlannerError("no end after %d steps" % MAX_STEPS)
        except Integrity as exc:
            return self.integrity(str(exc))

    def settings_checks(self, status: dict) -> None:
        """First session: the setup checks of SKILL.md section 2, recorded in notes.md and the ledger."""
        self.verb("settings", "--check-files")
        budget = self.must("budget", "--json")
        self.event("setup", backend=self.settings.get("ATTUNE_BACKEND"), budget_kind=budget["kind"],
                   budget_left=budget["left"], layout=layout_of(space_mod.as_recipe(self.baseline_text)))
        rows = self.settings.get("ATTUNE_ROWS_PATH")
        if not rows:
            if not any(r.get("kind") == "note" and "declared no rows" in str(r.get("text")) for r in self.ledger()):
                self.must("note", "planner: the campaign declared no rows (ATTUNE_ROWS_PATH empty): nothing checks "
                          "that all runs train on the same data", "--json")
        elif Path(rows).exists():
            code, _data, _out, err = self.verb("rows", "check", rows, "--json")
            if code == 1:
                self.must("note", "planner: rows check failed: %s" % err.strip()[:300], "--json")
        self.write_notes(status=status)

    def integrity(self, why: str) -> tuple:
        self.event("integrity", why=why[:200])
        self.log_lines.append("%s integrity violation: %s; nothing more is launched" % (now(), why[:300]))
        try:
            self.verb("report", "--json")
        except Integrity:
            pass
        self.write_notes()
        return "integrity violation", "integrity violation (%s): nothing more launched, nothing ships" % why[:200]


class EarlyExit(Exception):
    """The fault hook ``exit-after-launch``: end the session cleanly (exit 0) with the campaign unfinished."""


class BudgetRefused(Exception):
    """A launch the budget cannot hold (``budget --need`` or ``launch`` exit 1)."""


def _interrupted(_signum, _frame) -> None:
    """Ctrl-C: end at once with one line, wherever the planner is. Everything it records goes through the attune
    verbs (each interrupted on its own) and notes.md is replaced whole, so nothing is left half written; the
    launcher prints how to resume."""
    try:
        sys.stderr.write("planner: interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="planner/agent.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--session", help="the session id (resuming it)")
    parser.add_argument("--campaign", help="the campaign directory (default: $ATTUNE_CAMPAIGN_DIR, else .)")
    args = parser.parse_args(argv)
    directory = Path(args.campaign or os.environ.get("ATTUNE_CAMPAIGN_DIR") or ".").resolve()
    session = args.session or os.environ.get("ATTUNE_SESSION_ID") or "planner-%d" % os.getpid()
    signal.signal(signal.SIGINT, _interrupted)
    planner = Planner(directory, session)
    try:
        reason, summary = planner.run()
        error = reason == "error"
    except EarlyExit as exc:
        planner.event("exit", why=str(exc))
        reason, summary, error = "fault", str(exc), False
    except KeyboardInterrupt:  # Ctrl-C: one line; the launcher says how to resume
        print("planner: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # report, then exit 1: the launcher prints how to resume
        import traceback
        traceback.print_exc(file=sys.stderr)
        planner.event("error", why="%s: %s" % (type(exc).__name__, str(exc)[:300]))
        try:
            planner.write_notes()
        except Exception:
            pass
        reason, summary, error = "error", "%s: %s" % (type(exc).__name__, exc), True
    print(json.dumps({"type": "result", "subtype": "success" if not error else "error", "is_error": error,
                      "session_id": session, "result": summary, "terminal_reason": reason, "total_cost_usd": 0.0,
                      "agent": "planner"}), flush=True)
    return 1 if error else 0


if __name__ == "__main__":
    raise SystemExit(main())
