#!/usr/bin/env python3
"""Benchmark `attune status`, `attune rank` and `attune verify` on a large SYNTHETIC campaign.

    .venv/bin/python bench/bench_status_rank.py [--rows 100000] [--repeat 3] [--keep DIR] [--json]
    .venv/bin/python bench/bench_status_rank.py --campaign DIR   # time an existing campaign, build nothing

This is a benchmark, not a test: it never fails on slowness, it reports it. It exits non-zero only
when a timed command itself fails (a non-zero exit status or a timeout).

1. Build. A campaign is written through the real library (``attune_core.campaign.init``, then
   ``Campaign.ledger.append_many`` and ``Campaign.gpu_log.append_many``), so every row is
   validated and hash-chained exactly as in a real campaign. ALL DATA IS SYNTHETIC: run ids,
   recipes, hypotheses, step times and GPU-seconds come from a seeded random generator (default
   seed 20261102) and ``tests/factory.py`` (``metrics``, ``jittered``); nothing was measured on
   hardware. The mix looks like a long campaign: per run one ``launch`` row (the first 3 runs are
   the baseline, then mostly ``candidate`` with some ``repeat`` and ``confirm``), one ``result``
   row (20 iterations of metrics; about 5% of runs fail with an OOM and no metrics), a ``gate`` row
   for about 10% of runs and a ``note`` row now and then, until the ledger holds ``--rows`` rows
   (the genesis ``campaign`` row included). Every result is charged in ``gpu_hours.jsonl``.
2. Time. Each command is run as a subprocess exactly as a user runs it,
   ``<python> skill/scripts/attune.py VERB --campaign DIR``, with ``<python>`` the interpreter that
   runs this script (the repo's ``.venv``), and its whole wall time (interpreter start included)
   is measured with ``time.perf_counter``. One untimed ``rank`` runs first: it may append a
   ``leader`` row and it builds matplotlib's font cache, so the timed runs measure the steady
   state. The commands are then timed in rounds (status, rank, rank --no-chart, verify; repeated
   ``--repeat`` times) and reported as min / median / max against the 2 s target.

Output: greppable ``key: value`` lines, or one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "skill" / "scripts"
ATTUNE = SCRIPTS / "attune.py"
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(SCRIPTS / "tests"))

from attune_core import campaign as campaign_mod  # noqa: E402
from factory import jittered, metrics, settings  # noqa: E402

TARGET_S = 2.0
DEFAULT_ROWS = 100_000
DEFAULT_SEED = 20261102
CAMPAIGN_ID = "bench-synth-20261102"
START = datetime.datetime(2026, 11, 2, 9, 0, 0)
GPUS = 64
BASE_STEP_MS = 3400.0  # SYNTHETIC baseline step time
FLOOR_STEP_MS = 0.55 * BASE_STEP_MS  # candidates approach this, never pass it
GBS, SEQ = 1024, 4096

COMMANDS = (
    ("status", ["status"]),
    ("rank", ["rank"]),
    ("rank_no_chart", ["rank", "--no-chart"]),
    ("verify", ["verify"]),
)

ARGS = ("--micro-batch-size", "--recompute-num-layers", "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage", "--bucket-size",
        "--ddp-bucket-size", "--context-parallel-size", "--expert-model-parallel-size")
FLAGS = ("--overlap-grad-reduce", "--overlap-param-gather", "--tp-comm-overlap", "--use-distributed-optimizer",
         "--sequence-parallel", "--recompute-activations", "--fp8-format")
ENVS = ("NCCL_NVLS_ENABLE", "NCCL_MIN_NCHANNELS", "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_IB_QPS_PER_CONNECTION")
LEVERS = ("parallelism", "micro-batch-size", "recompute", "comm-overlap", "nccl-env", "fp8", "bucketing")
HYPOTHESES = (
    "data-parallel all-reduce is exposed in the trace; overlapping it with backward should cut step time",
    "GEMMs are small at this micro-batch size; a larger one should raise tensor-core utilisation noticeably",
    "pipeline bubbles dominate idle time; more virtual stages per rank should shrink the bubble fraction",
    "activation recompute costs a third of the backward pass; recomputing fewer layers should fit in memory",
    "NVLS all-reduce on NVSwitch should halve the intra-node reduction time seen in the profile for this job",
    "the optimizer step is serialised; sharding it across data-parallel ranks should hide it behind compute",
)


# ------------------------------------------------------------------------------------------ build
class Clock(object):
    """Strictly increasing SYNTHETIC timestamps."""

    def __init__(self, rng):
        self.rng = rng
        self.now = START

    def __call__(self, low_s, high_s):
        self.now += datetime.timedelta(seconds=self.rng.uniform(low_s, high_s), microseconds=1)
        return self.now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _change(rng):
    roll = rng.random()
    if roll < 0.5:
        return [{"op": "set", "arg": rng.choice(ARGS), "value": str(rng.choice((1, 2, 4, 8, 16)))}]
    if roll < 0.8:
        return [{"op": "set", "arg": rng.choice(FLAGS)}]
    return [{"op": "set", "env": rng.choice(ENVS), "value": str(rng.choice((0, 1, 4, 16, 32)))}]


def _hypothesis(rng, index):
    text = rng.choice(HYPOTHESES)
    return ("%s (#%d)" % (text[:72], index))[:80]


def synthetic_rows(total_rows, seed, charges):
    """Yield ``(kind, payload, ts)`` for ``total_rows - 1`` ledger rows; append charges to ``charges``.

    The genesis ``campaign`` row is the remaining one. Every value is SYNTHETIC.
    """
    rng = random.Random(seed)
    clock = Clock(rng)
    budget = [total_rows - 1]
    run_no = [0]
    recipe_no = [0]
    recipes = {}  # sha -> true step time in ms (SYNTHETIC)
    baseline_run, baseline_sha = None, None
    best = None  # (run, sha, step_ms): what candidates branch from
    recent = []  # recent candidate (run, sha) pairs, for repeats and confirms
    to_confirm = []  # fast candidates waiting for a confirmation and a gate

    def new_sha():
        recipe_no[0] += 1
        return hashlib.sha256(("bench-synth-recipe-%d" % recipe_no[0]).encode()).hexdigest()

    def emit(kind, payload, ts):
        budget[0] -= 1
        return kind, payload, ts

    while budget[0] > 0:
        run_no[0] += 1
        run = "bench-synth-r%06d" % run_no[0]
        if run_no[0] <= 3:
            purpose = "baseline"
            if baseline_sha is None:
                baseline_sha, baseline_run = new_sha(), run
                recipes[baseline_sha] = BASE_STEP_MS
                best = (run, baseline_sha, BASE_STEP_MS)
            sha, parent, change = baseline_sha, (None if run_no[0] == 1 else baseline_run), None
            hypothesis, lever = "untuned baseline, measured three times to establish the noise band", None
        elif to_confirm and rng.random() < 0.7:
            parent, sha = to_confirm.pop(0)
            purpose, change, lever = "confirm", None, None
            hypothesis = "confirm %s: same recipe, fresh pods, to rule out a lucky run" % parent
        elif recent and rng.random() < 0.08:
            parent, sha = rng.choice(recent[-50:] + [(baseline_run, baseline_sha)])
            purpose, change, lever = "repeat", None, None
            hypothesis = "repeat %s to measure run-to-run noise on this recipe and cluster" % parent
        else:
            purpose = "candidate"
            parent, parent_sha, parent_step = best
            sha = new_sha()
            gap = parent_step - FLOOR_STEP_MS
            recipes[sha] = FLOOR_STEP_MS + gap * (1 + rng.gauss(0.04, 0.03))
            change, lever = _change(rng), rng.choice(LEVERS)
            hypothesis = _hypothesis(rng, run_no[0])
            recent.append((run, sha))
            del recent[:-200]
        step = recipes[sha]
        seconds = round(rng.uniform(540.0, 720.0), 3)
        payload = {"run": run, "purpose": purpose, "recipe_sha256": sha, "gpus": GPUS, "backend": "kuberay",
                   "expected_gpu_hours": round(GPUS * 660.0 / 3600.0, 3)}
        if parent is not None:
            payload["parent"] = parent
        if change is not None:
            payload["change"] = change
        payload["hypothesis"] = hypothesis
        if lever:
            payload["lever"] = lever
        yield emit("launch", payload, clock(20, 90))
        if budget[0] <= 0:
            break  # the last run stays in flight

        failed = run_no[0] > 3 and rng.random() < 0.05
        ts = clock(seconds, seconds + 60)
        if failed:
            seconds = round(rng.uniform(60.0, 300.0), 3)
            result = {"run": run, "status": "failed",
                      "failure": {"class": "oom", "detail": "CUDA out of memory (SYNTHETIC)"}}
        else:
            result = {"run": run, "status": "finished",
                      "metrics": metrics(jittered(step, 0.02, rng.randrange(1 << 30)), gbs=GBS, seq=SEQ, gpus=GPUS)}
        charges.append(("charge", {"run": run, "gpus": GPUS, "seconds": float(seconds),
                                   "gpu_seconds": int(math.ceil(round(GPUS * seconds, 6))), "what": "run"}, ts))
        yield emit("result", result, ts)
        if budget[0] <= 0:
            break

        if not failed and purpose == "candidate" and (step < best[2] * 0.995 or rng.random() < 0.03):
            to_confirm.append((run, sha))  # promising (or just curious): relaunch it as a confirm
        gate = None
        if purpose == "confirm" and not failed:
            gate = {"run": parent, "verdict": "pass" if rng.random() < 0.9 else "fail", "against": baseline_run}
            if gate["verdict"] == "pass" and step < best[2]:
                best = (parent, sha, step)
        elif not failed and rng.random() < 0.075:
            gate = {"run": run, "verdict": "pass" if rng.random() < 0.8 else "fail", "against": baseline_run}
        if gate is not None:
            if gate["verdict"] == "fail":
                gate["reasons"] = ["loss at iteration 19 differs from the baseline by more than 2% (SYNTHETIC)"]
            yield emit("gate", gate, clock(30, 120))
            if budget[0] <= 0:
                break
        if rng.random() < 0.03:
            yield emit("note", {"text": "SYNTHETIC note: cluster maintenance window, queue was slow", "run": run},
                       clock(5, 60))


def build(directory, total_rows, seed):
    """Write the SYNTHETIC campaign; return its facts."""
    started = time.perf_counter()
    st = settings(ATTUNE_RUN_PREFIX="bench-synth-", ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT="synthetic",
                  ATTUNE_NAMESPACE="bench-synth", ATTUNE_IMAGE="registry.invalid/synthetic:0",
                  ATTUNE_SHARED_DIR="/synthetic", AUTOTUNE_LOG_POD="synthetic-log-reader",
                  AUTOTUNE_GPUH_BUDGET="2000000")
    campaign_mod.init(directory, st, CAMPAIGN_ID, ts=START.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    campaign = campaign_mod.Campaign(directory)
    charges = []
    written = campaign.ledger.append_many(synthetic_rows(total_rows, seed, charges))
    campaign.gpu_log.append_many(charges, campaign=CAMPAIGN_ID)
    return {"build_s": time.perf_counter() - started, "appended": written}


# ------------------------------------------------------------------------------------------ time
def count_lines(path):
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))


def kinds(path):
    """Row counts by kind, launches by purpose and results by status."""
    out = {}
    with open(path, "rb") as handle:
        for line in handle:
            row = json.loads(line)
            key = row["kind"]
            if key == "launch":
                key = "launch." + row["purpose"]
            elif key == "result":
                key = "result." + row["status"]
            out[key] = out.get(key, 0) + 1
    return out


def run_cmd(verb_args, directory, timeout):
    argv = [sys.executable, str(ATTUNE)] + verb_args + ["--campaign", str(directory)]
    env = dict(os.environ)
    env.pop("ATTUNE_CAMPAIGN_DIR", None)
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit("bench: `%s` ran past --timeout %ss" % (" ".join(argv), timeout))
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
        raise SystemExit("bench: `%s` exited %d" % (" ".join(argv), proc.returncode))
    return elapsed, proc.stdout.decode("utf-8", "replace")


def nproc():
    exe = shutil.which("nproc")
    if exe:
        try:
            return int(subprocess.run([exe], stdout=subprocess.PIPE, check=True).stdout.strip())
        except (subprocess.SubprocessError, ValueError):
            pass
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def grep(text, key):
    for line in text.splitlines():
        if line.startswith(key + ": "):
            return line[len(key) + 2:]
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS, help="ledger rows, genesis included (100000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions of each command (3)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed of the SYNTHETIC data")
    parser.add_argument("--keep", metavar="DIR", help="build the campaign in DIR (must not exist) and keep it")
    parser.add_argument("--campaign", metavar="DIR", help="time this existing campaign; build nothing")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one command may take (600)")
    parser.add_argument("--only", nargs="+", choices=[name for name, _ in COMMANDS],
                        help="time only these commands")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.rows < 10 or args.repeat < 1:
        parser.error("--rows must be at least 10 and --repeat at least 1")
    if args.keep and args.campaign:
        parser.error("--keep and --campaign exclude each other")

    tmp = None
    built = None
    if args.campaign:
        directory = Path(args.campaign).resolve()
    elif args.keep:
        directory = Path(args.keep).resolve()
        if directory.exists() and any(directory.iterdir()):
            parser.error("--keep %s exists and is not empty; use --campaign to time it" % directory)
    else:
        tmp = tempfile.mkdtemp(prefix="attune-bench-")
        directory = Path(tmp) / "campaign"
    ledger = directory / campaign_mod.LEDGER
    gpu_log = directory / campaign_mod.GPU_HOURS
    try:
        if not args.campaign:
            built = build(directory, args.rows, args.seed)
        rows_built = count_lines(ledger)
        warm_s, warm_out = run_cmd(["rank"], directory, args.timeout)
        rows_timed = count_lines(ledger)
        selected = [(name, verb) for name, verb in COMMANDS if not args.only or name in args.only]
        samples = {name: [] for name, _ in selected}
        outputs = {}
        for _ in range(args.repeat):
            for name, verb in selected:
                elapsed, out = run_cmd(verb, directory, args.timeout)
                samples[name].append(elapsed)
                outputs[name] = out
        rows_after = count_lines(ledger)
        result = {
            "data": "SYNTHETIC",
            "python": platform.python_version(),
            "python_executable": sys.executable,
            "nproc": nproc(),
            "platform": platform.platform(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "campaign_dir": str(directory) + (" (temporary, removed)" if tmp else ""),
            "seed": None if args.campaign else args.seed,
            "build_s": round(built["build_s"], 3) if built else None,
            "ledger_rows_built": rows_built,
            "ledger_rows_timed": rows_timed,
            "ledger_rows_after": rows_after,
            "ledger_mb": round(ledger.stat().st_size / 1e6, 2),
            "gpu_hours_rows": count_lines(gpu_log),
            "gpu_hours_mb": round(gpu_log.stat().st_size / 1e6, 2),
            "ledger_kinds": kinds(ledger),
            "warmup": "one untimed `rank` ran first (%.3f s, leader_recorded: %s); timed runs are the steady state"
                      % (warm_s, grep(warm_out, "leader_recorded") or "no"),
            "warmup_rank_s": round(warm_s, 3),
            "leader": grep(outputs.get("status", ""), "leader") or grep(warm_out, "leader"),
            "repeat": args.repeat,
            "target_s": TARGET_S,
            "commands": {},
        }
        for name, verb in selected:
            values = samples[name]
            result["commands"][name] = {
                "command": "python3 skill/scripts/attune.py %s --campaign DIR" % " ".join(verb),
                "min_s": round(min(values), 3), "median_s": round(statistics.median(values), 3),
                "max_s": round(max(values), 3), "samples_s": [round(v, 3) for v in values],
                "under_target": statistics.median(values) < TARGET_S,
            }
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return 0
    lines = ["data: SYNTHETIC (seeded generator + tests/factory.py; nothing measured on hardware)"]
    for key in ("python", "python_executable", "nproc", "platform", "date_utc", "campaign_dir", "seed", "build_s",
                "ledger_rows_built", "ledger_rows_timed", "ledger_mb", "gpu_hours_rows", "gpu_hours_mb"):
        lines.append("%s: %s" % (key, result[key]))
    lines.append("ledger_kinds: %s" % ", ".join("%s=%d" % item for item in sorted(result["ledger_kinds"].items())))
    lines.append("warmup: %s" % result["warmup"])
    lines.append("leader: %s" % result["leader"])
    lines.append("repeat: %d" % args.repeat)
    lines.append("target_s: %.1f (median must be under it)" % TARGET_S)
    for name, info in result["commands"].items():
        lines.append("%s: min %.3f s, median %.3f s, max %.3f s, under_2s: %s (%s)" % (
            name, info["min_s"], info["median_s"], info["max_s"], "yes" if info["under_target"] else "NO",
            info["command"]))
    if rows_after != rows_timed:
        lines.append("warning: timed commands appended %d row(s)" % (rows_after - rows_timed))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
