"""From per-rank numbers to a short, ranked diagnosis: what costs the most step time, its evidence,
and the levers that address it (their names in ``skill/references/levers.md``).

Every bottleneck is scored by the share of GPU time at stake (of the kept window, averaged over
ranks), and only those at or above ``MIN_SHARE`` are listed, largest first.
"""

from __future__ import annotations

from typing import Optional

MIN_SHARE = 0.02
MEMORY_LOW, MEMORY_HIGH = 0.60, 0.92
STRAGGLER_SPREAD = 0.05

# Bottleneck -> levers, by name (the lever catalog's ids; its evidence sections in brackets).
LEVERS = {
    "exposed_tp_communication": ["tp-comm-overlap", "sequence-parallel", "tensor-parallel-size"],  # D5 A3 A2
    "exposed_dp_communication": ["overlap-grad-reduce", "overlap-param-gather", "ddp-bucket-size",
                                 "distributed-optimizer"],  # D1 D2 D3 C6
    "exposed_all_to_all": ["moe-a2a-overlap", "token-dispatcher", "expert-parallel-size"],  # D7 E1 A8
    "exposed_pipeline_communication": ["virtual-pipeline", "pipeline-parallel-size"],  # A5 A4
    "exposed_communication": ["overlap-grad-reduce", "overlap-param-gather", "tp-comm-overlap",
                              "ddp-bucket-size"],
    "pipeline_bubble": ["virtual-pipeline", "micro-batch-size", "pipeline-parallel-size", "uneven-pipeline"],
    "host_bound_launching": ["cuda-graphs", "manual-gc", "micro-batch-size"],  # G1 G2 B1
    "memory_headroom": ["micro-batch-size", "selective-recompute", "full-recompute"],  # B1 C1 C2
    "memory_pressure": ["selective-recompute", "distributed-optimizer", "activation-offload"],  # C1 C6 C3
    "stragglers": ["cuda-device-max-connections", "high-priority-nccl-streams"],  # G3 G8; and node health
}

_GROUP_OF_COLLECTIVE = {"all_to_all": "exposed_all_to_all", "send_recv": "exposed_pipeline_communication"}


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _collective_group(label: str, parallel: Optional[dict]) -> str:
    if label in _GROUP_OF_COLLECTIVE:
        return _GROUP_OF_COLLECTIVE[label]
    if parallel:
        tp, dp = parallel.get("tp", 1), parallel.get("dp", 1)
        if label in ("all_gather", "reduce_scatter") and tp > 1 and parallel.get("sequence_parallel"):
            return "exposed_tp_communication"
        if label == "all_reduce" and tp > 1 and dp <= 1:
            return "exposed_tp_communication"
        if dp > 1 and tp <= 1:
            return "exposed_dp_communication"
    return "exposed_communication"


def diagnose(ranks: list, aggregate: dict, parallel: Optional[dict] = None) -> list:
    """Ranked bottlenecks: ``[{"bottleneck", "share", "evidence", "levers"}]``."""
    found = []
    spans = [r["temporal_breakdown"]["kernel_time_us"] for r in ranks if r["temporal_breakdown"]["kernel_time_us"]]
    if not spans:
        return []
    # exposed communication, grouped by what the collective most likely carries
    groups = {}
    for r in ranks:
        span = r["temporal_breakdown"]["kernel_time_us"]
        if not span:
            continue
        for label, c in r["communication"]["by_collective"].items():
            group = _collective_group(label, parallel)
            entry = groups.setdefault(group, {"shares": [], "collectives": {}})
            entry["collectives"].setdefault(label, []).append(c["exposed_us"] / span)
    for group, entry in groups.items():
        per_rank = {}
        for label, shares in entry["collectives"].items():
            per_rank[label] = sum(shares) / len(ranks)
        share = sum(per_rank.values())
        found.append({"bottleneck": group, "share": round(share, 4),
                      "evidence": {"exposed_share_by_collective": {k: round(v, 4) for k, v in per_rank.items()},
                                   "overlap_pctg_mean": _mean([r["communication"]["overlap_pctg"] for r in ranks])},
                      "levers": LEVERS[group]})
    host_shares = [r["gpu_idle"]["host_bound_us"] / r["temporal_breakdown"]["kernel_time_us"]
                   for r in ranks if r["temporal_breakdown"]["kernel_time_us"]]
    # pipeline bubble: GPU idle on pipeline ranks that the host did not cause (only with a pipeline)
    idle = _mean([r["temporal_breakdown"]["idle_pctg"] for r in ranks])
    if parallel and parallel.get("pp", 1) > 1 and idle is not None:
        share = max(0.0, idle / 100.0 - (_mean(host_shares) or 0.0))
        found.append({"bottleneck": "pipeline_bubble", "share": round(share, 4),
                      "evidence": {"gpu_idle_pctg_mean": idle, "ideal_bubble_fraction": parallel.get("ideal_bubble"),
                                   "pp": parallel.get("pp"), "vp": parallel.get("vp"),
                                   "micro_batches": parallel.get("micro_batches")},
                      "levers": LEVERS["pipeline_bubble"]})
    # host-bound launching: the whole GPU idle, waiting for the CPU to launch
    if host_shares:
        short = _mean([r["launches"].get("short_kernel_fraction") for r in ranks])
        found.append({"bottleneck": "host_bound_launching", "share": round(_mean(host_shares), 4),
                      "evidence": {"host_wait_share": round(_mean(host_shares), 4), "short_kernel_fraction": short,
                                   "launch_delay_p90_us": _mean([(r["launches"].get("launch_delay_us") or {}).get("p90")
                                                                 for r in ranks])},
                      "levers": LEVERS["host_bound_launching"]})
    # memory
    fractions = [r["memory"]["peak_fraction"] for r in ranks if r.get("memory") and r["memory"].get("peak_fraction")]
    if fractions:
        peak = max(fractions)
        if peak < MEMORY_LOW:
            found.append({"bottleneck": "memory_headroom", "share": round(MEMORY_LOW - peak, 4),
                          "evidence": {"peak_memory_fraction": peak}, "levers": LEVERS["memory_headroom"]})
        elif peak > MEMORY_HIGH:
            found.append({"bottleneck": "memory_pressure", "share": round(peak - MEMORY_HIGH, 4),
                          "evidence": {"peak_memory_fraction": peak}, "levers": LEVERS["memory_pressure"]})
    # stragglers
    spread = aggregate.get("stragglers", {}).get("step_time_spread_max")
    if spread is not None and spread > STRAGGLER_SPREAD:
        found.append({"bottleneck": "stragglers", "share": round(spread, 4),
                      "evidence": aggregate["stragglers"], "levers": LEVERS["stragglers"]})
    found = [f for f in found if f["share"] >= MIN_SHARE]
    found.sort(key=lambda f: -f["share"])
    return found
