"""A simulated Megatron-LM pretraining run: real-format output, no GPU (README.md in this folder).

Usage::

    ATTUNE_SIM_HARDWARE=H100 ATTUNE_SIM_GPUS=64 python3 skill/scripts/simulate/sim_megatron.py <pretrain_gpt.py args>
    python3 -m attune.simulate.sim_megatron <pretrain_gpt.py args>          # with skill/scripts on the path

It takes ``pretrain_gpt.py``'s arguments, asks the throughput projection (``projection.api.project``)
what the layout would do on the simulated hardware, and prints what Megatron-LM would: start-up
lines, one iteration line per ``--log-interval`` (step time from the projection times a noise model,
lm loss from a loss model, both fitted to Megatron-LM's golden curves), the memory report, and the
failures a real run shows (CUDA OOM when the projection says the layout does not fit, Megatron's
assertion for an illegal layout, and the faults asked for). Every line starts ``SIMULATED``.

Inputs other than the arguments come from the environment, so the recipe's argument set is
Megatron's own: ``ATTUNE_SIM_HARDWARE`` (required), ``ATTUNE_SIM_GPUS``, ``ATTUNE_SIM_GPUS_PER_NODE``,
``ATTUNE_SIM_SEED``, ``ATTUNE_SIM_FAULT``, ``ATTUNE_SIM_SPEED``, ``ATTUNE_SIM_TRUTH`` (README.md).

Exit codes: 0 the run finished; 1 it failed as a real run would (OOM, assertion, crash); 134 an
NCCL timeout took the process down (SIGABRT, as the shell reports it); 2 bad simulator input (no
hardware, an unknown fault, a hardware name the projection does not know).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import os
import shlex
import socket
import sys
import time
from pathlib import Path
from typing import Callable, Optional, TextIO

if __package__ in (None, ""):  # run as a file: load the attune package from this tree (attune.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import attune  # noqa: F401,E402

from attune.core import files  # noqa: E402
from attune.core.command import Command  # noqa: E402
from attune.core.errors import InputError  # noqa: E402
from attune.core.legality import BLACKWELL  # noqa: E402
from attune.correctness.rules import Rules, training_env  # noqa: E402
from attune.simulate import megatron_text as text, noise as model  # noqa: E402

LABEL = "SIMULATED"
FAULTS = ("none", "nccl_timeout", "hang", "crash")
DEFAULT_FAULT_STEP = 3
DEFAULT_SPEED_S = 0.02
DEFAULT_TRAIN_ITERS = 20
START = dt.datetime(2026, 1, 1, 0, 0, 0)  # the simulated clock: timestamps are reproducible
WALL_LINE = "ATTUNE simulated wall time:"  # the last line: what finalize charges a SIMULATED run for
STARTUP_S = 42.0  # initialization and data loading before iteration 1, on the simulated clock
NCCL_EXIT = 134
EXIT_FAILED, EXIT_USAGE = 1, 2


class UsageError(InputError):
    """Bad simulator input (environment), found before anything is printed."""


@dataclasses.dataclass(frozen=True)
class Inputs:
    hardware: str
    gpus: int
    gpus_per_node: Optional[int]
    seed: str  # the run's identity: an integer, "auto:run=<run id>" in a campaign, else "auto:<where it ran>"
    fault: str
    fault_step: int
    speed_s: float
    truth: Optional[str]


def _int(env: dict, name: str, default: Optional[int], minimum: int = 1) -> Optional[int]:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UsageError("%s=%r is not an integer. Fix: give a whole number" % (name, raw))
    if value < minimum:
        raise UsageError("%s=%d is below %d. Fix: give at least %d" % (name, value, minimum, minimum))
    return value


def read_inputs(env: dict) -> Inputs:
    """The simulator's own inputs from the environment; ``UsageError`` names the variable and the fix."""
    hardware = (env.get("ATTUNE_SIM_HARDWARE") or "").strip()
    if not hardware:
        raise UsageError("ATTUNE_SIM_HARDWARE is not set: the simulated GPU type (e.g. H100) is required. Fix: set "
                         "ATTUNE_SIM_HARDWARE in the recipe's env_vars")
    gpus = _int(env, "ATTUNE_SIM_GPUS", None) or _int(env, "WORLD_SIZE", None) or 8
    seed = (env.get("ATTUNE_SIM_SEED") or "0").strip()
    if seed == "auto":  # the run's id, which `attune launch` gives every job; by hand, where it runs
        run = (env.get("ATTUNE_RUN_ID") or "").strip()
        seed = "auto:run=%s" % run if run else "auto:%s@%s" % (os.getcwd(), socket.gethostname())
    elif not seed.lstrip("-").isdigit():
        raise UsageError("ATTUNE_SIM_SEED=%r is neither an integer nor `auto`. Fix: give e.g. 0, 1, ... or auto" % seed)
    fault, _, at = (env.get("ATTUNE_SIM_FAULT") or "none").strip().partition("@")
    if fault not in FAULTS:
        raise UsageError("ATTUNE_SIM_FAULT=%r: unknown fault. Fix: one of %s, optionally @STEP (e.g. hang@5)"
                         % (fault, ", ".join(FAULTS)))
    try:
        fault_step = int(at) if at else DEFAULT_FAULT_STEP
        speed = float(env.get("ATTUNE_SIM_SPEED") or DEFAULT_SPEED_S)
    except ValueError:
        raise UsageError("ATTUNE_SIM_FAULT step or ATTUNE_SIM_SPEED is not a number. Fix: e.g. hang@5, 0.05")
    if fault_step < 1 or speed < 0 or not math.isfinite(speed):
        raise UsageError("the fault step must be at least 1 and ATTUNE_SIM_SPEED a non-negative number of seconds")
    return Inputs(hardware=hardware, gpus=gpus, gpus_per_node=_int(env, "ATTUNE_SIM_GPUS_PER_NODE", None),
                  seed=seed, fault=fault, fault_step=fault_step, speed_s=speed,
                  truth=(env.get("ATTUNE_SIM_TRUTH") or "").strip() or None)


