#!/usr/bin/env python3
"""Generate HTA 0.5.0 reference ("golden") numbers for the real-trace corpus.

Regenerate the files (from the repository root)::

    python3 -m venv /tmp/hta-venv
    /tmp/hta-venv/bin/pip install --no-deps HolisticTraceAnalysis==0.5.0
    /tmp/hta-venv/bin/pip install pandas numpy networkx plotly pydot psutil PyYAML ijson
    /tmp/hta-venv/bin/python skill/scripts/profile_analyzer/tests/data/make_hta_golden.py

This is a developer tool, not a test: HTA is NOT a dependency of the analyzer and
must never be imported by it or by the test suite.  The tests only read the JSON
files this script writes to ``tests/data/hta_golden/<folder>.json``.

Inputs: every sub-folder of ``$ATTUNE_CORPUS_DIR/traces`` (default
``<repo>/../shared/data/traces``) that holds ``*.json`` / ``*.json.gz`` files is
one HTA ``trace_dir``.  HTA maps files to ranks itself (regex
``"rank":\\s+(\\d+)`` on the first matching line, i.e. ``distributedInfo.rank``;
rank 0 with a warning when absent).  The traces are read in place, never copied.

For each folder the JSON holds:

* ``hta_version`` and library versions, the exact HTA calls and arguments;
* ``trace_files``: name, size, sha256, HTA's rank and ``distributedInfo.rank``;
* ``ranks.<rank>``:
  - ``temporal_breakdown``: HTA's idle/compute/non_compute/kernel time (µs)
    and its ``*_pctg`` (HTA rounds to 2 decimals), plus ``*_pctg_exact``
    (100 * µs / kernel_time, unrounded);
  - ``comm_comp_overlap_pctg`` (HTA value, 2 decimals; null when the rank has
    no communication kernel: HTA returns NaN);
  - ``kernels_considered``: the GPU events HTA kept for the two analyses above
    (stream != -1 after its ProfilerStep filter), counts by cat / kernel type
    / stream, and the first start / last end in the trace's own time base
    (after HTA's ns rounding);
  - ``iterations``: HTA's iteration labels of those events (it computes no
    per-iteration breakdown; ``per_iteration`` is therefore null);
  - ``idle_time_breakdown``: ``get_idle_time_breakdown`` per stream;
  - ``cuda_kernel_launch_stats``: summary of ``get_cuda_kernel_launch_stats``.
* ``variants``: the temporal breakdown / overlap again with
  ``HTA_DISABLE_NS_ROUNDING=1`` (only for traces with float timestamps, where
  HTA's ceil/floor rounding applies) — shows how sensitive the numbers are;
* ``hta_warnings``: HTA log warnings of the main run (timing lines removed),
  ``hta_warnings_variant_runs`` those of the variant run, ``python_warnings``
  the Python warnings of both (first line, deduplicated; mostly pandas 3
  deprecations, plus numpy's divide warning when a rank has no comm kernel);
* ``hta_timing``: wall seconds to load and analyze (informational; the ONLY
  part that changes between runs).

Determinism: keys sorted, floats rounded to 6 significant digits (integral
values written as integers), lists sorted.  Only ``hta_timing`` varies.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata as md
import json
import logging
import math
import os
import platform
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO_ROOT = Path(__file__).resolve().parents[5]
OUT_DIR_DEFAULT = Path(__file__).resolve().parent / "hta_golden"
EXPECTED_HTA_VERSION = "0.5.0"
# HTA defaults, written into the golden files so the reader knows the thresholds.
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100
CONSECUTIVE_KERNEL_DELAY = 30  # HTA's docstring says "ns"; it is compared with µs timestamps.
QUANTILES = (0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
TIMING_LOG_RE = re.compile(r"seconds|duration=|PID:", re.IGNORECASE)


# --------------------------------------------------------------------------- utils
def corpus_traces_dir() -> Path:
    env = os.environ.get("ATTUNE_CORPUS_DIR")
    base = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return base / "traces"


def sig(x: Any) -> Any:
    """Round to 6 significant digits; integral floats become ints; NaN/inf -> None."""
    if x is None:
        return None
    if isinstance(x, bool):
        return x
    try:
        import numpy as np

        if isinstance(x, np.generic):
            x = x.item()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return None
        if x.is_integer() and abs(x) < 2**53:
            return int(x)
        return float(f"{x:.6g}")
    return x


def clean(obj: Any) -> Any:
    """Recursively apply sig() and make keys strings."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return sig(obj)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_distributed_rank(path: Path) -> Optional[int]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    info = doc.get("distributedInfo") or {}
    r = info.get("rank")
    return int(r) if r is not None else None


