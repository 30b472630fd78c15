#!/usr/bin/env python3
"""Benchmark `attune status`, `attune rank` and `attune verify` on a large SYNTHETIC campaign.

    .venv/bin/python bench/bench_status_rank.py [--rows 100000] [--repeat 3] [--keep DIR] [--json] [--out FILE]
    .venv/bin/python bench/bench_status_rank.py --campaign DIR   # time an existing campaign, build nothing
    .venv/bin/python bench/bench_status_rank.py --attune /frozen/copy/skill/scripts/attune.py

This is a benchmark, not a test: it never fails on slowness, it reports it. It exits non-zero only
when a timed command itself fails (a non-zero exit status or a timeout).

1. Build. A campaign is written through the real library (``attune.campaign.ledger.init``, then
   ``Campaign.ledger.append_many`` and ``Campaign.gpu_log.append_many``), so every row is
   validated and hash-chained exactly as in a real campaign. The library and ``tests/factory.py``
   are imported from the copy being timed (``--attune``, default this checkout), so the rows have
   the format that code writes. ALL DATA IS SYNTHETIC: run ids, recipes, hypotheses, step times
   and GPU-seconds come from a seeded random generator (default seed 20261102) and
   ``tests/factory.py`` (``metrics``, ``jittered``); nothing was measured on hardware, and the
   timestamps (from 2026-11-02T09:00:00.000000Z, strictly increasing) may lie after today. The mix
   looks like a long campaign: per run one ``launch`` row (the first 3 runs are the baseline, then
   mostly ``candidate`` with some ``repeat`` and ``confirm``), one ``result`` row (20 iterations of
   metrics; about 5% of runs fail with an OOM and no metrics), a ``gate`` row for about 10% of runs
   and a ``note`` row now and then, until the ledger holds ``--rows`` rows (the genesis
   ``campaign`` row included). Up to 4 runs are in flight at once, so launch and result rows
   interleave and the last few runs are still running. Every result is charged in
   ``gpu_hours.jsonl``.
2. Time. Each command is run as a subprocess exactly as a user runs it,
   ``<python> skill/scripts/attune.py VERB --campaign DIR``, with ``<python>`` the interpreter that
   runs this script (the repo's ``.venv``), and its whole wall time (interpreter start included)
   is measured with ``time.perf_counter``; the child's CPU time is reported beside it (CPU much
   below wall time means the machine was busy with something else). One untimed ``rank`` runs
   first: it may append a ``leader`` row and it builds matplotlib's font cache, so the timed runs
   measure the steady state. The commands are then timed in rounds (status, rank, rank
   --no-chart, verify; repeated ``--repeat`` times) and reported as min / median / max against
   the 2 s target (a command is under it when its median is). A SHA-256 of the timed code is
   taken before and after, and a warning is printed if it changed during the run.

Output: greppable ``key: value`` lines, or one JSON object with ``--json``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import heapq
import json
import math
import os
import platform
import random
import resource
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
LEDGER, GPU_HOURS = "ledger.jsonl", "gpu_hours.jsonl"


TARGET_S = 2.0
DEFAULT_ROWS = 100_000
DEFAULT_SEED = 20261102
CAMPAIGN_ID = "bench-synth-20261102"
START = datetime.datetime(2026, 11, 2, 9, 0, 0)
GPUS = 64
BASE_STEP_MS = 3400.0  # SYNTHETIC baseline step time
FLOOR_STEP_MS = 0.7 * BASE_STEP_MS  # candidates approach this, never pass it
GBS, SEQ = 1024, 4096
PARALLEL = 4  # runs in flight at once (SYNTHETIC)

# Bound by load_library(): the campaign library and factory of the copy being timed.
campaign_mod = jittered = metrics = settings = None


def load_library(scripts_dir):
    """Import the campaign library and ``tests/factory.py`` from ``scripts_dir`` (the copy being timed): the
    ``attune`` package (``campaign/ledger.py``), or in a copy from before it, the ``attune_core`` package.

    The campaign is written by the same code that is timed, so the row format always matches it.
    """
    global campaign_mod, jittered, metrics, settings
    sys.path[:0] = [str(scripts_dir), str(Path(scripts_dir) / "tests")]
    if (Path(scripts_dir) / "campaign" / "ledger.py").exists():
        import attune  # noqa: F401  (attune.py loads the package from scripts_dir)
        from attune.campaign import ledger as campaign_mod
    else:
        import importlib
        campaign_mod = importlib.import_module("attune_core.campaign")
    from factory import jittered, metrics, settings


COMMANDS = (
    ("status", ["status"]),
    ("rank", ["rank"]),
    ("rank_no_chart", ["rank", "--no-chart"]),
    ("verify", ["verify"]),
    # After one new row (an untimed `attune note` first): the view cache covers all but that row,
    # which is verified and merged, and the cache is rewritten (in a child, joined before exit).
    ("status_new_row", ["status"]),
    ("rank_new_row", ["rank"]),
    # The same with the view cache removed first (.attune/cache: a verified prefix that status and
    # rank reuse; see campaign/viewcache.py): what the first command after a restart pays.
    ("status_cold", ["status"]),
    ("rank_cold", ["rank"]),
)
VIEW_CACHE = (".attune", "cache")

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
def _fmt(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


def synthetic_rows(total_rows, seed, charges, parallel=PARALLEL):
    """Yield ``(kind, payload, ts)`` for ``total_rows - 1`` ledger rows; append charges to ``charges``.

    The genesis ``campaign`` row is the remaining one. Up to ``parallel`` runs are in flight at
    once, so launch and result rows interleave as in a real campaign, and the last few runs are
    still in flight when the target is reached. Timestamps strictly increase. Every value is
    SYNTHETIC.
    """
    rng = random.Random(seed)
    state = {"now": START, "left": total_rows - 1, "runs": 0, "recipes": 0}
    truth = {}  # recipe sha -> its SYNTHETIC true step time in ms
    baseline = {}  # "run", "sha"
    best = []  # [(run, sha, step_ms)]: what candidates branch from (the last confirmed, gated one)
    recent = []  # recent candidates (run, sha), for repeats
    to_confirm = []  # candidates worth a confirmation run
    flight = []  # heap of (finish time, run number, launch payload, seconds)

    def tick(moment=None):
        """The next timestamp: ``moment`` if it is later than the last one, else 1 microsecond later."""
        step = state["now"] + datetime.timedelta(microseconds=1)
        state["now"] = moment if moment is not None and moment > step else step
        state["left"] -= 1
        return _fmt(state["now"])

    def new_sha():
        state["recipes"] += 1
        return hashlib.sha256(("bench-synth-recipe-%d" % state["recipes"]).encode()).hexdigest()

    def launch():
        state["runs"] += 1
        number = state["runs"]
        run = "bench-synth-r%06d" % number
        parent, change, lever = None, None, None
        if number <= 3:
            purpose = "baseline"
            if not baseline:
                baseline.update(run=run, sha=new_sha())
                truth[baseline["sha"]] = BASE_STEP_MS
                best.append((run, baseline["sha"], BASE_STEP_MS))
            else:
                parent = baseline["run"]
            sha = baseline["sha"]
            hypothesis = "untuned baseline, measured three times to establish the noise band"
        elif to_confirm and rng.random() < 0.7:
            parent, sha = to_confirm.pop(0)
            purpose = "confirm"
            hypothesis = "confirm %s: same recipe, fresh pods, to rule out a lucky run" % parent
        elif recent and rng.random() < 0.08:
            parent, sha = rng.choice(recent[-50:] + [(baseline["run"], baseline["sha"])])
            purpose = "repeat"
            hypothesis = "repeat %s to measure run-to-run noise on this recipe and cluster" % parent
        else:
            purpose = "candidate"
            parent, _parent_sha, parent_step = best[-1]
            sha = new_sha()
            truth[sha] = FLOOR_STEP_MS + (parent_step - FLOOR_STEP_MS) * (1 + rng.gauss(0.04, 0.03))
            change, lever = _change(rng), rng.choice(LEVERS)
            hypothesis = _hypothesis(rng, number)
            recent.append((run, sha))
            del recent[:-200]
        payload = {"run": run, "purpose": purpose, "recipe_sha256": sha, "gpus": GPUS, "backend": "kuberay",
                   "expected_gpu_hours": round(GPUS * 660.0 / 3600.0, 3)}
        if parent is not None:
            payload["parent"] = parent
        if change is not None:
            payload["change"] = change
        payload["hypothesis"] = hypothesis
        if lever:
            payload["lever"] = lever
        ts = tick(state["now"] + datetime.timedelta(seconds=rng.uniform(20, 90)))
        seconds = round(rng.uniform(540.0, 720.0), 3)
        queued = datetime.timedelta(seconds=rng.uniform(60, 240))
        heapq.heappush(flight, (state["now"] + queued + datetime.timedelta(seconds=seconds), number, payload,
                                seconds))
        return "launch", payload, ts

    def finish():
        """Yield the rows that finalize the run that ends first."""
        finish_at, number, launched, seconds = heapq.heappop(flight)
        run, purpose, sha = launched["run"], launched["purpose"], launched["recipe_sha256"]
        step = truth[sha]
        failed = number > 3 and rng.random() < 0.05
        if failed:
            seconds = round(rng.uniform(60.0, 300.0), 3)
            result = {"run": run, "status": "failed",
                      "failure": {"class": "oom", "detail": "CUDA out of memory (SYNTHETIC)"}}
        else:
            result = {"run": run, "status": "finished",
                      "metrics": metrics(jittered(step, 0.02, rng.randrange(1 << 30)), gbs=GBS, seq=SEQ, gpus=GPUS)}
        ts = tick(finish_at)
        charges.append(("charge", {"run": run, "gpus": GPUS, "seconds": float(seconds),
                                   "gpu_seconds": int(math.ceil(round(GPUS * seconds, 6))), "what": "run"}, ts))
        yield "result", result, ts
        if failed:
            return
        if purpose == "candidate" and (step < best[-1][2] * 0.995 or rng.random() < 0.03):
            to_confirm.append((run, sha))  # promising (or just curious): relaunch it as a confirm
        gate = None
        if purpose == "confirm":
            gate = {"run": launched["parent"], "verdict": "pass" if rng.random() < 0.9 else "fail",
                    "against": baseline["run"]}
            if gate["verdict"] == "pass" and step < best[-1][2]:
                best.append((launched["parent"], sha, step))
        elif rng.random() < 0.075:
            gate = {"run": run, "verdict": "pass" if rng.random() < 0.8 else "fail", "against": baseline["run"]}
        if gate is not None:
            if gate["verdict"] == "fail":
                gate["reasons"] = ["loss at iteration 19 differs from the baseline by more than 2% (SYNTHETIC)"]
            yield "gate", gate, tick(state["now"] + datetime.timedelta(seconds=rng.uniform(30, 120)))
        if rng.random() < 0.03:
            yield "note", {"text": "SYNTHETIC note: cluster maintenance window, queue was slow", "run": run}, \
                tick(state["now"] + datetime.timedelta(seconds=rng.uniform(5, 60)))

    while state["left"] > 0:
        # Keep `parallel` runs in flight; the baseline is measured alone, as a campaign starts.
        limit = 1 if state["runs"] < 3 else parallel
        if len(flight) < limit:
            yield launch()
            continue
        for item in finish():
            yield item
            if state["left"] <= 0:
                return


def build(directory, total_rows, seed):
    """Write the SYNTHETIC campaign; return its facts."""
    started = time.perf_counter()
    st = settings(ATTUNE_RUN_PREFIX="bench-synth-", ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT="synthetic",
                  ATTUNE_NAMESPACE="bench-synth", ATTUNE_IMAGE="registry.invalid/synthetic:0",
                  ATTUNE_SHARED_DIR="/synthetic", AUTOTUNE_LOG_POD="synthetic-log-reader",
                  AUTOTUNE_GPUH_BUDGET="2000000")
    campaign_mod.init(directory, st, CAMPAIGN_ID, ts=START.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                      note="SYNTHETIC benchmark campaign written by bench/bench_status_rank.py (seed %d); "
                           "no number in it was measured on hardware" % seed)
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


def run_cmd(attune, verb_args, directory, timeout):
    argv = [sys.executable, str(attune)] + verb_args + ["--campaign", str(directory)]
    env = dict(os.environ)
    env.pop("ATTUNE_CAMPAIGN_DIR", None)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit("bench: `%s` ran past --timeout %ss" % (" ".join(argv), timeout))
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode("utf-8", "replace"))
        raise SystemExit("bench: `%s` exited %d" % (" ".join(argv), proc.returncode))
    return elapsed, cpu, proc.stdout.decode("utf-8", "replace")


def loadavg():
    try:
        with open("/proc/loadavg") as handle:
            return " ".join(handle.read().split()[:3])
    except OSError:
        return "n/a"


def fingerprint(attune):
    """SHA-256 over the code in play (attune.py, the package's *.py, tests/factory.py), to notice edits."""
    digest = hashlib.sha256()
    root = Path(attune).resolve().parent
    code = sorted(path for path in root.rglob("*.py") if "tests" not in path.relative_to(root).parts)
    for path in code + [root / "tests" / "factory.py"]:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def git_state(attune):
    """The commit of the timed code's checkout and whether its skill/ has uncommitted changes."""
    where = Path(attune).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=str(where), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=True).stdout.decode().strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=str(where),
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    changed = [line[3:] for line in dirty.splitlines()]
    return "%s%s" % (head, " + uncommitted changes in %s" % ", ".join(changed) if changed else " (clean)")


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
    parser.add_argument("--attune", metavar="PATH", default=str(ATTUNE),
                        help="the attune.py to time (default: this checkout's skill/scripts/attune.py); its "
                             "package and tests/factory.py also write the campaign. Point it at a frozen copy "
                             "to time one version while skill/ is being edited")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--out", metavar="FILE",
                        help="also write the JSON object to FILE (bench/out/ is ignored by git)")
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
    attune = Path(args.attune).resolve()
    load_library(attune.parent)
    ledger = directory / LEDGER
    gpu_log = directory / GPU_HOURS
    code_before = fingerprint(attune)
    code_git = git_state(attune)
    try:
        if not args.campaign:
            built = build(directory, args.rows, args.seed)
        rows_built = count_lines(ledger)
        warm_s, _warm_cpu, warm_out = run_cmd(attune, ["rank"], directory, args.timeout)
        rows_timed = count_lines(ledger)
        selected = [(name, verb) for name, verb in COMMANDS if not args.only or name in args.only]
        samples = {name: [] for name, _ in selected}
        cpu = {name: [] for name, _ in selected}
        outputs = {}
        load_before = loadavg()
        for _ in range(args.repeat):
            for name, verb in selected:
                if name.endswith("_cold"):
                    shutil.rmtree(os.path.join(str(directory), *VIEW_CACHE), ignore_errors=True)
                if name.endswith("_new_row"):
                    run_cmd(attune, ["note", "benchmark: one new row before %s" % name], directory, args.timeout)
                elapsed, used, out = run_cmd(attune, verb, directory, args.timeout)
                samples[name].append(elapsed)
                cpu[name].append(used)
                outputs[name] = out
        load_after = loadavg()
        rows_after = count_lines(ledger)
        code_after = fingerprint(attune)
        result = {
            "data": "SYNTHETIC",
            "python": platform.python_version(),
            "python_executable": sys.executable,
            "nproc": nproc(),
            "platform": platform.platform(),
            "loadavg_before_after": "%s / %s" % (load_before, load_after),
            "pythondontwritebytecode": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "campaign_dir": str(directory) + (" (temporary, removed)" if tmp else ""),
            "attune": str(attune),
            "code_git": code_git,
            "code_sha256": code_before,
            "code_changed_during_run": code_after != code_before,
            "seed": None if args.campaign else args.seed,
            "build_s": round(built["build_s"], 3) if built else None,
            "ledger_rows_at_start": rows_built,
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
                "cpu_median_s": round(statistics.median(cpu[name]), 3),
                "under_target": statistics.median(values) < TARGET_S,
            }
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n")
        return 0
    lines = ["data: SYNTHETIC (seeded generator + tests/factory.py; nothing measured on hardware)"]
    for key in ("python", "python_executable", "nproc", "loadavg_before_after", "pythondontwritebytecode",
                "platform", "date_utc", "campaign_dir", "attune", "code_git",
                "code_sha256", "seed", "build_s",
                "ledger_rows_at_start", "ledger_rows_timed", "ledger_mb", "gpu_hours_rows", "gpu_hours_mb"):
        lines.append("%s: %s" % (key, result[key]))
    lines.append("ledger_kinds: %s" % ", ".join("%s=%d" % item for item in sorted(result["ledger_kinds"].items())))
    lines.append("warmup: %s" % result["warmup"])
    lines.append("leader: %s" % result["leader"])
    lines.append("repeat: %d" % args.repeat)
    lines.append("target_s: %.1f (median must be under it)" % TARGET_S)
    for name, info in result["commands"].items():
        lines.append("%s: min %.3f s, median %.3f s, max %.3f s, cpu %.3f s, under_2s: %s (%s)" % (
            name, info["min_s"], info["median_s"], info["max_s"], info["cpu_median_s"],
            "yes" if info["under_target"] else "NO", info["command"]))
    if result["code_changed_during_run"]:
        lines.append("warning: %s changed while it was timed; the numbers mix two versions, run again"
                     % attune.parent)
    if rows_after != rows_timed:
        lines.append("warning: timed commands appended %d row(s)" % (rows_after - rows_timed))
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
