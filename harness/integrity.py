#!/usr/bin/env python3
"""The campaign integrity check: record what must not change, and verify that nothing did.

    integrity.py record   <campaign_dir> [--session]
    integrity.py verify   <campaign_dir> [--session] [--write-violation] [--json]
    integrity.py reprompt <campaign_dir>
    integrity.py live-runs <campaign_dir>

Exit codes: 0 ok, 3 integrity violation (or a record refused because the chained logs are already
broken), 2 usage.

``record`` writes ``.attune/integrity.json`` (atomically):

* every *static* protected file: everything under ``.attune/skill/``, ``.attune/harness/`` and
  ``.attune/bin/`` (folders too, so an added or deleted file is caught), ``.attune/settings.env``, the
  Claude Code settings file ``.attune/claude_settings.json``, and what Claude Code reads in the campaign
  as settings, hooks, skills or instructions (``campaign_files.AGENT_CONFIG``: ``.claude/settings.json``,
  ``.claude/settings.local.json``, ``.claude/hooks``, ``agents``, ``commands``, ``skills`` (the skill link),
  ``CLAUDE.md``, ``.mcp.json``; one that did not exist is recorded as missing, so creating it is caught):
  per path its type (file, dir, symlink), SHA-256, size and mode bits, and a symlink's target (never followed).
  Python's bytecode caches (``__pycache__``) are not recorded: ``verify`` accepts a cache file only
  when its code equals the recorded, unchanged source compiled by the verifying interpreter (a
  forged ``.pyc`` would run in place of its source); caches for another interpreter are refused, so
  run the agent's Python with ``PYTHONDONTWRITEBYTECODE=1`` where versions differ;
* per append-only file (``ledger.jsonl``, ``gpu_hours.jsonl``, ``levers.md``) the recorded prefix: its
  byte length and SHA-256 (for the chained logs only complete rows), plus for the chained logs the
  row count, the last row's SHA-256 and the campaign id;
* Claude Code's user settings (``user_settings``: ``~/.claude/settings.json`` and
  ``$CLAUDE_CONFIG_DIR/settings.json``): a digest per key, cosmetic keys left out;
* the prompts (``goal_prompt.txt``, ``resume_prompt.txt``); they are enforced only when the record was
  taken with ``--session`` (a session runs), and ``reprompt`` re-records them between sessions with a
  ledger row that names the old and new hashes.

``verify`` returns the list of problems, each a dict ``what`` (the campaign-relative path), ``expected``,
``found``, ``rule`` and ``message``. Rules: ``changed``, ``mode``, ``symlink``, ``type``, ``deleted``,
``added`` (static files, and bytecode caches that do not match their source); ``truncated``, ``prefix``, ``chain`` (append-only files); ``session_prompt``
(a prompt changed while a session ran: checked when the record was taken with ``--session`` and
no session ``end`` row was appended since, or when ``verify --session`` asks); ``agent_settings`` (a non-cosmetic key of the user's Claude Code settings added, removed or changed);
``record`` (no usable integrity record);
``violation_removed`` (the ledger records a violation but its file is gone).

What the record holds of one file or tree, and the problems between an entry and the file now, are in
``integrity_files.py``; the append-only files' recorded prefixes and their checks in ``integrity_logs.py``. Standard library only and Python 3.7 syntax: the Stop hook imports this module. The attune kernel
(the chained-log reader and the row schema) is imported from the campaign's read-only skill copy
``<campaign>/.attune/skill/scripts`` when present, else from ``../skill/scripts`` beside this file;
the static files are hashed first, and a skill copy that fails that check is not imported.
"""

from __future__ import print_function

import argparse
import datetime
import errno
import hashlib
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.join(HERE, "hooks") not in sys.path:
    sys.path.insert(0, os.path.join(HERE, "hooks"))

_saved_flag = sys.dont_write_bytecode
sys.dont_write_bytecode = True  # never leave a bytecode cache in a protected tree
if HERE not in sys.path:
    sys.path.insert(0, HERE)
