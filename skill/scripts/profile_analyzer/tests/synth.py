"""Write Chrome traces in Kineto's layout for tests: CPU ProfilerStep annotations, launch calls with
correlation ids, and GPU activities on named streams. Every number is chosen by the test (SYNTHETIC)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import analyzer_paths  # noqa: F401  (puts skill/scripts on sys.path)


class Trace(object):
    def __init__(self, rank=0, world_size=2, distributed=True, device_memory=80 << 30):
        self.meta = {"schemaVersion": 1,
                     "deviceProperties": [{"id": 0, "name": "SYNTHETIC GPU", "totalGlobalMem": device_memory}]}
        if distributed:
            self.meta["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world_size}
        self.events = []
        self.corr = 0

    def step(self, number, ts, dur):
        self.events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d" % number, "pid": 100,
                            "tid": 100, "ts": ts, "dur": dur, "args": {}})

    def kernel(self, name, start, end, stream=7, launch_at=None, launch_dur=5, launch="cudaLaunchKernel",
               cat="kernel", args=None):
        """A GPU activity on ``stream`` over [start, end); launched at ``launch_at`` (None: no launch call)."""
        self.corr += 1
        extra = dict(args or {})
        extra.update({"device": 0, "stream": stream, "correlation": self.corr})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start,
                            "dur": end - start, "args": extra})
        if launch_at is not None:
            self.events.append({"ph": "X", "cat": "cuda_runtime", "name": launch, "pid": 100, "tid": 100,
                                "ts": launch_at, "dur": launch_dur, "args": {"correlation": self.corr, "cbid": 211}})
        return self.corr

    def cpu(self, name, ts, dur, cat="cpu_op", tid=100, args=None):
        """A CPU span on thread ``tid`` (the launching thread is 100): an op, an annotation, a runtime call."""
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": tid, "ts": ts, "dur": dur,
                            "args": dict(args or {})})

    def memory(self, ts, allocated):
        self.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 100,
                            "tid": 100, "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": allocated,
                                                           "Total Reserved": allocated, "Bytes": 1}})

    def text(self, layout="kineto") -> str:
        if layout == "compact":
            return json.dumps(dict(self.meta, traceEvents=self.events))
        head = json.dumps(self.meta, indent=2)[:-2]  # without the closing "\n}"
        body = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in self.events)
        return head + ',\n  "traceEvents": [\n' + body + '\n  ],\n  "traceName": "synthetic"\n}\n'

    def write(self, path, layout="kineto") -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.text(layout).encode("utf-8")
        if path.name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path


def planted(rank=0, world_size=2, offset=0.0, stretch=1.0) -> Trace:
    """Three steps; the first two are analyzed (the last is outside HTA's window). See test_synthetic.py
    for the numbers planted. ``offset`` shifts every timestamp (a skewed clock); ``stretch`` scales
    the CPU step durations (a slower rank)."""
    t = Trace(rank=rank, world_size=world_size)
    o = offset
    for n, start in ((1, 0), (2, 1000), (3, 2000)):
        t.step(n, o + start * stretch, 1000 * stretch)
    t.kernel("ampere_bf16_gemm_fwd", o + 100, o + 400, 7, o + 10)
    t.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", o + 300, o + 600, 20, o + 20)
    t.kernel("ampere_bf16_gemm_bwd", o + 750, o + 900, 7, o + 700)
    t.kernel("flash_fwd_kernel", o + 1100, o + 1500, 7, o + 1010)
    t.kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", o + 1200, o + 1300, 20, o + 1020)
    t.kernel("Memcpy DtoD (Device -> Device)", o + 1290, o + 1320, 9, o + 1025, launch="cudaMemcpyAsync",
             cat="gpu_memcpy")
    t.kernel("vectorized_elementwise_kernel", o + 1600, o + 1602, 7, o + 1030)
    t.kernel("late_kernel", o + 2100, o + 2200, 7, o + 2010)
    t.memory(o + 50, 30 << 30)
    t.memory(o + 60, 36 << 30)
    return t
