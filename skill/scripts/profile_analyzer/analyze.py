"""Per-rank and aggregated numbers from collected traces (``collect.RankTrace``).

The temporal breakdown and the communication/computation overlap follow HolisticTraceAnalysis
0.5.0 exactly (README.md, "What it computes"), so the two can be compared: the same kernel classes, the same
window (GPU work launched before the last ``ProfilerStep`` starts, when the trace has two or more),
the same rounding of fractional-microsecond timestamps, the same percentages of the span from the
first kept GPU activity to the last. Everything else (per-step numbers, exposed time per
collective, launch delays, host waits, memory, stragglers) is ATTUNE's, defined where it is computed.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from . import intervals as iv
from .collect import CLASS_NAMES, COMM, COMPUTE, RankTrace, kernel_class

# HTA's launch calls (get_cuda_kernel_launch_stats) and the others a trace may hold (driver API, HIP).
HTA_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
LAUNCHES = HTA_LAUNCHES + ("cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
                           "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipMemcpyAsync",
                           "hipMemsetAsync", "hipGraphLaunch")
SHORT_KERNEL_RUNTIME_US = 50.0  # HTA runtime_cutoff
LAUNCH_DELAY_OUTLIER_US = 100.0  # HTA launch_delay_cutoff
KERNEL_WAIT_US = 30.0  # HTA consecutive_kernel_delay (compared with microseconds)
TOP_KERNELS = 10


class Timeline(object):
    """A rank's GPU activities as numpy arrays, with HTA's rounding applied when it applies."""

    def __init__(self, trace: RankTrace, step_name_count: int):
        ts = np.frombuffer(trace.ts, dtype=float) if len(trace.ts) else np.zeros(0)
        dur = np.frombuffer(trace.dur, dtype=float) if len(trace.dur) else np.zeros(0)
        self.rounded = trace.float_ts
        if self.rounded:  # HTA: ts = ceil(ts), end = floor(ts + dur) when any timestamp is fractional
            self.start, self.end = np.ceil(ts), np.floor(ts + dur)
        else:
            self.start, self.end = ts.copy(), ts + dur
        self.stream = np.frombuffer(trace.stream, dtype=np.int64) if len(trace.stream) else np.zeros(0, np.int64)
        self.cls = np.frombuffer(trace.cls, dtype=np.int8) if len(trace.cls) else np.zeros(0, np.int8)
        self.corr = np.frombuffer(trace.corr, dtype=np.int64) if len(trace.corr) else np.zeros(0, np.int64)
        self.coll = np.frombuffer(trace.coll, dtype=np.int8) if len(trace.coll) else np.zeros(0, np.int8)
        self.name = np.frombuffer(trace.name, dtype=np.int64) if len(trace.name) else np.zeros(0, np.int64)
        self.trace = trace
        launches = trace.launches
        self.launch = launches.find(self.corr)  # index of each activity's launch call, -1 when none
        found = self.launch >= 0
        self.launch_ts = np.where(found, launches.column("ts")[np.clip(self.launch, 0, None)], np.nan) \
            if self.launch.size else np.zeros(0)
        self.launch_dur = np.where(found, launches.column("dur")[np.clip(self.launch, 0, None)], np.nan) \
            if self.launch.size else np.zeros(0)
        self.launch_name = np.where(found, launches.column("name")[np.clip(self.launch, 0, None)], -1) \
            if self.launch.size else np.zeros(0, np.int64)
        self.launch_ts_rounded = np.ceil(self.launch_ts) if self.rounded else self.launch_ts
        self.window_rule = "every GPU activity (fewer than two ProfilerStep names in the trace set)"
        keep = self.stream != -1
        if step_name_count >= 2 and trace.step_starts:
            last_start = max(trace.step_starts)
            if self.rounded:
                last_start = math.ceil(last_start)
            with np.errstate(invalid="ignore"):
                keep &= (self.corr >= 0) & (self.launch_ts_rounded < last_start)
            self.window_rule = "GPU activity launched before the last ProfilerStep starts (as HTA)"
        self.keep = keep
        self.launch_step = self._launch_steps()
        if trace.selected_steps is not None:
            first, last = trace.selected_steps
            self.keep = self.keep & (self.launch_step >= first) & (self.launch_step <= last)
            self.window_rule = "GPU activity launched in ProfilerStep#%d-%d" % (first, last)

    def _launch_steps(self) -> np.ndarray:
        """The ProfilerStep each activity was launched in (its launch call's start), -1 when none."""
        steps = sorted(self.trace.steps.items(), key=lambda item: item[1][0])
        out = np.full(self.start.size, -1, dtype=np.int64)
        if not steps or not self.start.size:
            return out
        when = np.where(np.isnan(self.launch_ts), np.frombuffer(self.trace.ts, dtype=float), self.launch_ts)
        starts = np.array([span[0] for _n, span in steps])
        ends = np.array([span[0] + span[1] for _n, span in steps])
        numbers = np.array([n for n, _span in steps])
        index = np.searchsorted(starts, when, side="right") - 1
        valid = (index >= 0) & (when < ends[np.clip(index, 0, None)])
        out[valid] = numbers[index[valid]]
        return out

    def merged(self, mask) -> tuple:
        return iv.union(self.start[mask], self.end[mask])


def _pct(part: float, whole: float) -> Optional[float]:
    return round(100.0 * part / whole, 2) if whole > 0 else None


def temporal_breakdown(t: Timeline) -> dict:
    """HTA's get_temporal_breakdown for one rank, in microseconds and percent of the kept span."""
    k = t.keep
    if not k.any():
        return {"kernel_time_us": 0.0, "idle_time_us": 0.0, "compute_time_us": 0.0, "non_compute_time_us": 0.0,
                "idle_pctg": None, "compute_pctg": None, "non_compute_pctg": None}
    span = float(t.end[k].max() - t.start[k].min())
    busy = iv.length(t.merged(k))
    compute = iv.length(t.merged(k & (t.cls == COMPUTE)))
    return {"kernel_time_us": span, "idle_time_us": span - busy, "compute_time_us": compute,
            "non_compute_time_us": busy - compute, "idle_pctg": _pct(span - busy, span),
            "compute_pctg": _pct(compute, span), "non_compute_pctg": _pct(busy - compute, span)}


def communication(t: Timeline) -> dict:
    """HTA's overlap, and ATTUNE's exposed time per collective: the time a collective runs while no
    computation runs on any stream of the GPU."""
    k = t.keep
    comp = t.merged(k & (t.cls == COMPUTE))
    comm_mask = k & (t.cls == COMM)
    comm = t.merged(comm_mask)
    comm_len = iv.length(comm)
    overlap = iv.intersection_length(comm, comp)
    per = {}
    for index, label in enumerate(t.trace.collectives):
        mask = comm_mask & (t.coll == index)
        if not mask.any():
            continue
        merged = t.merged(mask)
        total = iv.length(merged)
        exposed = iv.union_length(merged, comp) - iv.length(comp)
        entry = per.setdefault(label, {"kernels": 0, "total_us": 0.0, "exposed_us": 0.0})
        entry["kernels"] += int(mask.sum())
        entry["total_us"] += total
        entry["exposed_us"] += exposed
    exposed_all = iv.union_length(comm, comp) - iv.length(comp)
    return {"overlap_pctg": _pct(overlap, comm_len), "total_us": comm_len, "exposed_us": exposed_all,
            "by_collective": dict(sorted(per.items(), key=lambda item: -item[1]["exposed_us"]))}


def relabel_all_to_all(trace: RankTrace) -> None:
    """SendRecv kernels launched inside a CPU ``nccl:all_to_all`` annotation implement all-to-all."""
    if not trace.nccl_annotations or "send_recv" not in trace.collectives:
        return
    if "all_to_all" not in trace.collectives:
        trace.collectives.append("all_to_all")
    send_recv, a2a = trace.collectives.index("send_recv"), trace.collectives.index("all_to_all")
    spans = sorted((ts, end, tid) for tid, ts, end, label in trace.nccl_annotations if label == "all_to_all")
    if not spans:
        return
    starts = np.array([s for s, _e, _t in spans])
    coll = np.frombuffer(trace.coll, dtype=np.int8)
    candidates = np.nonzero(coll == send_recv)[0]
    index = trace.launches.find(np.frombuffer(trace.corr, dtype=np.int64)[candidates])
    l_ts, l_tid = trace.launches.column("ts"), trace.launches.column("tid")
    for i, li in zip(candidates, index):
        if li < 0:
            continue
        when, tid = l_ts[li], l_tid[li]
        j = int(np.searchsorted(starts, when, side="right")) - 1
        while j >= 0:
            if when <= spans[j][1] and spans[j][2] in (tid, -1):
                trace.coll[i] = a2a
                break
            j -= 1


def steps(t: Timeline) -> list:
    """Per ProfilerStep: its CPU duration, and on the GPU the span, busy and idle time of the work
    launched in it, and its communication left exposed."""
    out = []
    for number, (ts, dur) in sorted(t.trace.steps.items()):
        mask = (t.launch_step == number) & (t.stream != -1)
        if t.trace.selected_steps is not None and not (t.trace.selected_steps[0] <= number <= t.trace.selected_steps[1]):
            continue
        row = {"step": number, "step_time_us": dur}
        if mask.any():
            span = float(t.end[mask].max() - t.start[mask].min())
            busy = iv.length(t.merged(mask))
            comp = t.merged(mask & (t.cls == COMPUTE))
            comm = t.merged(mask & (t.cls == COMM))
            row.update({"gpu_span_us": span, "gpu_busy_us": busy, "gpu_idle_us": span - busy,
                        "gpu_idle_fraction": round((span - busy) / span, 4) if span > 0 else None,
                        "exposed_comm_us": iv.union_length(comm, comp) - iv.length(comp)})
        out.append(row)
    return out


def launches(t: Timeline) -> dict:
    """CPU launch call against GPU activity, by correlation id: launch delay and short kernels."""
    trace = t.trace
    names = np.array([n in LAUNCHES for n in trace.launches.names] + [False], dtype=bool)
    sel = t.keep & (t.launch >= 0)
    sel &= names[np.where(t.launch_name >= 0, t.launch_name, len(names) - 1)]
    if not sel.any():
        return {"matched": 0}
    cpu_ts, cpu_dur = t.launch_ts[sel], t.launch_dur[sel]
    raw_ts = np.frombuffer(trace.ts, dtype=float)
    raw_dur = np.frombuffer(trace.dur, dtype=float)
    gpu_start, gpu_dur = raw_ts[sel], raw_dur[sel]
    delay = np.maximum(0.0, gpu_start - cpu_ts - cpu_dur)
    short = (cpu_dur <= SHORT_KERNEL_RUNTIME_US) & (gpu_dur < cpu_dur)
    q = np.percentile(delay, [50, 90, 99])
    return {"matched": int(cpu_ts.size), "short_kernels": int(short.sum()),
            "short_kernel_fraction": round(float(short.mean()), 4),
            "short_kernel_gpu_us": float(gpu_dur[short].sum()),
            "launch_delay_us": {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]), "max": float(delay.max())},
            "launch_delay_outliers": int((delay > LAUNCH_DELAY_OUTLIER_US).sum()),
            "runtime_outliers": int((cpu_dur > SHORT_KERNEL_RUNTIME_US).sum())}