try:
    import campaign_files  # noqa: E402
    import integrity_key  # noqa: E402
    import user_settings  # noqa: E402
    from integrity_logs import RecordError, _append_only_record, _chain, _core, _verify_append_only  # noqa: E402,F401
    from integrity_files import (  # noqa: E402
        MISSING, _bless_caches, _compare, _describe, _entry, _join, _problem, _prompt_snapshot, _read_bytes,
        _static_snapshot, _verify_static)
finally:
    sys.dont_write_bytecode = _saved_flag

_sha256 = hashlib.sha256  # bound before any campaign code is imported

SCHEMA_VERSION = 1
EXIT_OK, EXIT_USAGE, EXIT_INTEGRITY = 0, 2, 3

INTEGRITY = campaign_files.INTEGRITY
VIOLATION = campaign_files.VIOLATION
APPEND_ONLY = tuple(campaign_files.APPEND_ONLY)
SESSION_PROTECTED = tuple(campaign_files.SESSION_PROTECTED)
HEADS = tuple(campaign_files.HEADS)
LEDGER = "ledger.jsonl"
SKILL_TREE = campaign_files.STATE + "/skill"
HARNESS_TREE = campaign_files.STATE + "/harness"
# The static protected roots: trees are walked (symlinks recorded, never followed).
STATIC_ROOTS = (SKILL_TREE, HARNESS_TREE, campaign_files.SETTINGS, campaign_files.STATE + "/claude_settings.json",
                campaign_files.STATE + "/bin", campaign_files.BASELINE) + tuple(campaign_files.AGENT_CONFIG)


# ---------------------------------------------------------------------------------- helpers
def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _atomic_write_json(path, data):
    """``data`` as JSON at ``path``, whole or not at all: an exclusive temporary file of an unpredictable name beside
    it (never one planted in advance), renamed over it; a ``path`` that is a symbolic link is refused."""
    directory = os.path.dirname(path)
    if os.path.islink(path):
        raise OSError(errno.ELOOP, "%s is a symbolic link; the harness writes no record through a link" % path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True, default=str)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------ record
def record(campaign_dir, session=False):
    """Write ``.attune/integrity.json`` for the campaign as it is now; return the record.

    ``session=True`` while an agent session runs: the prompts are enforced too. Raises
    ``RecordError`` when a chained log is already broken (recording it would launder the damage)."""
    campaign_dir = os.fspath(campaign_dir)
    caches = []
    static = _static_snapshot(campaign_dir, STATIC_ROOTS, caches)
    data = {
        "schema_version": SCHEMA_VERSION,
        "recorded_at": _now(),
        "session": bool(session),
        "static_roots": list(STATIC_ROOTS),
        "static": static,
        "caches": _bless_caches(campaign_dir, caches, static),
        "append_only": dict((name, _append_only_record(campaign_dir, name)) for name in APPEND_ONLY),
        "prompts": _prompt_snapshot(campaign_dir),
        "prompts_recorded_at": None,
        "user_settings": user_settings.record(),
    }
    data["prompts_recorded_at"] = data["recorded_at"]
    state = _join(campaign_dir, campaign_files.STATE)
    if not os.path.isdir(state):
        os.makedirs(state)
    _sign(campaign_dir, data)
    _atomic_write_json(_join(campaign_dir, INTEGRITY), data)
    return data


def _sign(campaign_dir, data):
    """Set ``key_id`` and ``mac``: the campaign keeps the key of its earlier record, and gets a new one only when it
    has none (a record is re-taken only after ``verify`` passed, so a key that went missing fails first)."""
    key_id = None
    try:
        key_id = load_record(campaign_dir, keyed=False).get("key_id")
        integrity_key.key_path(key_id)
    except (ValueError, integrity_key.KeyProblem):
        key_id = None
    try:
        if key_id is None:
            key_id = integrity_key.new_key_id()
            key = integrity_key.create(key_id)
        else:
            key = integrity_key.load(key_id)
    except integrity_key.KeyProblem as exc:
        raise RecordError("%s; the record is not re-taken. Fix: restore the key, or start a new campaign" % exc)
    data["key_id"] = key_id
    data.pop("mac", None)
    data["mac"] = integrity_key.sign(data, key)


