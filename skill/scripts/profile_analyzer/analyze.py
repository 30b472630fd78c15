"""Per-rank and aggregated numbers from collected traces (``collect.RankTrace``).

The temporal breakdown and the communication/computation overlap follow HolisticTraceAnalysis
0.5.0 exactly (README.md, "What it computes"), so the two can be compared: the same kernel classes, the same
window (GPU work launched before the last ``ProfilerStep`` starts, when the trace has two or more),
the same rounding of fractional-microsecond timestamps, the same percentages of the span from the
first kept GPU activity to the last. Everything else (per-step numbers, exposed time per
collective, launch delays, host waits, memory, stragglers) is ATTUNE's, defined where it is computed.
"""

from __future__ import annotations

import heapq
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
    family = np.full(t.coll.size, -1, dtype=np.int8)
    families = []
    for i, desc in t.trace.comm_groups.items():
        name = _group_family(desc)
        if name is not None:
            if name not in families:
                families.append(name)
            family[i] = families.index(name)
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
        if families and (family[mask] >= 0).any():  # the process groups the kernels ran in (Megatron-LM's names)
            split = {}
            for fi in np.unique(family[mask]):
                part = mask & (family == fi)
                split[families[fi] if fi >= 0 else "unknown"] = iv.union_length(t.merged(part), comp) - iv.length(comp)
            entry["exposed_us_by_group"] = split
    exposed_all = iv.union_length(comm, comp) - iv.length(comp)
    return {"overlap_pctg": _pct(overlap, comm_len), "total_us": comm_len, "exposed_us": exposed_all,
            "by_collective": dict(sorted(per.items(), key=lambda item: -item[1]["exposed_us"]))}


GENERIC_LABELS = ("send_recv", "other")  # kernel names that do not say which collective they run (NCCL 2.12-2.18)


def _group_family(desc: Optional[str]) -> Optional[str]:
    """The parallelism a Megatron-LM process group serves, from its description (parallel_state.py's
    group_desc: TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP, EXPERT_MODEL_PARALLEL_GROUP, ...)."""
    if not desc:
        return None
    text = desc.upper()
    for needle, family in (("EXPERT_DATA", "data_parallel"), ("EXPERT", "expert"), ("PIPELINE", "pipeline"),
                           ("EMBEDDING", "pipeline"), ("CONTEXT", "context_parallel"),
                           ("TENSOR_AND", None), ("TENSOR", "tensor_parallel"), ("DATA_PARALLEL", "data_parallel"),
                           ("DISTRIBUTED_OPTIMIZER", "data_parallel")):
        if needle in text:
            return family
    return None


def relabel_collectives(trace: RankTrace) -> None:
    """Each communication kernel's collective from the CPU span its launch call ran in (the innermost
    ``nccl:<collective>`` annotation, ``c10d::<collective>`` op or ``record_param_comms`` op on the launching
    thread) where the kernel's name does not say it: NCCL 2.12 to 2.18 names the kernels of several collectives
    ``ncclKernel_SendRecv_*``. A span naming send or recv keeps the kernel as point-to-point. The process group
    the span names, when it does, is kept per kernel (``trace.comm_groups``) for the lever family."""
    coll = np.frombuffer(trace.coll, dtype=np.int8) if len(trace.coll) else np.zeros(0, np.int8)
    trace.comm_groups = {}
    if not trace.nccl_annotations or not coll.size:
        return
    pg_desc = {}
    for pg in (trace.metadata.get("distributedInfo") or {}).get("pg_config") or []:
        if isinstance(pg, dict) and pg.get("pg_name") is not None:
            pg_desc[str(pg["pg_name"])] = pg.get("pg_desc")
    by_tid = {}
    for tid, ts, end, label, desc in trace.nccl_annotations:
        by_tid.setdefault(tid, []).append((ts, end, label, pg_desc.get(desc, desc) if desc else None))
    tables = {}
    for tid, spans in by_tid.items():
        spans.sort(key=lambda item: item[0])
        starts = np.array([item[0] for item in spans])
        reach = np.maximum.accumulate(np.array([item[1] for item in spans]))  # the latest end so far
        tables[tid] = (spans, starts, reach)
    comm = np.nonzero(coll >= 0)[0]
    index = trace.launches.find(np.frombuffer(trace.corr, dtype=np.int64)[comm])
    l_ts, l_tid = trace.launches.column("ts"), trace.launches.column("tid")
    for i, li in zip(comm, index):
        if li < 0:
            continue
        when, tid = l_ts[li], int(l_tid[li])
        label, desc = _enclosing(tables.get(tid), when) or _enclosing(tables.get(-1), when) or (None, None)
        if desc == "default_pg" and trace.ddp:
            # every rank, in a model torch DDP replicates: its collectives are the data-parallel ones
            desc = "default_pg under torch DistributedDataParallel: DATA_PARALLEL"
        if desc:
            trace.comm_groups[int(i)] = desc
        if label is None or trace.collectives[coll[i]] not in GENERIC_LABELS or label in GENERIC_LABELS:
            continue
        if label not in trace.collectives:
            trace.collectives.append(label)
        trace.coll[i] = trace.collectives.index(label)


