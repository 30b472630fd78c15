#!/usr/bin/env python3
"""Benchmark `attune profile` against HolisticTraceAnalysis on a trace of at least 1 GB built from real
trace events (not a test: it measures, it never fails on a number).

    .venv/bin/python bench/bench_profile.py [--gb 1.0] [--hta-python /path/to/python-with-hta] [--keep FILE] [--diff]

The trace is built from the real Kineto events of the corpus's legacy all-to-all trace
(``$ATTUNE_CORPUS_DIR/traces/hta_alltoall_8r_a100_legacy_format/control.json.gz``, read in place): its
events are repeated, each copy shifted in time past the previous one, with correlation and external
ids and ProfilerStep numbers renumbered so every copy stays a distinct stretch of the same run. The
events themselves are unchanged otherwise; the result is a SYNTHETIC concatenation of real events,
written in Kineto's layout (plain JSON). Then, each in a fresh process:

* ours: ``attune.py profile TRACE --json`` (wall time; peak RSS from the child's rusage);
* HTA: ``TraceAnalysis(trace_files={rank: TRACE})``, ``get_temporal_breakdown()`` and
  ``get_comm_comp_overlap()``, with the interpreter given by ``--hta-python`` (one with
  ``HolisticTraceAnalysis`` 0.5.0 installed); skipped, and said so, when there is none.

With ``--diff``, a second trace of the same size is built the same way with a longer shift between
copies (``DIFF_GAP_US`` instead of ``GAP_US`` past the previous copy's end, so the GPU idles longer
between copies; the events are the same), and ``attune.py profile --diff TRACE TRACE2 --json`` is
timed the same way.

It prints greppable ``key: value`` lines: sizes, times, peak RSS, both breakdowns, and the ratios.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ATTUNE = REPO / "skill" / "scripts" / "attune.py"
CORPUS = Path(os.environ.get("ATTUNE_CORPUS_DIR") or REPO.parent / "shared" / "data")
SOURCE = CORPUS / "traces" / "hta_alltoall_8r_a100_legacy_format" / "control.json.gz"
HTA_SCRIPT = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_files={int(sys.argv[2]): sys.argv[1]})
t1 = time.perf_counter()
breakdown = analysis.get_temporal_breakdown(visualize=False)
overlap = analysis.get_comm_comp_overlap(visualize=False)
t2 = time.perf_counter()
row = breakdown.iloc[0]
print(json.dumps({"load_s": t1 - t0, "analyze_s": t2 - t1,
                  "idle_pctg": float(row["idle_time_pctg"]), "compute_pctg": float(row["compute_time_pctg"]),
                  "non_compute_pctg": float(row["non_compute_time_pctg"]),
                  "overlap_pctg": float(overlap.iloc[0]["comp_comm_overlap_pctg"])}))
"""


GAP_US = 1000  # between one copy's last event and the next copy's first
DIFF_GAP_US = 21000  # the second trace of --diff