def load_record(campaign_dir, keyed=True):
    """The integrity record as a dict; raises ``ValueError`` (with the reason) when unusable, and (``keyed``) when
    its MAC is not the campaign key's (``integrity_key``)."""
    path = _join(os.fspath(campaign_dir), INTEGRITY)
    try:
        with open(path, "r", encoding="utf-8") as handle:
            data = json.load(handle)
    except (IOError, OSError) as exc:
        if getattr(exc, "errno", None) == errno.ENOENT:
            raise ValueError("there is no integrity record (%s)" % INTEGRITY)
        raise ValueError("the integrity record cannot be read: %s" % exc)
    except ValueError as exc:
        raise ValueError("the integrity record is not valid JSON: %s" % exc)
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError("the integrity record has no schema_version %d" % SCHEMA_VERSION)
    for key in ("static", "append_only", "prompts"):
        if not isinstance(data.get(key), dict):
            raise ValueError("the integrity record has no %r section" % key)
    if keyed:
        why = integrity_key.check(data)
        if why is not None:
            raise ValueError("the integrity record is not the launcher's: %s" % why)
    return data


# ------------------------------------------------------------------------------------ verify
def _verify_prompts(campaign_dir, recorded):
    problems = []
    found = _prompt_snapshot(campaign_dir)
    for name in SESSION_PROTECTED:
        expected = recorded.get(name, MISSING)
        for problem in _compare(name, expected, found[name], rule_override="session_prompt"):
            problem["message"] = "prompt changed while a session runs (editable only between sessions): " + problem["message"]
            problems.append(problem)
    return problems


def _ledger_records_violation(campaign_dir):
    """Whether any ledger row is an ``integrity`` row with event ``violation`` (tolerant reading)."""
    try:
        data = _read_bytes(_join(campaign_dir, LEDGER))
    except (IOError, OSError):
        return False
    for line in data.split(b"\n"):
        if b'"event":"violation"' in line and b'"kind":"integrity"' in line:
            try:
                row = json.loads(line.decode("utf-8"))
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("kind") == "integrity" and row.get("event") == "violation":
                return True
    return False


