"""What the planner says: one progress line per event, ``notes.md`` (the state and a log of what it did and
why), and one lesson per tested change (``attune lesson``), for ``Planner``."""

from __future__ import annotations

import datetime
import json

from attune.core import files
from attune.planner import policy, space as space_mod


def pairs(fields: dict) -> list:
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


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt(value) -> str:
    return "%.1f" % value if isinstance(value, (int, float)) else "-"


def pct(value) -> str:
    return "%+.2f%%" % (100 * value) if isinstance(value, (int, float)) else "-"


def hardware_of(text: str) -> str:
    return space_mod.as_recipe(text).env().get("ATTUNE_SIM_HARDWARE") or "GPU"


def layout_of(recipe) -> str:
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


class Notes(object):
    """Progress lines, notes.md and lessons, for ``Planner``."""

    # ---------------------------------------------------------------- progress and notes
    def event(self, kind: str, **fields) -> None:
        """One progress line on stderr, ending with the timing fields (``progress.py``); the notes' log keeps it
        without them, after its own time stamp."""
        line = " ".join(["planner:", kind] + pairs(fields))
        print(" ".join([line] + pairs(self.clock.fields())), file=self.out, flush=True)
        self.log_lines.append("%s %s" % (now(), line[len("planner: "):]))

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
            lines += ["## Layout (baseline)", "", "- " + layout_of(space_mod.as_recipe(self.baseline_text)), ""]
        if status is not None:
            leader = status.get("leader") or {}
            band = status.get("band") or {}
            lines += ["## Leader", "",
                      "- %s: %s tokens/s/GPU (%s vs baseline); band %s, from %s; budget %s" % (
                          leader.get("run"), fmt(leader.get("tokens_per_s_per_gpu")),
                          pct(leader.get("vs_baseline")), band.get("text"), band.get("basis"),
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
                        m.step_s, fmt(m.tokens_per_s_per_gpu), fmt(m.max_reserved_gib)))
                lines.append("- shares: " + ", ".join("%s %.1f%%" % (k, 100 * v) for k, v in shares.items()))
            else:
                lines.append("- bottleneck: unknown (no projection for this recipe)")
            lines += ["", "## Tried", "", "| run | parent | lever | alternative | predicted | measured vs parent | "
                      "verdict |", "|---|---|---|---|---|---|---|"]
            for t in sorted(state.tried, key=lambda t: t.order):
                lines.append("| %s | %s | %s | %s | %s | %s | %s%s |" % (
                    t.run, t.parent, t.lever, t.alternative, pct(t.predicted_gain), pct(t.gain), t.verdict,
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
        files.write_text(path, text)

    def lesson_text(self, tried: policy.Tried, verdict: str) -> str:
        """The lesson's sentence: the setup (model, GPUs, layout) and what to do differently next time."""
        layout = layout_of(space_mod.as_recipe(self.recipe_text(tried.parent)))
        hardware = self.settings.get("ATTUNE_PLANNER_GPU") or hardware_of(self.recipe_text(tried.parent))
        predicted = "the projection predicted %s" % pct(tried.predicted_gain) if tried.predicted_gain is not None \
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
        have = {r.get("run") for r in rows if r.get("kind") == "lesson"}
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
            verdict = data["verdict"]
            code, data, _out, err = self.verb("lesson", t.run, "--text", self.lesson_text(t, verdict), "--json")
            if code == 0:
                self.event("lesson", run=t.run, lever=t.lever, change=t.alternative, verdict=verdict)
            else:
                self.event("lesson", run=t.run, skipped=err.strip()[:160])
