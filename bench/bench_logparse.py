"""Benchmark (not a test): parse a large SYNTHETIC log made of real-format lines with
`attune metrics`, and report MB/s and peak RSS, beside `grep -c iteration` on the same file.

    .venv/bin/python bench/bench_logparse.py [--mb 1024] [--keep FILE]

The log repeats line shapes copied from real Megatron-LM, Megatron-Bridge and slime output
(tests/data/logs): iteration lines with and without timestamps and prefixes, memory reports,
timer blocks, Bridge step-time lines, slime step lines and noise, with the iteration number and
numbers varied. Every number in it is SYNTHETIC.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ATTUNE = REPO / "skill" / "scripts" / "attune.py"

TEMPLATES = (
    " [2025-05-09 06:22:{sec:02d}] iteration {it:8d}/ 2753818 | consumed samples: {cs:12d} | elapsed time per "
    "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | learning rate: 3.333333E-05 | "
    "global batch size:    32 | lm loss: {loss:.6E} | load_balancing_loss: 8.778212E-01 | loss scale: 1.0 | "
    "grad norm: {gn:.3f} | num zeros: 0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "[lrdn3321:3]:  iteration {it:8d}/  242204 | consumed samples: {cs:12d} | elapsed time per iteration (ms): "
    "{ms:.1f} | learning rate: 8.000E-06 | global batch size:  1008 | lm loss: {loss:.6E} | loss scale: 1.0 | "
    "grad norm: {gn:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "[Rank 0] (after {it} iterations) memory (MB) | allocated: 33437.7109375 | max allocated: 61396.447265625 | "
    "reserved: 61620.0 | max reserved: 61620.0",
    "(min, max) time across ranks (ms):\n    evaluate .......................................: ({ms:.2f}, {ms:.2f})",
    "Step Time : {s:.2f}s GPU utilization: {tf:.1f}MODEL_TFLOP/s/GPU",
    "(MegatronTrainRayActor pid=32167) [2025-12-17 14:10:28] model.py:649 - step {it}: {{'train/loss': {loss}, "
    "'train/grad_norm': {gn}, 'train/lr-pg_0': 1e-06, 'train/step': {it}}}",
)
# Most of a large log is chatter around the records (NCCL_DEBUG=INFO, Ray, warnings): one line in
# RECORD_EVERY is a record, the rest is noise of these shapes.
NOISE = (
    "WARNING:megatron.core.rerun_state_machine:Setting RerunStateMachine mode RerunMode.DISABLED",
    "(raylet) [2025-04-02 15:02:00,117 I 135782 135782] (raylet) node_manager.cc:1000: health check ok",
    "node-{n}:{pid}:{pid} [{r}] NCCL INFO Channel {c:02d}/0 : {r} -> {r2} via P2P/CUMEM/read",
    "node-{n}:{pid}:{pid} [{r}] NCCL INFO comm 0x{h:x} rank {r} nRanks 64 nNodes 8 localRanks 8 localRank {r} - Init COMPLETE",
    "(MegatronTrainRayActor pid={pid}) [AMEM] allocated {h} bytes [repeated 15x across cluster]",
)
RECORD_EVERY = 500


def build(path: Path, megabytes: int, seed: int = 20261130) -> int:
    rng = random.Random(seed)
    target = megabytes * 1024 * 1024
    written = 0
    iteration = 0
    with open(path, "w") as handle:
        while written < target:
            chunk = []
            for _ in range(2000):
                if rng.randrange(RECORD_EVERY):
                    template = NOISE[rng.randrange(len(NOISE))]
                    chunk.append(template.format(n=rng.randrange(8), pid=rng.randrange(1000, 99999),
                                                 r=rng.randrange(8), r2=rng.randrange(8), c=rng.randrange(32),
                                                 h=rng.randrange(1 << 40)))
                    continue
                iteration += 1
                template = TEMPLATES[rng.randrange(len(TEMPLATES))]
                chunk.append(template.format(it=iteration, sec=iteration % 60, cs=iteration * 32,
                                             ms=rng.uniform(800, 4000), tf=rng.uniform(100, 500),
                                             loss=rng.uniform(2, 11), gn=rng.uniform(0.5, 4), s=rng.uniform(1, 9)))
            text = "\n".join(chunk) + "\n"
            handle.write(text)
            written += len(text)
    return written


def timed(argv):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit("bench: %s exited %d: %s" % (argv, proc.returncode, proc.stderr.decode()[-500:]))
    return elapsed, after.ru_maxrss, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, proc.stdout


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the SYNTHETIC log in MiB (1024)")
    parser.add_argument("--keep", help="write the log here and keep it")
    args = parser.parse_args(argv)
    tmp = None
    if args.keep:
        path = Path(args.keep)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="attune-logbench-")
        path = Path(tmp.name) / "synthetic.log"
    try:
        started = time.perf_counter()
        size = build(path, args.mb)
        print("data: SYNTHETIC (real line formats, made-up numbers)")
        print("log_mb: %.1f" % (size / 1e6))
        print("build_s: %.1f" % (time.perf_counter() - started))
        print("python: %s" % sys.version.split()[0])
        print("nproc: %d" % os.cpu_count())
        elapsed, rss_kb, cpu, _out = timed(["grep", "-c", "iteration", str(path)])
        print("grep_c_iteration: %.2f s, %.0f MB/s, peak RSS %.1f MB" % (elapsed, size / 1e6 / elapsed, rss_kb / 1024))
        # ru_maxrss of RUSAGE_CHILDREN is the largest child so far: measure attune in a fresh process
        code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
                "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL); "
                "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)")
        out = subprocess.run([sys.executable, "-c", code, sys.executable, str(ATTUNE), "metrics", str(path), "--json"],
                             stdout=subprocess.PIPE, check=True).stdout.decode().split()
        elapsed, rss_kb, rc = float(out[0]), int(out[1]), int(out[2])
        if rc != 0:
            raise SystemExit("bench: attune metrics exited %d" % rc)
        print("attune_metrics: %.2f s, %.1f MB/s, peak RSS %.1f MB (goal under 200 MB)"
              % (elapsed, size / 1e6 / elapsed, rss_kb / 1024))
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
