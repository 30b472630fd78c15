"""Benchmark (not a test): `attune metrics LOG` and `attune metrics --json LOG` on a large log, their
CPU time and peak RSS beside `grep -c iteration LOG` on the same file, in one run.

    .venv/bin/python bench/bench_logparse.py [--mb 1024] [--every 500] [--keep FILE] [--log FILE] [--repeat 2]

Without --log it builds a SYNTHETIC log of --mb MiB from line shapes copied from real Megatron-LM,
Megatron-Bridge, Megatron-DeepSpeed, NeMo and slime output (tests/data/logs): iteration lines with and
without timestamps and prefixes, seconds-unit Megatron-DeepSpeed lines, NeMo 2 lines, NeMo 1 bars,
memory reports, timer blocks, Bridge step-time lines, slime step lines and chatter, with the iteration
number and the numbers varied. Every number in it is SYNTHETIC. Each command runs in a fresh process
(its peak RSS is its own), --repeat times, and the run with the least CPU time is shown (the host is
shared); CPU time is user + system of the command and its children. The parse is checked: the steps
`attune metrics --json` counts must be the steps written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ATTUNE = REPO / "skill" / "scripts" / "attune.py"

STEP_TEMPLATES = (
    " [2025-05-09 06:22:{sec:02d}] iteration {it:8d}/ 2753818 | consumed samples: {cs:12d} | elapsed time per "
    "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {tf:.1f} | learning rate: 3.333333E-05 | "
    "global batch size:    32 | lm loss: {loss:.6E} | load_balancing_loss: 8.778212E-01 | loss scale: 1.0 | "
    "grad norm: {gn:.3f} | num zeros: 0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "[lrdn3321:3]:  iteration {it:8d}/  242204 | consumed samples: {cs:12d} | elapsed time per iteration (ms): "
    "{ms:.1f} | learning rate: 8.000E-06 | global batch size:  1008 | lm loss: {loss:.6E} | loss scale: 1.0 | "
    "grad norm: {gn:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |",
    "[default7]: iteration {it:8d}/  115311 | consumed samples: {cs:12d} | consumed tokens: {ct:12d} | elapsed time "
    "per iteration (s): {s:.2f} | learning rate: 5.279E-05 | global batch size:  2048 | lm loss: {loss:.6E} | "
    "grad norm: {gn:.3f} | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 | "
    "samples per second: 19.238 | TFLOPs: {tf:.2f} |",
    " 0: Training epoch 0, iteration {it}/2753818 | lr: 5.389e-06 | global_batch_size: 512 | global_step: {it} | "
    "reduced_train_loss: {loss:.4g} | train_step_timing in s: {s:.4g} | consumed_samples: {cs} | TFLOPS_per_GPU: {tf:.4g}",
    "Epoch 0: :  60%|██████    | {it}/2753818 [4:26:54<2:56:09, v_num=0, reduced_train_loss={loss:.3g}, "
    "global_step={it}.0, consumed_samples={cs}.0, train_step_timing in s={s:.3f}]",
)
RECORD_TEMPLATES = (
    "[Rank 0] (after {it} iterations) memory (MB) | allocated: 33437.7109375 | max allocated: 61396.447265625 | "
    "reserved: 61620.0 | max reserved: 61620.0",
    "(min, max) time across ranks (ms):\n    evaluate .......................................: ({ms:.2f}, {ms:.2f})",
    "Step Time : {s:.2f}s GPU utilization: {tf:.1f}MODEL_TFLOP/s/GPU",
    "(MegatronTrainRayActor pid=32167) [2025-12-17 14:10:28] model.py:649 - step {it}: {{'train/loss': {loss}, "
    "'train/grad_norm': {gn}, 'train/lr-pg_0': 1e-06, 'train/step': {it}}}",
)
# Most of a large log is chatter around the records (NCCL_DEBUG=INFO, Ray, warnings): one line in
# RECORD_EVERY is a record, the rest is chatter of these shapes.
NOISE = (
    "WARNING:megatron.core.rerun_state_machine:Setting RerunStateMachine mode RerunMode.DISABLED",
    "(raylet) [2025-04-02 15:02:00,117 I 135782 135782] (raylet) node_manager.cc:1000: health check ok",
    "node-{n}:{pid}:{pid} [{r}] NCCL INFO Channel {c:02d}/0 : {r} -> {r2} via P2P/CUMEM/read",
    "node-{n}:{pid}:{pid} [{r}] NCCL INFO comm 0x{h:x} rank {r} nRanks 64 nNodes 8 localRanks 8 localRank {r} - Init COMPLETE",
    "(MegatronTrainRayActor pid={pid}) [AMEM] allocated {h} bytes [repeated 15x across cluster]",
)
RECORD_EVERY = 500


def build(path: Path, megabytes: int, every: int = RECORD_EVERY, seed: int = 20261130) -> tuple:
    """Write the log, one record in ``every`` lines; return (bytes, steps written)."""
    rng = random.Random(seed)
    target = megabytes * 1024 * 1024
    written = iteration = steps = 0
    templates = STEP_TEMPLATES + RECORD_TEMPLATES
    with open(path, "w", encoding="utf-8") as handle:
        while written < target:
            chunk = []
            for _ in range(2000):
                if rng.randrange(every):
                    template = NOISE[rng.randrange(len(NOISE))]
                    chunk.append(template.format(n=rng.randrange(8), pid=rng.randrange(1000, 99999),
                                                 r=rng.randrange(8), r2=rng.randrange(8), c=rng.randrange(32),
                                                 h=rng.randrange(1 << 40)))
                    continue
                iteration += 1
                index = rng.randrange(len(templates))
                steps += index < len(STEP_TEMPLATES)
                chunk.append(templates[index].format(
                    it=iteration, sec=iteration % 60, cs=iteration * 32, ct=iteration * 65536,
                    ms=rng.uniform(800, 4000), tf=rng.uniform(100, 500), loss=rng.uniform(2, 11),
                    gn=rng.uniform(0.5, 4), s=rng.uniform(1, 9)))
            text = "\n".join(chunk) + "\n"
            handle.write(text)
            written += len(text.encode("utf-8"))
    return written, steps


# Run argv in this fresh process's child and report its CPU time, peak RSS and exit code (RUSAGE_CHILDREN
# holds only that child, so its ru_maxrss is the command's own).
_MEASURE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "p = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], 'wb')); "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(time.perf_counter() - t, u.ru_utime + u.ru_stime, u.ru_maxrss, p.returncode)")


def measure(argv, out: Path) -> dict:
    report = subprocess.run([sys.executable, "-c", _MEASURE, str(out)] + argv, stdout=subprocess.PIPE,
                            check=True).stdout.decode().split()
    wall, cpu, rss_kb, rc = float(report[0]), float(report[1]), int(report[2]), int(report[3])
    if rc != 0:
        raise SystemExit("bench: %s exited %d" % (" ".join(argv), rc))
    return {"wall": wall, "cpu": cpu, "rss_mb": rss_kb / 1024.0}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the SYNTHETIC log in MiB (1024)")
    parser.add_argument("--every", type=int, default=RECORD_EVERY,
                        help="one record in this many lines (%d; 1: every line a record)" % RECORD_EVERY)
    parser.add_argument("--keep", help="write the SYNTHETIC log here and keep it")
    parser.add_argument("--log", help="measure this log instead of building one (no step count check)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each command; the least CPU time is shown (2)")
    args = parser.parse_args(argv)
    tmp = tempfile.TemporaryDirectory(prefix="attune-logbench-")
    work = Path(tmp.name)
    try:
        steps = None
        if args.log:
            path = Path(args.log)
            size = path.stat().st_size
            print("data: %s" % path)
        else:
            path = Path(args.keep) if args.keep else work / "synthetic.log"
            started = time.perf_counter()
            size, steps = build(path, args.mb, args.every)
            print("data: SYNTHETIC (real line formats, made-up numbers, one record in %d lines), built in %.1f s"
                  % (args.every, time.perf_counter() - started))
        print("log_mb: %.1f" % (size / 1e6))
        print("python: %s" % sys.version.split()[0])
        print("nproc: %d" % os.cpu_count())
        commands = (("grep -c iteration LOG", ["grep", "-c", "iteration", str(path)], "grep.out"),
                    ("attune metrics LOG", [sys.executable, str(ATTUNE), "metrics", str(path)], "text.out"),
                    ("attune metrics --json LOG", [sys.executable, str(ATTUNE), "metrics", "--json", str(path)],
                     "json.out"))
        runs = {name: [] for name, _argv, _out in commands}
        for _ in range(max(1, args.repeat)):  # interleaved, so a busy moment on the host hits them alike
            for name, command, out in commands:
                runs[name].append(measure(command, work / out))
        rows = [(name, min(runs[name], key=lambda row: row["cpu"])) for name, _argv, _out in commands]
        print("runs: %d of each; CPU times: %s" % (max(1, args.repeat), "; ".join(
            "%s %s" % (name, ", ".join("%.2f" % row["cpu"] for row in runs[name])) for name, _argv, _out in commands)))
        shown = json.loads((work / "json.out").read_text())
        if steps is not None and shown["counts"]["steps"] != steps:
            raise SystemExit("bench: attune counted %d steps, the log has %d" % (shown["counts"]["steps"], steps))
        grep_cpu = rows[0][1]["cpu"]
        print("steps: %d read (%s), %d kept in full, JSON output %.1f MB" % (
            shown["counts"]["steps"], "as written" if steps is not None else "not checked", len(shown["steps"]),
            (work / "json.out").stat().st_size / 1e6))
        print()
        print("| command | CPU time | x grep | wall | MB/s | peak RSS |")
        print("|---|---|---|---|---|---|")
        for name, row in rows:
            print("| `%s` | %.2f s | %s | %.2f s | %.0f | %.1f MB |" % (
                name, row["cpu"], "%.1f" % (row["cpu"] / grep_cpu) if grep_cpu > 0 else "n/a", row["wall"],
                size / 1e6 / row["wall"], row["rss_mb"]))
        print()
        for name, row in rows[1:]:
            ratio = row["cpu"] / grep_cpu if grep_cpu > 0 else float("inf")
            print("goal %s: CPU %.1fx grep (at most 20x): %s; peak RSS %.1f MB (under 200 MB): %s" % (
                name, ratio, "met" if ratio <= 20 else "MISSED", row["rss_mb"], "met" if row["rss_mb"] < 200 else "MISSED"))
    finally:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