def has_float_ts(path: Path) -> bool:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return any(isinstance(e.get("ts"), float) for e in doc.get("traceEvents", []))


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.levelname}: {record.getMessage()}")


# --------------------------------------------------------------------------- HTA
def temporal_and_overlap(ta) -> Dict[int, Dict[str, Any]]:
    tb = ta.get_temporal_breakdown(visualize=False)
    ov = ta.get_comm_comp_overlap(visualize=False)
    out: Dict[int, Dict[str, Any]] = {}
    for row in tb.to_dict("records"):
        r = int(row["rank"])
        kt = float(row["kernel_time(us)"])
        d = {
            "idle_time_us": row["idle_time(us)"],
            "compute_time_us": row["compute_time(us)"],
            "non_compute_time_us": row["non_compute_time(us)"],
            "kernel_time_us": row["kernel_time(us)"],
            "idle_time_pctg": row["idle_time_pctg"],
            "compute_time_pctg": row["compute_time_pctg"],
            "non_compute_time_pctg": row["non_compute_time_pctg"],
        }
        for k in ("idle_time", "compute_time", "non_compute_time"):
            d[f"{k}_pctg_exact"] = 100.0 * float(row[f"{k}(us)"]) / kt if kt else None
        out[r] = {"temporal_breakdown": d}
    for row in ov.to_dict("records"):
        out.setdefault(int(row["rank"]), {})["comm_comp_overlap_pctg"] = row["comp_comm_overlap_pctg"]
    return out


def kernels_considered(ta, rank: int) -> Dict[str, Any]:
    from hta.utils.utils import get_kernel_type

    t = ta.t
    sym = t.symbol_table.get_sym_table()
    df = t.get_trace(rank)
    k = df[df["stream"].ne(-1)]
    by_cat: Dict[str, int] = {}
    for c, n in k["cat"].value_counts().items():
        by_cat[sym[int(c)]] = int(n)
    by_type: Dict[str, int] = {}
    for name_id, n in k["name"].value_counts().items():
        kt = get_kernel_type(sym[int(name_id)])
        by_type[kt] = by_type.get(kt, 0) + int(n)
    by_stream = {int(s): int(n) for s, n in k["stream"].value_counts().items()}
    res: Dict[str, Any] = {
        "count": int(len(k)),
        "by_cat": by_cat,
        "by_kernel_type": by_type,
        "by_stream": by_stream,
    }
    if len(k):
        res["first_start_us"] = float(k["ts"].min()) + float(t.min_ts)
        res["last_end_us"] = float((k["ts"] + k["dur"]).max()) + float(t.min_ts)
    # iteration labels (HTA add_iteration: GPU event -> iteration of its launching CPU event)
    it = k["iteration"] if "iteration" in k.columns else None
    per_iter: Dict[str, int] = {}
    if it is not None:
        for v, n in it.value_counts(dropna=False).items():
            key = "nan" if (isinstance(v, float) and math.isnan(v)) else str(int(v))
            per_iter[key] = int(n)
    steps = []
    step_ids = {i: s for i, s in enumerate(sym) if isinstance(s, str) and "ProfilerStep" in s}
    ps = df[df["name"].isin(list(step_ids))]
    for row in ps.itertuples():
        steps.append(
            {
                "name": sym[int(row.name)],
                "cat": sym[int(row.cat)],
                "ts_us": float(row.ts) + float(t.min_ts),
                "dur_us": float(row.dur),
            }
        )
    steps.sort(key=lambda s: (s["ts_us"], s["name"], s["cat"]))
    iterations = {
        "hta_get_iterations": sorted(int(i) for i in t.get_iterations(rank) if not math.isnan(float(i))),
        "kernels_per_iteration_label": per_iter,
        "profiler_step_events_kept": steps,
    }
    return {"kernels_considered": res, "iterations": iterations}


def idle_breakdown(ta, rank: int) -> Dict[str, Any]:
    idle, stats = ta.get_idle_time_breakdown(
        ranks=[rank],
        visualize=False,
        show_idle_interval_stats=True,
        consecutive_kernel_delay=CONSECUTIVE_KERNEL_DELAY,
    )
    per_stream: Dict[str, Dict[str, Any]] = {}
    totals: Dict[str, float] = {}
    for row in idle.to_dict("records"):
        s = str(int(row["stream"]))
        cat = str(row["idle_category"])
        per_stream.setdefault(s, {})[f"{cat}_us"] = row["idle_time"]
        per_stream[s][f"{cat}_ratio"] = row["idle_time_ratio"]
        totals[f"{cat}_us"] = totals.get(f"{cat}_us", 0.0) + float(row["idle_time"])
    counts: Dict[str, Dict[str, Any]] = {}
    if stats is not None:
        for cat, row in stats.iterrows():
            s = str(int(row["stream"]))
            counts.setdefault(s, {})[f"{cat}_intervals"] = row["count"]
            counts[s][f"{cat}_median_us"] = row["50%"]
    for s, c in counts.items():
        per_stream.setdefault(s, {}).update(c)
    return {
        "consecutive_kernel_delay": CONSECUTIVE_KERNEL_DELAY,
        "per_stream": per_stream,
        "total_over_streams": totals,
    }