def _enclosing(table, when: float):
    """(collective, group) of the innermost span of ``table`` holding ``when`` that names a collective."""
    if table is None:
        return None
    spans, starts, reach = table
    j = int(np.searchsorted(starts, when, side="right")) - 1
    found = None
    while j >= 0 and reach[j] >= when:  # no span before j ends after ``when`` once the running latest end is past
        ts, end, label, desc = spans[j]
        if ts <= when <= end:
            if found is None:
                found = [label, desc]
            elif found[1] is None and desc:
                found[1] = desc  # an outer record_param_comms may name the group the inner annotation does not
            if found[1] is not None:
                break
        j -= 1
    return tuple(found) if found else None


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
    while other streams run; ``idle_attribution`` is the GPU-wide view): a gap on a stream is a host wait
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


IDLE_CAUSES = ("host_launch", "synchronization", "dataloader", "peer_wait", "kernel_wait", "queued")


def idle_attribution(t: Timeline) -> dict:
    """Every idle microsecond of the span, attributed. The span is HTA's (from the first kept GPU activity's
    start to the last one's end), but busy time here counts every GPU activity inside it, also work launched
    in a step the window leaves out, which still runs in the span when the GPU trails the CPU. Each gap in
    which no stream runs anything is attributed by the activity that ends it and its launch call:

    * launched after the gap began, or its launch call still running when it began (nothing was queued: the
      host caused the gap), split by what the launching thread was doing in the gap: ``peer_wait`` for the
      time it spent in a barrier or another wait on other ranks outside a GPU collective, ``dataloader`` for
      the time it spent fetching the batch; the rest ``synchronization`` when the thread had been blocked in a
      synchronizing call (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize, a synchronous
      copy, ``.item()``) that returned after the GPU went idle (it drained the queue), else ``host_launch``;
    * queued before the gap began, or no launch call recorded: the time a copy call was still running on
      any host thread is ``synchronization`` (a copy from pageable memory blocks the stream while the host
      stages it); the rest, when the launch is recorded, under ``KERNEL_WAIT_US`` (HTA's kernel wait)
      ``kernel_wait``, the device's own latency between back-to-back kernels, and longer ``queued``: the GPU
      had the work and did not run it, waiting on something the trace does not show here (a pipeline peer, a
      cross-stream event); with no launch record, ``unexplained``.

    The parts add up to the idle time exactly."""
    out = {"span_us": 0.0, "busy_us": 0.0, "idle_us": 0.0, "gaps": 0, "host_bound_gaps": 0, "host_bound_us": 0.0,
           "attribution_us": {name: 0.0 for name in IDLE_CAUSES + ("unexplained",)}, "largest_gaps": [],
           "activities_outside_window": 0,
           "basis": "every GPU activity inside the span of the kept window (HTA's span)"}
    k = t.keep
    if not k.any():
        return out
    lo, hi = float(t.start[k].min()), float(t.end[k].max())
    inside = (t.stream != -1) & (t.end > lo) & (t.start < hi)
    out["activities_outside_window"] = int((inside & ~k).sum())
    idx = np.nonzero(inside)[0]
    idx = idx[np.argsort(t.start[idx], kind="stable")]
    start, end = np.maximum(t.start[idx], lo), np.minimum(np.maximum.accumulate(t.end[idx]), hi)
    busy = iv.length(iv.union(start, np.minimum(t.end[idx], hi)))
    out.update({"span_us": hi - lo, "busy_us": busy, "idle_us": (hi - lo) - busy})
    new = np.zeros(idx.size, dtype=bool)
    new[1:] = start[1:] > end[:-1]
    first = np.nonzero(new)[0]
    if not first.size:
        return out
    gap_start, gap_end = end[first - 1], start[first]
    ending = idx[first]
    launch = t.launch[ending]
    l_tid = t.trace.launches.column("tid")
    spans = _thread_spans(t.trace)
    parts = out["attribution_us"]
    largest, late = [], []
    for g0, g1, act, li in zip(gap_start.tolist(), gap_end.tolist(), ending.tolist(), launch.tolist()):
        length_us = float(g1 - g0)
        split = {}
        recorded = li >= 0 and bool(np.isfinite(t.launch_ts[act]))
        call_start = float(t.launch_ts_rounded[act]) if recorded else None
        if not recorded or (call_start <= g0 and float(t.launch_ts[act] + t.launch_dur[act]) <= g0):
            # the GPU had the work (or no launch record says otherwise) and did not run it: the time a copy call
            # was still running on the host (a copy from pageable memory blocks the stream while the host stages
            # it) is that copy's; the rest the device's kernel wait, queued, or unexplained
            covered, _left = _take([(g0, g1)], spans.get("*", {}).get("copy"))
            if covered:
                split["synchronization"] = covered
            if length_us - covered > 0:
                split["unexplained" if not recorded else "kernel_wait" if length_us < KERNEL_WAIT_US
                      else "queued"] = length_us - covered
        else:
            thread = spans.get(int(l_tid[li]), {})
            left = [(g0, g1)]
            for kind in ("peer_wait", "dataloader"):
                covered, left = _take(left, thread.get(kind))
                if covered:
                    split[kind] = covered
            rest = sum(b - a for a, b in left)
            if rest > 0:
                sync = thread.get("sync")
                drained = sync is not None and _any_overlap(sync, g0 - 1.0, g1, ends_after=g0)
                split["synchronization" if drained else "host_launch"] = rest
                if not drained:
                    late.append(max(0.0, call_start - g0))
        for name, value in split.items():
            parts[name] += value
        host = sum(v for name, v in split.items() if name not in ("kernel_wait", "queued", "unexplained"))
        if host > 0:
            out["host_bound_gaps"] += 1
            out["host_bound_us"] += host
        if len(largest) < 5:  # the five largest gaps, kept as they come (a trace can hold millions of gaps)
            heapq.heappush(largest, (length_us, -g0, split))
        elif length_us > largest[0][0]:
            heapq.heapreplace(largest, (length_us, -g0, split))
    out["gaps"] = int(first.size)
    if late:  # how long after the GPU went idle the host launched the work that ended a host_launch gap
        q = np.percentile(np.array(late), [50, 90])
        out["host_launch_late_us"] = {"gaps": len(late), "p50": float(q[0]), "p90": float(q[1])}
    out["host_bound_us"] = float(out["host_bound_us"])
    for name in parts:
        parts[name] = float(parts[name])
    largest.sort(key=lambda item: (-item[0], -item[1]))
    out["largest_gaps"] = [{"start_us": -neg_g0, "idle_us": length_us,
                            "cause": max(split, key=split.get), "parts_us": split}
                           for length_us, neg_g0, split in largest]
    return out


