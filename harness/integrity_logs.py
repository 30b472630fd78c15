"""The integrity record's append-only files (``ledger.jsonl``, ``gpu_hours.jsonl``, ``levers.md``): the
prefix a record holds of each, and the problems between that prefix and the file now. The chained logs are
read by the attune kernel's chained-log reader, from the campaign's read-only skill copy when it passed the static
check, else from the copy beside this file. ``integrity.py`` records and verifies a campaign with these.

Standard library only and Python 3.7 syntax (the Stop hook imports ``integrity``, which imports this).
"""

from __future__ import print_function

import hashlib
import os
import sys

import campaign_files
from integrity_files import _describe, _entry, _join, _problem, _read_bytes, _short

HERE = os.path.dirname(os.path.abspath(__file__))
_sha256 = hashlib.sha256
LEDGER = "ledger.jsonl"
GPU_HOURS = "gpu_hours.jsonl"
CHAIN_LOGS = (LEDGER, GPU_HOURS)
SKILL_TREE = campaign_files.STATE + "/skill"


class RecordError(Exception):
    """The campaign cannot be recorded as it is (its chained logs are already broken)."""


def _core(campaign_dir, trust_campaign=True):
    """``(chainlog, schema)`` modules of the attune kernel (``attune.core``): an already imported copy, else
    the campaign's read-only skill copy (unless ``trust_campaign`` is False), else the one beside this file.
    Its ``attune.py`` loads the package from the folder it sits in and takes that folder off ``sys.path``."""
    if "attune.core.chainlog" not in sys.modules or "attune.core.schema" not in sys.modules:
        candidates = []
        if trust_campaign:
            candidates.append(_join(campaign_dir, SKILL_TREE + "/scripts"))
        candidates.append(os.path.normpath(os.path.join(HERE, "..", "skill", "scripts")))
        for candidate in candidates:
            if os.path.isfile(os.path.join(candidate, "core", "chainlog.py")):
                if candidate not in sys.path:
                    sys.path.insert(0, candidate)
                break
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        from attune.core import chainlog, schema
    finally:
        sys.dont_write_bytecode = saved
    return chainlog, schema


def _chain(campaign_dir, name, trust_campaign=True):
    chainlog, schema = _core(campaign_dir, trust_campaign)
    path = _join(campaign_dir, name)
    if name == LEDGER:
        return chainlog.ChainLog(path, schema.validate_ledger_row)
    return chainlog.ChainLog(path, schema.validate_gpu_hour_row)


def _append_only_record(campaign_dir, name):
    path = _join(campaign_dir, name)
    entry = _entry(path)
    if entry is None:
        return {"present": False}
    if entry["type"] != "file":
        raise RecordError("%s is %s, not a regular file; an append-only file must be a plain file"
                          % (name, _describe(entry)))
    data = _read_bytes(path)
    out = {"present": True, "mode": entry["mode"]}
    if name in CHAIN_LOGS:
        report = _chain(campaign_dir, name).verify(data)
        if not report.ok:
            raise RecordError("refusing to record %s: its chain is already broken (%s)" % (name, report.summary()))
        end = data.rfind(b"\n") + 1  # complete rows only: a torn tail is moved aside by the next append
        prefix = data[:end]
        lines = prefix.split(b"\n")[:-1]
        out.update({
            "length": end,
            "sha256": _sha256(prefix).hexdigest(),
            "rows": len(lines),
            "last_row_sha256": _sha256(lines[-1]).hexdigest() if lines else None,
            "campaign": report.parsed[0]["campaign"] if report.parsed else None,
            "torn_tail_bytes": len(data) - end,
        })
    else:
        out.update({"length": len(data), "sha256": _sha256(data).hexdigest()})
    return out


