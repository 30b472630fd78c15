"""The hooks the wrapper can run, and their registry ``HOOKS`` (name -> class).

A hook is a class built as ``cls(name, args)`` from its ``--hook-arg`` values (``ARGS`` lists the
keys with default and help; ``configure`` validates them and raises ValueError, a usage error).
``before(ctx)`` may change ``ctx.argv`` and ``ctx.env`` (the child's) and fill ``self.facts``;
``after(ctx, exit_code, log_tail)`` runs once the entrypoint has exited. Raising ``HookSkipped``
records the hook as skipped with the reason; any other exception as failed. A hook's ``WATCH``
pattern keeps the matching output lines of the whole run in ``ctx.watched[name]``.

Extensions register the same way as the built-ins: ``HOOKS["mine"] = MyHook``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from . import helper_status as status, memory, profiler

PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)


class HookSkipped(Exception):
    """The hook had nothing to do in this run; the message is the recorded reason."""


class Context:
    """What hooks see: the out dir, the child's argv and env, and the watched output lines."""

    def __init__(self, out: Path, argv: List[str], env: Dict[str, str],
                 watched: Optional[Dict[str, List[str]]] = None) -> None:
        self.out = out
        self.argv = argv
        self.env = env
        self.watched = watched if watched is not None else {}

    def copy(self) -> "Context":
        return Context(self.out, list(self.argv), dict(self.env), self.watched)

    def expose_helpers(self) -> None:
        """Let the job ``import pod_hooks``: this package's folder goes last on its PYTHONPATH."""
        paths = [p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if PACKAGE_PARENT not in paths:
            self.env["PYTHONPATH"] = os.pathsep.join(paths + [PACKAGE_PARENT])


class Hook:
    ARGS = {}  # type: Dict[str, Tuple[str, str]]
    WATCH = None  # type: Optional[re.Pattern]

    def __init__(self, name: str, args: Dict[str, str]) -> None:
        self.name = name
        self.args = {key: default for key, (default, _help) in self.ARGS.items()}
        self.args.update(args)
        self.facts = {}  # type: Dict[str, object]
        self.warnings = []  # type: List[str]
        self.configure()

    def configure(self) -> None:
        """Validate ``self.args``; raise ValueError stating value, rule and fix."""

    def before(self, ctx: Context) -> None:
        """Runs before the entrypoint starts."""

    def after(self, ctx: Context, exit_code: int, log_tail: List[str]) -> None:
        """Runs after the entrypoint exited (or failed to start)."""


def _int_arg(hook: str, key: str, value: str, low: int = 0) -> int:
    try:
        number = int(value)
    except ValueError:
        number = low - 1
    if number < low:
        raise ValueError("--hook-arg %s.%s=%s: expected an integer >= %d" % (hook, key, value, low))
    return number


def _helper_outcome(rows: List[Dict[str, object]]) -> None:
    """Turn the job-side helper's status rows into this hook's outcome when none of them is ok."""
    if not rows or any(row.get("status") == "ok" for row in rows):
        return
    failed = [row for row in rows if row.get("status") == "failed"]
    if failed:
        raise RuntimeError("in the job (rank %s): %s" % (failed[0].get("rank"), failed[0].get("error")))
    raise HookSkipped(str(rows[0].get("reason")))


MEGATRON_SCRIPT = re.compile(r"pretrain_\w+\.py|train\.py")


def megatron_script(argv: List[str]) -> Optional[str]:
    """The Megatron-LM / slime training script the argv runs (``pretrain_*.py``, ``train.py``), if any."""
    for token in argv:
        if MEGATRON_SCRIPT.fullmatch(os.path.basename(token)):
            return token
    return None


def flag_value(argv: List[str], flag: str) -> Optional[str]:
    """The last value given to ``flag`` (``--flag V`` or ``--flag=V``), as argparse would keep it."""
    value = None
    for i, token in enumerate(argv):
        if token == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith(flag + "="):
            value = token[len(flag) + 1:]
    return value


class ProfilerHook(Hook):
    """torch.profiler traces of steps N..M-1 on the shared volume, for ``attune profile``."""

    ARGS = {
        "start": ("10", "first recorded step (Megatron --profile-step-start)"),
        "end": ("12", "the step after the last recorded one (Megatron --profile-step-end)"),
        "ranks": ("0", "comma-separated global ranks that profile (Megatron --profile-ranks)"),
        "dir": ("", "trace folder; empty: OUT/profile"),
        "mode": ("auto", "megatron (append Megatron flags), env (set ATTUNE_PROFILE_*) or auto "
                         "(megatron when the entrypoint runs pretrain_*.py or train.py)"),
    }

    def configure(self) -> None:
        self.start = _int_arg(self.name, "start", self.args["start"])
        self.end = _int_arg(self.name, "end", self.args["end"], low=self.start + 1)
        self.ranks = [str(_int_arg(self.name, "ranks", r.strip())) for r in self.args["ranks"].split(",")]
        if self.args["mode"] not in ("auto", "megatron", "env"):
            raise ValueError("--hook-arg %s.mode=%s: expected auto, megatron or env" % (self.name, self.args["mode"]))

    def before(self, ctx: Context) -> None:
        directory = Path(self.args["dir"]) if self.args["dir"] else ctx.out / "profile"
        mode = self.args["mode"]
        if mode == "auto":
            mode = "megatron" if megatron_script(ctx.argv) else "env"
        self.facts.update(mode=mode, steps=[self.start, self.end], ranks=[int(r) for r in self.ranks])
        if mode == "megatron":
            added = ["--profile", "--use-pytorch-profiler", "--profile-step-start", str(self.start),
                     "--profile-step-end", str(self.end), "--profile-ranks"] + self.ranks
            existing = flag_value(ctx.argv, "--tensorboard-dir")
            if existing is None:
                added += ["--tensorboard-dir", str(directory)]
            else:  # the job's own tensorboard dir stays; its traces go there
                directory = Path(existing)
            directory.mkdir(parents=True, exist_ok=True)
            ctx.argv.extend(added)
            self.facts["added_args"] = added
            # core_v0.15 and slime write into the tensorboard dir; Megatron HEAD into ../torch_profile.
            self.facts["trace_dirs"] = [str(directory), str(directory.parent / "torch_profile")]
        else:
            directory.mkdir(parents=True, exist_ok=True)
            ctx.env[profiler.STEPS_ENV] = "%d:%d" % (self.start, self.end)
            ctx.env[profiler.DIR_ENV] = str(directory)
            ctx.env[profiler.RANKS_ENV] = ",".join(self.ranks)
            ctx.expose_helpers()
            self.facts["trace_dirs"] = [str(directory)]

    def after(self, ctx: Context, exit_code: int, log_tail: List[str]) -> None:
        traces = []  # type: List[str]
        for directory in self.facts.get("trace_dirs", []):
            folder = Path(str(directory))
            if folder.is_dir():
                traces += sorted(str(p) for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))
        self.facts["traces"] = traces
        helpers = status.read(ctx.out, profiler.HOOK)
        if helpers:
            self.facts["helper"] = helpers
        if not traces:
            _helper_outcome(helpers)
            self.warnings.append("no trace file in %s: the run may have ended before step %d, or the job "
                                 "does not profile (see pod_hooks/README.md)"
                                 % (", ".join(map(str, self.facts.get("trace_dirs", []))), self.end - 1))


