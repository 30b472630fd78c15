"""Keep, from a stream of trace events, only what the analysis needs, in compact arrays.

Per file (one rank): the GPU activities (kernels, memory copies and sets) with their start, duration,
stream, class, name and correlation id; the CPU-side launch calls with their correlation id; the
``ProfilerStep#N`` annotations; the largest memory allocated. Everything else is dropped as it is
read, so memory grows with the GPU activities kept, not with the file.
"""

from __future__ import annotations

import re
from array import array
from pathlib import Path
from typing import Optional

from .reader import TraceReader

GPU_CATEGORIES = {"kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "memcpy", "Memcpy": "memcpy",
                  "gpu_memset": "memset", "Memset": "memset"}
RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver", "Runtime", "hip_runtime")
STEP = re.compile(r"^ProfilerStep#(\d+)")
# HolisticTraceAnalysis 0.5.0's kernel classes (hta/utils/utils.py get_kernel_type, applied with re.match),
# so that the temporal breakdown and the overlap compare with its numbers.
COMMUNICATION = re.compile(r"^nccl.*Kernel")
MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
COMPUTE, COMM, MEM, OTHER = 0, 1, 2, 3
CLASS_NAMES = ("computation", "communication", "memory", "other")
_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)

# Collective of a communication kernel, from its name (NCCL >= 2.19 ncclDevKernel_<Coll>_..., older
# ncclKernel_<Coll>_..., RCCL) or from the "Collective name" argument Kineto adds.
_COLLECTIVES = (("allreduce", "all_reduce"), ("reducescatter", "reduce_scatter"), ("allgather", "all_gather"),
                ("alltoall", "all_to_all"), ("sendrecv", "send_recv"), ("send", "send_recv"), ("recv", "send_recv"),
                ("broadcast", "broadcast"), ("reduce", "reduce"))  # first match wins, so "reduce" comes last


def kernel_class(name: str) -> int:
    if COMMUNICATION.match(name):
        return COMM
    if MEMORY.match(name):
        return MEM
    if not NOT_COMPUTE.match(name):
        return COMPUTE
    return OTHER


def collective(name: str, args: Optional[dict] = None) -> str:
    text = str(args.get("Collective name") or "") if args else ""
    for source in (text, name):
        squashed = source.lower().replace("_", "").replace("-", "").replace(" ", "")
        for needle, label in _COLLECTIVES:
            if needle in squashed:
                return label
    return "other"


_LAUNCH_CALL = re.compile(r"Launch|Memcpy|Memset|runFunction")
# CPU calls that block the host until the GPU (or a copy) finishes: the runtime's synchronizing calls, and the
# torch ops that read a GPU value on the host (``.item()``).
SYNC_CALLS = frozenset(("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                        "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
                        "cuMemcpyDtoH_v2", "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
                        "hipMemcpy", "hipMemcpyWithStream", "aten::item", "aten::_local_scalar_dense"))
# CPU spans in which the host fetches the next batch (torch's DataLoader iterator; Megatron-LM's get_batch;
# TorchRec's batch annotations), and in which it waits for other ranks outside a GPU collective (barriers, gloo,
# the rendezvous store).
DATALOADER = re.compile(r"enumerate\(DataLoader\)|DataLoader|dataloader|\bget_batch\b|## (data_load|load_batch|"
                        r"wait_for_batch) ##")
PEER_WAIT = re.compile(r"barrier|^gloo:|TCPStore|store_based")
CPU_SPAN_KINDS = ("sync", "dataloader", "peer_wait", "copy")


class Launches(object):
    """The CPU calls that launch GPU work (launch, copy and set calls), by correlation id, in arrays."""

    def __init__(self):
        self.corr, self.ts, self.dur = array("q"), array("d"), array("d")
        self.name, self.tid = array("l"), array("q")
        self.names = []
        self._frozen = None

    def __len__(self) -> int:
        return len(self.corr)

    def freeze(self) -> None:
        """Sort by correlation id (the last of a repeated id wins) for vectorized lookups."""
        import numpy as np

        corr = np.frombuffer(self.corr, dtype=np.int64) if len(self.corr) else np.zeros(0, np.int64)
        order = np.argsort(corr, kind="stable")
        self._frozen = {"corr": corr[order], "ts": (np.frombuffer(self.ts, dtype=float) if len(self.ts)
                                                     else np.zeros(0))[order],
                        "dur": (np.frombuffer(self.dur, dtype=float) if len(self.dur) else np.zeros(0))[order],
                        "name": (np.frombuffer(self.name, dtype=np.int64) if len(self.name)
                                 else np.zeros(0, np.int64))[order],
                        "tid": (np.frombuffer(self.tid, dtype=np.int64) if len(self.tid)
                                else np.zeros(0, np.int64))[order]}

    def column(self, key: str):
        if self._frozen is None:
            self.freeze()
        return self._frozen[key]

    def find(self, corrs):
        """Index (into the columns) of each correlation id's launch call, -1 where there is none."""
        import numpy as np

        sorted_corr = self.column("corr")
        corrs = np.asarray(corrs, dtype=np.int64)
        if not sorted_corr.size:
            return np.full(corrs.shape, -1, dtype=np.int64)
        pos = np.searchsorted(sorted_corr, corrs, side="right") - 1
        ok = (pos >= 0) & (sorted_corr[np.clip(pos, 0, None)] == corrs) & (corrs >= 0)
        return np.where(ok, pos, -1)


