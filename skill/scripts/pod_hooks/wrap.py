"""Run a training entrypoint inside the pod with ATTUNE's hooks around it.

Usage::

    python3 -m attune.pod_hooks.wrap --hooks NAME[,NAME...] --out DIR [--hook-arg NAME.KEY=VALUE ...] -- ENTRYPOINT...
    python3 skill/scripts/pod_hooks/wrap.py ...      # the same, run as a file

Each selected hook's ``before`` runs, then the entrypoint as a child process (its output passed
through unchanged, and watched; SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 forwarded to its
process group), then each hook's ``after``. ``DIR/pod_hooks.json`` records every hook's outcome and
the exit code. A hook that fails is logged to stderr as ``attune-pod-hooks: <hook> failed: ...`` and
recorded; it never stops the entrypoint or changes the exit code.

Exit codes: the entrypoint's own; 128+N when signal N killed it; 127 (126) when it could not be
started (not found / not executable); 2 for a usage error (unknown hook, bad ``--hook-arg``, no
entrypoint after ``--``, DIR not writable), found before anything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

if __package__ in (None, ""):  # run as a file: load the attune package from this tree (attune.py)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import attune  # noqa: F401,E402

from attune.pod_hooks.helper_status import OUT_ENV, PREFIX, replace_text  # noqa: E402
from attune.pod_hooks.hooks import HOOKS, Context, Hook, HookSkipped  # noqa: E402

RECORD = "pod_hooks.json"
SCHEMA_VERSION = 1
TAIL_LINES = 2000
WATCH_LINES = 1000
LINE_BYTES = 65536
FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
DRAIN_SECONDS = 5.0


class UsageError(ValueError):
    """Bad wrapper arguments: exit 2 before anything runs."""


def _log(message: str) -> None:
    print("%s %s" % (PREFIX, message), file=sys.stderr, flush=True)


def parse(argv: List[str]) -> Tuple[argparse.Namespace, List[str]]:
    """The wrapper's own options and the entrypoint argv after ``--``."""
    if "--" not in argv and not {"-h", "--help"} & set(argv):
        raise UsageError("no entrypoint: put it after `--`, e.g. --hooks gpu_facts --out DIR -- python3 train.py")
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(prog="pod_hooks.wrap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hooks", default="", help="comma-separated names from: " + ", ".join(sorted(HOOKS)))
    parser.add_argument("--out", required=True, help="folder for pod_hooks.json and the hooks' files")
    parser.add_argument("--hook-arg", action="append", default=[], metavar="NAME.KEY=VALUE",
                        help="a setting of one selected hook, e.g. profiler.start=10 (repeatable)")
    options = parser.parse_args(argv[:split])
    entrypoint = argv[split + 1:]
    if not entrypoint:
        raise UsageError("no entrypoint: put it after `--`, e.g. --hooks gpu_facts --out DIR -- python3 train.py")
    return options, entrypoint