class GpuFactsHook(Hook):
    """GPU model, clocks, ``nvidia-smi topo -m`` and NCCL init lines, for the topology check."""

    ARGS = {"timeout": ("20", "seconds allowed for each nvidia-smi call")}
    WATCH = re.compile(r"NCCL INFO.*(Init|comm|version)")
    QUERY = ["--query-gpu=name,clocks.sm,clocks.max.sm,memory.total", "--format=csv,noheader"]
    FILE = "gpu_facts.json"

    def configure(self) -> None:
        self.timeout = _int_arg(self.name, "timeout", self.args["timeout"], low=1)

    def _smi(self, smi: str, args: List[str]) -> Optional[str]:
        try:
            done = subprocess.run([smi] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=self.timeout, universal_newlines=True)
        except (OSError, subprocess.TimeoutExpired) as err:
            self.warnings.append("nvidia-smi %s: %s" % (" ".join(args), err))
            return None
        if done.returncode != 0:
            self.warnings.append("nvidia-smi %s exited %d: %s" % (" ".join(args), done.returncode,
                                                                 done.stdout.strip()[-500:]))
            return None
        return done.stdout

    def before(self, ctx: Context) -> None:
        self.facts["hostname"] = socket.gethostname()
        smi = shutil.which("nvidia-smi", path=ctx.env.get("PATH", os.defpath))
        if smi is None:
            self.facts["nvidia_smi"] = "nvidia-smi not found"
            return
        self.facts["nvidia_smi"] = smi
        query = self._smi(smi, self.QUERY)
        if query is not None:
            self.facts["gpus"] = [parse_gpu_line(line) for line in query.splitlines() if line.strip()]
        topo = self._smi(smi, ["topo", "-m"])
        if topo is not None:
            self.facts["topo"] = topo

    def after(self, ctx: Context, exit_code: int, log_tail: List[str]) -> None:
        self.facts["env"] = {key: value for key, value in sorted(ctx.env.items())
                             if key == "CUDA_VISIBLE_DEVICES" or key.startswith("NCCL_")}
        self.facts["nccl_init_lines"] = list(ctx.watched.get(self.name, []))
        path = ctx.out / self.FILE
        row = {"schema_version": 1}
        row.update(self.facts)
        status.replace_text(path, json.dumps(row, indent=1, sort_keys=True, default=str) + "\n")
        self.facts["file"] = str(path)


