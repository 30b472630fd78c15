"""From per-rank numbers to a short, ranked diagnosis: what costs the most GPU time, its evidence in one
line, and the levers that address it (their names in ``skill/references/levers.md``), and, apart, the
facts that are not GPU time (memory, the analysis window).

Every bottleneck is scored by the share of GPU time at stake (of the span analyzed, averaged over
ranks), and only those at or above ``MIN_SHARE`` are listed, largest first. Idle time is split by cause
(``analyze.idle_attribution``); exposed communication by the parallelism its collective serves.
"""

from __future__ import annotations

from typing import Optional

from .analyze import KERNEL_WAIT_US

MIN_SHARE = 0.02
MEMORY_LOW, MEMORY_HIGH = 0.60, 0.92
STRAGGLER_SPREAD = 0.05

# Bottleneck -> levers, by name (the lever catalog's ids; its evidence sections in brackets). An empty list: no
# lever in the catalog addresses it; the evidence says where to look.
LEVERS = {
    "exposed_tp_communication": ["tp-comm-overlap", "sequence-parallel", "tensor-parallel-size"],  # D5 A3 A2
    "exposed_dp_communication": ["overlap-grad-reduce", "overlap-param-gather", "ddp-bucket-size",
                                 "distributed-optimizer"],  # D1 D2 D3 C6
    "exposed_all_to_all": ["moe-a2a-overlap", "token-dispatcher", "expert-parallel-size"],  # D7 E1 A8
    "exposed_pipeline_communication": ["virtual-pipeline", "pipeline-parallel-size"],  # A5 A4
    "exposed_cp_communication": ["context-parallel-size"],  # A6
    "exposed_communication": ["overlap-grad-reduce", "overlap-param-gather", "tp-comm-overlap",
                              "ddp-bucket-size"],
    "pipeline_bubble": ["virtual-pipeline", "micro-batch-size", "pipeline-parallel-size", "uneven-pipeline"],
    "host_bound_launching": ["cuda-graphs", "manual-gc", "micro-batch-size"],  # G1 G2 B1
    "host_synchronization": [],
    "dataloader_wait": [],
    "peer_wait": ["manual-gc", "cuda-device-max-connections"],  # G2 G3; and the other ranks' health
    "kernel_wait": ["elementwise-fusions", "cuda-graphs"],  # fewer, back-to-back kernels
    "unexplained_idle": [],
    "stragglers": ["cuda-device-max-connections", "high-priority-nccl-streams"],  # G3 G8; and node health
    # facts, not ranked: memory
    "memory_headroom": ["micro-batch-size", "selective-recompute", "full-recompute"],  # B1 C1 C2
    "memory_pressure": ["selective-recompute", "distributed-optimizer", "activation-offload"],  # C1 C6 C3
}

# The parallelism a collective serves -> the bottleneck its exposed time is.
_FAMILY_BOTTLENECK = {"tensor_parallel": "exposed_tp_communication", "data_parallel": "exposed_dp_communication",
                      "expert": "exposed_all_to_all", "pipeline": "exposed_pipeline_communication",
                      "context_parallel": "exposed_cp_communication", None: "exposed_communication"}
_FAMILY_WORDS = {"tensor_parallel": "tensor-parallel", "data_parallel": "data-parallel", "expert": "expert-parallel",
                 "pipeline": "pipeline", "context_parallel": "context-parallel", None: "unattributed"}