def _thread_spans(trace: RankTrace) -> dict:
    """tid -> kind -> merged (starts, ends) of the CPU spans collect.py kept (sync calls, dataloader, peer waits)."""
    if trace.thread_spans is not None:
        return trace.thread_spans
    out = {}
    for kind, spans in trace.cpu_spans.items():
        by_tid = {}
        for tid, ts, end in spans:
            by_tid.setdefault(tid, ([], []))
            by_tid[tid][0].append(ts)
            by_tid[tid][1].append(end)
        for tid, (starts, ends) in by_tid.items():
            out.setdefault(tid, {})[kind] = iv.union(starts, ends)
        if spans:  # "*": every thread's
            out.setdefault("*", {})[kind] = iv.union([span[1] for span in spans], [span[2] for span in spans])
    trace.thread_spans = out
    return out


def _take(pieces: list, merged) -> tuple:
    """(time of ``pieces`` covered by ``merged``, the pieces left uncovered)."""
    if merged is None or not merged[0].size:
        return 0.0, pieces
    starts, ends = merged
    covered, left = 0.0, []
    for a, b in pieces:
        j = int(np.searchsorted(ends, a, side="right"))
        cursor = a
        while j < starts.size and starts[j] < b:
            s0, e0 = max(starts[j], cursor), min(ends[j], b)
            if e0 > s0:
                if s0 > cursor:
                    left.append((cursor, s0))
                covered += e0 - s0
                cursor = e0
            j += 1
        if cursor < b:
            left.append((cursor, b))
    return covered, left


def _any_overlap(merged, lo: float, hi: float, ends_after: float) -> bool:
    """Whether a merged span starts before ``hi`` and ends after both ``lo`` and ``ends_after``."""
    starts, ends = merged
    j = int(np.searchsorted(ends, max(lo, ends_after), side="left"))
    return j < starts.size and starts[j] < hi


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
    relabel_collectives(trace)
    t = Timeline(trace, step_name_count)
    memory = None
    if trace.peak_allocated is not None:
        memory = {"peak_allocated_bytes": trace.peak_allocated, "device_memory_bytes": trace.device_memory,
                  "peak_fraction": round(trace.peak_allocated / trace.device_memory, 4) if trace.device_memory else None}
    return {"rank": trace.rank, "file": str(trace.path), "events": trace.events, "gpu_activities": trace.kernels,
            "window": t.window_rule, "timestamps_rounded": t.rounded,
            "temporal_breakdown": temporal_breakdown(t), "communication": communication(t), "steps": steps(t),
            "launches": launches(t), "gpu_idle": idle_attribution(t), "idle_breakdown": host_waits(t),
            "top_kernels": top_kernels(t),
            "memory": memory, "truncated": trace.truncated, "warnings": list(trace.warnings)}
