"""``attune diagnose RUN``: what bounds a run's step time, from every source the campaign has, in a stated order.

The sources, in the order their bottlenecks are listed (a measured one before a projected one):

1. ``profile``: the profile analyzer's diagnosis of the traces of a finished profile run of RUN's recipe
   (``launch --profile-of``): GPU time at stake per bottleneck, measured;
2. ``timers``: the last timer block of RUN's log (Megatron-LM's ``forward-backward``, ``all-grads-sync``,
   ``params-all-gather``, ``optimizer``, ``batch-generator`` ...), each as a share of the median step, measured;
3. ``projection``: the analytic projection of RUN's recipe on its GPU (``--gpu``, or the recipe's
   ``ATTUNE_SIM_HARDWARE``): exposed communication per parallelism, the pipeline bubble, and compute,
   each as a share of the projected step; a model, labelled ``projected``;
4. ``triage``: the failure classes of the campaign's failed runs, which rule levers out at this shape;
5. ``catalog``: the levers of every bottleneck (``profile_analyzer.diagnose.LEVERS``) that the campaign's
   ``levers.md`` has, and apart (``levers_in_recipe``) those whose switches RUN's recipe already sets.

The memory fact (peak allocated against the GPU's memory) comes from the log's memory report, else from the
projection. Every source says whether it was used and, when not, why; the answer always names a top
bottleneck, ``unknown`` only when neither a measurement nor the projection is available.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from attune.campaign import candidates, logview, runs as runs_mod
from attune.core import levers as levers_mod, logparse
from attune.core.errors import AttuneError, InputError
from attune.core.recipe import Recipe
from attune.profile_analyzer.diagnose import LEVERS, MEMORY_HIGH, MEMORY_LOW, MIN_SHARE

ORDER = ("profile", "timers", "projection", "triage", "catalog")

# Megatron-LM's timer names -> the bottleneck their time is (the share of the median step they take); a timer not
# listed is compute or bookkeeping, not a bottleneck of its own
TIMER_BOTTLENECK = {
    "all-grads-sync": "exposed_dp_communication",
    "params-all-gather": "exposed_dp_communication",
    "embedding-grads-all-reduce": "exposed_pipeline_communication",
    "forward-send": "exposed_pipeline_communication", "backward-send": "exposed_pipeline_communication",
    "forward-recv": "exposed_pipeline_communication", "backward-recv": "exposed_pipeline_communication",
    "forward-send-backward-recv": "exposed_pipeline_communication",
    "backward-send-forward-recv": "exposed_pipeline_communication",
    "batch-generator": "dataloader_wait",
    "optimizer": "optimizer_step",
}
# the projection's exposed communication per parallelism -> bottleneck
PROJECTED_BOTTLENECK = {"tp": "exposed_tp_communication", "cp": "exposed_cp_communication",
                        "ep": "exposed_all_to_all", "pp": "exposed_pipeline_communication",
                        "dp": "exposed_dp_communication"}
EXTRA_LEVERS = {"optimizer_step": ["distributed-optimizer"], "compute": ["fp8-training", "selective-recompute",
                                                                          "micro-batch-size"]}


def _levers(bottleneck: str) -> list:
    return list(LEVERS.get(bottleneck, EXTRA_LEVERS.get(bottleneck, [])))


def _profile(campaign, settings, run: str, launches: dict) -> tuple:
    """(bottlenecks, facts, source) from the newest finished profile run of ``run``'s recipe."""
    sha = launches[run].get("recipe_sha256")
    profiles = [r for r in launches.values() if r.get("purpose") == "profile" and r.get("recipe_sha256") == sha]
    if not profiles:
        return [], [], {"used": False, "why": "no profile run of this recipe (`attune launch --profile-of %s`, where "
                                             "the workload writes torch.profiler traces)" % run}
    from attune.profile_analyzer import profile as profile_mod
    why = []
    for row in reversed(profiles):
        try:
            traces = [str(path) for path in runs_mod.traces(campaign, settings, row["run"])]
            result = profile_mod.run(traces, None, str(campaign.run_dir(row["run"]) / "recipe.yaml"))
        except (AttuneError, OSError, ValueError) as exc:
            why.append("%s: %s" % (row["run"], exc))
            continue
        found = [dict(item, source="profile", measured=True) for item in result["diagnosis"]]
        return found, result.get("facts") or [], {"used": True, "run": row["run"], "bottlenecks": len(found)}
    return [], [], {"used": False, "why": "; ".join(why)}


def _timer_ms(value) -> Optional[float]:
    if isinstance(value, (list, tuple)) and value:
        return float(max(value))  # min/max over ranks: the slowest rank's
    return float(value) if isinstance(value, (int, float)) else None