def select(names: str, hook_args: List[str], registry: Optional[Dict[str, type]] = None) -> List[Hook]:
    """Build the named hooks with their ``--hook-arg`` values; UsageError lists what is valid."""
    registry = HOOKS if registry is None else registry
    chosen = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in registry]
    if unknown:
        raise UsageError("unknown hook %s; valid hooks: %s" % (", ".join(unknown), ", ".join(sorted(registry))))
    twice = sorted({name for name in chosen if chosen.count(name) > 1})
    if twice:
        raise UsageError("hook %s named twice in --hooks" % ", ".join(twice))
    args = {name: {} for name in chosen}  # type: Dict[str, Dict[str, str]]
    for item in hook_args:
        match = re.fullmatch(r"(\w+)\.(\w+)=(.*)", item, re.S)
        if not match:
            raise UsageError("--hook-arg %r: expected NAME.KEY=VALUE, e.g. profiler.start=10" % item)
        name, key, value = match.groups()
        if name not in args:
            raise UsageError("--hook-arg %s: hook %r is not in --hooks (%s)" % (item, name, ",".join(chosen)))
        valid = registry[name].ARGS
        if key not in valid:
            raise UsageError("--hook-arg %s: %s takes %s" % (item, name, ", ".join(sorted(valid)) or "no arguments"))
        args[name][key] = value
    hooks = []
    for name in chosen:
        try:
            hooks.append(registry[name](name, args[name]))
        except ValueError as err:
            raise UsageError(str(err)) from None
    return hooks


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_record(out: Path, record: Dict[str, object]) -> None:
    """Replace ``out/pod_hooks.json`` atomically; a write failure is logged, never raised."""
    path = out / RECORD
    try:
        replace_text(path, json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")
    except OSError as err:
        _log("cannot write %s: %s" % (path, err))


class _Output:
    """Passes the child's output through and keeps the tail and each hook's watched lines."""

    def __init__(self, hooks: List[Hook], watched: Dict[str, List[str]]) -> None:
        self.tail = deque(maxlen=TAIL_LINES)  # type: deque
        self.patterns = [(hook.name, hook.WATCH) for hook in hooks if hook.WATCH is not None]
        self.watched = watched
        for name, _pattern in self.patterns:
            watched.setdefault(name, [])

    def pump(self, pipe, sink) -> None:  # type: ignore[no-untyped-def]
        binary = getattr(sink, "buffer", None)
        for chunk in iter(lambda: pipe.readline(LINE_BYTES), b""):
            text = chunk.decode("utf-8", "replace")
            try:  # the child must keep running even when our own output is gone
                if binary is not None:
                    binary.write(chunk)
                else:
                    sink.write(text)
                sink.flush()
            except (OSError, ValueError):
                pass
            line = text.rstrip("\r\n")
            self.tail.append(line)
            for name, pattern in self.patterns:
                kept = self.watched[name]
                if len(kept) < WATCH_LINES and pattern.search(line):
                    kept.append(line)
        pipe.close()


class _Forwarder:
    """Signal handlers that pass each signal on to the child's process group."""

    def __init__(self) -> None:
        self.child = None  # type: Optional[subprocess.Popen]
        self.pending = []  # type: List[int]
        self.previous = {}  # type: Dict[int, object]

    def install(self) -> None:
        for name in FORWARDED:
            number = getattr(signal, name, None)
            if number is None:
                continue
            try:
                self.previous[number] = signal.signal(number, self.handle)
            except ValueError:  # not the main thread: no forwarding possible
                _log("signals are not forwarded: the wrapper does not run in the main thread")
                return

    def restore(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)

    def handle(self, number: int, _frame: object) -> None:
        child = self.child
        if child is None:
            self.pending.append(number)
            return
        if child.returncode is not None:
            return
        try:
            os.killpg(child.pid, number)
        except (ProcessLookupError, PermissionError):
            try:
                child.send_signal(number)
            except OSError:
                pass


def _outcome(hook: Hook) -> Dict[str, object]:
    return {"name": hook.name, "args": dict(hook.args), "status": "ok"}


def _call(hook: Hook, entry: Dict[str, object], phase: str, call) -> bool:  # type: ignore[no-untyped-def]
    """Run one hook phase; record and log a skip or a failure; True when it went through."""
    try:
        call()
        return True
    except HookSkipped as err:
        entry.update(status="skipped", reason=str(err), phase=phase)
        _log("%s skipped: %s" % (hook.name, err))
    except Exception as err:  # a hook never takes the run down with it
        entry.update(status="failed", phase=phase, error="%s: %s" % (type(err).__name__, err))
        _log("%s failed: %s: %s" % (hook.name, type(err).__name__, err))
    return False


def run(hooks: List[Hook], entrypoint: List[str], out: Path) -> int:
    """Run the hooks around the entrypoint, write the record, return the exit code for the pod."""
    env = dict(os.environ)
    env[OUT_ENV] = str(out)
    ctx = Context(out, list(entrypoint), env)
    entries = [_outcome(hook) for hook in hooks]
    record = {"schema_version": SCHEMA_VERSION, "status": "running", "started_at": _now(),
              "entrypoint": list(entrypoint), "hooks": entries, "exit_code": None, "signal": None}
    for hook, entry in zip(hooks, entries):
        trial = ctx.copy()  # a hook that fails in before() leaves argv and env as they were
        if _call(hook, entry, "before", lambda: hook.before(trial)):
            ctx.argv, ctx.env = trial.argv, trial.env
    record["launched"] = list(ctx.argv)
    write_record(out, record)

    forwarder = _Forwarder()
    forwarder.install()
    live = [hook for hook, entry in zip(hooks, entries) if entry["status"] == "ok"]
    output = _Output(live, ctx.watched)
    try:
        code = _run_child(ctx, forwarder, output, record)
    finally:
        forwarder.restore()

    for hook, entry in zip(hooks, entries):
        if entry["status"] == "ok":
            _call(hook, entry, "after", lambda: hook.after(ctx, code, list(output.tail)))
    for hook, entry in zip(hooks, entries):
        entry["facts"] = hook.facts
        if hook.warnings:
            entry["warnings"] = hook.warnings
            for warning in hook.warnings:
                _log("%s warning: %s" % (hook.name, warning))
    record.update(status="finished", finished_at=_now(), exit_code=code)
    write_record(out, record)
    return code


def _run_child(ctx: Context, forwarder: _Forwarder, output: _Output, record: Dict[str, object]) -> int:
    if forwarder.pending:
        name = signal.Signals(forwarder.pending[0]).name
        record["entrypoint_error"] = "not started: %s arrived before the entrypoint started" % name
        record["signal"] = name
        _log(str(record["entrypoint_error"]))
        return 128 + forwarder.pending[0]
    try:
        # Its own session, so that a terminal's Ctrl-C reaches it once, through the forwarder.
        child = subprocess.Popen(ctx.argv, env=ctx.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
    except OSError as err:
        record["entrypoint_error"] = "%s: %s" % (type(err).__name__, err)
        _log("cannot start the entrypoint: %s" % record["entrypoint_error"])
        return 126 if isinstance(err, PermissionError) else 127
    forwarder.child = child
    pumps = [threading.Thread(target=output.pump, args=(child.stdout, sys.stdout), daemon=True),
             threading.Thread(target=output.pump, args=(child.stderr, sys.stderr), daemon=True)]
    for pump in pumps:
        pump.start()
    for number in forwarder.pending:  # arrived between the check above and Popen
        forwarder.handle(number, None)
    returncode = child.wait()
    for pump in pumps:  # a background grandchild may hold the pipes open: do not wait for it forever
        pump.join(DRAIN_SECONDS)
    if returncode < 0:
        record["signal"] = signal.Signals(-returncode).name
        return 128 - returncode
    return returncode


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        options, entrypoint = parse(argv)
        hooks = select(options.hooks, options.hook_arg)
        out = Path(options.out).resolve()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UsageError("--out %s: cannot create it: %s" % (options.out, err)) from None
        if not os.access(str(out), os.W_OK):
            raise UsageError("--out %s: not writable" % options.out)
    except UsageError as err:
        _log("error: %s" % err)
        return 2
    return run(hooks, entrypoint, out)


if __name__ == "__main__":
    raise SystemExit(main())