def parse_gpu_line(line: str) -> Dict[str, object]:
    """One ``name, clocks.sm, clocks.max.sm, memory.total`` CSV row; numbers in MHz and MiB."""
    fields = [field.strip() for field in line.rsplit(",", 3)]
    row = {"raw": line.strip()}  # type: Dict[str, object]
    if len(fields) != 4:
        return row
    row["name"] = fields[0]
    for key, text in zip(("clocks_sm_mhz", "clocks_max_sm_mhz", "memory_total_mib"), fields[1:]):
        number = text.split()[0] if text.split() else ""
        row[key] = int(number) if number.isdigit() else None  # "[N/A]" and the like
    return row


class NcclDebugHook(Hook):
    """NCCL's own debug output in the log, on demand."""

    ARGS = {
        "level": ("INFO", "NCCL_DEBUG (VERSION, WARN, INFO, TRACE)"),
        "subsys": ("INIT,NET", "NCCL_DEBUG_SUBSYS, e.g. INIT,NET,GRAPH or ALL"),
        "file": ("", "NCCL_DEBUG_FILE (%h host, %p pid); empty keeps the lines in the log, "
                     "where gpu_facts finds them"),
    }

    def configure(self) -> None:
        if self.args["level"] not in ("VERSION", "WARN", "INFO", "TRACE"):
            raise ValueError("--hook-arg %s.level=%s: expected VERSION, WARN, INFO or TRACE"
                             % (self.name, self.args["level"]))

    def before(self, ctx: Context) -> None:
        wanted = {"NCCL_DEBUG": self.args["level"], "NCCL_DEBUG_SUBSYS": self.args["subsys"]}
        if self.args["file"]:
            wanted["NCCL_DEBUG_FILE"] = self.args["file"]
        self.facts["replaced"] = {key: ctx.env[key] for key in wanted if key in ctx.env}
        self.facts["set"] = wanted
        ctx.env.update(wanted)


class OomSnapshotHook(Hook):
    """A CUDA memory snapshot when the job runs out of GPU memory, and the OOM noted in the record."""

    ARGS = {"max_entries": ("100000", "allocation events kept by torch's memory history")}
    WATCH = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")

    def configure(self) -> None:
        _int_arg(self.name, "max_entries", self.args["max_entries"], low=1)

    def before(self, ctx: Context) -> None:
        directory = ctx.out / "memory"
        directory.mkdir(parents=True, exist_ok=True)
        ctx.env[memory.HISTORY_ENV] = self.args["max_entries"]
        ctx.env[memory.DIR_ENV] = str(directory)
        ctx.expose_helpers()
        # The allocator settings are the job's own; recorded, never changed.
        self.facts["PYTORCH_CUDA_ALLOC_CONF"] = ctx.env.get("PYTORCH_CUDA_ALLOC_CONF")
        self.facts["snapshot_dir"] = str(directory)

    def after(self, ctx: Context, exit_code: int, log_tail: List[str]) -> None:
        lines = ctx.watched.get(self.name, [])
        self.facts["oom"] = bool(lines)
        self.facts["oom_lines"] = lines[:5]
        directory = Path(str(self.facts["snapshot_dir"]))
        self.facts["snapshots"] = sorted(str(p) for p in directory.glob("*.pickle"))
        helpers = status.read(ctx.out, memory.HOOK)
        if helpers:
            self.facts["helper"] = helpers
        if lines and not self.facts["snapshots"]:
            _helper_outcome(helpers)
            if not helpers:
                self.warnings.append("out of memory but no snapshot: the job does not call "
                                     "pod_hooks.memory.install()")
        elif not lines:
            _helper_outcome(helpers)


class CpuHook(Hook):
    """Megatron-LM's own training script on a CPU-only host: the start-up layer ``pod_hooks/cpu.py``."""

    ARGS = {}
    LAYER = str(Path(__file__).resolve().parent / "cpu.py")
    WATCH = re.compile(r"attune-cpu: ")

    def before(self, ctx: Context) -> None:
        script = megatron_script(ctx.argv)
        if script is None:
            raise RuntimeError("no Megatron-LM training script (pretrain_*.py, train.py) in the entrypoint %s: the "
                               "layer runs one; nothing was changed" % " ".join(ctx.argv[:6]))
        index = ctx.argv.index(script)
        ctx.argv[index:index + 1] = [self.LAYER, script]
        self.facts.update(device="cpu", layer=self.LAYER, script=script, cpu_count=os.cpu_count())

    def after(self, ctx: Context, exit_code: int, log_tail: List[str]) -> None:
        self.facts["layer_lines"] = list(ctx.watched.get(self.name, []))[:20]


HOOKS = {
    "cpu": CpuHook,
    "profiler": ProfilerHook,
    "gpu_facts": GpuFactsHook,
    "nccl_debug": NcclDebugHook,
    "oom_snapshot": OomSnapshotHook,
}  # type: Dict[str, type]
