"""A verified-prefix cache so that `status` and `rank` do not re-read rows they verified before.

It holds, for the first ``size`` bytes of ``ledger.jsonl``: their SHA-256, the number of rows, the
SHA-256 of the last row (the next row's ``prev``), the campaign id, and every row of that prefix
with ``metrics`` replaced by the run's score for the campaign's scoring window.

It is used only when the file's first ``size`` bytes still hash to the recorded digest, so no
change to the ledger can hide behind it, and the rows after it are verified as usual. Only the
views use it (``status``, ``rank``); ``verify`` and ``report``, which decides what ships, always
read and check every row. It is derived data: delete it at any time; anything that does not match
(version, window, digest, shape) is ignored and rebuilt. Writing it is best effort.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from . import __version__
from .chainlog import loads
from .measure import RunScore
from .schema import LEDGER_KINDS

PATH = ".attune/cache/ledger-view.json"
VERSION = 1

try:
    from orjson import dumps as _dumps
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    def _dumps(value) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _key(window) -> dict:
    return {"version": VERSION, "attune_version": __version__, "window": list(window)}


def load(campaign_dir, data: bytes, window) -> Optional[dict]:
    """The cache when it matches ``data``'s first bytes exactly; otherwise None."""
    path = Path(campaign_dir) / PATH
    try:
        cache = loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    try:
        if any(cache.get(key) != value for key, value in _key(window).items()):
            return None
        size = cache["size"]
        if not (0 < size <= len(data)) or data[size - 1:size] != b"\n":
            return None
        if hashlib.sha256(memoryview(data)[:size]).hexdigest() != cache["sha256"]:
            return None
        rows = cache["rows"]
        if len(rows) != cache["count"] or not isinstance(cache["prev"], str):
            return None
        if not all(type(row) is dict and row.get("seq") == index and row.get("kind") in LEDGER_KINDS
                   for index, row in enumerate(rows)):
            return None
        cache["scores"] = {row["seq"]: RunScore(*row["score"]) for row in rows if row["kind"] == "result"}
    except (KeyError, TypeError, AttributeError):
        return None
    return cache


def slim(row: dict, score: Optional[RunScore]) -> dict:
    """A row as the cache keeps it: no per-iteration metrics; a result carries its score."""
    if row["kind"] != "result":
        return row
    out = {key: value for key, value in row.items() if key != "metrics"}
    out["score"] = list(score)
    return out


def save(campaign_dir, data: bytes, size: int, rows: list, prev: str, campaign: str, window) -> bool:
    """Record that ``data[:size]`` (whole rows) verified as ``rows`` (slim). Best effort."""
    path = Path(campaign_dir) / PATH
    cache = dict(_key(window), size=size, sha256=hashlib.sha256(memoryview(data)[:size]).hexdigest(),
                 count=len(rows), prev=prev, campaign=campaign, rows=rows)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as handle:
            handle.write(_dumps(cache))
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False
    return True
