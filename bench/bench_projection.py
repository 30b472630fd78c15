"""Benchmark (not a test): the projection model's accuracy on published measurements and its speed.

    .venv/bin/python bench/bench_projection.py                 # refit, leave-one-out table, timing
    .venv/bin/python bench/bench_projection.py --stored        # the table recorded in params.json
    .venv/bin/python bench/bench_projection.py --json --out bench/out/projection.json

1. **Accuracy**: ``projection.calibrate.run`` refits the efficiencies on the usable rows of
   ``skill/scripts/projection/data/published_throughput.csv`` (REAL published measurements; see its
   SOURCES.md and the exclusion rules in ``projection/dataset.py``) and predicts every row from a fit
   without it (leave-one-out). Printed per row: model, GPU, GPUs, measured and predicted
   tokens/s/GPU, error %; then the median and p90 absolute error, dense and MoE apart, and the same
   with every row of the row's model left out together (leave-one-model-out) and with every row of
   the row's published table, one software release, left out together (leave-one-release-out: a
   release's own speed-ups and regressions show as error, never as a fit).
2. **Speed**: ``projection.api.project`` on a DeepSeek-V3-like job on 1,024 GB200 (61 layers, MLA,
   256 experts top-8, TP1 PP8 EP64, MXFP8, GBS 8192): the first (cold) call, then the median, min and
   max of ``--calls`` (100) calls, ``time.perf_counter`` in-process. Goal: well under a second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "skill" / "scripts"))

from attune.projection import api, calibrate  # noqa: E402

DSV3_1024 = {
    "--num-layers": "61", "--hidden-size": "7168", "--ffn-hidden-size": "18432", "--num-attention-heads": "128",
    "--multi-latent-attention": True, "--q-lora-rank": "1536", "--kv-lora-rank": "512", "--qk-head-dim": "128",
    "--qk-pos-emb-head-dim": "64", "--v-head-dim": "128", "--num-experts": "256", "--moe-router-topk": "8",
    "--moe-ffn-hidden-size": "2048", "--moe-shared-expert-intermediate-size": "2048",
    "--moe-layer-freq": "[0]*3+[1]*58", "--mtp-num-layers": "1", "--position-embedding-type": "rope",
    "--disable-bias-linear": True,
    "--swiglu": True, "--vocab-size": "129280",
    "--untie-embeddings-and-output-weights": True, "--seq-length": "4096", "--micro-batch-size": "1",
    "--global-batch-size": "8192", "--tensor-model-parallel-size": "1", "--pipeline-model-parallel-size": "8",
    "--pipeline-model-parallel-layout": "Et*8|(t*8|)*6t*5mL", "--expert-model-parallel-size": "64",
    "--moe-token-dispatcher-type": "flex", "--moe-grouped-gemm": True, "--bf16": True, "--fp8-format": "e4m3",
    "--fp8-recipe": "mxfp8", "--use-distributed-optimizer": True, "--overlap-grad-reduce": True,
    "--overlap-param-gather": True, "--recompute-granularity": "selective",
    "--recompute-modules": "mla_up_proj moe_act",
}


def timing(calls: int) -> dict:
    start = time.perf_counter()
    out = api.project(DSV3_1024, 1024, "GB200")
    cold = time.perf_counter() - start
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        api.project(DSV3_1024, 1024, "GB200")
        samples.append(time.perf_counter() - start)
    return {"cold_ms": cold * 1e3, "median_ms": statistics.median(samples) * 1e3, "min_ms": min(samples) * 1e3,
            "max_ms": max(samples) * 1e3, "calls": calls, "tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"],
            "model_tflops_per_gpu": out["model_tflops_per_gpu"], "memory_gib": out["memory"]["total_gib"],
            "fits": out["memory"]["fits"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", action="store_true", help="print the LOO table recorded in params.json")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--out", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.stored:
        result = json.loads(api.PARAMS.read_text())
    else:
        result = calibrate.run()
    fit_s = time.perf_counter() - started
    loo, lomo, loro = result["loo"], result["leave_one_model_out"], result["leave_one_release_out"]
    report = {"python": platform.python_version(), "nproc": os.cpu_count(), "rows_used": result["rows_used"],
              "rows_excluded": result["rows_excluded"], "fit_and_loo_s": round(fit_s, 2),
              "loo_median_abs_pct": loo["median_abs_pct"], "loo_p90_abs_pct": loo["p90_abs_pct"],
              "loo_within_10_pct": "%d/%d" % (loo["within_10_pct"], loo["rows"]),
              "loo_by_kind_median_abs_pct": loo["by_kind"],
              "lomo_median_abs_pct": lomo["median_abs_pct"], "lomo_p90_abs_pct": lomo["p90_abs_pct"],
              "lomo_by_kind_median_abs_pct": lomo["by_kind"],
              "loro_median_abs_pct": loro["median_abs_pct"], "loro_p90_abs_pct": loro["p90_abs_pct"],
              "loro_by_kind_median_abs_pct": loro["by_kind"],
              "loo_by_gpu_median_abs_pct": loo["by_gpu"], "projection": timing(args.calls), "table": loo["table"]}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    if args.json:
        print(json.dumps(report))
        return 0
    print("%-17s %-6s %5s %10s %10s %8s" % ("model", "gpu", "gpus", "measured", "predicted", "error%"))
    for row in sorted(loo["table"], key=lambda r: (r["model"], r["gpu"], r["gpus"])):
        print("%-17s %-6s %5d %10.1f %10.1f %+8.1f" % (row["model"][:17], row["gpu"], row["gpus"], row["measured"],
                                                      row["predicted"], row["error_pct"]))
    for key, value in report.items():
        if key == "table":
            continue
        if key == "projection":
            for name, number in value.items():
                print("projection_%s: %s" % (name, round(number, 3) if isinstance(number, float) else number))
        else:
            print("%s: %s" % (key, value))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