def verify(campaign_dir, session=None, warnings=None):
    """Every problem found against ``.attune/integrity.json`` (an empty list when all is well).

    ``session``: True checks the prompts, False does not; None (the default) checks them when the
    record was taken with ``session=True`` and the ledger has no session ``end`` row appended since
    (the session is still running). ``warnings``, when a list, receives non-fatal notes (a torn tail
    left by a crashed writer, rows appended after a lagging head)."""
    campaign_dir = os.fspath(campaign_dir)
    warnings = warnings if warnings is not None else []
    try:
        rec = load_record(campaign_dir)
    except ValueError as exc:
        return [_problem(INTEGRITY, "record", "an integrity record written by `integrity.py record`", str(exc),
                         "%s: %s; the protected files cannot be checked" % (INTEGRITY, exc))]
    problems = []
    state_entry = _entry(_join(campaign_dir, campaign_files.STATE))
    if state_entry is not None and state_entry["type"] == "symlink":
        problems.append(_problem(campaign_files.STATE, "symlink", "directory", _describe(state_entry),
                                 "%s: the harness state folder was replaced by a symlink to %s"
                                 % (campaign_files.STATE, state_entry.get("target"))))
    roots = rec.get("static_roots")
    if not isinstance(roots, list) or not all(isinstance(root, str) for root in roots):
        roots = STATIC_ROOTS  # the roots this version protects; a record from another keeps its own
    problems.extend(_verify_static(campaign_dir, rec["static"], roots, rec.get("caches")))
    trust_campaign = not any(p["what"] == SKILL_TREE or p["what"].startswith(SKILL_TREE + "/") for p in problems)
    new_rows = {}
    for name in APPEND_ONLY:
        problems.extend(_verify_append_only(campaign_dir, name, rec["append_only"].get(name), trust_campaign,
                                            warnings, new_rows))
    for head in HEADS:
        entry = _entry(_join(campaign_dir, head))
        if entry is not None and entry["type"] != "file":
            problems.append(_problem(head, "symlink" if entry["type"] == "symlink" else "type", "file", _describe(entry),
                                     "%s: the head record was replaced by a %s" % (head, _describe(entry))))
    for path, change in user_settings.differences(rec.get("user_settings")):
        problems.append(_problem(path, "agent_settings", "as recorded", change,
                                 "%s: Claude Code's user settings changed since the record (%s); they apply to the "
                                 "agent's sessions and can loosen its hooks, permissions or sandbox. Undo the change, "
                                 "or start a new campaign" % (path, change)))
    if session is None:
        ended = any(row.get("kind") == "session" and row.get("event") == "end" for row in new_rows.get(LEDGER, ()))
        session = bool(rec.get("session")) and not ended
    if session:
        problems.extend(_verify_prompts(campaign_dir, rec["prompts"]))
    if not os.path.exists(_join(campaign_dir, VIOLATION)) and _ledger_records_violation(campaign_dir):
        problems.append(_problem(VIOLATION, "violation_removed", "present (the ledger records a violation)", "missing",
                                 "%s: the ledger records an integrity violation but the violation file is gone"
                                 % VIOLATION))
    return problems


# --------------------------------------------------------------------------------- violation
def _ledger_appendable(campaign_dir, problems):
    """``(ok, why)``: whether a row may be appended to the ledger."""
    touched = [p for p in problems if p.get("what") in (LEDGER, LEDGER + ".head")]
    if touched:
        return False, "not appended: the ledger is what broke (%s)" % "; ".join(
            "%s: %s" % (p.get("what"), p.get("rule")) for p in touched)
    if not os.path.isfile(_join(campaign_dir, LEDGER)) or os.path.islink(_join(campaign_dir, LEDGER)):
        return False, "not appended: there is no ledger"
    try:
        report = _chain(campaign_dir, LEDGER, trust_campaign=False).verify()
    except Exception as exc:
        return False, "not appended: the ledger cannot be checked (%s)" % exc
    if not report.ok:
        return False, "not appended: the ledger's chain is broken (%s)" % report.summary()
    return True, ""


def _signature(problems):
    return sorted([p.get("what"), p.get("rule"), str(p.get("found"))] for p in problems)


def _current_sha(campaign_dir, rel):
    entry = _entry(_join(campaign_dir, rel))
    return entry.get("sha256") if entry is not None and entry.get("type") == "file" else None


