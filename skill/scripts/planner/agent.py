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
import datetime
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE.parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from planner import policy, progress, space as space_mod  # noqa: E402

ATTUNE = SCRIPTS / "attune.py"
POLL_S = {"local": 0.1, "kuberay": 90.0}  # a local (simulated) run lasts seconds; poll itself takes ~0.2 s
HANG_AFTER_S = 900.0
MAX_STEPS = 1000  # actions per session: a guard against a loop that makes no progress
LOO_PREFIX = "Leave-one-out of "
# a lesson as ``lesson --json`` prints it (``- **Verdict**: kept``) or as its ledger note keeps it (``Verdict: kept``)
RESULT_RE = re.compile(r"Result(?:\*\*)?:\s*([+-]?\d+(?:\.\d+)?)%(?: \([^)]*\))? tokens/s/GPU vs parent")
VERDICT_RE = re.compile(r"Verdict(?:\*\*)?:\s*(kept|rejected|hurt)")


class Integrity(Exception):
    """A verb exited 3: the records are broken; nothing more may be launched."""


class PlannerError(Exception):
    pass


def _pairs(fields: dict) -> list:
    """``key=value`` words; a value with a space (or none) is quoted as JSON."""
    parts = []
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, float):
            value = "%.1f" % value
        text = str(value)
        parts.append("%s=%s" % (key, json.dumps(text, ensure_ascii=False) if (" " in text or not text) else text))
    return parts


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Planner(object):
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

    # ---------------------------------------------------------------- the verbs
    def verb(self, *args):
        """``(exit code, parsed JSON or None, stdout, stderr)`` of one ``attune`` verb."""
        argv = [self.python, str(ATTUNE)] + [str(a) for a in args]
        proc = subprocess.run(argv, cwd=str(self.dir), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
        data = None
        if "--json" in args:
            try:
                data = json.loads(out) if out.strip() else None
            except ValueError:
                data = None
        if proc.returncode == 3:
            raise Integrity(err.strip() or out.strip())
        if proc.returncode in (130, -2):  # the verb was interrupted (Ctrl-C reaches the whole process group)
            raise KeyboardInterrupt
        return proc.returncode, data, out, err

    def must(self, *args):
        code, data, out, err = self.verb(*args)
        if code != 0:
            raise PlannerError("attune %s exited %d: %s" % (" ".join(str(a) for a in args[:3]), code,
                                                             (err or out).strip()[-500:]))
        return data

    def status(self) -> dict:
        data = self.must("status", "--json")
        self.clock.seen(data["budget"])
        return data

    # ---------------------------------------------------------------- progress and notes
    def event(self, kind: str, **fields) -> None:
        """One progress line on stderr, ending with the timing fields (``progress.py``); the notes' log keeps it
        without them, after its own time stamp."""
        line = " ".join(["planner:", kind] + _pairs(fields))
        print(" ".join([line] + _pairs(self.clock.fields())), file=self.out, flush=True)
        self.log_lines.append("%s %s" % (_now(), line[len("planner: "):]))

    def budget_text(self, status: dict) -> str:
        budget = status["budget"]
        return "%.4g/%.4g %s" % (max(0.0, budget["left"]), budget["limit"], budget["unit"])

    def write_notes(self, state=None, status=None) -> None:
        path = self.dir / "notes.md"
        old_log = []
        if path.exists():
            text = path.read_text(encoding="utf-8", errors="replace")
            if "\n## Log\n" in text:
                old_log = [line for line in text.split("\n## Log\n", 1)[1].splitlines() if line.startswith("- ")]
        log = old_log + ["- " + line for line in self.log_lines]
        self.log_lines = []
        lines = ["# Planner notes", "",
                 "Written by the deterministic planner (`planner/agent.py`, seed %s). Everything above the log is "
                 "rewritten at each step from the ledger, `status --json` and the projection; the log below only "
                 "grows." % self.settings.get("ATTUNE_PLANNER_SEED", "0"), ""]
        s = self.settings
        if s:
            lines += ["## Settings", "",
                      "- backend %s, run prefix %s, budget %s" % (
                          s.get("ATTUNE_BACKEND"), s.get("ATTUNE_RUN_PREFIX"),
                          ("%s GPU-hours" % s["AUTOTUNE_GPUH_BUDGET"]) if s.get("AUTOTUNE_GPUH_BUDGET")
                          else "%s runs" % s.get("AUTOTUNE_BUDGET")),
                      "- context %s, namespace %s, log pod %s, shared dir %s" % (
                          s.get("ATTUNE_KUBE_CONTEXT") or "-", s.get("ATTUNE_NAMESPACE") or "-",
                          s.get("AUTOTUNE_LOG_POD") or "-", s.get("ATTUNE_SHARED_DIR") or "-"),
                      "- rows %s (%s); baseline %s; web %s" % (
                          s.get("ATTUNE_ROWS_PATH") or "none declared (nothing checks that runs train on the same "
                          "data)", s.get("ATTUNE_ROWS_SHA256") or "-", s.get("ATTUNE_BASELINE_YAML"),
                          "allowed" if s.get("AUTOTUNE_ALLOW_WEB") in ("1", "true") else "off"), ""]
        if self.baseline_text:
            lines += ["## Layout (baseline)", "", "- " + _layout(space_mod.as_recipe(self.baseline_text)), ""]
        if status is not None:
            leader = status.get("leader") or {}
            band = status.get("band") or {}
            lines += ["## Leader", "",
                      "- %s: %s tokens/s/GPU (%s vs baseline); band %s, from %s; budget %s" % (
                          leader.get("run"), _fmt(leader.get("tokens_per_s_per_gpu")),
                          _pct(leader.get("vs_baseline")), band.get("text"), band.get("basis"),
                          self.budget_text(status)), ""]
        if state is not None:
            if state.lineage:
                lines += ["Lineage: " + " -> ".join("%s (%s, %s)" % (c.alternative, c.lever, c.run)
                                                    for c in state.lineage), ""]
            shares = policy.diagnose(state.leader_prediction, state.leader_measured)
            lines += ["## Diagnosis (projection of the leader)", ""]
            if shares:
                lead = state.leader_prediction
                lines.append("- projected step %.2f s (compute %.2f, exposed communication %.2f, bubble %.2f), "
                             "%.1f tokens/s/GPU, memory %.1f of %.1f GiB" % (
                                 lead.step_s, lead.compute_s, lead.exposed_comm_s, lead.bubble_s,
                                 lead.tokens_per_s_per_gpu, lead.memory_gib, lead.usable_gib))
                m = state.leader_measured
                if m and m.step_s:
                    lines.append("- measured step %.2f s, %s tokens/s/GPU, peak reserved %s GiB" % (
                        m.step_s, _fmt(m.tokens_per_s_per_gpu), _fmt(m.max_reserved_gib)))
                lines.append("- shares: " + ", ".join("%s %.1f%%" % (k, 100 * v) for k, v in shares.items()))
            else:
                lines.append("- bottleneck: unknown (no projection for this recipe)")
            lines += ["", "## Tried", "", "| run | parent | lever | alternative | predicted | measured vs parent | "
                      "verdict |", "|---|---|---|---|---|---|---|"]
            for t in sorted(state.tried, key=lambda t: t.order):
                lines.append("| %s | %s | %s | %s | %s | %s | %s%s |" % (
                    t.run, t.parent, t.lever, t.alternative, _pct(t.predicted_gain), _pct(t.gain), t.verdict,
                    " (%s)" % t.failure if t.failure else ""))
            nxt = policy.options(state)[:3]
            lines += ["", "## Next candidates", ""]
            lines += ["- %s (%s): %s" % (o.alternative.name, o.lever.id, o.why) for o in nxt] or ["- none"]
            if state.excluded:
                lines += ["", "Refused by `candidate new` this session: " + "; ".join(
                    "%s (%s)" % (k[1], v[:120]) for k, v in state.excluded.items())]
            lines.append("")
        lines += ["## Log", ""] + log
        text = "\n".join(lines) + "\n"
        tmp = path.with_name("notes.md.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(str(tmp), str(path))

    # ---------------------------------------------------------------- the ledger (read only)
    def ledger(self) -> list:
        rows = []
        with open(self.dir / "ledger.jsonl", "r", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                line = line.strip()
                if line:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(row, dict):
                        rows.append(row)
        return rows

    def gpu_charges(self) -> dict:
        out = {}
        path = self.dir / "gpu_hours.jsonl"
        if path.exists():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if row.get("kind") == "charge" and isinstance(row.get("gpu_seconds"), (int, float)):
                    out[row.get("run")] = out.get(row.get("run"), 0.0) + row["gpu_seconds"] / 3600.0
        return out

    def recipe_text(self, run: str) -> str:
        return (self.dir / "runs" / run / "recipe.yaml").read_text(encoding="utf-8")

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
                   change=_describe(row.get("change")), budget_left_before=self.budget_text(status))
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
        while True:
            code, poll, _out, err = self.verb("poll", run, "--json")
            if code != 0:
                raise PlannerError("poll %s: %s" % (run, err.strip()))
            quiet = poll.get("seconds_without_progress") or 0
            if poll.get("done") or quiet > float(self.settings.get("ATTUNE_HANG_AFTER_S") or HANG_AFTER_S):
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
                   tokens_per_s_per_gpu=entry.get("tokens_per_s_per_gpu"), vs_leader=_pct(entry.get("vs_leader")),
                   verdict=entry.get("verdict"), budget_left=self.budget_text(status))
        for warning in result.get("warnings") or ():
            self.event("warning", run=run, text=warning)
        return entry

    # ---------------------------------------------------------------- state
    def space_of(self, run: str, text: str):
        if run not in self.spaces:
            self.spaces[run] = space_mod.space(text, self.baseline_text, gpu=self.settings.get("ATTUNE_PLANNER_GPU")
                                               or None, gate_rules=self.settings.get("ATTUNE_GATE_RULES") or None,
                                               cpu="cpu" in (self.settings.get("ATTUNE_POD_HOOKS") or "").split())
        return self.spaces[run]

    def name_of(self, lever: str, parent: str, change: list) -> str:
        """The space's name for a candidate's change (matched by its diff against the parent)."""
        try:
            levers = self.space_of(parent, self.recipe_text(parent))
        except OSError:
            levers = []
        wanted = _canon(change)
        parent_recipe = None
        for item in levers:
            for alt in list(item.alternatives) + [a for a, _ in item.rejected]:
                if alt.child is None:
                    continue
                if parent_recipe is None:
                    parent_recipe = space_mod.as_recipe(self.recipe_text(parent))
                if _canon(space_mod.diff(parent_recipe, alt.child)) == wanted:
                    return alt.name
        return "change:" + wanted

    def measured(self, run: str, tokens) -> policy.Measured:
        if run not in self.metrics:
            step = reserved = allocated = None
            code, data, _out, _err = self.verb("metrics", "runs/%s/log.txt" % run, "--json")
            if code == 0 and data:
                window = (int(self.settings.get("ATTUNE_SCORE_FIRST_STEP") or 5),
                          int(self.settings.get("ATTUNE_SCORE_LAST_STEP") or 19))
                times = [s["elapsed_ms"] for s in data.get("steps", ())
                         if window[0] <= s.get("step", 0) <= window[1] and s.get("elapsed_ms")]
                step = statistics.median(times) / 1000.0 if times else None
                mem = data.get("memory") or []
                reserved = max((m.get("max_reserved_mb") or 0 for m in mem), default=0) / 1024.0 or None
                allocated = max((m.get("max_allocated_mb") or 0 for m in mem), default=0) / 1024.0 or None
            self.metrics[run] = (step, allocated, reserved)
        step, allocated, reserved = self.metrics[run]
        return policy.Measured(tokens_per_s_per_gpu=tokens, step_s=step, max_allocated_gib=allocated,
                               max_reserved_gib=reserved)

    def history(self, status: dict) -> dict:
        """What the ledger says was tried: ``{"tried", "launches", "baseline_runs", "baseline_failures"}``."""
        rows = self.ledger()
        launches = {r["run"]: r for r in rows if r.get("kind") == "launch"}
        results = {r["run"]: r for r in rows if r.get("kind") == "result"}
        gates = {}
        for r in rows:
            if r.get("kind") == "gate":
                gates.setdefault(r["run"], []).append(r.get("verdict"))
        lessons = {}
        for r in rows:
            if r.get("kind") == "note" and str(r.get("text", "")).startswith("lesson: ") and r.get("run"):
                lessons[r["run"]] = r["text"]
        by_sha = {}
        for run, row in sorted(launches.items(), key=lambda item: item[1]["seq"]):
            by_sha.setdefault(row["recipe_sha256"], []).append(run)
        pending, repeats = {}, {}
        for item in status.get("actions", ()):
            if item.get("action") in ("confirm", "gate", "repeat") and item.get("run"):
                pending.setdefault(item["run"], set()).add(item["action"])
            if item.get("action") == "repeat" and item.get("repeat_of"):
                repeats[item["run"]] = item["repeat_of"]
        first_base = min((r for r in launches.values() if r["purpose"] == "baseline"), key=lambda r: r["seq"],
                         default=None)
        baseline_runs = tuple(by_sha.get(first_base["recipe_sha256"], ())) if first_base else ()
        baseline_failures = sum(1 for run in baseline_runs if run in results and results[run]["status"] != "finished")
        projected = {run: (row.get("projection") or {}).get("tokens_per_s_per_gpu") for run, row in launches.items()}
        tried = []
        for run, row in sorted(launches.items(), key=lambda item: item[1]["seq"]):
            if row["purpose"] != "candidate":
                continue
            parent = row.get("parent")
            hypothesis = row.get("hypothesis") or ""
            loo = hypothesis.startswith(LOO_PREFIX)
            if loo:
                name = "undo:" + hypothesis[len(LOO_PREFIX):].split(" (", 1)[0]
            else:
                name = self.name_of(row.get("lever", ""), parent, row.get("change") or [])
            runs = by_sha.get(row["recipe_sha256"], [run])
            verdicts = [v for r in runs for v in gates.get(r, ())]
            gate = "fail" if "fail" in verdicts else ("pass" if "pass" in verdicts else None)
            confirms = [r for r in runs if launches[r]["purpose"] == "confirm"]
            retried = any(launches[r]["purpose"] == "repeat" and launches[r].get("parent") == run for r in launches)
            result = results.get(run)
            failure = ((result or {}).get("failure") or {}).get("class")
            gain = None
            if run not in results:
                verdict = "running"
            elif run in pending or any(r in pending for r in runs):
                verdict = "beats"
            elif run in lessons:
                found = VERDICT_RE.search(lessons[run])
                verdict = found.group(1) if found else "rejected"
                measured = RESULT_RE.search(lessons[run])
                gain = float(measured.group(1)) / 100 if measured else None
            elif result["status"] != "finished":
                verdict = "failed"
            else:
                verdict = "rejected"
            before, after = projected.get(parent), projected.get(run)
            predicted = after / before - 1 if before and after else None
            tried.append(policy.Tried(lever=row.get("lever", ""), alternative=name, parent=parent, run=run,
                                      verdict=verdict, gain=gain, predicted_gain=predicted, failure=failure,
                                      gate=gate, confirmed=any(r in results for r in confirms), retried=retried,
                                      loo=loo, order=row["seq"], repeat_of=repeats.get(run)))
        return {"tried": tried, "launches": launches, "baseline_runs": baseline_runs,
                "baseline_failures": baseline_failures}

    def build(self, status: dict):
        """The policy's state, from ``status --json``, the ledger and the runs' records."""
        found = self.history(status)
        tried, launches = found["tried"], found["launches"]
        baseline_runs, baseline_failures = found["baseline_runs"], found["baseline_failures"]
        leader = (status.get("leader") or {}).get("run")
        band = status["band"]
        budget = status["budget"]
        hours = self.expected_hours(status)
        run_cost = hours if hours is not None else 1.0
        levers, lead_pred, predictions, lineage = [], None, {}, []
        measured = policy.Measured()
        if leader and band.get("established"):
            text = self.recipe_text(leader)
            levers = self.space_of(leader, text)
            if leader not in self.predicted:
                self.predicted[leader] = space_mod.predict(text, levers,
                                                           self.settings.get("ATTUNE_PLANNER_GPU") or None)
            lead_pred, predictions = self.predicted[leader]
            measured = self.measured(leader, (status.get("leader") or {}).get("tokens_per_s_per_gpu"))
            lineage = policy.project_lineage(self.lineage(leader, launches, tried, text),
                                             self.settings.get("ATTUNE_PLANNER_GPU") or None)
        return policy.State(
            leader=leader, leader_measured=measured, baseline_runs=baseline_runs, baseline_failures=baseline_failures,
            baseline_runs_needed=band.get("baseline_runs_needed", 0), band=band["value"],
            band_established=bool(band.get("established")), budget_left=max(0.0, budget["left"]), run_cost=run_cost,
            levers=levers, leader_prediction=lead_pred, predictions=predictions, tried=tried, lineage=lineage,
            excluded=dict(self.excluded), seed=int(self.settings.get("ATTUNE_PLANNER_SEED") or 0),
            config=policy.Config(unusable_band=float(self.settings.get("ATTUNE_PLANNER_MAX_BAND") or
                                                     policy.Config().unusable_band)),
            moe=("--num-experts" in space_mod.as_recipe(self.recipe_text(leader)).args()) if levers else None)

    def lineage(self, leader: str, launches: dict, tried: list, leader_text: str) -> list:
        """The changes from the baseline to the leader, each with the change that removes it from the leader."""
        by_run = {t.run: t for t in tried}
        chain, run, seen = [], leader, set()
        while run in launches and launches[run]["purpose"] == "candidate" and run not in seen:
            seen.add(run)
            chain.append(run)
            run = launches[run].get("parent")
        chain.reverse()
        leader_recipe = space_mod.as_recipe(leader_text)
        baseline = space_mod.as_recipe(self.baseline_text)
        out = []
        for run in chain:
            row, item = launches[run], by_run.get(run)
            name = item.alternative if item else run
            try:
                undo = space_mod.leave_one_out(leader_recipe, self.recipe_text(row["parent"]), self.recipe_text(run),
                                               row.get("lever", ""), "undo:" + name, baseline,
                                               gpu=self.settings.get("ATTUNE_PLANNER_GPU") or None,
                                               gate_rules=self.settings.get("ATTUNE_GATE_RULES") or None)
            except OSError:  # a recipe missing from runs/: no leave-one-out candidate
                undo = None
            out.append(policy.Change(lever=row.get("lever", ""), alternative=name, run=run, undo=undo,
                                     gain=item.gain if item else None, removed=self.removed(row["parent"], run)))
        return out

    def removed(self, parent: str, run: str) -> tuple:
        """The arguments and variables ``run``'s recipe took out of its parent's."""
        try:
            before, after = (space_mod.as_recipe(self.recipe_text(r)) for r in (parent, run))
        except OSError:
            return ()
        gone = [name for name in before.args() if name not in after.args()]
        return tuple(gone + [name for name in before.env() if name not in after.env()])

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

    def lesson_text(self, tried: policy.Tried, verdict: str) -> str:
        """The lesson's sentence: the setup (model, GPUs, layout) and what to do differently next time."""
        layout = _layout(space_mod.as_recipe(self.recipe_text(tried.parent)))
        hardware = self.settings.get("ATTUNE_PLANNER_GPU") or _hardware(self.recipe_text(tried.parent))
        predicted = "the projection predicted %s" % _pct(tried.predicted_gain) if tried.predicted_gain is not None \
            else "no projection"
        if tried.loo:
            name = tried.alternative[len("undo:"):]
            advice = {"kept": "removing %s from the final stack was faster: the stack is better without it" % name,
                      "hurt": "removing %s from the final stack cost throughput: it pulls its weight there" % name,
                      "rejected": "removing %s did not lose beyond its interval: it does not pull its weight in "
                                  "the final stack" % name}[verdict]
            return "%s on %s: leave-one-out against %s (%s); %s" % (layout, hardware, tried.parent, predicted, advice)
        advice = {"kept": "it passed the leader test against its parent and the gate: keep it, and try it early on a "
                          "similar model and cluster",
                  "hurt": "its parent beat it by the leader test, or it failed: avoid it at this layout",
                  "rejected": "it was not conclusive (or failed the gate): spend no run on it at this layout "
                              "unless the bottleneck it addresses grows"}[verdict]
        text = "%s on %s: %s against %s (%s); %s" % (layout, hardware, tried.alternative, tried.parent, predicted,
                                                     advice)
        if tried.failure:
            text += "; the run failed with %s" % tried.failure
        return text

    def settle_lessons(self, status: dict, final: bool = False) -> None:
        """One lesson per finalized candidate, once nothing is left to do on it (gate, confirmation, rerun)."""
        rows = self.ledger()
        have = {r.get("run") for r in rows if r.get("kind") == "note" and str(r.get("text", "")).startswith("lesson: ")}
        finalized = {r.get("run") for r in rows if r.get("kind") == "result"}
        todo = [r["run"] for r in rows if r.get("kind") == "launch" and r.get("purpose") == "candidate"
                and r["run"] in finalized and r["run"] not in have]
        if not todo:
            return
        for t in self.history(status)["tried"]:
            if t.run not in todo or t.verdict == "running" or (t.verdict == "beats" and not final):
                continue  # (at the end, a gated winner the budget could not confirm gets its lesson too)
            if t.verdict == "failed" and t.failure in policy.Config().retry_classes and not t.retried and not final:
                continue
            if t.run in self.no_lesson:
                continue
            code, data, _out, err = self.verb("lesson", t.run, "--text", self.lesson_text(t, "rejected"), "--json",
                                              "--dry-run")
            if code != 0:  # e.g. never measured (unschedulable): no lesson; asked once per session
                self.no_lesson.add(t.run)
                self.event("lesson", run=t.run, skipped=err.strip()[:160])
                continue
            found = VERDICT_RE.search(data["lesson"])
            verdict = found.group(1) if found else "rejected"
            code, data, _out, err = self.verb("lesson", t.run, "--text", self.lesson_text(t, verdict), "--json")
            if code == 0:
                self.event("lesson", run=t.run, lever=t.lever, change=t.alternative, verdict=verdict)
            else:
                self.event("lesson", run=t.run, skipped=err.strip()[:160])

    # ---------------------------------------------------------------- actions
    def do(self, action: policy.Action, status: dict, state: policy.State) -> None:
        key = (action.kind, action.run, action.lever, action.alternative.name if action.alternative else None)
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
            code, data, _out, err = self.verb("gate", "--run", action.run, "--json")
            if code not in (0, 1):
                raise PlannerError("gate %s: %s" % (action.run, err.strip()))
            reasons = (data or {}).get("reasons") or []
            self.event("gate", run=action.run, verdict=(data or {}).get("verdict"), reasons="; ".join(reasons)[:200])
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
        wanted = _canon(space_mod.diff(space_mod.as_recipe(self.recipe_text(leader)), child))
        for path in sorted((self.dir / "runs").glob("*/candidate.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if record.get("parent") == leader and record.get("lever") == alt.lever and \
                    _canon(record.get("change")) == wanted:
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
        run = data["run"]
        self.candidates += 1
        for item in data.get("gate_config", {}).get("reasons") or ():
            self.event("warning", run=run, text=item)
        self.event("candidate", run=run, lever=alt.lever, change=alt.describe(), why=action.why)
        if self.fault and self.fault[0] == "after-candidate" and self.candidates >= self.fault[1]:
            self.write_notes()
            os.kill(os.getpid(), signal.SIGKILL)
        if data.get("gate_config", {}).get("reasons"):
            self.must("note", "planner: candidate %s not launched: the gate would fail it" % run, "--run", run,
                      "--json")
            self.excluded[alt.key] = "the gate would fail it"
            return
        run = self.launch(run, status=status)
        self.follow(run)

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
            reason, leader.get("run"), _fmt(leader.get("tokens_per_s_per_gpu")), _pct(leader.get("vs_baseline")),
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
                   budget_left=budget["left"], layout=_layout(space_mod.as_recipe(self.baseline_text)))
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
        self.log_lines.append("%s integrity violation: %s; nothing more is launched" % (_now(), why[:300]))
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


# ------------------------------------------------------------------------------------------ helpers
def _fmt(value) -> str:
    return "%.1f" % value if isinstance(value, (int, float)) else "-"


def _pct(value) -> str:
    return "%+.2f%%" % (100 * value) if isinstance(value, (int, float)) else "-"


def _canon(change) -> str:
    items = []
    for record in change or ():
        if "arg" in record:
            items.append("%s %s=%s" % (record.get("op"), record["arg"], record.get("value")))
        elif "env" in record:
            items.append("%s %s=%s" % (record.get("op"), record["env"], record.get("value")))
    return ",".join(sorted(items))


def _describe(change) -> str:
    if not change:
        return None
    out = []
    for record in change:
        name = record.get("arg") or record.get("env")
        out.append("%s%s" % (name, "" if record.get("op") == "unset" else "=%s" % record.get("value"))
                   if record.get("op") == "set" else "unset %s" % name)
    return ", ".join(out)


def _hardware(text: str) -> str:
    return space_mod.as_recipe(text).env().get("ATTUNE_SIM_HARDWARE") or "GPU"


def _layout(recipe) -> str:
    a = recipe.args()

    def get(flag, default="1"):
        value = a.get(flag)
        return default if value is None else ("on" if value is True else str(value))
    model = "%s layers, hidden %s%s" % (get("--num-layers", "?"), get("--hidden-size", "?"),
                                        ", %s experts" % a["--num-experts"] if "--num-experts" in a else "")
    recompute = a.get("--recompute-granularity")
    if recompute == "full":
        recompute = "full/%s/%s" % (a.get("--recompute-method"), a.get("--recompute-num-layers"))
    parts = ["%s on %d GPUs" % (model, recipe.gpus()), "TP %s%s" % (get("--tensor-model-parallel-size"),
                                                                    "+SP" if "--sequence-parallel" in a else ""),
             "PP %s" % get("--pipeline-model-parallel-size")]
    if "--num-layers-per-virtual-pipeline-stage" in a:
        parts.append("%s layers per virtual stage" % a["--num-layers-per-virtual-pipeline-stage"])
    parts += ["CP %s" % get("--context-parallel-size"), "EP %s" % get("--expert-model-parallel-size"),
              "MBS %s" % get("--micro-batch-size"), "GBS %s" % get("--global-batch-size", "?"),
              "recompute %s" % (recompute or "none"),
              "overlap %s" % ("/".join(n for f, n in (("--overlap-grad-reduce", "grad"),
                                                     ("--overlap-param-gather", "param"),
                                                     ("--tp-comm-overlap", "tp")) if f in a) or "none")]
    return ", ".join(parts)


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