def launch_stats(ta, rank: int) -> Dict[str, Any]:
    df = ta.get_cuda_kernel_launch_stats(
        ranks=[rank],
        runtime_cutoff=RUNTIME_CUTOFF_US,
        launch_delay_cutoff=LAUNCH_DELAY_CUTOFF_US,
        include_memory_events=True,
        visualize=False,
    )[rank]
    out: Dict[str, Any] = {
        "runtime_cutoff_us": RUNTIME_CUTOFF_US,
        "launch_delay_cutoff_us": LAUNCH_DELAY_CUTOFF_US,
        "events": int(len(df)),
        # definitions from hta/analyzers/cuda_kernel_analysis.py visualize_cuda_launch_kernel_info
        "short_kernels": int(
            ((df["cpu_duration"] <= RUNTIME_CUTOFF_US) & (df["gpu_duration"] < df["cpu_duration"])).sum()
        ),
        "runtime_outliers": int((df["cpu_duration"] > RUNTIME_CUTOFF_US).sum()),
        "launch_delay_outliers": int((df["launch_delay"] > LAUNCH_DELAY_CUTOFF_US).sum()),
    }
    for col in ("launch_delay", "cpu_duration", "gpu_duration"):
        if len(df):
            q = df[col].astype(float).quantile(list(QUANTILES))  # pandas linear interpolation
            out[f"{col}_quantiles_us"] = {f"p{int(p * 100)}": float(v) for p, v in q.items()}
            out[f"{col}_mean_us"] = float(df[col].astype(float).mean())
            out[f"{col}_sum_us"] = float(df[col].astype(float).sum())
        else:
            out[f"{col}_quantiles_us"] = None
            out[f"{col}_mean_us"] = None
            out[f"{col}_sum_us"] = None
    return out