def _timers(parsed: dict, step_ms: Optional[float]) -> tuple:
    training = [block for block in parsed.get("timers") or ()
                if set(block.get("values") or ()) & (set(TIMER_BOTTLENECK) | {"forward-backward"})]
    if not training:
        return [], {"used": False, "why": "the log has no training timer block: Megatron-LM prints forward-backward, "
                                          "all-grads-sync, optimizer ... only with --timing-log-level 1 or more (its "
                                          "start-up timers do not time a step)"}
    if not step_ms:
        return [], {"used": False, "why": "the log has timers but no timed step to take shares of"}
    shares = {}
    values = training[-1].get("values") or {}
    for name, value in values.items():
        bottleneck = TIMER_BOTTLENECK.get(name)
        ms = _timer_ms(value)
        if bottleneck and ms is not None:
            shares.setdefault(bottleneck, []).append((name, ms))
    found = []
    for bottleneck, items in shares.items():
        total = sum(ms for _, ms in items)
        share = total / step_ms
        if share >= MIN_SHARE:
            found.append({"bottleneck": bottleneck, "share": round(share, 4), "source": "timers", "measured": True,
                          "evidence_text": "%s: %s of a %.1f ms median step" % (
                              bottleneck, ", ".join("%s %.1f ms" % item for item in items), step_ms),
                          "levers": _levers(bottleneck)})
    return found, {"used": True, "timers": sorted(values), "step_ms": step_ms}


def _projection(recipe: Recipe, gpu: Optional[str]) -> tuple:
    hardware = gpu or recipe.env().get("ATTUNE_SIM_HARDWARE")
    if not hardware:
        return [], None, {"used": False, "why": "no GPU model: give --gpu MODEL (h100, b200, ...)"}
    try:
        out = candidates.projected_full(recipe, hardware)
    except InputError as exc:
        return [], None, {"used": False, "why": str(exc)}
    if out is None:
        return [], None, {"used": False, "why": "the projection times a pretraining step, not this workload's "
                                                "(slime's rollout, log-probs and training)"}
    time_ = out["time"]
    step = time_["step_s"]
    parts = [(PROJECTED_BOTTLENECK[kind], seconds, "exposed %s communication %.3f s" % (kind.upper(), seconds))
             for kind, seconds in time_["exposed_s"].items()]
    parts.append(("pipeline_bubble", time_["bubble_s"], "pipeline bubble %.3f s" % time_["bubble_s"]))
    parts.append(("compute", time_["compute_s"], "compute %.3f s (%s)" % (time_["compute_s"], ", ".join(
        "%s %.3f" % item for item in time_["parts_s"].items()))))
    found = []
    for bottleneck, seconds, text in parts:
        share = seconds / step if step > 0 else 0.0
        if share >= MIN_SHARE:
            found.append({"bottleneck": bottleneck, "share": round(share, 4), "source": "projection",
                          "measured": False, "evidence_text": "projected on %s: %s of a %.3f s step" % (
                              out["hardware"], text, step), "levers": _levers(bottleneck)})
    found.sort(key=lambda item: (item["bottleneck"] == "compute", -item["share"]))  # what a lever can remove first
    error = (out.get("params") or {}).get("loo_median_abs_error_pct")
    return found, out, {"used": True, "hardware": out["hardware"], "step_s": step,
                        "tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"], "loo_median_abs_error_pct": error}


def _memory(parsed: Optional[dict], projection: Optional[dict]) -> Optional[dict]:
    hbm = (projection or {}).get("memory", {}).get("hbm_gib")
    reports = (parsed or {}).get("memory") or []
    peak = max((float(m.get("max_allocated_mb") or 0) for m in reports), default=0.0) / 1024.0
    if peak and hbm:
        source, used = "log", peak
    elif projection is not None:
        source, used = "projection", projection["memory"]["total_gib"]
    else:
        return None
    if not hbm:
        return {"source": source, "max_allocated_gib": round(used, 2), "hbm_gib": None, "fact": None, "levers": []}
    fraction = used / hbm
    fact = "memory_pressure" if fraction > MEMORY_HIGH else "memory_headroom" if fraction < MEMORY_LOW else None
    return {"source": source, "max_allocated_gib": round(used, 2), "hbm_gib": hbm, "fraction": round(fraction, 3),
            "fact": fact, "levers": _levers(fact) if fact else []}


