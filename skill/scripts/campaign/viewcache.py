"""A verified-prefix cache so that `status` and `rank` do not re-read rows they verified before.

It holds, for the first ``size`` bytes of ``ledger.jsonl``: their SHA-256, the number of rows, the
SHA-256 of the last row (the next row's ``prev``), the campaign id and timestamp of the last row,
and what the views need from that prefix: one entry per run as ``runview.merge`` folded the
prefix's launch, result and gate rows into it (a result carries its score for the campaign's
scoring window, not its per-iteration metrics), the genesis row, and the ``leader`` and ``stop``
rows. Its size grows with runs, not rows.

It is used only when the file's first ``size`` bytes still hash to the recorded digest, so no
change to the ledger can hide behind it, and the rows after it are verified as usual and merged
into its runs. A prefix whose merge raised a warning (a run launched twice, a result without a
launch) is not cached: such rows can only be placed against every other row, so those ledgers are
always read whole. A new row that cannot be placed incrementally makes the view read every row.
Only the views use it (``status``, ``rank``); ``verify`` and ``report``, which decides what ships,
always read and check every row. It is derived data: delete it at any time; anything that does not
match (version, window, digest, shape) is ignored and rebuilt. Writing it is best effort.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Optional

from attune.core import __version__, files
from attune.core.chainlog import loads
from attune.core.measure import RunScore

from .runview import RunView

PATH = ".attune/cache/ledger-view.json"
GPU_PATH = ".attune/cache/gpu-hours-view.json"  # the same for gpu_hours.jsonl: its prefix's GPU-seconds
VERSION = 2
RUN_FIELDS = tuple(field.name for field in dataclasses.fields(RunView))
_SCORE = RUN_FIELDS.index("score")
_REASONS = RUN_FIELDS.index("gate_reasons")

try:
    from orjson import dumps as _dumps
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    def _dumps(value) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _key(window) -> dict:
    return {"version": VERSION, "attune_version": __version__, "window": list(window),
            "run_fields": list(RUN_FIELDS)}


def _run(values: list) -> RunView:
    if type(values) is not list or len(values) != len(RUN_FIELDS):
        raise TypeError("run entry of the wrong shape")
    score = values[_SCORE]
    if score is not None:
        values[_SCORE] = RunScore(*score)
    values[_REASONS] = tuple(values[_REASONS])
    run = RunView(*values)
    if type(run.run) is not str or type(run.recipe) is not str or type(run.launch_ts) is not str:
        raise TypeError("run entry with a bad id, recipe or launch time")
    return run


def _values(run: RunView) -> list:
    values = [getattr(run, name) for name in RUN_FIELDS]
    if values[_SCORE] is not None:
        values[_SCORE] = list(values[_SCORE])
    values[_REASONS] = list(values[_REASONS])
    return values


def _read(path: Path, key: dict, data: bytes) -> Optional[dict]:
    """The cache at ``path`` when its key matches and its prefix is exactly ``data``'s first bytes."""
    try:
        cache = loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    try:
        if any(cache.get(name) != value for name, value in key.items()):
            return None
        size = cache["size"]
        if not (0 < size <= len(data)) or data[size - 1:size] != b"\n":
            return None
        if hashlib.sha256(memoryview(data)[:size]).hexdigest() != cache["sha256"]:
            return None
        if (type(cache["count"]) is not int or not isinstance(cache["prev"], str)
                or not isinstance(cache["campaign"], str)):
            return None
    except (KeyError, TypeError, AttributeError):
        return None
    return cache


def _write(path: Path, cache: dict) -> bool:
    try:
        files.make_folders(path.parent)
        files.atomic_write(path, _dumps(cache))
    except (OSError, TypeError, ValueError):  # a cache not written is read anew next time (a link: LinkRefused)
        return False
    return True


def _prefix(data: bytes, size: int, count: int, prev: str, campaign: str) -> dict:
    return dict(size=size, sha256=hashlib.sha256(memoryview(data)[:size]).hexdigest(), count=count, prev=prev,
                campaign=campaign)


def load(campaign_dir, data: bytes, window) -> Optional[dict]:
    """The cache when it matches ``data``'s first bytes exactly; otherwise None.

    ``runs`` comes back as ``{run id: RunView}``, ready for ``runview.merge``."""
    cache = _read(Path(campaign_dir) / PATH, _key(window), data)
    if cache is None:
        return None
    try:
        if type(cache["genesis"]) is not dict or cache["genesis"].get("seq") != 0:
            return None
        for name in ("leaders", "stops"):
            if not all(type(row) is dict and type(row.get("seq")) is int for row in cache[name]):
                return None
        runs = {}
        for values in cache["runs"]:
            run = _run(values)
            if run.run in runs:
                return None
            runs[run.run] = run
        cache["runs"] = runs
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    return cache


def save(campaign_dir, data: bytes, size: int, count: int, prev: str, campaign: str, last_ts: str,
         genesis: dict, leaders: list, stops: list, runs, window) -> bool:
    """Record that ``data[:size]`` (``count`` whole rows) verified and merged into ``runs``. Best effort."""
    cache = dict(_key(window), **_prefix(data, size, count, prev, campaign), last_ts=last_ts, genesis=genesis,
                 leaders=leaders, stops=stops, runs=[_values(run) for run in runs])
    return _write(Path(campaign_dir) / PATH, cache)


def _gpu_key() -> dict:
    return {"version": VERSION, "attune_version": __version__}


def load_gpu(campaign_dir, data: bytes) -> Optional[dict]:
    """The GPU-hour log's cache when it matches ``data``'s first bytes exactly; otherwise None."""
    cache = _read(Path(campaign_dir) / GPU_PATH, _gpu_key(), data)
    if cache is None or type(cache.get("gpu_seconds")) is not int or cache["gpu_seconds"] < 0:
        return None
    return cache


def save_gpu(campaign_dir, data: bytes, size: int, count: int, prev: str, campaign: str, gpu_seconds: int) -> bool:
    """Record that ``data[:size]`` (``count`` whole rows) verified and charged ``gpu_seconds``. Best effort."""
    cache = dict(_gpu_key(), **_prefix(data, size, count, prev, campaign), gpu_seconds=gpu_seconds)
    return _write(Path(campaign_dir) / GPU_PATH, cache)