class RankTrace(object):
    """What one trace file holds for its rank."""

    def __init__(self, path):
        self.path = Path(path)
        self.rank = None
        self.world_size = None
        self.metadata = {}
        self.warnings = []
        self.truncated = False
        self.refusal = None  # why the file is not a trace (TraceReader.refusal)
        self.events = 0
        # GPU activities, one entry each
        self.ts = array("d")
        self.dur = array("d")
        self.stream = array("q")
        self.cls = array("b")
        self.name = array("l")  # index into self.names
        self.corr = array("q")  # -1 when absent
        self.coll = array("b")  # index into self.collectives (communication only; -1 otherwise)
        self.names = []
        self.collectives = []
        # CPU launch calls: correlation -> (ts, dur)
        self.launches = Launches()
        self.steps = {}  # step number -> (ts, dur), CPU ProfilerStep annotations
        self.step_names = set()  # every distinct name holding "ProfilerStep" (CPU or GPU annotation)
        self.step_starts = []  # ts of every such annotation
        self.float_ts = False  # any event with a fractional-microsecond timestamp (HTA then rounds)
        # (tid, ts, end, collective, process group description or None) of the CPU spans that name the collective
        # of the GPU work launched in them: "nccl:<collective>" annotations, c10d::<collective> ops, and
        # record_param_comms ops with a "Collective name" argument
        self.nccl_annotations = []
        self.cpu_spans = {kind: [] for kind in CPU_SPAN_KINDS}  # kind -> [(tid, ts, end)]
        self.ddp = False  # the model runs under torch's DistributedDataParallel (its annotations are in the trace)
        self.comm_groups = {}  # activity index -> process group description (analyze.relabel_collectives)
        self.thread_spans = None  # cpu_spans merged per thread (analyze._thread_spans), once
        self.peak_allocated = None  # bytes, from [memory] events
        self.device_memory = None  # bytes, the GPU's total memory from deviceProperties
        self.gpu_devices = set()
        self.selected_steps = None  # (first, last) when the caller chose a step range

    @property
    def kernels(self) -> int:
        return len(self.ts)


