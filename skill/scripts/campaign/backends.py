"""Backends run a recipe somewhere behind one interface: submit, status, logs (``log_path``),
teardown, resources, and the scheduler's ``events`` and ``cluster_facts`` for triage and topology.

``BACKENDS`` is a plain registry (an unknown name lists the valid ones). ``local`` runs the
entrypoint as a process group on this host, for one-machine users and the demo. The KubeRay
backend registers here the same way.
"""

from __future__ import annotations

import calendar
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from attune.campaign import localrun
from attune.core import confinement, files, secrets
from attune.core.errors import CheckFailed, InputError
from attune.core.recipe import Recipe

LOCALRUN = Path(__file__).resolve().parent / "localrun.py"


STATES = ("pending", "running", "succeeded", "failed", "lost", "torn_down")  # the last four: ended


@dataclasses.dataclass(frozen=True)
class Status:
    state: str  # one of STATES: lost is ended without a record
    exit_code: Optional[int] = None
    started: Optional[float] = None
    ended: Optional[float] = None
    seconds_without_progress: Optional[float] = None
    # what the backend says about an ended job, for triage (a RayJob's status.message, which holds the tail of
    # the driver's log when the job failed); not part of ``as_dict``: it can be 20,000 characters of log
    message: Optional[str] = dataclasses.field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.state in STATES[2:]

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        del out["message"]
        out["done"] = self.done
        return out


# seconds a cluster backend's request waits to connect, and for each read of the answer: neither the kubernetes client
# nor Ray's job client sets a limit, and a server that takes the connection and never answers would hold every verb
REQUEST_TIMEOUT_S = (10.0, 60.0)
SIMULATOR_ENV = "ATTUNE_SIM_"  # the SIMULATED workload's inputs (hardware, seed, fault, speed): the recipe's own


def ambient_training_env(recipe_env: dict, environ=None) -> list:
    """The variables of ``environ`` (default: this process's) that change what training computes or how fast (those
    the gate's rules list: NCCL_*, OMP_NUM_THREADS, TORCHDYNAMO_DISABLE, ...; and the SIMULATED workload's
    ``ATTUNE_SIM_*`` inputs) which the recipe does not set, the host's plumbing (``core.recipe.HOST_ENV``) aside: a local run
    does not inherit them, so its result is its recipe's, as a pod's is, whatever shell launched it (or resumed
    the campaign)."""
    from attune.correctness.rules import Rules, training_env
    environ = os.environ if environ is None else environ
    outside = [name for name in environ if name not in recipe_env]
    return sorted(set(training_env(outside, Rules())) | {name for name in outside if name.startswith(SIMULATOR_ENV)})