def build(target_bytes: int, out: Path, gap_us: int = GAP_US) -> dict:
    """Write the concatenated trace; returns its size, copies and events."""
    data = json.load(gzip.open(SOURCE))
    events = data["traceEvents"]
    meta = {k: v for k, v in data.items() if k != "traceEvents"}
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    period = int(max(ends) - min(ts)) + gap_us
    lines = ["  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events]
    one = sum(len(line) + 2 for line in lines)
    copies = max(1, -(-target_bytes // one))
    written = 0
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(meta, indent=2)[:-2] + ',\n  "traceEvents": [\n')
        first = True
        for copy in range(copies):
            shift, ids = copy * period, copy * 10_000_000
            for event in events:
                e = dict(event)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + shift
                args = e.get("args")
                if isinstance(args, dict):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += ids
                    e["args"] = args
                if isinstance(e.get("id"), int):
                    e["id"] += ids
                name = e.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    e["name"] = "ProfilerStep#%d" % (int(name[13:]) + copy * 100)
                text = ("" if first else ",\n") + "  {\n    " + json.dumps(e)[1:-1] + "\n  }"
                first = False
                handle.write(text)
                written += len(text)
        handle.write('\n  ],\n  "traceName": "SYNTHETIC concatenation of real events"\n}\n')
    return {"bytes": out.stat().st_size, "copies": copies, "events": copies * len(events),
            "rank": data.get("distributedInfo", {}).get("rank", 0)}


# A small, fresh launcher runs the command and reports its child's peak RSS: measured from this
# (large) process, a child's peak would include the pages it shared with its parent before exec.
LAUNCHER = r"""
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[1:])
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
sys.stderr.write("\nLAUNCHER %d %.6f %d %.6f\n" % (code, wall, usage.ru_maxrss, usage.ru_utime + usage.ru_stime))
"""


def run(argv) -> dict:
    proc = subprocess.run([sys.executable, "-c", LAUNCHER] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = proc.stderr.decode("utf-8", "replace")
    code, wall, maxrss, cpu = err.strip().splitlines()[-1].split()[1:]
    return {"wall_s": float(wall), "rc": int(code), "stdout": proc.stdout.decode("utf-8", "replace"),
            "stderr": err[-2000:], "peak_rss_mb": int(maxrss) / 1024.0, "cpu_s": float(cpu)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="trace size to build, in GB (1.0)")
    parser.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis 0.5.0 (default: none, skip HTA)")
    parser.add_argument("--keep", help="write the trace here and keep it (default: a temporary file)")
    parser.add_argument("--diff", action="store_true",
                        help="also build a second trace (a longer shift between copies) and time "
                             "`attune profile --diff` on the two")
    args = parser.parse_args(argv)
    if not SOURCE.is_file():
        print("no source trace at %s (set ATTUNE_CORPUS_DIR)" % SOURCE, file=sys.stderr)
        return 2
    tmp = None
    if args.keep:
        trace = Path(args.keep)
    else:
        tmp = tempfile.TemporaryDirectory()
        trace = Path(tmp.name) / "rank3.json"
    try:
        t0 = time.perf_counter()
        built = build(int(args.gb * 1e9), trace)
        print("data: SYNTHETIC concatenation of real Kineto events from %s" % SOURCE.name)
        print("trace_bytes: %d" % built["bytes"])
        print("trace_events: %d (%d copies)" % (built["events"], built["copies"]))
        print("build_s: %.1f" % (time.perf_counter() - t0))
        ours = run([sys.executable, str(ATTUNE), "profile", str(trace), "--json"])
        if ours["rc"] != 0:
            print("ours_failed: %s" % ours["stderr"], file=sys.stderr)
            return 1
        result = json.loads(ours["stdout"])
        tb = result["ranks"][0]["temporal_breakdown"]
        print("ours_wall_s: %.2f" % ours["wall_s"])
        print("ours_peak_rss_mb: %.0f" % ours["peak_rss_mb"])
        print("ours_breakdown: idle %s compute %s non_compute %s overlap %s" % (
            tb["idle_pctg"], tb["compute_pctg"], tb["non_compute_pctg"],
            result["ranks"][0]["communication"]["overlap_pctg"]))
        if args.diff:
            second = trace.with_name("second_" + trace.name)
            t0 = time.perf_counter()
            other = build(int(args.gb * 1e9), second, DIFF_GAP_US)
            print("diff_trace_bytes: %d (a shift of %d us between copies instead of %d)" % (
                other["bytes"], DIFF_GAP_US, GAP_US))
            print("diff_build_s: %.1f" % (time.perf_counter() - t0))
            timed = run([sys.executable, str(ATTUNE), "profile", "--diff", str(trace), str(second), "--json"])
            if not args.keep:
                second.unlink()
            if timed["rc"] != 0:
                print("diff_failed: %s" % timed["stderr"], file=sys.stderr)
                return 1
            compared = json.loads(timed["stdout"])
            print("diff_wall_s: %.2f" % timed["wall_s"])
            print("diff_peak_rss_mb: %.0f" % timed["peak_rss_mb"])
            print("diff_steps: A %d B %d" % (compared["a"]["steps"], compared["b"]["steps"]))
            for item in compared["differences"]:
                print("diff_explain: %d. %s" % (item["rank"], item["text"]))
        if not args.hta_python:
            print("hta: not run (no --hta-python)")
            return 0
        hta = run([args.hta_python, "-c", HTA_SCRIPT, str(trace), str(built["rank"])])
        if hta["rc"] != 0:
            print("hta_failed: rc %d after %.1f s, peak RSS %.0f MB: %s" % (hta["rc"], hta["wall_s"], hta["peak_rss_mb"],
                                                                           hta["stderr"].strip().splitlines()[-1:]))
            return 0
        numbers = json.loads(hta["stdout"].strip().splitlines()[-1])
        print("hta_wall_s: %.2f (load %.1f, analyze %.1f)" % (hta["wall_s"], numbers["load_s"], numbers["analyze_s"]))
        print("hta_peak_rss_mb: %.0f" % hta["peak_rss_mb"])
        print("hta_breakdown: idle %s compute %s non_compute %s overlap %s" % (
            numbers["idle_pctg"], numbers["compute_pctg"], numbers["non_compute_pctg"], numbers["overlap_pctg"]))
        print("speedup: %.1fx" % (hta["wall_s"] / ours["wall_s"]))
        print("memory_ratio: %.3f (ours / HTA peak RSS)" % (ours["peak_rss_mb"] / hta["peak_rss_mb"]))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
