"""What the planner knows was tried: each candidate's lever, change, verdict and measurement, rebuilt from the
ledger, ``status --json`` and ``runs/*/candidate.json`` at every step, for ``Planner``."""

from __future__ import annotations

import statistics

from attune.planner import policy, space as space_mod

LOO_PREFIX = "Leave-one-out of "


def canon(change) -> str:
    items = []
    for record in change or ():
        if "arg" in record:
            items.append("%s %s=%s" % (record.get("op"), record["arg"], record.get("value")))
        elif "env" in record:
            items.append("%s %s=%s" % (record.get("op"), record["env"], record.get("value")))
    return ",".join(sorted(items))


def describe(change) -> str:
    if not change:
        return None
    out = []
    for record in change:
        name = record.get("arg") or record.get("env")
        out.append("%s%s" % (name, "" if record.get("op") == "unset" else "=%s" % record.get("value"))
                   if record.get("op") == "set" else "unset %s" % name)
    return ", ".join(out)


class History(object):
    """The state the policy decides on, for ``Planner``."""

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
        wanted = canon(change)
        parent_recipe = None
        for item in levers:
            for alt in list(item.alternatives) + [a for a, _ in item.rejected]:
                if alt.child is None:
                    continue
                if parent_recipe is None:
                    parent_recipe = space_mod.as_recipe(self.recipe_text(parent))
                if canon(space_mod.diff(parent_recipe, alt.child)) == wanted:
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
        lessons = {r["run"]: r for r in rows if r.get("kind") == "lesson"}
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
        # the leader's lineage (its run and its ancestors): a candidate run alongside one of them, against the
        # same parent, that finished without leading lost the lead to that sibling, not to its own measurement
        lineage, at = set(), (status.get("leader") or {}).get("run")
        while at and at not in lineage and at in launches:
            lineage.add(at)
            at = launches[at].get("parent")
        ended = {run: row["seq"] for run, row in results.items()}
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
                verdict, gain = lessons[run]["verdict"], lessons[run].get("gain")
            elif result["status"] != "finished":
                verdict = "failed"
            else:
                verdict = "rejected"
            if verdict == "rejected" and run not in lineage and any(
                    other in lineage and other != run and launches[other]["purpose"] == "candidate"
                    and launches[other].get("parent") == parent
                    and launches[other]["seq"] < ended.get(run, 0) and row["seq"] < ended.get(other, 10 ** 12)
                    for other in launches):
                verdict = "superseded"
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
