"""Run one local job and record how it ended (started by the local backend, never by hand).

    python3 localrun.py RUN_DIR

Reads ``RUN_DIR/local.json`` (``command``, ``env``, ``unset``, ``cwd``), runs the command with bash in this
process's group (the backend started this process as a session leader, so tearing the run down
kills the whole group; every process of the run also carries ``ATTUNE_LOCAL_RUN=RUN_DIR`` in its environment, which
finds those a launcher started in sessions of their own), sends its output to ``RUN_DIR/log.txt`` and writes
``RUN_DIR/exit.json``
(``exit_code``, ``started``, ``ended``: seconds since the epoch) when it ends. The command's environment is this
process's without the names in ``unset`` (training variables of the launching shell that the recipe does not set),
with ``env`` (the recipe's) over it. Standard library only.

While the job runs, it watches the memory its processes hold (the resident set of every process descended from
this one, read from ``/proc`` once a second). Over ``memory_limit_mb`` (``local.json``; the local backend sets it from
``ATTUNE_LOCAL_MEMORY_MB``) it kills them and says so in the log, a line triage reads as ``oom``: a job whose
memory runs away (real Megatron-LM on the CPU with ``--recompute-modules mlp`` grows by 200 MB/s a rank) then
fails in seconds, instead of filling the host until everything on it, the polls that would see the job stuck
included, crawls. ``exit.json`` then has ``memory_killed``.
"""

import json
import os
import subprocess
import sys
import time


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


MARK = "attune-local: "
MARK_ENV = "ATTUNE_LOCAL_RUN"  # the run's directory, in the environment of every process of the run
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def descendants(root):
    """Pids of every process descended from ``root`` (by parent pid, from ``/proc``): the job's processes,
    whatever process group or session a launcher put them in (torchrun starts its workers in their own)."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(name))  # after the command: state, ppid
    out, todo = [], list(children.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def resident_mb(pids):
    """The memory the processes hold together (MiB): the sum of their proportional set sizes (``Pss`` of
    ``/proc/PID/smaps_rollup``: a page shared by n of them counts 1/n to each, so the forked data-loader workers
    do not count their parent's pages again), or of their resident sets where the kernel has no rollup."""
    total_kb = 0
    for pid in pids:
        try:
            with open("/proc/%d/smaps_rollup" % pid) as handle:
                total_kb += next(int(line.split()[1]) for line in handle if line.startswith("Pss:"))
            continue
        except (OSError, StopIteration, IndexError, ValueError):
            pass
        try:
            with open("/proc/%d/statm" % pid) as handle:
                total_kb += int(handle.read().split()[1]) * PAGE // 1024
        except (OSError, IndexError, ValueError):
            pass
    return total_kb / 1024.0


def watch(proc, limit_mb, log, interval=1.0):
    """Wait for ``proc``; kill it and every process descended from it when together they hold over
    ``limit_mb`` MiB. True when it killed them."""
    while True:
        try:
            proc.wait(timeout=interval)
            return False
        except subprocess.TimeoutExpired:
            pass
        if not limit_mb:
            continue
        members = descendants(os.getpid())
        held = resident_mb(members)
        if held <= limit_mb:
            continue
        log.write(("\n%sout of memory: the job's processes hold %.0f MiB, over the %.0f MiB a local run may hold "
                   "(ATTUNE_LOCAL_MEMORY_MB); killing them\n" % (MARK, held, limit_mb)).encode())
        log.flush()
        for pid in members:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        proc.wait()
        return True


def main(argv=None):
    run_dir = (argv or sys.argv[1:])[0]
    with open(os.path.join(run_dir, "local.json")) as handle:
        spec = json.load(handle)
    env = dict(os.environ)
    for name in spec.get("unset", ()):  # training variables of the launching shell the recipe does not set
        env.pop(name, None)
    env.update(spec.get("env", {}))
    # every process of the run carries this, whatever group or session a launcher puts it in (torchrun starts its
    # workers in sessions of their own), so that teardown finds them all, even once their parents are gone
    env[MARK_ENV] = os.path.realpath(run_dir)
    started = time.time()
    _write_json(os.path.join(run_dir, "started.json"), {"started": started, "pid": os.getpid()})
    with open(os.path.join(run_dir, "log.txt"), "ab") as log:
        proc = subprocess.Popen(["bash", "-c", spec["command"]], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=spec.get("cwd") or run_dir)
        killed = watch(proc, spec.get("memory_limit_mb"), log)
        code = proc.returncode
    ended = {"exit_code": code, "started": started, "ended": time.time()}
    if killed:
        ended["memory_killed"] = True
    _write_json(os.path.join(run_dir, "exit.json"), ended)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
