"""Run one local job and record how it ended (started by the local backend, never by hand).

    python3 localrun.py RUN_DIR

Reads ``RUN_DIR/local.json`` (``command``, ``env``, ``cwd``), runs the command with bash in this
process's group (the backend started this process as a session leader, so tearing the run down
kills the whole group), sends its output to ``RUN_DIR/log.txt`` and writes ``RUN_DIR/exit.json``
(``exit_code``, ``started``, ``ended``: seconds since the epoch) when it ends. Standard library only.
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


def main(argv=None):
    run_dir = (argv or sys.argv[1:])[0]
    with open(os.path.join(run_dir, "local.json")) as handle:
        spec = json.load(handle)
    env = dict(os.environ)
    env.update(spec.get("env", {}))
    started = time.time()
    _write_json(os.path.join(run_dir, "started.json"), {"started": started, "pid": os.getpid()})
    with open(os.path.join(run_dir, "log.txt"), "ab") as log:
        proc = subprocess.Popen(["bash", "-c", spec["command"]], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, cwd=spec.get("cwd") or run_dir)
        code = proc.wait()
    _write_json(os.path.join(run_dir, "exit.json"), {"exit_code": code, "started": started, "ended": time.time()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
