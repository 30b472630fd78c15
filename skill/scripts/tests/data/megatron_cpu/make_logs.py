"""Make the real Megatron-LM CPU logs in this folder (ATTUNE's own output; Megatron-LM's source is never kept here).

    ATTUNE_MEGATRON_DIR=/path/to/Megatron-LM python skill/scripts/tests/data/megatron_cpu/make_logs.py [NAME...]

Each case runs the tiny-GPT recipe (``harness/recipes/gpt_tiny_cpu.yaml``, made smaller as
``test_megatron_real.SMALLER`` makes it) through the pod-hooks wrapper with the ``cpu`` hook, exactly as the
local backend runs it, and keeps its whole output as ``NAME.log``, with the run's exit code and how it was made in
``NAME.case.json``. The expected parse and triage of each log are written by hand in ``NAME.expected.json`` (from
reading the log, not from the parser). Cases:

- ``success``: 20 iterations, exit 0.
- ``cpu_oom``: the job's address space limited to 6 GiB (``ulimit -v``) and a model too big for it (hidden
  8192, 16 layers): torch's CPU allocator refuses.
- ``config_error``: micro-batch size 3 with global batch 8 at data parallel 2: Megatron's argument check.
- ``tp_without_max_connections``: tensor parallel 2 without ``CUDA_DEVICE_MAX_CONNECTIONS=1``.
- ``expert_parallel_without_experts``: expert parallel 2 in a dense model: Megatron's argument check.
- ``heads_not_multiple_of_tp``: tensor parallel 2 with one attention head: TransformerConfig's ValueError.
- ``layers_not_divisible_by_pp``: pipeline parallel 2 with 3 layers: Megatron's argument check.
- ``killed_rank``: world size 2; rank 1 is sent SIGKILL once iteration 5 is logged.
- ``hang``: world size 2; rank 1 is stopped (SIGSTOP) once iteration 5 is logged; the log is cut 30 s later,
  when the run is torn down as a hang would be.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[4]
sys.path.insert(0, str(REPO / "skill" / "scripts"))
sys.path.insert(0, str(REPO / "skill" / "scripts" / "tests"))
sys.path.insert(0, str(REPO / "harness"))

import megatron_cpu  # noqa: E402
from attune.core.recipe import Recipe  # noqa: E402

WRAP = REPO / "skill" / "scripts" / "pod_hooks" / "wrap.py"
SMALLER = [{"op": "set", "arg": flag, "value": value} for flag, value in (
    ("--num-layers", "2"), ("--hidden-size", "64"), ("--ffn-hidden-size", "256"), ("--seq-length", "64"),
    ("--max-position-embeddings", "64"), ("--vocab-size", "1024"), ("--global-batch-size", "8"))]


def _set(arg, value=True):
    return {"op": "set", "arg": arg, "value": value}


CASES = {
    "success": ([], None, None),
    "cpu_oom": ([_set("--hidden-size", "8192"), _set("--ffn-hidden-size", "32768"), _set("--num-layers", "16"),
                 _set("--num-attention-heads", "64")], "ulimit -v %d" % (6 << 20), None),
    "config_error": ([_set("--micro-batch-size", "3")], None, None),
    "tp_without_max_connections": ([_set("--tensor-model-parallel-size", "2"),
                                    {"op": "unset", "env": "CUDA_DEVICE_MAX_CONNECTIONS"}], None, None),
    "expert_parallel_without_experts": ([_set("--expert-model-parallel-size", "2")], None, None),
    "heads_not_multiple_of_tp": ([_set("--tensor-model-parallel-size", "2"), _set("--num-attention-heads", "1")], None,
                                 None),
    "layers_not_divisible_by_pp": ([_set("--pipeline-model-parallel-size", "2"), _set("--num-layers", "3")], None,
                                   None),
    "killed_rank": ([], None, ("SIGKILL", 5)),
    "hang": ([], None, ("SIGSTOP", 5)),
}


def _rank_pid(tag: str, rank: int):
    """The pid of the training process of ``rank`` (LOCAL_RANK in its environment) of the case tagged ``tag``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path("/proc/%s/environ" % entry).read_bytes().split(b"\0")
            cmdline = Path("/proc/%s/cmdline" % entry).read_bytes()
        except OSError:
            continue
        if (b"ATTUNE_LOG_CASE=" + tag.encode()) in environ and b"LOCAL_RANK=%d" % rank in environ \
                and b"cpu.py" in cmdline:
            return int(entry)
    return None


def _pids(tag: str) -> list:
    out = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and (b"ATTUNE_LOG_CASE=" + tag.encode()) in \
                    Path("/proc/%s/environ" % entry).read_bytes().split(b"\0"):
                out.append(int(entry))
        except OSError:
            continue
    return out


def make(name: str, base: Recipe) -> None:
    changes, limit, signal_at = CASES[name]
    recipe = base.apply(changes)
    out = Path(tempfile.mkdtemp(prefix="attune-cpu-log-%s-" % name))
    command = recipe.command.wrap(["python3", str(WRAP), "--hooks", "cpu", "--out", str(out), "--"])
    if limit:
        command = "%s && %s" % (limit, command)
    env = dict(os.environ)
    env.update(recipe.env())
    env["ATTUNE_LOG_CASE"] = "%s-%d" % (name, os.getpid())  # finds the case's ranks
    for key in [key for key in env if key not in recipe.env() and key == "CUDA_DEVICE_MAX_CONNECTIONS"]:
        del env[key]
    log = HERE / ("%s.log" % name)
    started = time.time()
    with open(log, "wb") as handle:
        proc = subprocess.Popen(["bash", "-c", command], stdout=handle, stderr=subprocess.STDOUT, env=env,
                                cwd=str(out), start_new_session=True)
        sent = None
        if signal_at:
            sig, step = signal_at
            pattern = re.compile(r"iteration\s+%d/" % step)
            while proc.poll() is None and not pattern.search(log.read_text(errors="replace")):
                time.sleep(0.2)
            pid = _rank_pid(env["ATTUNE_LOG_CASE"], 1)
            if pid:
                os.kill(pid, getattr(signal, sig))
                sent = {"signal": sig, "after_iteration": step, "rank": 1}
            if sig == "SIGSTOP":
                time.sleep(30)
                for pid_ in _pids(env["ATTUNE_LOG_CASE"]):  # the whole job, in whatever process group
                    os.kill(pid_, signal.SIGKILL)
        try:
            code = proc.wait(timeout=600)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    text = log.read_text(errors="replace")
    for path, name_ in ((sys.executable, "<python>"), (str(megatron_cpu.find()), "<megatron>"), (str(out), "<out>"),
                        (str(REPO), "<repo>")):  # this host's paths, so that the logs do not depend on them
        text = text.replace(path, name_)
    log.write_text(text)
    case = {"changes": changes, "limit": limit, "signal": sent, "exit_code": code, "wall_s": round(time.time() -
                                                                                                 started, 1),
            "made_by": "make_logs.py %s" % name}
    (HERE / ("%s.case.json" % name)).write_text(json.dumps(case, indent=1) + "\n")
    print("%s: exit %s, %d lines" % (name, code, text.count("\n")), flush=True)


def main(argv=None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or list(CASES)
    megatron = megatron_cpu.find()
    megatron_cpu.build_helpers(megatron)
    base = Recipe(megatron_cpu.recipe_text(megatron), "baseline.yaml").apply(SMALLER)
    for name in names:
        make(name, base)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