def run_folder(folder: Path) -> Dict[str, Any]:
    from hta.trace_analysis import TraceAnalysis

    files = sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
    handler = _ListHandler()
    hta_logger = logging.getLogger("hta")
    hta_logger.addHandler(handler)
    timing: Dict[str, float] = {}
    py_warnings: List[str] = []
    try:
        with warnings.catch_warnings(record=True) as wrec:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            ta = TraceAnalysis(trace_dir=str(folder))
            timing["load_s"] = time.perf_counter() - t0

            t1 = time.perf_counter()
            ranks_out = temporal_and_overlap(ta)
            timing["temporal_and_overlap_s"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            for r in ta.t.get_ranks():
                ro = ranks_out.setdefault(int(r), {})
                ro.update(kernels_considered(ta, r))
                ro["per_iteration"] = None
                ro["idle_time_breakdown"] = idle_breakdown(ta, r)
                ro["cuda_kernel_launch_stats"] = launch_stats(ta, r)
            timing["idle_and_launch_stats_s"] = time.perf_counter() - t2
            timing["total_s"] = time.perf_counter() - t0

            main_log = list(handler.messages)
            variants: Dict[str, Any] = {}
            if any(has_float_ts(p) for p in files):
                os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
                try:
                    ta2 = TraceAnalysis(trace_dir=str(folder))
                    v = temporal_and_overlap(ta2)
                finally:
                    del os.environ["HTA_DISABLE_NS_ROUNDING"]
                variants["HTA_DISABLE_NS_ROUNDING=1"] = {str(r): x for r, x in v.items()}
            for w in wrec:
                first_line = str(w.message).splitlines()[0] if str(w.message) else ""
                py_warnings.append(f"{w.category.__name__}: {first_line} ({Path(w.filename).name}:{w.lineno})")
    finally:
        hta_logger.removeHandler(handler)

    hta_rank_of = {str(Path(p).resolve()): int(r) for r, p in ta.t.trace_files.items()}
    trace_files = []
    for p in files:
        trace_files.append(
            {
                "file": p.name,
                "bytes": p.stat().st_size,
                "sha256": sha256(p),
                "hta_rank": hta_rank_of.get(str(p.resolve())),
                "distributedInfo_rank": read_distributed_rank(p),
                "float_timestamps": has_float_ts(p),
            }
        )
    log_msgs = [m for m in main_log if not TIMING_LOG_RE.search(m)]
    variant_log = [m for m in handler.messages[len(main_log):] if not TIMING_LOG_RE.search(m)]
    return {
        "folder": folder.name,
        "generator": "skill/scripts/profile_analyzer/tests/data/make_hta_golden.py",
        "hta_version": md.version("HolisticTraceAnalysis"),
        "library_versions": {
            "pandas": md.version("pandas"),
            "numpy": md.version("numpy"),
            "python": platform.python_version(),
        },
        "hta_calls": [
            "TraceAnalysis(trace_dir=<folder>)  # include_last_profiler_step=False",
            "get_temporal_breakdown(visualize=False)",
            "get_comm_comp_overlap(visualize=False)",
            f"get_idle_time_breakdown(ranks=[r], consecutive_kernel_delay={CONSECUTIVE_KERNEL_DELAY}, "
            "show_idle_interval_stats=True, visualize=False)",
            f"get_cuda_kernel_launch_stats(ranks=[r], runtime_cutoff={RUNTIME_CUTOFF_US}, "
            f"launch_delay_cutoff={LAUNCH_DELAY_CUTOFF_US}, include_memory_events=True, visualize=False)",
        ],
        "notes": [
            "HTA computes temporal breakdown and overlap over ALL kept GPU events of a rank, "
            "not per iteration; per_iteration is null.",
            "percentage denominator = kernel_time_us = last kept GPU event end - first kept GPU event start.",
            "*_pctg are HTA's values (rounded to 2 decimals); *_pctg_exact = 100*us/kernel_time_us.",
            "Log warnings from HTA's parser worker processes (multi-rank folders) are not captured.",
        ],
        "trace_files": trace_files,
        "ranks": {str(r): v for r, v in sorted(ranks_out.items())},
        "variants": variants,
        "hta_warnings": sorted(set(log_msgs)),
        "hta_warnings_variant_runs": sorted(set(variant_log)),
        "python_warnings": sorted(set(py_warnings)),
        "hta_timing": {k: round(v, 3) for k, v in timing.items()},
    }


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces-dir", type=Path, default=None, help="default: $ATTUNE_CORPUS_DIR/traces")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR_DEFAULT)
    ap.add_argument("--only", action="append", default=[], help="folder name(s) to process")
    args = ap.parse_args(argv)

    try:
        version = md.version("HolisticTraceAnalysis")
    except md.PackageNotFoundError:
        print("HolisticTraceAnalysis is not installed in this interpreter; see the module docstring.", file=sys.stderr)
        return 2
    if version != EXPECTED_HTA_VERSION:
        print(f"expected HolisticTraceAnalysis {EXPECTED_HTA_VERSION}, found {version}", file=sys.stderr)
        return 2

    traces_dir = args.traces_dir or corpus_traces_dir()
    if not traces_dir.is_dir():
        print(f"no traces directory at {traces_dir}", file=sys.stderr)
        return 2
    # keep HTA quiet on the console; warnings are recorded in the JSON
    logging.getLogger("hta").setLevel(logging.WARNING)
    for h in list(logging.getLogger("hta").handlers):
        h.setLevel(logging.ERROR)
    logging.getLogger().setLevel(logging.ERROR)

    args.out_dir.mkdir(parents=True, exist_ok=True)
    folders = sorted(
        p for p in traces_dir.iterdir()
        if p.is_dir() and any(f.name.endswith((".json", ".json.gz")) for f in p.iterdir())
    )
    if args.only:
        folders = [p for p in folders if p.name in set(args.only)]
    rc = 0
    for folder in folders:
        try:
            result = run_folder(folder)
        except Exception as exc:  # record the failure, keep going
            rc = 1
            result = {"folder": folder.name, "hta_version": version, "error": f"{type(exc).__name__}: {exc}"}
        result = clean(result)
        out = args.out_dir / f"{folder.name}.json"
        out.write_text(json.dumps(result, sort_keys=True, indent=2, allow_nan=False) + "\n")
        summary = []
        for r, v in result.get("ranks", {}).items():
            tb = v.get("temporal_breakdown", {})
            summary.append(
                f"rank {r}: idle {tb.get('idle_time_pctg')} compute {tb.get('compute_time_pctg')} "
                f"non-compute {tb.get('non_compute_time_pctg')} overlap {v.get('comm_comp_overlap_pctg')}"
            )
        print(f"{out}: " + ("; ".join(summary) if summary else result.get("error", "")))
    return rc


if __name__ == "__main__":
    sys.exit(main())