# Idle cause (analyze.IDLE_CAUSES) -> bottleneck.
_IDLE_BOTTLENECK = {"host_launch": "host_bound_launching", "synchronization": "host_synchronization",
                    "dataloader": "dataloader_wait", "peer_wait": "peer_wait"}


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def collective_family(label: str, group: Optional[str], parallel: Optional[dict]) -> tuple:
    """(family, basis): the parallelism a collective's kernels serve. The process group's Megatron-LM name
    decides when the trace records it; otherwise all-to-all is expert dispatch and send/recv pipeline
    traffic; otherwise the recipe's layout, where it leaves one choice; otherwise unattributed."""
    if group and group != "unknown":
        return group, "its process group"
    if label == "all_to_all":
        return "expert", "the collective (all-to-all)"
    if label == "send_recv":
        return "pipeline", "the collective (send/recv)"
    if parallel:
        tp, dp = parallel.get("tp", 1), parallel.get("dp") or 1
        if label in ("all_gather", "reduce_scatter") and tp > 1 and parallel.get("sequence_parallel") and dp <= 1:
            return "tensor_parallel", "the layout (sequence parallel, no data parallel)"
        if label in ("all_reduce", "all_gather", "reduce_scatter") and tp > 1 and dp <= 1:
            return "tensor_parallel", "the layout (TP %d, no data parallel)" % tp
        if label in ("all_reduce", "all_gather", "reduce_scatter", "broadcast") and dp > 1 and tp <= 1:
            return "data_parallel", "the layout (DP %d, no tensor parallel)" % dp
    return None, "neither its process group nor the layout says which parallelism it serves"


def duration_text(us: Optional[float]) -> str:
    """A duration as the text outputs write it: microseconds below one millisecond, else milliseconds."""
    if us is None:
        return "?"
    return "%.1f ms" % (us / 1000.0) if abs(us) >= 1000 else "%.0f us" % us


_ms = duration_text


def _communication(ranks: list, parallel: Optional[dict]) -> list:
    groups = {}
    n = len(ranks)
    for r in ranks:
        span = r["temporal_breakdown"]["kernel_time_us"]
        if not span:
            continue
        for label, c in r["communication"]["by_collective"].items():
            parts = c.get("exposed_us_by_group") or {"unknown": c["exposed_us"]}
            for group, exposed in parts.items():
                family, basis = collective_family(label, group, parallel)
                entry = groups.setdefault(_FAMILY_BOTTLENECK[family], {"family": family, "collectives": {}})
                item = entry["collectives"].setdefault(label, {"share": 0.0, "exposed_us": 0.0, "total_us": 0.0,
                                                               "kernels": 0, "basis": basis})
                item["share"] += exposed / span / n
                item["exposed_us"] += exposed / n
                if item["total_us"] is not None:  # a collective split over process groups: its total is not
                    item["total_us"] = item["total_us"] + c["total_us"] / n if len(parts) == 1 else None
                item["kernels"] += c["kernels"]
    overlap = _mean([r["communication"]["overlap_pctg"] for r in ranks])
    span = _mean([r["temporal_breakdown"]["kernel_time_us"] for r in ranks]) or 0.0
    found = []
    for bottleneck, entry in groups.items():
        share = sum(item["share"] for item in entry["collectives"].values())
        ordered = sorted(entry["collectives"].items(), key=lambda kv: -kv[1]["exposed_us"])
        text = "; ".join("%s exposed %s%s (%d kernels) while no computation ran" % (
            label, _ms(item["exposed_us"]), "" if item["total_us"] is None else " of its %s" % _ms(item["total_us"]),
            item["kernels"]) for label, item in ordered[:3])
        text += " over a %s span%s; %s communication by %s; overlap with computation %s%%" % (
            _ms(span), " (mean of %d ranks)" % n if n > 1 else "", _FAMILY_WORDS[entry["family"]],
            ordered[0][1]["basis"], "n/a" if overlap is None else "%.1f" % overlap)
        found.append({"bottleneck": bottleneck, "family": _FAMILY_WORDS[entry["family"]], "share": round(share, 4),
                      "evidence": {"exposed_share_by_collective": {k: round(v["share"], 4) for k, v in ordered},
                                   "exposed_us_by_collective": {k: round(v["exposed_us"], 1) for k, v in ordered},
                                   "overlap_pctg_mean": overlap},
                      "evidence_text": text, "levers": LEVERS[bottleneck]})
    return found