def violation(campaign_dir, problems):
    """Record a failed check: ``.attune/integrity_violation.json`` (the first violation stays; later
    ones are added to its ``later`` list) and an ``integrity`` ledger row (event ``violation``) when the
    ledger is still appendable. The same problems recorded again add nothing. Returns the file's data."""
    campaign_dir = os.fspath(campaign_dir)
    problems = [dict(p) for p in problems]
    path = _join(campaign_dir, VIOLATION)
    existing = None
    unreadable = None
    if os.path.lexists(path):
        try:
            with open(path, "r", encoding="utf-8") as handle:
                existing = json.load(handle)
        except (IOError, OSError, ValueError) as exc:
            unreadable = str(exc)
        if existing is not None and not isinstance(existing, dict):
            unreadable, existing = "not a JSON object", None
    entry = {
        "ts": _now(),
        "problems": [{"what": p.get("what"), "expected": p.get("expected"), "found": p.get("found"),
                      "rule": p.get("rule"), "message": p.get("message")} for p in problems],
        "ledger_row": None,
        "ledger_note": "pending",
    }
    if existing is not None:
        entries = [existing] + [e for e in existing.get("later", []) if isinstance(e, dict)]
        if any(_signature(e.get("problems") or []) == _signature(entry["problems"]) for e in entries):
            return existing
        data = existing
        data.setdefault("later", [])
        if not isinstance(data["later"], list):
            data["later"] = [data["later"]]
        data["later"].append(entry)
    else:
        data = {"schema_version": SCHEMA_VERSION}
        data.update(entry)
        entry = data
        if unreadable is not None:
            data["previous_file_unreadable"] = unreadable
    state = os.path.dirname(path)
    if not os.path.isdir(state):
        os.makedirs(state)
    _atomic_write_json(path, data)  # first: the file alone already blocks shipping
    ok, why = _ledger_appendable(campaign_dir, problems)
    if ok:
        names = ", ".join("%s (%s)" % (p.get("what"), p.get("rule")) for p in problems)
        if len(names) > 400:
            names = names[:400] + "..."
        files = {}
        for p in problems:
            files[str(p.get("what"))] = _current_sha(campaign_dir, str(p.get("what")))
        try:
            row = _append_ledger(campaign_dir, "violation",
                                 "integrity check failed: %d problem(s): %s" % (len(problems), names), files)
            entry["ledger_row"] = True
            entry["ledger_note"] = "integrity row appended at seq %d" % row["seq"]
        except Exception as exc:
            entry["ledger_row"] = False
            entry["ledger_note"] = "not appended: %s" % exc
    else:
        entry["ledger_row"] = False
        entry["ledger_note"] = why
    _atomic_write_json(path, data)
    return data


def _append_ledger(campaign_dir, event, detail, files=None):
    payload = {"event": event, "detail": detail}
    if files is not None:
        payload["files"] = files
    try:
        _core(campaign_dir, trust_campaign=False)
        saved = sys.dont_write_bytecode
        sys.dont_write_bytecode = True
        try:
            from attune.campaign.ledger import Campaign
        finally:
            sys.dont_write_bytecode = saved
    except ImportError:  # pragma: no cover - the skill always ships campaign/ledger.py
        Campaign = None
    if Campaign is not None:
        return Campaign(campaign_dir).append("integrity", **payload)
    log = _chain(campaign_dir, LEDGER, trust_campaign=False)
    first = log.first_row()
    return log.append("integrity", payload, campaign=first["campaign"] if first else None)


def enforce(campaign_dir, session=None):
    """``verify`` and, when it finds problems, ``violation``; returns the problems."""
    problems = verify(campaign_dir, session=session)
    if problems:
        violation(campaign_dir, problems)
    return problems


# --------------------------------------------------------------------------------- launcher
def live_runs(campaign_dir):
    """Run ids launched with no result row yet, in launch order (lines that do not parse are skipped)."""
    try:
        data = _read_bytes(_join(os.fspath(campaign_dir), LEDGER))
    except (IOError, OSError):
        return []
    launched = []
    seen = set()
    finished = set()
    for line in data.split(b"\n"):
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("run"), str):
            continue
        run = row["run"]
        if row.get("kind") == "launch":
            if run not in seen:
                seen.add(run)
                launched.append(run)
            finished.discard(run)
        elif row.get("kind") == "result":
            finished.add(run)
    return [run for run in launched if run not in finished]


