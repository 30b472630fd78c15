"""Status files that the job-side helpers leave for their hook to read after the run.

A helper (``profiler.maybe_profile``, ``memory.install``) runs inside the training process, not the
wrapper, so it reports through ``OUT/helpers/<hook>.rank<R>.json``: ``{"hook", "rank", "status":
"ok"|"skipped"|"failed", "reason"|"error", ...}``. ``OUT`` comes from ``ATTUNE_POD_HOOKS_OUT``, which
the wrapper sets for the child; without it (the job runs unwrapped) nothing is written.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

OUT_ENV = "ATTUNE_POD_HOOKS_OUT"
PREFIX = "attune-pod-hooks:"


def rank() -> int:
    """The process's global rank as torchrun sets it (``RANK``); 0 when unset or not a number."""
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def replace_text(path: Path, text: str) -> None:
    """Write ``path`` whole: an exclusive, randomly named temporary file beside it, synced, then renamed over it.

    Never writes through a symbolic link at ``path`` (an ``OSError``, ELOOP) nor at a name another
    process could predict. The standard-library twin of ``attune.core.files.atomic_write``, which the
    pod cannot import (``pod_hooks`` imports nothing else of ours).
    """
    path = Path(path)
    if path.is_symlink():
        raise OSError(errno.ELOOP, "is a symbolic link (to %s); remove the link" % os.readlink(str(path)), str(path))
    fd, temporary = tempfile.mkstemp(dir=str(path.parent), prefix="." + path.name[:100] + ".", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            fd = -1  # the file object closes it
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, str(path))
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def write(hook: str, status: str, **fields: object) -> None:
    """Leave this rank's status for ``hook``; a failure to write is logged, never raised into the job."""
    out = os.environ.get(OUT_ENV)
    if not out:
        return
    row = {"hook": hook, "rank": rank(), "pid": os.getpid(), "status": status}
    row.update(fields)
    path = Path(out) / "helpers" / ("%s.rank%d.json" % (hook, rank()))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_text(path, json.dumps(row, sort_keys=True) + "\n")
    except OSError as err:
        print("%s %s: cannot write %s: %s" % (PREFIX, hook, path, err), file=sys.stderr)


def read(out: Path, hook: str) -> List[Dict[str, object]]:
    """Every rank's status row for ``hook`` under ``out``; unreadable files become ``failed`` rows."""
    rows = []
    for path in sorted((out / "helpers").glob("%s.rank*.json" % hook)):
        try:
            rows.append(json.loads(path.read_text()))
        except (OSError, ValueError) as err:
            rows.append({"hook": hook, "status": "failed", "error": "unreadable %s: %s" % (path, err)})
    return rows