def _idle(ranks: list, parallel: Optional[dict]) -> list:
    n = len(ranks)
    spans = [r["gpu_idle"]["span_us"] for r in ranks if r["gpu_idle"].get("span_us")]
    if not spans:
        return []
    span = sum(spans) / len(spans)
    causes = {}
    for r in ranks:
        idle = r["gpu_idle"]
        if not idle.get("span_us"):
            continue
        for cause, us in idle["attribution_us"].items():
            causes[cause] = causes.get(cause, 0.0) + us / idle["span_us"] / n
    idle_share = _mean([r["gpu_idle"]["idle_us"] / r["gpu_idle"]["span_us"] for r in ranks
                        if r["gpu_idle"].get("span_us")])
    delay = _mean([(r["launches"].get("launch_delay_us") or {}).get("p90") for r in ranks])
    short = _mean([r["launches"].get("short_kernel_fraction") for r in ranks])
    where = "of a %s span%s, GPU idle %.1f%% in all" % (_ms(span), " (mean of %d ranks)" % n if n > 1 else "",
                                                         100 * (idle_share or 0.0))
    found = []
    for cause, bottleneck in _IDLE_BOTTLENECK.items():
        share = causes.get(cause, 0.0)
        evidence = {"share_of_span": round(share, 4), "gpu_idle_share": round(idle_share or 0.0, 4)}
        if cause == "host_launch":
            late = [r["gpu_idle"].get("host_launch_late_us") for r in ranks if r["gpu_idle"].get("host_launch_late_us")]
            late_p50 = _mean([x["p50"] for x in late])
            evidence.update({"launch_delay_p90_us": delay, "short_kernel_fraction": short,
                             "host_launch_gaps": sum(x["gaps"] for x in late), "launched_late_p50_us": late_p50})
            text = ("%.1f%% %s: %d gaps the next kernel was launched into after the GPU had gone idle (median %s "
                    "after), the launching thread busy elsewhere; over all kernels launch delay p90 %s (where the CPU "
                    "runs ahead), short kernels %s" % (
                        100 * share, where, evidence["host_launch_gaps"], "n/a" if late_p50 is None else _ms(late_p50),
                        "n/a" if delay is None else _ms(delay), "n/a" if short is None else "%.0f%%" % (100 * short)))
        elif cause == "synchronization":
            text = ("%.1f%% %s: gaps after the host blocked in a synchronizing call (cudaStreamSynchronize, "
                    "cudaEventSynchronize, a synchronous copy, .item()) that drained the GPU's queue, or while it was "
                    "still in a copy call the queued work waited behind (a copy from pageable memory); no catalog "
                    "lever: find the call in the trace (logging or checks that read GPU values each step, unpinned "
                    "host buffers)" % (100 * share, where))
        elif cause == "dataloader":
            text = ("%.1f%% %s: the launching thread was fetching the next batch (DataLoader, get_batch); no "
                    "catalog lever: more loader workers or prefetching" % (100 * share, where))
        else:
            text = ("%.1f%% %s: the launching thread waited on other ranks outside a GPU collective (a barrier, "
                    "gloo, the store): a slower rank, see stragglers" % (100 * share, where))
        found.append({"bottleneck": bottleneck, "family": "host", "share": round(share, 4), "evidence": evidence,
                      "evidence_text": text, "levers": LEVERS[bottleneck]})
    wait = causes.get("kernel_wait", 0.0)
    found.append({"bottleneck": "kernel_wait", "family": "gpu", "share": round(wait, 4),
                  "evidence": {"share_of_span": round(wait, 4), "gpu_idle_share": round(idle_share or 0.0, 4)},
                  "evidence_text": "%.1f%% %s: gaps under %d us between kernels the GPU already had queued (the device's "
                                   "own latency from one kernel to the next); fewer, larger kernels remove them"
                                   % (100 * wait, where, KERNEL_WAIT_US),
                  "levers": LEVERS["kernel_wait"]})
    queued, unexplained = causes.get("queued", 0.0), causes.get("unexplained", 0.0)
    pp = (parallel or {}).get("pp")
    if pp and pp > 1:
        ideal = parallel.get("ideal_bubble")
        found.append({"bottleneck": "pipeline_bubble", "family": "pipeline", "share": round(queued, 4),
                      "evidence": {"queued_idle_share": round(queued, 4), "ideal_bubble_fraction": ideal, "pp": pp,
                                   "vp": parallel.get("vp"), "micro_batches": parallel.get("micro_batches")},
                      "evidence_text": "%.1f%% %s: the GPU had the next work queued and waited (PP %d, VP %s, %s "
                                       "micro-batches: ideal 1F1B bubble %s)" % (
                                           100 * queued, where, pp, parallel.get("vp"), parallel.get("micro_batches"),
                                           "n/a" if ideal is None else "%.1f%%" % (100 * ideal)),
                      "levers": LEVERS["pipeline_bubble"]})
        queued = 0.0
    if queued + unexplained > 0:
        found.append({"bottleneck": "unexplained_idle", "family": "unexplained", "share": round(queued + unexplained, 4),
                      "evidence": {"queued_idle_share": round(queued, 4), "no_launch_record_share": round(unexplained, 4)},
                      "evidence_text": "%.1f%% %s not explained by the host: %.1f%% with the next work already queued "
                                       "(a pipeline peer, a cross-stream event, work the trace does not show%s), %.1f%% "
                                       "ended by work with no launch record" % (
                                           100 * (queued + unexplained), where, 100 * queued,
                                           "; with a pipeline layout, give --recipe" if not parallel else "",
                                           100 * unexplained),
                      "levers": []})
    return found