def host_waits(t: Timeline) -> dict:
    """HTA's idle-time breakdown, summed over streams (for comparison: a stream's gap counts even
    while other streams run; ``gpu_idle_gaps`` is the GPU-wide view): a gap on a stream is a host wait
    when the next activity's launch call started after the previous activity ended (the GPU waited
    for the CPU), a kernel wait when shorter than 30 µs, other otherwise."""
    totals = {"host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_wait_us": 0.0}
    for stream in np.unique(t.stream[t.keep]):
        idx = np.nonzero(t.keep & (t.stream == stream))[0]
        idx = idx[np.argsort(t.start[idx], kind="stable")]
        if idx.size < 2:
            continue
        prev_end = t.end[idx[:-1]]
        gap = t.start[idx[1:]] - prev_end
        runtime = t.launch_ts_rounded[idx[1:]]
        with np.errstate(invalid="ignore"):
            host = runtime > prev_end
        kernel = ~host & (gap < KERNEL_WAIT_US)
        totals["host_wait_us"] += float(gap[host].sum())
        totals["kernel_wait_us"] += float(gap[kernel].sum())
        totals["other_wait_us"] += float(gap[~host & ~kernel].sum())
    return totals


def gpu_idle_gaps(t: Timeline) -> dict:
    """The gaps in which no stream of the GPU runs anything, and how much of that idle time the host
    caused: a gap counts as host-bound when the activity that ends it was launched (its launch call
    started) after the gap began, so the GPU had nothing queued."""
    idx = np.nonzero(t.keep)[0]
    out = {"gaps": 0, "idle_us": 0.0, "host_bound_gaps": 0, "host_bound_us": 0.0}
    if idx.size < 2:
        return out
    idx = idx[np.argsort(t.start[idx], kind="stable")]
    start, end = t.start[idx], np.maximum.accumulate(t.end[idx])
    new = np.zeros(idx.size, dtype=bool)
    new[1:] = start[1:] > end[:-1]
    first = np.nonzero(new)[0]  # the activity that ends each gap
    if not first.size:
        return out
    gap_start, gap = end[first - 1], start[first] - end[first - 1]
    runtime = t.launch_ts_rounded[idx[first]]
    with np.errstate(invalid="ignore"):
        host = runtime > gap_start
    out.update({"gaps": int(first.size), "idle_us": float(gap.sum()), "host_bound_gaps": int(host.sum()),
                "host_bound_us": float(gap[host].sum())})
    return out