def megatron_args(argv: list) -> dict:
    """The arguments as the project reads a recipe's (``Recipe.args``): ``--flag value``, ``--flag=value``,
    a bare ``--flag`` is ``True``, the last of a repeated flag wins."""
    return Command(" ".join(shlex.quote(word) for word in ["pretrain_gpt.py"] + list(argv))).args()


def _number(args: dict, flag: str, default):
    value = args.get(flag)
    if value in (None, True):
        return default
    try:
        return type(default)(float(value)) if default is not None else float(value)
    except ValueError:
        return default


class Printer(object):
    """Writes labelled lines and keeps the simulated clock."""

    def __init__(self, out: TextIO, sleep: Callable[[float], None]):
        self.out, self.sleep, self.clock = out, sleep, START

    def line(self, content: str) -> None:
        """One line, labelled; Megatron's own leading space (iteration lines) doubles as the separator."""
        self.out.write("%s%s\n" % (LABEL, content if content.startswith(" ") else " " + content))
        self.out.flush()

    def lines(self, contents: list) -> None:
        for content in contents:
            self.line(content)

    def advance(self, seconds: float) -> dt.datetime:
        self.clock += dt.timedelta(seconds=seconds)
        return self.clock


def _vocab(args: dict) -> Optional[int]:
    vocab = _number(args, "--vocab-size", 0.0)
    return int(vocab) if vocab else None


def _padded_vocab(args: dict, tp: int) -> int:
    vocab = _vocab(args) or model.DEFAULT_VOCAB
    multiple = int(_number(args, "--make-vocab-size-divisible-by", 128.0)) * tp
    return int(math.ceil(vocab / multiple) * multiple)