def diagnose(ranks: list, aggregate: dict, parallel: Optional[dict] = None) -> list:
    """Ranked bottlenecks by GPU time at stake: ``[{"bottleneck", "family", "share", "evidence",
    "evidence_text", "levers"}]``."""
    if not any(r["temporal_breakdown"]["kernel_time_us"] for r in ranks):
        return []
    found = _communication(ranks, parallel) + _idle(ranks, parallel)
    spread = aggregate.get("stragglers", {}).get("step_time_spread_max")
    if spread is not None and spread > STRAGGLER_SPREAD:
        counts = aggregate["stragglers"].get("slowest_rank_counts") or {}
        worst = max(counts, key=counts.get) if counts else None
        found.append({"bottleneck": "stragglers", "family": "cluster", "share": round(spread, 4),
                      "evidence": aggregate["stragglers"],
                      "evidence_text": "step times differ across ranks by up to %.1f%% of the median (per step "
                                       "number, not by clock); slowest most often: rank %s" % (100 * spread, worst),
                      "levers": LEVERS["stragglers"]})
    found = [f for f in found if f["share"] >= MIN_SHARE]
    found.sort(key=lambda f: (-f["share"], f["bottleneck"]))
    return found


def facts(ranks: list) -> list:
    """What is not GPU time at stake and so not ranked: memory, and how the window was chosen."""
    out = []
    fractions = [r["memory"]["peak_fraction"] for r in ranks if r.get("memory") and r["memory"].get("peak_fraction")]
    if fractions:
        peak = max(fractions)
        name = "memory_headroom" if peak < MEMORY_LOW else "memory_pressure" if peak > MEMORY_HIGH else "memory"
        words = {"memory_headroom": "below %.0f%%: room for a larger micro-batch or less recompute" % (100 * MEMORY_LOW),
                 "memory_pressure": "above %.0f%%: close to out of memory" % (100 * MEMORY_HIGH),
                 "memory": "between %.0f%% and %.0f%%" % (100 * MEMORY_LOW, 100 * MEMORY_HIGH)}[name]
        out.append({"fact": name, "value": peak, "text": "peak memory allocated %.1f%% of the GPU's memory (largest "
                                                         "over ranks, from [memory] events), %s" % (100 * peak, words),
                    "levers": LEVERS.get(name, [])})
    outside = sum(r["gpu_idle"].get("activities_outside_window", 0) for r in ranks)
    windows = sorted({r["window"] for r in ranks})
    out.append({"fact": "window", "value": outside,
                "text": "%s; idle is attributed over all GPU activity inside that span (%d activities launched "
                        "outside the window ran in it)" % ("; ".join(windows), outside), "levers": []})
    return out