def _verify_append_only(campaign_dir, name, rec, trust_campaign, warnings, new_rows):
    """Problems of one append-only file against its recorded prefix."""
    path = _join(campaign_dir, name)
    entry = _entry(path)
    if not isinstance(rec, dict):
        return [_problem(name, "record", "a recorded prefix", repr(rec), "%s: the integrity record has no usable entry" % name)]
    if not rec.get("present"):
        if entry is None:
            return []
        rec = {"present": True, "length": 0, "sha256": _sha256(b"").hexdigest(), "rows": 0,
               "last_row_sha256": None, "campaign": None, "mode": None}
    length = rec.get("length", 0)
    expected_desc = "%d-byte prefix sha256=%s" % (length, rec.get("sha256"))
    if entry is None:
        return [_problem(name, "deleted", expected_desc, "missing",
                         "%s: append-only file deleted (it held %d recorded bytes%s)" % (
                             name, length, ", %s rows" % rec.get("rows") if name in CHAIN_LOGS else ""))]
    if entry["type"] == "symlink":
        return [_problem(name, "symlink", expected_desc, _describe(entry),
                         "%s: append-only file replaced by a symlink to %s" % (name, entry.get("target")))]
    if entry["type"] != "file":
        return [_problem(name, "type", expected_desc, _describe(entry),
                         "%s: append-only file replaced by a %s" % (name, entry["type"]))]
    problems = []
    if rec.get("mode") is not None and entry.get("mode") != rec.get("mode"):
        problems.append(_problem(name, "mode", "mode %s" % rec["mode"], "mode %s" % entry.get("mode"),
                                 "%s: permissions changed from %s to %s" % (name, rec["mode"], entry.get("mode"))))
    try:
        data = _read_bytes(path)
    except (IOError, OSError) as exc:
        problems.append(_problem(name, "changed", expected_desc, "unreadable: %s" % exc, "%s: cannot be read: %s" % (name, exc)))
        return problems
    if len(data) < length:
        problems.append(_problem(name, "truncated", expected_desc, "%d bytes" % len(data),
                                 "%s: truncated from %d recorded bytes to %d (append-only: rows may not be removed)"
                                 % (name, length, len(data))))
        return problems
    digest = _sha256(data[:length]).hexdigest()
    if digest != rec.get("sha256"):
        detail = ""
        if name in CHAIN_LOGS:
            try:
                detail = "; chain check: %s" % _chain(campaign_dir, name, trust_campaign).verify(data).summary()
            except Exception as exc:  # the diagnosis is a courtesy; the problem stands without it
                detail = "; chain check could not run: %s" % exc
        problems.append(_problem(name, "prefix", expected_desc, "the first %d bytes have sha256=%s" % (length, digest),
                                 "%s: the recorded prefix (%d bytes) changed: SHA-256 %s -> %s (append-only: written "
                                 "bytes may not be edited)%s" % (name, length, _short(rec.get("sha256")), _short(digest), detail)))
        return problems
    if name not in CHAIN_LOGS:
        return problems
    rows = rec.get("rows") or 0
    if rows:
        start = data.rfind(b"\n", 0, length - 1) + 1
        last = _sha256(data[start:length - 1]).hexdigest()
        if last != rec.get("last_row_sha256"):
            problems.append(_problem(name, "prefix", "row %d sha256=%s" % (rows - 1, rec.get("last_row_sha256")),
                                     "row %d sha256=%s" % (rows - 1, last),
                                     "%s: recorded row seq %d no longer hashes as recorded" % (name, rows - 1)))
            return problems
        resume = (length, rows, rec.get("last_row_sha256"), rec.get("campaign"))
    else:
        resume = None
    try:
        report = _chain(campaign_dir, name, trust_campaign).verify(data, resume=resume)
    except Exception as exc:
        problems.append(_problem(name, "chain", "well-formed rows chained after row %d" % (rows - 1), "error: %s" % exc,
                                 "%s: the rows appended since the record cannot be checked: %s" % (name, exc)))
        return problems
    if not report.ok:
        problems.append(_problem(name, "chain", "well-formed rows chained after the %d recorded" % rows,
                                 report.summary(),
                                 "%s: not a well-formed append after the %d recorded rows: %s" % (name, rows, report.summary())))
    for warning in report.warnings:
        warnings.append("%s: %s" % (name, warning))
    if new_rows is not None:
        new_rows[name] = list(report.parsed)
    return problems
