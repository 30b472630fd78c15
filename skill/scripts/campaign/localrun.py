"""Run one local job and record how it ended (started by the local backend, never by hand).

    python3 localrun.py RUN_DIR

Reads ``RUN_DIR/local.json`` (``command``, ``env``, ``unset``, ``cwd``, ``memory_limit_mb``, ``confined``,
``writable``, ``tmp``, ``sandbox``), runs the command with bash in this
process's group (the backend started this process as a session leader, so tearing the run down
kills the whole group; every process of the run also carries ``ATTUNE_LOCAL_RUN=RUN_DIR`` in its environment, which
finds those a launcher started in sessions of their own), copies its output (stdout and stderr, one pipe) into
``RUN_DIR/log.txt`` and writes ``RUN_DIR/exit.json``
(``exit_code``, ``started``, ``ended``: seconds since the epoch) when it ends. The command's environment is this
process's without the names in ``unset`` (training variables of the launching shell that the recipe does not set),
with ``env`` (the recipe's) over it. Its working folder is ``cwd``, the run's ``work/``. Standard library only.

A confined run (``confined``: the local backend's ``ATTUNE_LOCAL_CONFINE=on``, its default) runs inside a bubblewrap
sandbox of its own, ``sandbox`` (``sandbox_argv`` says what each flag is for): it writes only its ``writable``
folders (``work/``, and ``pod_hooks/``, where the in-pod hooks write) and its temporary folder ``tmp`` (``TMPDIR``,
removed when it ends), reaches no network beyond the loopback of its own network namespace, sees only its own
processes, and every process it leaves behind ends with it. Its output reaches ``log.txt`` only through the pipe
this process reads: it cannot open the log (nor ``local.json``, ``exit.json`` or anything of the campaign) for
writing, nor rewrite what it printed before. A sandbox that cannot start fails the run, with bwrap's reason in the
log; a confined run never runs unconfined. The exit code of a confined run is its command's as bwrap reports it:
128 + N for a command that signal N killed (a shell's convention), where an unconfined run's is -N.

While the job runs, it watches the memory its processes hold (the resident set of every process descended from
this one, read from ``/proc`` once a second). Over ``memory_limit_mb`` (``local.json``; the local backend sets it from
``ATTUNE_LOCAL_MEMORY_MB``) it kills them and says so in the log, a line triage reads as ``oom``: a job whose
memory runs away (real Megatron-LM on the CPU with ``--recompute-modules mlp`` grows by 200 MB/s a rank) then
fails in seconds, instead of filling the host until everything on it, the polls that would see the job stuck
included, crawls. ``exit.json`` then has ``memory_killed``.
"""

import glob
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time