def _int_or(value, default: int) -> int:
    if type(value) is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def load(path, steps: Optional[tuple] = None) -> RankTrace:
    """Read one trace file into a ``RankTrace``."""
    trace = RankTrace(path)
    reader = TraceReader(path)
    name_index, coll_index, launch_index, labels = {}, {}, {}, {}
    l_corr, l_ts, l_dur, l_name, l_tid = (trace.launches.corr, trace.launches.ts, trace.launches.dur,
                                          trace.launches.name, trace.launches.tid)
    ts_a, dur_a, stream_a, cls_a, name_a, corr_a, coll_a = (trace.ts, trace.dur, trace.stream, trace.cls, trace.name,
                                                           trace.corr, trace.coll)
    step_map = trace.steps
    spans = trace.cpu_spans
    peak = None
    float_ts = False
    for chunk in reader:
        for event in chunk:
            if type(event) is not dict:
                continue
            ts = event.get("ts")
            if type(ts) is float and not float_ts and ts != int(ts):
                float_ts = True
            if event.get("ph") != "X":
                if event.get("name") == "[memory]":
                    args = event.get("args") or {}
                    value = args.get("Total Allocated")
                    if isinstance(value, (int, float)) and args.get("Device Type", 1) != 0:
                        peak = value if peak is None or value > peak else peak
                continue
            cat = event.get("cat")
            dur = event.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                continue
            kind = GPU_CATEGORIES.get(cat)
            if kind is not None:
                name = str(event.get("name", ""))
                args = event.get("args") or {}
                index = name_index.get(name)
                if index is None:
                    index = name_index[name] = len(trace.names)
                    trace.names.append(name)
                cls = kernel_class(name)
                ts_a.append(float(ts))
                dur_a.append(float(dur))
                stream = args.get("stream")
                stream_a.append(_int_or(stream, -1) if stream is not None else _int_or(event.get("tid"), -1))
                cls_a.append(cls)
                name_a.append(index)
                corr_a.append(_int_or(args.get("correlation"), -1))
                if cls == COMM:
                    key = (name, args.get("Collective name"))
                    label = labels.get(key)
                    if label is None:
                        label = labels[key] = collective(name, args)
                    ci = coll_index.get(label)
                    if ci is None:
                        ci = coll_index[label] = len(trace.collectives)
                        trace.collectives.append(label)
                    coll_a.append(ci)
                else:
                    coll_a.append(-1)
                pid = event.get("pid")
                if isinstance(pid, int):
                    trace.gpu_devices.add(pid)
            elif cat in RUNTIME_CATEGORIES:
                correlation = (event.get("args") or {}).get("correlation")
                name = event.get("name", "")
                if name in SYNC_CALLS:
                    tid = event.get("tid")
                    spans["sync"].append((tid if type(tid) is int else -1, float(ts), float(ts) + float(dur)))
                if "Memcpy" in name and dur > 0:  # a copy call: from pageable memory it blocks while the host stages it
                    tid = event.get("tid")
                    spans["copy"].append((tid if type(tid) is int else -1, float(ts), float(ts) + float(dur)))
                if type(correlation) is int and _LAUNCH_CALL.search(name):
                    li = launch_index.get(name)
                    if li is None:
                        li = launch_index[name] = len(trace.launches.names)
                        trace.launches.names.append(name)
                    l_corr.append(correlation)
                    l_ts.append(float(ts))
                    l_dur.append(float(dur))
                    l_name.append(li)
                    tid = event.get("tid")
                    l_tid.append(tid if type(tid) is int else -1)
            elif cat in ("user_annotation", "gpu_user_annotation"):
                name = str(event.get("name", ""))
                if "ProfilerStep" in name:
                    trace.step_names.add(name)
                    trace.step_starts.append(float(ts))
                    match = STEP.match(name)
                    if match and cat == "user_annotation":
                        step_map[int(match.group(1))] = (float(ts), float(dur))
                elif cat == "user_annotation" and name.startswith("nccl:"):
                    tid = event.get("tid")
                    trace.nccl_annotations.append((tid if type(tid) is int else -1, float(ts), float(ts) + float(dur),
                                                   collective(name[5:]), None))
                elif cat == "user_annotation":
                    if name.startswith("DistributedDataParallel."):
                        trace.ddp = True
                    _cpu_span(spans, event, name, ts, dur)
            elif cat == "cpu_op" or cat == "python_function":
                name = str(event.get("name", ""))
                if cat == "cpu_op" and (name.startswith("c10d::") or name == "record_param_comms"):
                    args = event.get("args") or {}
                    label = collective(name[6:]) if name.startswith("c10d::") else (
                        collective("", args) if args.get("Collective name") else "other")
                    if label != "other":
                        tid = event.get("tid")
                        desc = args.get("Process Group Description") or args.get("Process Group Name")
                        trace.nccl_annotations.append((tid if type(tid) is int else -1, float(ts),
                                                       float(ts) + float(dur), label, str(desc) if desc else None))
                if cat == "cpu_op" and name in SYNC_CALLS:
                    tid = event.get("tid")
                    spans["sync"].append((tid if type(tid) is int else -1, float(ts), float(ts) + float(dur)))
                else:
                    _cpu_span(spans, event, name, ts, dur)
    trace.float_ts = float_ts
    trace.events = reader.events_read
    trace.metadata = reader.metadata
    trace.warnings.extend(reader.warnings)
    trace.truncated = reader.truncated
    trace.refusal = reader.refusal
    trace.peak_allocated = peak
    _identify(trace)
    if steps is not None:
        first, last = steps
        trace.selected_steps = (first, last)
        if not any(first <= n <= last for n in trace.steps):
            trace.warnings.append("%s: no ProfilerStep#%d..%d in this trace" % (trace.path, first, last))
    return trace


def _cpu_span(spans: dict, event: dict, name: str, ts, dur) -> None:
    kind = "dataloader" if DATALOADER.search(name) else "peer_wait" if PEER_WAIT.search(name) else None
    if kind is not None:
        tid = event.get("tid")
        spans[kind].append((tid if type(tid) is int else -1, float(ts), float(ts) + float(dur)))


def _identify(trace: RankTrace) -> None:
    info = trace.metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        trace.rank = info["rank"]
        trace.world_size = info.get("world_size") if isinstance(info.get("world_size"), int) else None
    else:
        match = _RANK_IN_NAME.search(trace.path.name)
        trace.rank = int(match.group(1)) if match else 0
        trace.warnings.append("%s: no distributedInfo; rank %d taken from %s" % (
            trace.path, trace.rank, "the file name" if match else "nothing (default 0)"))
    devices = trace.metadata.get("deviceProperties")
    if isinstance(devices, list) and trace.gpu_devices:
        device = min(trace.gpu_devices)
        for prop in devices:
            if isinstance(prop, dict) and prop.get("id") == device and isinstance(prop.get("totalGlobalMem"), int):
                trace.device_memory = prop["totalGlobalMem"]
