"""Which settings move tokens/s on this host: real Megatron-LM pretrain_gpt.py on the CPU, measured.

    ATTUNE_MEGATRON_DIR=/path/to/Megatron-LM python bench/bench_megatron_cpu.py [--repeats 3] [--only NAME,...]
        [--out bench/results/megatron_cpu.json]
    (or ATTUNE_CORPUS_DIR=../shared/data: the core_v0.16.1 archive there is unpacked into the cache)

Each variant is the tiny-GPT recipe (``harness/recipes/gpt_tiny_cpu.yaml``) with one change, run as the local
backend runs it: the entrypoint through the pod-hooks wrapper with the ``cpu`` hook, the recipe's environment,
20 iterations. Each run is scored as a campaign scores it (``measure.score_run`` on the log's iterations 5-19:
tokens/s/GPU, where a "GPU" is one of the world size's ranks). The variants run interleaved (round r runs
every variant once, in an order shuffled by seed r) so that a drift of the host over time spreads over all of
them. Reported per variant: mean, sd and each run's value, the change against the baseline's mean, and whether
it clears the baseline's full range. Nothing is assumed from GPU lore: a CPU answers for itself.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "skill" / "scripts"))
sys.path.insert(0, str(REPO / "harness"))

import megatron_cpu  # noqa: E402
from attune.core import logparse  # noqa: E402
from attune.campaign.finalize import metrics_columns  # noqa: E402
from attune.core.measure import score_run  # noqa: E402
from attune.core.recipe import Recipe  # noqa: E402

WRAP = REPO / "skill" / "scripts" / "pod_hooks" / "wrap.py"
RECOMPUTE = [{"op": "unset", "arg": "--recompute-granularity"}, {"op": "unset", "arg": "--recompute-method"},
             {"op": "unset", "arg": "--recompute-num-layers"}]


def _set(arg, value=True):
    return {"op": "set", "arg": arg, "value": value}


# name: (changes against the baseline recipe, what it is)
VARIANTS = {
    "baseline": ([], "the recipe as written: TP 1 x DP 2, micro-batch 1, full recompute"),
    "no-recompute": (RECOMPUTE, "activation recompute off"),
    "recompute-selective": (RECOMPUTE[1:] + [_set("--recompute-granularity", "selective")],
                            "selective (core attention) recompute instead of full"),
    "mbs-2": ([_set("--micro-batch-size", "2")], "micro-batch size 2 (global batch 16 kept)"),
    "mbs-4": ([_set("--micro-batch-size", "4")], "micro-batch size 4 (global batch 16 kept)"),
    "tp-2": ([_set("--tensor-model-parallel-size", "2")], "tensor parallel 2 (DP 1) instead of DP 2"),
    "tp-2-sp": ([_set("--tensor-model-parallel-size", "2"), _set("--sequence-parallel")],
                "tensor parallel 2 with sequence parallel"),
    "dist-opt": ([_set("--use-distributed-optimizer")], "distributed optimizer (optimizer state sharded over DP)"),
    "overlap-grad": ([_set("--overlap-grad-reduce")], "overlap the data-parallel gradient reduce with backward"),
    "workers-0": ([_set("--num-workers", "0")], "data loading in the training process (no loader workers)"),
    "omp-2": ([{"op": "set", "env": "OMP_NUM_THREADS", "value": "2"}], "two intra-op threads per rank (4 on 2 cores)"),
}


# --factorial: every combination of these levels (the first of each is the recipe as written), so that a search
# benchmark can replay a measured run for any combination of these levers
FACTORS = (
    ("mbs", (("1", []), ("2", [_set("--micro-batch-size", "2")]), ("4", [_set("--micro-batch-size", "4")]))),
    ("recompute", (("full", []), ("selective", RECOMPUTE[1:] + [_set("--recompute-granularity", "selective")]),
                   ("none", RECOMPUTE))),
    ("workers", (("default", []), ("0", [_set("--num-workers", "0")]))),
    ("dist-opt", (("off", []), ("on", [_set("--use-distributed-optimizer")]))),
)


def factorial() -> dict:
    """``{name: (changes, what)}`` for every combination of ``FACTORS``; the all-first combination is "baseline"."""
    out = {}
    combos = [[]]
    for factor, levels in FACTORS:
        combos = [combo + [(factor, level, changes)] for combo in combos for level, changes in levels]
    for combo in combos:
        moved = [(factor, level) for (factor, level, _c), (_f, levels) in zip(combo, FACTORS) if level != levels[0][0]]
        name = "+".join("%s-%s" % pair for pair in moved) or "baseline"
        out[name] = ([change for _f, _l, changes in combo for change in changes],
                     ", ".join("%s %s" % (factor, level) for factor, level, _c in combo))
    return out


def run_once(recipe: Recipe, workdir: Path, timeout_s: float = 600.0) -> dict:
    """One run as the local backend runs it; its score and its wall time."""
    out = workdir / "pod_hooks"
    text = recipe.command.wrap(["python3", str(WRAP), "--hooks", "cpu", "--out", str(out), "--"])
    env = dict(os.environ)
    env.update(recipe.env())
    log = workdir / "log.txt"
    started = time.time()
    with open(log, "wb") as handle:
        code = subprocess.call(["bash", "-c", text], stdout=handle, stderr=subprocess.STDOUT, env=env,
                               cwd=str(workdir), timeout=timeout_s)
    wall = time.time() - started
    parsed = logparse.parse_file(log)
    seq = recipe.args().get("--seq-length")
    metrics, _warnings = metrics_columns(parsed, int(seq), recipe.gpus())
    score = score_run("finished" if code == 0 else "failed", metrics)
    return {"exit_code": code, "wall_s": round(wall, 1), "device": parsed.get("device"),
            "tokens_per_s_per_gpu": score.tokens_per_s_per_gpu if score.rankable else None,
            "why": None if score.rankable else score.why, "loss": metrics.get("loss")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated variant names (baseline is always run)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "megatron_cpu.json"))
    parser.add_argument("--keep", default="", help="keep every run's folder (its log) under this directory")
    parser.add_argument("--factorial", action="store_true",
                        help="every combination of FACTORS instead of the one-change variants (36 of them)")
    args = parser.parse_args(argv)
    if args.factorial:
        VARIANTS.clear()
        VARIANTS.update(factorial())
    names = [n for n in VARIANTS if not args.only or n == "baseline" or n in args.only.split(",")]
    megatron = megatron_cpu.find()
    missing = megatron_cpu.missing_packages()
    if missing:
        sys.exit("bench: the job's Python lacks %s (pip install -e '.[megatron]')" % " ".join(missing))
    megatron_cpu.build_helpers(megatron)
    base = Recipe(megatron_cpu.recipe_text(megatron), str(megatron_cpu.RECIPE))
    keep = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="attune-bench-cpu-"))
    results = {name: [] for name in names}
    total = len(names) * args.repeats
    done = 0
    for round_no in range(args.repeats):
        order = list(names)
        random.Random(round_no).shuffle(order)
        for name in order:
            workdir = keep / ("%s-%d" % (name, round_no))
            workdir.mkdir(parents=True, exist_ok=True)
            row = run_once(base.apply(VARIANTS[name][0]), workdir)
            results[name].append(row)
            done += 1
            print("[%d/%d] %s round %d: %s tokens/s/GPU (%.0f s)%s" % (
                done, total, name, round_no, "%.1f" % row["tokens_per_s_per_gpu"] if row["tokens_per_s_per_gpu"]
                else "n/a", row["wall_s"], "" if row["why"] is None else ": " + row["why"]), flush=True)
            _write(args, megatron, results)  # after every run: a long measurement stopped early keeps its runs
    table = _write(args, megatron, results)
    print(render(table))
    print("runs kept in %s; results in %s" % (keep, args.out))
    return 0


def _write(args, megatron, results: dict) -> dict:
    table = summarize({name: rows for name, rows in results.items() if rows or name == "baseline"})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"host_cpus": os.cpu_count(), "megatron": str(megatron),
                                          "repeats": args.repeats, "factorial": args.factorial,
                                          "factors": [[f, [level for level, _c in levels]] for f, levels in FACTORS]
                                          if args.factorial else None,
                                          "variants": table, "runs": results}, indent=1) + "\n")
    return table


def summarize(results: dict) -> dict:
    base = [r["tokens_per_s_per_gpu"] for r in results["baseline"] if r["tokens_per_s_per_gpu"]]
    base_mean = statistics.mean(base) if base else None
    base_range = (max(base) - min(base)) / base_mean if len(base) >= 2 else None
    table = {}
    for name, rows in results.items():
        values = [r["tokens_per_s_per_gpu"] for r in rows if r["tokens_per_s_per_gpu"]]
        mean = statistics.mean(values) if values else None
        entry = {"what": VARIANTS[name][1], "changes": VARIANTS[name][0], "n": len(values), "failed": len(rows) -
                 len(values), "mean": mean, "sd": statistics.stdev(values) if len(values) >= 2 else None,
                 "values": values, "wall_s": statistics.mean(r["wall_s"] for r in rows)}
        if mean is not None and base_mean:
            entry["vs_baseline"] = mean / base_mean - 1
            entry["clears_baseline_range"] = (base_range is not None and name != "baseline"
                                              and abs(entry["vs_baseline"]) > base_range)
        table[name] = entry
    table["baseline"]["full_range"] = base_range
    return table


def render(table: dict) -> str:
    out = ["| variant | change | tokens/s/GPU mean | sd | n | vs baseline | beyond the baseline's full range | "
           "wall s/run |", "|---|---|---:|---:|---:|---:|---|---:|"]
    for name, entry in table.items():
        out.append("| %s | %s | %s | %s | %d%s | %s | %s | %.0f |" % (
            name, entry["what"], "%.1f" % entry["mean"] if entry["mean"] else "n/a",
            "%.1f" % entry["sd"] if entry["sd"] is not None else "n/a", entry["n"],
            " (%d failed)" % entry["failed"] if entry["failed"] else "",
            "%+.1f%%" % (100 * entry["vs_baseline"]) if "vs_baseline" in entry and name != "baseline" else "",
            ("yes" if entry.get("clears_baseline_range") else "no") if name != "baseline" else
            "range %.1f%%" % (100 * entry["full_range"]) if entry.get("full_range") is not None else "",
            entry["wall_s"]))
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
