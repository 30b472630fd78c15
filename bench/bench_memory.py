"""Benchmark (not a test): the projection's memory model against the GPU memory Megatron-LM's own runs allocated.

    .venv/bin/python bench/bench_memory.py            # one line per golden case, then the summary
    .venv/bin/python bench/bench_memory.py --json     # one JSON object

Megatron-LM's functional-test golden values (the corpus's ``megatron_golden/``, ``ATTUNE_CORPUS_DIR``, REAL:
measured on DGX GB200 by NVIDIA's CI) record ``mem-max-allocated-bytes`` per iteration: PyTorch's
``torch.cuda.max_memory_allocated()`` on the rank that writes the metrics, the last one, so the last pipeline
stage. For every case that records it, ``projection.memory.rank_memory`` of that rank (weights, gradients,
optimizer states, activations; the fixed ``OVERHEAD_GIB`` left out, since the allocator does not count the CUDA
context, NCCL or cuBLAS workspaces) is set beside the largest value over the case's iterations. A case whose
arguments the projection refuses is listed with the reason. The cases are small models (12 layers, hidden 512,
a few hundred MB): what they test is the accounting of parallel layouts, recompute and optimizers, at a scale
where fixed buffers the model does not count weigh more than at production scale.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "skill" / "scripts"))

from attune.projection import config, memory  # noqa: E402

GIB = float(2 ** 30)
# what the golden runs set that the projection has no use for (logging, paths, checkpoints, data, schedule)
UNUSED = ("--log-", "--tensorboard", "--save", "--load", "--data-", "--split", "--tokenizer", "--eval-", "--lr",
          "--min-lr", "--weight-decay", "--clip-grad", "--ckpt", "--dist-ckpt", "--async-save", "--use-persistent",
          "--train-iters", "--timing-log", "--distributed-backend", "--use-mcore", "--exit-", "--deterministic",
          "--seed", "--init-method", "--mock-data", "--no-mmap", "--num-workers", "--use-checkpoint", "--finetune",
          "--no-load", "--auto-detect", "--rerun", "--check-", "--no-ckpt", "--override-opt", "--legacy-tokenizer",
          "--attention-softmax-in-fp32", "--no-gradient-accumulation-fusion",
          "--nccl-", "--manual-gc", "--calculate-per-token-loss", "--ft-", "--decoupled-lr", "--use-dist-ckpt")


def corpus() -> Path:
    root = Path(os.environ.get("ATTUNE_CORPUS_DIR") or REPO.parent / "shared" / "data")
    return root / "megatron_golden"


def args_of(case: dict) -> dict:
    out = {}
    for flag, value in (case.get("MODEL_ARGS") or {}).items():
        if any(flag.startswith(prefix) for prefix in UNUSED) or value is False or value is None:
            continue
        out[flag] = True if value is True else str(value)
    out.setdefault("--seq-length", out.get("--max-position-embeddings", "1024"))
    return out


def world_size(case: dict) -> int:
    schedule = case.get("ci_schedule") or []
    sizes = {int(item["world_size"]) for item in schedule if item.get("world_size")}
    if len(sizes) == 1:
        return sizes.pop()
    return 4 if case["case"].endswith("_1node") else 8  # SOURCE.md: every _1node case at 4, every other at 8


def measured_bytes(case: dict):
    values = ((case.get("metrics") or {}).get("mem-max-allocated-bytes") or {}).get("values") or {}
    numbers = [float(v) for v in values.values() if isinstance(v, (int, float))]
    return max(numbers) if numbers else None


def compare(path: Path) -> dict:
    case = json.loads(path.read_text(encoding="utf-8"))
    measured = measured_bytes(case)
    row = {"case": case.get("case", path.stem), "world_size": world_size(case)}
    if measured is None:
        row["skipped"] = "no mem-max-allocated-bytes"
        return row
    row["measured_gib"] = measured / GIB
    try:
        job = config.parse(args_of(case), row["world_size"], "GB200", 4)
        parts = memory.rank_memory(job, job.pp - 1)
    except config.ConfigError as exc:
        row["skipped"] = "projection refuses it: %s" % exc
        return row
    predicted = sum(value for key, value in parts.items() if key != "overhead")
    row.update(predicted_gib=predicted / GIB, error_pct=100.0 * (predicted - measured) / measured,
               layout="TP%d PP%d CP%d EP%d VP%d MBS%d %s" % (job.tp, job.pp, job.cp, job.ep, job.vp, job.mbs,
                                                              job.recompute or "no-recompute"),
               breakdown_gib={key: round(value / GIB, 3) for key, value in parts.items() if key != "overhead"})
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    folder = corpus()
    if not folder.is_dir():
        print("bench_memory: %s is absent (set ATTUNE_CORPUS_DIR to the real-artifact corpus): nothing measured"
              % folder, file=sys.stderr)
        return 2
    rows = [compare(path) for path in sorted(folder.glob("*.json")) if path.name not in
            ("cross_group_pairs.json", "index.json")]
    done = [row for row in rows if "error_pct" in row]
    errors = [abs(row["error_pct"]) for row in done]
    summary = {"cases": len(rows), "compared": len(done), "skipped": len(rows) - len(done),
               "median_abs_error_pct": round(statistics.median(errors), 1) if errors else None,
               "median_signed_error_pct": round(statistics.median(row["error_pct"] for row in done), 1) if done
               else None,
               "over_predicted": sum(1 for row in done if row["error_pct"] > 0),
               "within_20_pct": sum(1 for e in errors if e <= 20)}
    if args.json:
        print(json.dumps({"summary": summary, "rows": rows}))
        return 0
    for row in rows:
        if "skipped" in row:
            print("%-80s skipped: %s" % (row["case"][:80], row["skipped"]))
        else:
            print("%-80s %-40s measured %6.3f predicted %6.3f GiB %+6.1f%%" % (
                row["case"][:80], row["layout"], row["measured_gib"], row["predicted_gib"], row["error_pct"]))
    for key, value in summary.items():
        print("%s: %s" % (key, value))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