def _run_key(inputs: Inputs, args: dict, env: dict, rules) -> str:
    listed = {name: env[name] for name in sorted(training_env(env, rules))}
    blob = json.dumps({"seed": inputs.seed, "args": {k: str(v) for k, v in sorted(args.items())},
                       "env": listed, "hardware": inputs.hardware, "gpus": inputs.gpus}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _connections_problem(args: dict, env: dict, layout: dict, hardware: str) -> Optional[str]:
    """Megatron-LM's own environment assertion, which a projection of the arguments cannot see."""
    if hardware.lower() in BLACKWELL:
        return None
    if any(flag in args for flag in ("--overlap-moe-expert-parallel-comm", "--use-megatron-fsdp", "--use-custom-fsdp")):
        return None
    if (int(layout.get("tp") or 1) > 1 or int(layout.get("cp") or 1) > 1) and \
            str(env.get("CUDA_DEVICE_MAX_CONNECTIONS")) != "1":
        return text.CUDA_CONNECTIONS
    return None


def _header(printer: Printer, inputs: Inputs, projection: Optional[dict]) -> None:
    per_node = (projection or {}).get("gpus_per_node") or inputs.gpus_per_node
    where = "hardware %s x %d%s" % (inputs.hardware, inputs.gpus, " (%d per node)" % per_node if per_node else "")
    if projection:
        time_part = projection.get("time") or {}
        where += ", projection: step %.3f s, %.1f tokens/s/GPU, MFU %.1f%%" % (
            float(time_part.get("step_s") or 0.0), float(projection.get("tokens_per_s_per_gpu") or 0.0),
            100.0 * float(projection.get("mfu") or 0.0))
    printer.out.write("ATTUNE SIMULATED WORKLOAD: sim_megatron.py, no GPU used, %s, seed %s; every line below "
                      "labelled %s is simulated\n" % (where, inputs.seed, LABEL))
    printer.out.flush()


def _memory_values(projection: dict) -> dict:
    """The memory report from the projection's breakdown (GiB -> MB of 2^20 bytes): allocated = weights,
    gradients and optimizer; max allocated adds activations; reserved adds the overhead."""
    parts = projection["memory"]["breakdown_gib"]
    static = sum(float(parts.get(k) or 0.0) for k in ("weights", "grads", "optimizer"))
    peak = static + float(parts.get("activations") or 0.0)
    reserved = peak + float(parts.get("overhead") or 0.0)
    return {key: "%.2f" % (value * 1024.0) for key, value in (
        ("allocated_mb", static), ("max_allocated_mb", peak), ("reserved_mb", reserved), ("max_reserved_mb", reserved))}


def _oom(printer: Printer, projection: dict, args: dict, inputs: Inputs) -> None:
    memory, layout = projection["memory"], projection["layout"]
    tp, cp = int(layout.get("tp") or 1), int(layout.get("cp") or 1)
    mbs, seq = _number(args, "--micro-batch-size", 1.0), _number(args, "--seq-length", 4096.0)
    tried = mbs * (seq / cp) * _padded_vocab(args, tp) / tp * 4 / 2.0 ** 30  # fp32 logits in the cross entropy
    stream = model.Stream("oom", inputs.seed)
    capacity = float(memory.get("hbm_gib") or 80.0)
    free = tried * (0.05 + 0.85 * stream.uniform())
    in_use = capacity - free
    overhead = float(memory["breakdown_gib"].get("overhead") or 0.0)
    non_torch = overhead if 0.0 < overhead < in_use / 4 else 0.5
    unallocated = min(in_use - non_torch, 0.1 + 1.4 * stream.uniform())
    printer.lines(text.oom_lines(tried, capacity, free, in_use, in_use - non_torch - unallocated, unallocated, layout))


def run(argv: list, env: dict, out: TextIO, project, config_error=(), rules=None,
        sleep: Callable[[float], None] = time.sleep) -> int:
    """Simulate one run of ``pretrain_gpt.py argv``; write its output to ``out``; return the exit code.
    ``project`` is ``projection.api.project`` (or a stand-in with its signature); ``config_error`` the
    exception class it raises for an illegal layout."""
    inputs = read_inputs(env)
    rules = rules or Rules()
    args = megatron_args(argv)
    printer = Printer(out, sleep)
    truth = {"schema_version": 1, "hardware": inputs.hardware, "gpus": inputs.gpus, "seed": inputs.seed,
             "fault": inputs.fault, "steps": [], "memory": [], "failure": None, "projection": None}

    def finish(code: Optional[int]) -> Optional[int]:
        truth["exit_code"] = code
        truth["simulated_seconds"] = (printer.clock - START).total_seconds()
        printer.line("%s %.3f s (exit %s)" % (WALL_LINE, truth["simulated_seconds"], code))
        if inputs.truth:
            files.write_text(inputs.truth, json.dumps(truth, indent=1, sort_keys=True) + "\n")
        return code

    try:
        projection = project(dict(args), inputs.gpus, inputs.hardware, inputs.gpus_per_node)
    except config_error as exc:
        _header(printer, inputs, None)
        printer.lines(text.assertion_lines(str(exc)))
        truth["failure"] = "config_error"
        return finish(EXIT_FAILED)
    truth["projection"] = projection
    _header(printer, inputs, projection)
    layout = projection["layout"]
    problem = _connections_problem(args, env, layout, str(projection.get("hardware") or inputs.hardware))
    if problem:
        printer.lines(text.assertion_lines(problem))
        truth["failure"] = "config_error"
        return finish(EXIT_FAILED)
    printer.line(text.world_size_line(inputs.gpus, layout))
    printer.line(text.datetime_line("after megatron is initialized", printer.advance(STARTUP_S * 0.6)))
    memory = projection["memory"]
    parts = memory["breakdown_gib"]
    static_mb = 1024.0 * sum(float(parts.get(k) or 0.0) for k in ("weights", "grads", "optimizer"))
    printer.line(text.theoretical_memory_line(static_mb, 1024.0 * float(parts.get("activations") or 0.0)))
    printer.line(text.datetime_line("after dataloaders are built", printer.advance(STARTUP_S * 0.4)))
    printer.line("training ...")
    if not memory.get("fits", True):
        _oom(printer, projection, args, inputs)
        truth["failure"] = "oom"
        return finish(EXIT_FAILED)
    return finish(_train(printer, inputs, args, env, rules, projection, truth, finish))


def _train(printer: Printer, inputs: Inputs, args: dict, env: dict, rules, projection: dict, truth: dict,
           finish: Callable) -> int:
    """The training loop's output; ``finish`` records the truth (called here only before a hang)."""
    gbs = int(_number(args, "--global-batch-size", 0.0)) or int(
        _number(args, "--micro-batch-size", 1.0) * int(projection["layout"].get("dp") or 1))
    train_iters = int(_number(args, "--train-iters", 0.0)) or (
        int(_number(args, "--train-samples", 0.0)) // gbs if _number(args, "--train-samples", 0.0) else 0) \
        or DEFAULT_TRAIN_ITERS
    exit_interval = int(_number(args, "--exit-interval", 0.0))
    last = min(train_iters, exit_interval) if exit_interval else train_iters
    interval = max(1, int(_number(args, "--log-interval", 100.0)))
    run_key = _run_key(inputs, args, env, rules)
    deterministic = "--deterministic-mode" in args
    level_keys = model.keys(args, env, rules)
    step_s = float(projection["time"]["step_s"])
    times = model.step_times(last, step_s, run_key)
    loss = model.losses(last, level_keys, None if deterministic else run_key, _vocab(args))
    flops_per_gpu = float(projection.get("model_tflops_per_gpu") or 0.0) * step_s  # TFLOP per step per GPU
    loss_scale = "%.1f" % (_number(args, "--initial-loss-scale", 2.0 ** 32) if "--fp16" in args else 1.0)
    stop = inputs.fault_step if inputs.fault != "none" else None
    since = 1
    for iteration in range(1, last + 1):
        if stop == iteration:
            truth["failure"] = inputs.fault
            if inputs.fault == "hang":
                finish(None)  # the truth is written before the run stops printing
            return _fault(printer, inputs, args, projection["layout"], iteration)
        moment = printer.advance(times[iteration - 1])
        printer.sleep(inputs.speed_s)
        if iteration % interval and iteration != 1:  # Megatron logs every interval, and the first iteration
            continue
        window = range(since, iteration + 1)
        since = iteration + 1
        elapsed_ms = "%.1f" % (1000.0 * sum(times[i - 1] for i in window) / len(window))
        mean_loss = "%.6E" % (sum(loss[i - 1] for i in window) / len(window))
        tflops = "%.1f" % (flops_per_gpu / (float(elapsed_ms) / 1000.0)) if "--log-throughput" in args else None
        lr = "%.6E" % model.learning_rate(iteration, args, train_iters)
        printer.line(text.iteration_line(moment, iteration, train_iters, gbs * iteration, elapsed_ms, tflops, lr, gbs,
                                         mean_loss, loss_scale))
        truth["steps"].append({"step": iteration, "elapsed_ms": float(elapsed_ms), "lm_loss": float(mean_loss),
                               "tflops_per_gpu": float(tflops) if tflops else None, "lr": float(lr),
                               "global_batch_size": gbs, "consumed_samples": gbs * iteration})
        if not truth["memory"]:
            values = _memory_values(projection)
            printer.line(text.memory_line(0, iteration, values))
            truth["memory"].append(dict({"rank": 0, "after_iterations": iteration},
                                        **{k: float(v) for k, v in values.items()}))
    if last < train_iters:
        printer.line(text.datetime_line("exiting program at iteration %d" % last, printer.advance(1.0)))
    else:
        printer.line(text.datetime_line("after training is done", printer.advance(1.0)))
    return 0


def _fault(printer: Printer, inputs: Inputs, args: dict, layout: dict, iteration: int) -> int:
    """Print what the fault leaves in a real log at ``iteration``; return the exit code (a hang never returns)."""
    code = EXIT_FAILED
    if inputs.fault == "hang":
        printer.out.flush()
        while True:  # a hung collective: no more output until the run is torn down
            printer.sleep(3600.0)
    if inputs.fault == "nccl_timeout":
        timeout_ms = int(_number(args, "--distributed-timeout-minutes", 10.0) * 60000)
        moment = printer.advance(timeout_ms / 1000.0)
        stream = model.Stream("nccl", inputs.seed, iteration)
        rank, seq = int(stream.uniform() * inputs.gpus), 40 * iteration + int(stream.uniform() * 40)
        ran_ms = timeout_ms + int(stream.uniform() * 900)
        printer.lines(text.nccl_timeout_lines(rank, moment, seq, "_ALLGATHER_BASE", 1 << 26, timeout_ms, ran_ms))
        code = NCCL_EXIT
    elif inputs.fault == "crash":
        printer.advance(1.0)
        printer.lines(text.crash_lines(layout))
    return code


def entry(name: str, simulate: Callable, argv: Optional[list] = None, **options) -> int:
    """A simulator's command line: ``simulate(argv, environment, stdout, project, ConfigError, **options)`` with the
    throughput projection, its bad input reported on stderr under ``name`` (exit 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        from attune.projection import api
    except ImportError as exc:
        print("%s: the throughput projection (projection.api) cannot be imported: %s. Fix: run from a checkout that "
              "has skill/scripts/projection/" % (name, exc), file=sys.stderr)
        return EXIT_USAGE
    try:
        return simulate(argv, dict(os.environ), sys.stdout, api.project, api.ConfigError, **options)
    except InputError as exc:
        for line in exc.lines():
            print("%s: %s" % (name, line), file=sys.stderr)
        return EXIT_USAGE


def main(argv: Optional[list] = None) -> int:
    return entry("sim_megatron", run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