def top_kernels(t: Timeline, n: int = TOP_KERNELS) -> list:
    k = np.nonzero(t.keep)[0]
    if not k.size:
        return []
    total = np.bincount(t.name[k], weights=(t.end[k] - t.start[k]), minlength=len(t.trace.names))
    count = np.bincount(t.name[k], minlength=len(t.trace.names))
    busy = iv.length(t.merged(t.keep)) or 1.0
    order = np.argsort(-total)[:n]
    return [{"name": t.trace.names[i][:160], "class": CLASS_NAMES[kernel_class(t.trace.names[i])], "count": int(count[i]),
             "total_us": float(total[i]), "share_of_busy": round(float(total[i]) / busy, 4)}
            for i in order if count[i]]


def rank_summary(trace: RankTrace, step_name_count: int) -> dict:
    relabel_all_to_all(trace)
    t = Timeline(trace, step_name_count)
    memory = None
    if trace.peak_allocated is not None:
        memory = {"peak_allocated_bytes": trace.peak_allocated, "device_memory_bytes": trace.device_memory,
                  "peak_fraction": round(trace.peak_allocated / trace.device_memory, 4) if trace.device_memory else None}
    return {"rank": trace.rank, "file": str(trace.path), "events": trace.events, "gpu_activities": trace.kernels,
            "window": t.window_rule, "timestamps_rounded": t.rounded,
            "temporal_breakdown": temporal_breakdown(t), "communication": communication(t), "steps": steps(t),
            "launches": launches(t), "gpu_idle": gpu_idle_gaps(t), "idle_breakdown": host_waits(t),
            "top_kernels": top_kernels(t),
            "memory": memory, "truncated": trace.truncated, "warnings": list(trace.warnings)}