class LocalBackend(object):
    """A run is ``localrun.py`` as a session leader, with the training command in its group. Its environment is the
    launching process's, less the training variables the recipe does not set (``ambient_training_env``), plus the
    recipe's own. Its working folder is ``work/`` in its run directory. With ``ATTUNE_LOCAL_CONFINE=on`` (the
    default) the command runs confined, in a bubblewrap sandbox of its own (``localrun.sandbox_argv``: it writes
    only ``work/``, ``pod_hooks/`` and its ``tmp/``, reaches no network beyond its own loopback, and its log is
    copied from its output, never written by it); ``local.json`` records ``confined`` and the sandbox's command."""

    name = "local"

    def __init__(self, settings=None):
        self.settings = settings

    def confined(self) -> bool:
        """Whether local runs run confined: ``ATTUNE_LOCAL_CONFINE`` (on unless set off)."""
        return getattr(self.settings, "local_confine", "on") != "off"

    def check(self, recipe: Recipe) -> None:
        """What this backend refuses before anything is written: any launch while local runs are to run confined
        and bubblewrap cannot make their sandbox on this host (``CheckFailed`` naming what failed and the fix). A
        run never falls back to running unconfined."""
        if not self.confined():
            return
        problem = confinement.run_sandbox_unavailable(shutil.which("bwrap"), localrun.sandbox_argv)
        if problem:
            raise CheckFailed("launch refused: local runs run confined (ATTUNE_LOCAL_CONFINE=on), and %s. Fix: %s; or, "
                              "to run local jobs unconfined on purpose (a job can then write any file of yours, reach "
                              "the network and rewrite its own log), set ATTUNE_LOCAL_CONFINE=off in the config.env of "
                              "a new campaign" % problem)

    def submit(self, run: str, recipe: Recipe, run_dir: Path) -> None:
        if (run_dir / "local.json").exists():
            raise InputError("run %s was submitted already (%s exists)" % (run, run_dir / "local.json"))
        env = recipe.env()
        top = Path(os.path.realpath(str(run_dir)))
        work, hooks, tmp = (str(top / name) for name in (localrun.WORK, localrun.HOOKS, localrun.TMP))
        # the launching shell's credential variables never reach the run, unless its recipe sets them
        unset = ambient_training_env(env) + [name for name in secrets.CREDENTIAL_VARS
                                             if name in os.environ and name not in env]
        spec = {"command": recipe.command.text, "env": env, "unset": unset, "cwd": work,
                "memory_limit_mb": memory_limit_mb(self.settings), "confined": self.confined(),
                "writable": [work, hooks]}
        if spec["confined"]:
            bwrap = shutil.which("bwrap")
            if not bwrap:
                raise CheckFailed("bubblewrap (bwrap) is no longer on PATH: a confined run cannot start. Fix: install "
                                  "it again (apt-get install bubblewrap)")
            hidden = secrets.paths(os.environ) + secrets.socket_paths(os.environ)
            spec.update(tmp=tmp, sandbox=localrun.sandbox_argv(bwrap, [work, hooks], tmp, work, hidden))
        files.write_text(run_dir / "local.json", json.dumps(spec, indent=2))
        proc = subprocess.Popen([sys.executable, str(LOCALRUN), str(run_dir)], start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # which process this is, beyond its number: a pid is reused once its process is gone, and a stale number
        # must never lead status to call another process this run, or teardown to signal another process group
        identity = {"pid": proc.pid, "start_ticks": _start_ticks(proc.pid), "boot_id": _boot_id()}
        files.write_text(run_dir / "process.json", json.dumps(identity))
        files.write_text(run_dir / "pid", str(proc.pid))

    def log_path(self, run_dir: Path) -> Path:
        return run_dir / "log.txt"

    def events(self, run: str) -> list:
        """A local run has no scheduler events."""
        return []

    @staticmethod
    def resources(recipe: Recipe) -> dict:
        """What a run of ``recipe`` holds: its GPUs, nodes and GPUs per node, as the recipe asks."""
        from attune.core.topology import requested
        return requested(recipe)

    def cluster_facts(self, run: str) -> dict:
        """A local run has no cluster to ask about its nodes."""
        return {}

    def status(self, run_dir: Path) -> Status:
        exit_file, pid_file = run_dir / "exit.json", run_dir / "pid"
        if exit_file.exists():
            data = json.loads(exit_file.read_text())
            return Status("succeeded" if data["exit_code"] == 0 else "failed", data["exit_code"],
                          data["started"], data["ended"])
        torn = run_dir / "teardown.json"
        started = self._started(run_dir)
        if torn.exists():
            return Status("torn_down", None, started, json.loads(torn.read_text())["ended"])
        if not pid_file.exists():
            return Status("pending")
        pid = int(pid_file.read_text())
        log = self.log_path(run_dir)
        quiet = _seconds_without_progress(run_dir, log, started) if log.exists() else None
        if _alive(pid) and _is_run_process(run_dir, pid):
            return Status("running" if started else "pending", None, started, None, quiet)
        ended = log.stat().st_mtime if log.exists() else time.time()
        return Status("lost", None, started, ended)

    @staticmethod
    def _started(run_dir: Path) -> Optional[float]:
        path = run_dir / "started.json"
        return json.loads(path.read_text())["started"] if path.exists() else None

    def teardown(self, run_dir: Path, grace_s: float = 10.0) -> Status:
        """Stop the run's whole process group (TERM, then KILL after ``grace_s``), then every other process of the
        run (``ATTUNE_LOCAL_RUN`` in its environment: workers a launcher started in sessions of their own, which
        a KILL of the launcher leaves running) the same way, and confirm they are gone. A run lost (its leader
        ended without a record) has what it left behind ended too. A confined run's temporary folder goes with it."""
        before = self.status(run_dir)
        if before.done:
            if before.state == "lost":
                _end_marked(run_dir, grace_s)
                shutil.rmtree(str(run_dir / localrun.TMP), ignore_errors=True)
            return before
        pid = int((run_dir / "pid").read_text())

        def signal_group(sig) -> bool:
            # the group is signalled only while its leader is this run's process (status checked that), or, once
            # the leader has ended, while members of its group live on: their group id holds the number, so the
            # kernel cannot have given it to another process meanwhile
            if not (_is_run_process(run_dir, pid) or (sig == signal.SIGKILL and _group_alive(pid))):
                return False
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                return False
            return True

        if not _terminate(signal_group, lambda: _group_alive(pid), grace_s):
            raise RuntimeError("run in %s: process group %d survived SIGKILL" % (run_dir, pid))
        _end_marked(run_dir, grace_s)
        shutil.rmtree(str(run_dir / localrun.TMP), ignore_errors=True)
        files.write_text(run_dir / "teardown.json", json.dumps({"ended": time.time()}))
        return self.status(run_dir)


def memory_limit_mb(settings=None) -> Optional[float]:
    """The memory a local run's processes may hold together (MiB): ``ATTUNE_LOCAL_MEMORY_MB``, else 85% of
    this host's memory (``/proc/meminfo``), else no limit (0: none)."""
    value = getattr(settings, "local_memory_mb", None) if settings is not None else None
    if value is not None:
        return float(value) or None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(0.85 * int(line.split()[1]) / 1024.0)
    except (OSError, ValueError, IndexError):
        pass
    return None


# what a launcher prints on its own while the job makes no progress: torch elastic's rendezvous keep-alive warnings
# lines a stuck job keeps printing that are not progress: torchrun's rendezvous heartbeat, and slime's driver waiting
# for a placement group the cluster cannot satisfy (every 30 s, for ever)
_CHATTER = re.compile(rb"torch/distributed/elastic/rendezvous/|keep-alive heartbeat|Waiting for placement group of \d+ GPUs")


# the time stamp torch's (glog-style) warnings start with: W1202 02:43:23.009000 (local time, no year)
_GLOG_TIME = re.compile(rb"^\[?[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(\.\d+)?\s")


def _chatter_time(line: bytes, now: float, utc_offset_s: Optional[float] = None) -> Optional[float]:
    """When a launcher line was printed, from its own time stamp, or None when it has none. The stamp is local
    time: this host's (``utc_offset_s`` None) or that of a clock ``utc_offset_s`` seconds east of UTC; the
    year is the one that puts it at or before ``now``."""
    match = _GLOG_TIME.match(line)
    if not match:
        return None
    month, day, hour, minute, second = (int(group) for group in match.groups()[:5])
    fraction = float(match.group(6) or 0.0)
    if utc_offset_s is None:
        year = time.localtime(now).tm_year
    else:
        year = time.gmtime(now + utc_offset_s).tm_year
    for candidate in (year, year - 1):  # a stamp from late December read in January
        fields = (candidate, month, day, hour, minute, second, 0, 0, -1)
        try:
            stamp = (time.mktime(fields) if utc_offset_s is None else calendar.timegm(fields) - utc_offset_s)
        except (OverflowError, ValueError):
            return None
        if stamp <= now + 60.0:
            return stamp + fraction
    return None


def quiet_from_tail(tail: bytes, mtime: float, now: float, utc_offset_s: Optional[float] = None,
                    cut: bool = False) -> float:
    """Seconds without progress from the end of a log (``tail``; ``cut``: it starts inside a line), the log's
    modification time and the clock ``now`` (both of one host). A last line of the job's own was written at
    ``mtime``; one followed by launcher chatter, no later than the first chatter line's own stamp; where the
    whole tail is chatter, the job's last line came before the first one. The stamps are trusted only when the
    last line's stamp agrees with ``mtime`` (within 2 minutes: the same clock and zone). Otherwise, or without
    a stamp: the log's age (which chatter keeps young: a hang is then seen only when the launcher goes quiet
    too)."""
    lines = [line for line in tail.split(b"\n") if line.strip()]
    if cut and lines:
        lines = lines[1:]
    own = [not _CHATTER.search(line) for line in lines]
    if not lines or own[-1]:
        return max(0.0, now - mtime)
    mine = [index for index, flag in enumerate(own) if flag]
    stamped = _chatter_time(lines[mine[-1] + 1 if mine else 0], now, utc_offset_s)
    last = _chatter_time(lines[-1], now, utc_offset_s)
    # the last line was written when the log last changed: a stamp far from that is another clock or zone
    if stamped is None or last is None or abs(last - mtime) > 120.0 or stamped > mtime + 1.0:
        return max(0.0, now - mtime)
    return max(0.0, now - stamped)


def _seconds_without_progress(run_dir: Path, log: Path, started: Optional[float]) -> float:
    """Seconds since the log last grew by a line of the job's own: a line of launcher chatter (torchrun's
    rendezvous heartbeat warnings, printed every few seconds by a job that is stuck) is not progress, so a
    stuck job is seen as quiet however much its launcher prints. Where the log stood and when the job last
    printed (and when it was last looked at) are kept in ``progress.json`` beside the log."""
    now = time.time()
    state_file = run_dir / "progress.json"
    try:
        state = json.loads(state_file.read_text())
        offset, since, checked = int(state["offset"]), float(state["since"]), float(state["checked"])
    except (OSError, ValueError, KeyError, TypeError):
        offset, since = 0, started or now
        checked = since
    mtime = log.stat().st_mtime
    with open(log, "rb") as handle:
        size = handle.seek(0, 2)
        if size < offset:  # the log was replaced: read it again
            offset = 0
        handle.seek(offset)
        new = handle.read(size - offset)
    complete = new[:new.rfind(b"\n") + 1]  # whole lines only; a partial line is read with the rest of it
    lines = [line for line in complete.split(b"\n") if line.strip()]
    own = [not _CHATTER.search(line) for line in lines]
    if any(own):  # the job printed since the last look: when its last line was written, as closely as is known
        last = max(index for index, mine in enumerate(own) if mine)
        if last == len(lines) - 1:
            since = mtime
        else:  # chatter after it: no later than the first chatter line's own time stamp, else than the last look
            stamped = _chatter_time(lines[last + 1], now)
            usable = stamped is not None and since <= stamped <= mtime + 1.0  # a clock that disagrees: not used
            since = max(since, min(stamped, mtime) if usable else checked)
    files.write_text(state_file, json.dumps({"offset": offset + len(complete), "since": since, "checked": now}))
    return max(0.0, now - since)


def _proc_stat(pid: int) -> Optional[list]:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None where there is none."""
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_ticks(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22), or None where
    this host has no ``/proc``."""
    fields = _proc_stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def _is_run_process(run_dir: Path, pid: int) -> bool:
    """Whether ``pid`` is still the process the run was started as (``process.json``: its pid, start time in
    ticks since boot, and the boot), not a later process given the same number. A run recorded before
    ``process.json`` is matched by the start time against when its ``pid`` file was written (within 5 s).
    On a host without ``/proc`` nothing can be checked: a live pid is taken as the run's."""
    ticks = _start_ticks(pid)
    if ticks is None:
        return _alive(pid)
    try:
        identity = json.loads((run_dir / "process.json").read_text())
    except (OSError, ValueError):
        identity = None
    if isinstance(identity, dict) and identity.get("start_ticks") is not None:
        boot = _boot_id()
        return (identity.get("pid") == pid and identity["start_ticks"] == ticks
                and (boot is None or identity.get("boot_id") in (None, boot)))
    try:  # no record of identity: the process must have started when the pid file was written
        written = (run_dir / "pid").stat().st_mtime
        with open("/proc/stat") as handle:
            boot_s = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
    except (OSError, StopIteration, IndexError, ValueError):
        return _alive(pid)
    return abs(boot_s + ticks / float(os.sysconf("SC_CLK_TCK")) - written) <= 5.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _proc_stat(pid)  # a zombie (ended, not yet reaped by its parent) is not alive
    return fields is None or fields[0] != "Z"


MARK_ENV = "ATTUNE_LOCAL_RUN"  # localrun.py's: the run's directory, in every process of the run


def _marked(run_dir: Path) -> list:
    """Live processes of this user whose environment carries ``ATTUNE_LOCAL_RUN`` = this run's directory."""
    needle = ("\0%s=%s\0" % (MARK_ENV, os.path.realpath(str(run_dir)))).encode()
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as handle:
                environ = handle.read()
        except OSError:  # gone, or another user's
            continue
        if needle in b"\0" + environ and _alive(int(entry)):
            found.append(int(entry))
    return found


def _terminate(send, alive, grace_s: float) -> bool:
    """TERM, then KILL after ``grace_s``: ``send(sig)`` signals (False: nothing more to signal), ``alive()`` says
    whether anything is left; True when nothing is."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        if not alive() or not send(sig):
            break
        deadline = time.time() + wait
        while time.time() < deadline and alive():
            time.sleep(0.05)
    return not alive()


def _end_marked(run_dir: Path, grace_s: float) -> None:
    """End every process of the run still alive (TERM, then KILL after ``grace_s``); an error if one survives."""
    def send(sig) -> bool:
        for pid in _marked(run_dir):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        return True

    if not _terminate(send, lambda: bool(_marked(run_dir)), grace_s):
        raise RuntimeError("run in %s: processes %s survived SIGKILL" % (run_dir, _marked(run_dir)))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(_alive(pid) for pid in _group_members(pgid))


def _group_members(pgid: int) -> list:
    members = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        fields = _proc_stat(int(entry)) if entry.isdigit() else None
        if fields and len(fields) > 2 and fields[2] == str(pgid):
            members.append(int(entry))
    return members or [pgid]


BACKENDS = {"local": LocalBackend}


def get(name: str, settings=None):
    if name == "kuberay" and name not in BACKENDS:
        from . import kuberay  # noqa: F401  (registers itself; imports the kubernetes client)
    if name == "ray" and name not in BACKENDS:
        from . import raybackend  # noqa: F401  (registers itself; imports ray only when it talks to the cluster)
    if name not in BACKENDS:
        raise InputError("backend %r is not available here (available: %s)" % (name, ", ".join(sorted(BACKENDS))))
    return BACKENDS[name](settings)
