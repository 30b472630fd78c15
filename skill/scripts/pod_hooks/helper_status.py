"""Status files that the job-side helpers leave for their hook to read after the run.

A helper (``profiler.maybe_profile``, ``memory.install``) runs inside the training process, not the
wrapper, so it reports through ``OUT/helpers/<hook>.rank<R>.json``: ``{"hook", "rank", "status":
"ok"|"skipped"|"failed", "reason"|"error", ...}``. ``OUT`` comes from ``ATTUNE_POD_HOOKS_OUT``, which
the wrapper sets for the child; without it (the job runs unwrapped) nothing is written.
"""

from __future__ import annotations

import json
import os
import sys
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
        path.write_text(json.dumps(row, sort_keys=True) + "\n")
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