def reprompt(campaign_dir):
    """Between sessions: when the prompts differ from the record, append an ``integrity`` ledger row
    (event ``prompts_changed``, old and new SHA-256 in the detail) and re-record the prompts (the rest
    of the record is kept). Returns the ledger row, or None when nothing changed. With no record yet,
    records the campaign and returns None."""
    campaign_dir = os.fspath(campaign_dir)
    if not os.path.lexists(_join(campaign_dir, INTEGRITY)):
        record(campaign_dir)
        return None
    rec = load_record(campaign_dir)  # a record that is not the launcher's is never re-signed
    found = _prompt_snapshot(campaign_dir)
    changes = []
    files = {}
    for name in SESSION_PROTECTED:
        old = rec["prompts"].get(name) or MISSING
        new = found[name]
        key_old = (old.get("type"), old.get("sha256"), old.get("target"))
        key_new = (new.get("type"), new.get("sha256"), new.get("target"))
        if key_old != key_new:
            changes.append("%s sha256 %s -> %s" % (name, old.get("sha256") or old.get("type"),
                                                   new.get("sha256") or new.get("type")))
            files[name] = new.get("sha256")
    if not changes:
        return None
    unchanged = [name for name in SESSION_PROTECTED if name not in files]
    detail = "prompts changed between sessions: %s%s" % (
        "; ".join(changes), "; unchanged: %s" % ", ".join(unchanged) if unchanged else "")
    row = _append_ledger(campaign_dir, "prompts_changed", detail, files)
    rec["prompts"] = found
    rec["prompts_recorded_at"] = _now()
    _sign(campaign_dir, rec)
    _atomic_write_json(_join(campaign_dir, INTEGRITY), rec)
    return row


# -------------------------------------------------------------------------------------- CLI
def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="integrity.py", description="Record or verify a campaign's protected files.",
        epilog="Exit codes: 0 ok, 2 usage, 3 integrity violation.")
    sub = parser.add_subparsers(dest="verb")
    p_record = sub.add_parser("record", help="write .attune/integrity.json")
    p_record.add_argument("campaign_dir")
    p_record.add_argument("--session", action="store_true", help="a session starts: protect the prompts too")
    p_verify = sub.add_parser("verify", help="check the campaign against its record")
    p_verify.add_argument("campaign_dir")
    p_verify.add_argument("--session", action="store_true", help="check the prompts whatever the record says")
    p_verify.add_argument("--write-violation", action="store_true",
                          help="on problems, write .attune/integrity_violation.json and a ledger row")
    p_verify.add_argument("--json", action="store_true", help="print the problems as JSON")
    p_reprompt = sub.add_parser("reprompt", help="between sessions: record changed prompts")
    p_reprompt.add_argument("campaign_dir")
    p_live = sub.add_parser("live-runs", help="print the runs launched without a result, one per line")
    p_live.add_argument("campaign_dir")
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_usage(sys.stderr)
        return EXIT_USAGE
    directory = os.path.abspath(args.campaign_dir)
    if not os.path.isdir(directory):
        print("integrity.py: %s is not a directory" % args.campaign_dir, file=sys.stderr)
        return EXIT_USAGE
    if args.verb == "record":
        try:
            rec = record(directory, session=args.session)
        except RecordError as exc:
            print("integrity.py: %s" % exc, file=sys.stderr)
            return EXIT_INTEGRITY
        print("recorded %d static paths, %s%s" % (
            len(rec["static"]), ", ".join("%s %s bytes" % (n, rec["append_only"][n].get("length", 0))
                                          for n in APPEND_ONLY), "; prompts protected" if args.session else ""))
        return EXIT_OK
    if args.verb == "verify":
        warnings = []
        problems = verify(directory, session=True if args.session else None, warnings=warnings)
        if args.write_violation and problems:
            violation(directory, problems)
        if args.json:
            print(json.dumps({"ok": not problems, "problems": problems, "warnings": warnings}, indent=1, default=str))
        else:
            for warning in warnings:
                print("warning: %s" % warning, file=sys.stderr)
            for problem in problems:
                print("VIOLATION [%s] %s" % (problem["rule"], problem["message"]))
            if not problems:
                print("integrity: ok")
        return EXIT_INTEGRITY if problems else EXIT_OK
    if args.verb == "reprompt":
        row = reprompt(directory)
        print(row["detail"] if row else "prompts unchanged")
        return EXIT_OK
    for run in live_runs(directory):
        print(run)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