def _write_json(path, data):
    """``data`` into ``path`` through a fresh temporary file of the same folder (no name prepared beforehand is
    followed), renamed into place."""
    handle, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(data, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


MARK = "attune-local: "
MARK_ENV = "ATTUNE_LOCAL_RUN"  # the run's directory, in the environment of every process of the run
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
WORK, HOOKS, TMP = "work", "pod_hooks", "tmp"  # a confined run's folders in its directory: the only ones it writes
CHUNK = 1 << 16  # bytes of the job's output copied at a time
# seconds the output is still copied once the job's first process has ended: processes an unconfined run left
# behind may hold the pipe open for ever (a confined run's end with it, and the pipe closes at once)
DRAIN_S = 5.0
# device nodes a GPU job opens, passed into the sandbox's private /dev where this host has them; never RDMA devices
# (/dev/infiniband): verbs traffic reaches other hosts whatever the network namespace
DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd")
# folders of the host's service sockets (the D-Bus buses, through which systemd starts programs outside any sandbox;
# a container daemon's): a read-only mount still lets a program connect to a socket, so the sandbox gets empty ones
SERVICE_SOCKETS = ("/run", "/var/run")

def sandbox_argv(bwrap, writable, tmp, cwd, hidden=()):
    """The bubblewrap command a confined run's ``bash -c COMMAND`` follows: ``bwrap`` its path, ``writable`` the
    run's own folders, ``tmp`` its temporary folder, ``cwd`` its working folder (absolute paths of folders that
    exist when it starts).

    - ``--die-with-parent``: the sandbox ends when this process does;
    - ``--unshare-net``: a network namespace of its own whose one interface is loopback (bwrap brings it up):
      torchrun and gloo on 127.0.0.1 work, and nothing beyond it, the host's own loopback included, is reached;
    - ``--unshare-pid``: it sees only its own processes (not this one, whose open log it could reach through
      ``/proc/PID/fd``), and every process it leaves behind ends when its first process does. The host still sees
      them all under their host pids: teardown's scan for ``ATTUNE_LOCAL_RUN``, the memory watch by parent pid;
    - ``--unshare-ipc``: System V shared memory and semaphores of its own;
    - ``--cap-drop ALL``: no capability, also where the user is root (bwrap then makes no user namespace);
    - ``--ro-bind / /``: the whole file system, read-only, every mount below it included;
    - ``--tmpfs`` over ``SERVICE_SOCKETS``: the host's service sockets out of reach;
    - ``hidden`` (the user's credentials and the folders of the sockets that act for the user, ``core/secrets.py``):
      an empty folder over each folder, an empty file over each file, as they exist when it starts: a run prints
      what it reads into the log the agent reads;
    - ``--dev /dev`` and ``--dev-bind`` of the GPU device nodes (``DEVICES``): a private /dev (its own /dev/shm);
    - ``--proc /proc``: the pid namespace's own;
    - ``--bind`` of each writable folder and of ``tmp``, the only places it writes; ``--setenv TMPDIR tmp``;
      ``--chdir cwd``.

    No ``--new-session``: the job stays in this process's group, so that teardown's TERM to the group reaches the
    trainer itself, not only this process (a new session guards a terminal against injected input, and a run has
    none: this process's session has no controlling terminal, stdin is /dev/null and the output a pipe)."""
    argv = [bwrap, "--die-with-parent", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL",
            "--ro-bind", "/", "/"]
    for path in SERVICE_SOCKETS:
        if os.path.isdir(path) and not os.path.islink(path):
            argv += ["--tmpfs", path]
    for path in hidden:
        real = os.path.realpath(path)
        if os.path.isdir(real):
            argv += ["--tmpfs", real]
        elif os.path.exists(real):
            argv += ["--ro-bind", "/dev/null", real]
    argv += ["--dev", "/dev"]
    for pattern in DEVICES:
        for path in sorted(glob.glob(pattern)):
            argv += ["--dev-bind", path, path]
    argv += ["--proc", "/proc"]
    for path in list(writable) + [tmp]:
        argv += ["--bind", path, path]
    return argv + ["--setenv", "TMPDIR", tmp, "--chdir", cwd, "--"]


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


def _over_limit(limit_mb, log):
    """Kill every process descended from this one when together they hold over ``limit_mb`` MiB, and say so in
    ``log``; True when it killed them."""
    members = descendants(os.getpid())
    held = resident_mb(members)
    if held <= limit_mb:
        return False
    log.write(("\n%sout of memory: the job's processes hold %.0f MiB, over the %.0f MiB a local run may hold "
               "(ATTUNE_LOCAL_MEMORY_MB); killing them\n" % (MARK, held, limit_mb)).encode())
    for pid in members:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return True


def watch(proc, output, limit_mb, log, interval=1.0):
    """Copy the job's output (``output``: the read end of its stdout and stderr pipe) into ``log`` as it comes, until
    ``proc`` has ended and the pipe is drained (``DRAIN_S`` at most after the end); every ``interval`` seconds,
    kill it and every process descended from it when together they hold over ``limit_mb`` MiB. True when it
    killed them."""
    reader = selectors.DefaultSelector()
    reader.register(output, selectors.EVENT_READ)
    killed, ended, check_at = False, None, time.monotonic() + interval
    while True:
        now = time.monotonic()
        if ended is None and proc.poll() is not None:
            ended = now
        if ended is not None and (not reader.get_map() or now - ended >= DRAIN_S):
            break
        if ended is None and limit_mb and now >= check_at:
            check_at = now + interval
            if _over_limit(limit_mb, log):
                killed = True
                proc.wait()
                continue
        if ended is not None:
            wait_s = DRAIN_S - (now - ended)
        else:
            wait_s = min(check_at - now, interval) if limit_mb else interval
        wait_s = max(0.0, wait_s)
        if not reader.get_map():  # the job closed its output and runs on
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
            continue
        if reader.select(wait_s):
            chunk = os.read(output, CHUNK)
            if chunk:
                log.write(chunk)
            else:
                reader.unregister(output)
    reader.close()
    proc.wait()
    return killed


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
    cwd = spec.get("cwd") or run_dir
    tmp = spec.get("tmp")
    for path in list(spec.get("writable") or ()) + ([tmp] if tmp else []):
        os.makedirs(path, exist_ok=True)
    argv = ["bash", "-c", spec["command"]]
    refused = None
    if spec.get("confined"):  # never unconfined instead
        if spec.get("sandbox"):
            argv = list(spec["sandbox"]) + argv
        else:
            refused = "local.json asks for a confined run and gives no sandbox command"
    started = time.time()
    _write_json(os.path.join(run_dir, "started.json"), {"started": started, "pid": os.getpid()})
    # created here, outside any sandbox; the job reaches it only through the pipe this process copies from
    handle = os.open(os.path.join(run_dir, "log.txt"), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    killed = False
    with os.fdopen(handle, "ab", buffering=0) as log:
        try:
            if refused:
                raise OSError(refused)
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=cwd)
        except OSError as exc:
            log.write(("%sthe job could not start: %s\n" % (MARK, exc)).encode())
            code = 127
        else:
            with proc.stdout:
                killed = watch(proc, proc.stdout.fileno(), spec.get("memory_limit_mb"), log)
            code = proc.returncode
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    ended = {"exit_code": code, "started": started, "ended": time.time()}
    if killed:
        ended["memory_killed"] = True
    _write_json(os.path.join(run_dir, "exit.json"), ended)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