def diagnose(campaign, settings, run: str, gpu: Optional[str] = None) -> dict:
    """The diagnosis of ``run`` (module docstring): ``{"run", "order", "sources", "bottlenecks", "top", "memory",
    "failures"}``."""
    launches = {row["run"]: row for row in campaign.ledger.rows() if row.get("kind") == "launch"}
    if run not in launches:
        raise InputError("the ledger has no launch of run %s. Fix: give a run id from `attune status`" % run)
    run_dir = campaign.run_dir(run)
    recipe = Recipe.load(run_dir / "recipe.yaml")
    sources = {}
    found, facts, sources["profile"] = _profile(campaign, settings, run, launches)
    log = run_dir / "log.txt"
    parsed = logparse.parse_file(log) if log.is_file() else None
    step_ms = None
    if parsed is not None:  # the step time as ranking scores it: the median of the scoring window
        step_ms = logview.window(parsed)["median_step_ms"]
        if step_ms is None:  # a log short of the window: every timed step of its last run
            timed = [s["elapsed_ms"] for s in logparse.last_run(parsed)[0] if isinstance(s.get("elapsed_ms"), float)]
            step_ms = statistics.median(timed) if timed else None
        more, sources["timers"] = _timers(parsed, step_ms)
        found += more
    else:
        sources["timers"] = {"used": False, "why": "no log at %s (has the run started?)" % log}
    projected, projection, sources["projection"] = _projection(recipe, gpu)
    found += projected
    failures = [{"run": r["run"], "class": (r.get("failure") or {}).get("class")}
                for r in campaign.ledger.rows() if r.get("kind") == "result" and r.get("failure")]
    sources["triage"] = {"used": bool(failures), "failures": len(failures)} if failures else \
        {"used": False, "why": "no run of the campaign has failed"}
    catalog_path, catalog_text = levers_mod.campaign_catalog(campaign.dir)
    known = set(levers_mod.catalog_ids(catalog_path, catalog_text))
    flags = {entry["id"]: entry for entry in levers_mod.parse(catalog_text)}
    args = recipe.args()
    for item in found:  # a switch the recipe already has is no lever to try: listed apart
        item["levers_in_recipe"] = [lever for lever in item["levers"] if lever in flags and
                                    _sets_all(flags[lever], args)]
        item["levers"] = [lever for lever in item["levers"] if lever in known and lever not in item["levers_in_recipe"]]
    sources["catalog"] = {"used": True, "path": str(catalog_path)}
    top = found[0] if found else {"bottleneck": "unknown", "share": None, "source": None, "measured": False,
                                  "evidence_text": "no profile, no timers and no projection: %s" % "; ".join(
                                      "%s: %s" % (name, sources[name].get("why")) for name in ORDER[:3]),
                                  "levers": [lever for lever in ("overlap-grad-reduce", "overlap-param-gather")
                                             if lever in known and not _sets_all(flags.get(lever, {}), args)],
                                  "levers_in_recipe": [lever for lever in ("overlap-grad-reduce", "overlap-param-gather")
                                                       if _sets_all(flags.get(lever, {}), args)]}
    return {"run": run, "order": list(ORDER), "sources": sources, "bottlenecks": found, "top": top,
            "memory": _memory(parsed, projection), "facts": facts, "failures": failures}


def _sets_all(entry: dict, args: dict) -> bool:
    """Whether the recipe already has every switch the lever's catalog entry names: its flags are all boolean and all
    set (a lever with a value, TP size or micro-batch size, is never used up; nor one set by environment)."""
    names = entry.get("flags") or []
    return bool(names) and all(args.get(flag) is True for flag in names)


def text(result: dict) -> str:
    lines = ["run: %s" % result["run"]]
    for name in result["order"]:
        source = result["sources"][name]
        lines.append("source %s: %s" % (name, "used" if source.get("used") else "not used (%s)" % source.get("why")))
    top = result["top"]
    lines.append("top: %s%s (%s)" % (top["bottleneck"], "" if top["share"] is None else " %.1f%%" % (
        top["share"] * 100), top["source"] or "no source"))
    for item in result["bottlenecks"]:
        lines.append("bottleneck: %s %.1f%% [%s%s]" % (item["bottleneck"], item["share"] * 100, item["source"],
                                                       "" if item["measured"] else ", projected"))
        lines.append("  evidence: %s" % item["evidence_text"])
        lines.append("  levers: %s" % (", ".join(item["levers"]) or "none in the catalog"))
        if item["levers_in_recipe"]:
            lines.append("  already in the recipe: %s" % ", ".join(item["levers_in_recipe"]))
    memory = result["memory"]
    if memory:
        lines.append("memory: %.1f GiB of %s GiB (%s)%s" % (
            memory["max_allocated_gib"], memory["hbm_gib"], memory["source"],
            "; %s (levers: %s)" % (memory["fact"], ", ".join(memory["levers"])) if memory.get("fact") else ""))
    for failure in result["failures"]:
        lines.append("failed: %s %s" % (failure["run"], failure["class"]))
    return "\n".join(lines)
