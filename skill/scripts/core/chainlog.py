"""Append-only, hash-chained JSONL logs (the ledger and the GPU-hour log).

Every row is one line of JSON with the envelope fields ``schema_version``, ``campaign``, ``seq``
(0, 1, 2, ... with no gaps), ``ts`` (UTC, ISO 8601 with a ``Z``), ``kind`` and ``prev``: the
SHA-256 (hex) of the previous row's exact bytes, without its newline. The first row's ``prev`` is
64 zeros.

Appends take an exclusive ``flock`` on the log itself, write the whole line with ``O_APPEND``
and ``fsync`` it, then record the new head (sequence number and SHA-256 of the last row) in
``<log>.head`` by write-to-temporary and rename. The head lets ``verify`` notice what a chain
alone cannot: a changed or deleted final row. Every write goes through ``files``: none follows a
symbolic link.

A crash in the middle of an append leaves a final line with no newline (a torn tail). ``verify``
reports it; the next append moves its bytes, unchanged, into ``<log>.torn-<seq>`` beside the
log, truncates the log back to its last complete row and appends a ``recovery`` row naming the
side file and the SHA-256 of the bytes. No complete row is ever altered or dropped.

This module uses only the standard library and Python 3.7 syntax so that the harness hooks can
import it.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import json
import os
import re

from . import files
from .errors import InputError, IntegrityError

try:  # orjson parses the ledger about twice as fast; the standard library is the fallback (hooks, 3.7)
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    _fast_loads = None


def _refuse_constant(name):
    raise ValueError("%s is not valid in strict JSON" % name)


def loads(data):
    """Parse one row strictly: NaN and infinities are refused whichever parser runs.

    Where orjson refuses a row the standard library is asked too, so both readers accept exactly
    the same files (the hooks read with the standard library only)."""
    if _fast_loads is not None:
        try:
            return _fast_loads(data)
        except ValueError:
            pass
    return json.loads(data, parse_constant=_refuse_constant)

SCHEMA_VERSION = 1
GENESIS_PREV = "0" * 64
ENVELOPE = ("schema_version", "campaign", "seq", "ts", "kind", "prev")
_TAIL_CHUNK = 65536


def utc_now() -> str:
    """The current UTC time as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_TS_RE = re.compile(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d\.\d{6}Z\Z")


def check_ts(text) -> None:
    """Raise ``ValueError`` unless ``text`` has the documented form ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
    if not isinstance(text, str) or not _TS_RE.match(text):
        raise ValueError("timestamp %r is not UTC ISO 8601 as YYYY-MM-DDTHH:MM:SS.ffffffZ" % (text,))


def parse_ts(text) -> datetime.datetime:
    """Parse a row timestamp; raises ``ValueError`` on anything but the documented form."""
    check_ts(text)
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_row(row: dict) -> bytes:
    """The exact bytes of a row (no newline). Strict JSON: NaN and infinities are refused, and so
    is text that is not valid Unicode (a lone surrogate), which not every JSON reader accepts."""
    try:
        text = json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:  # NaN or infinity
        raise InputError("refusing to write a row: %s; write non-finite metrics as \"nan\", \"inf\"" % exc)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError("refusing to write a row: a text field is not valid Unicode (%s)" % exc.reason)
    return json.dumps(row, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode("ascii")


class VerifyReport(object):
    """What ``ChainLog.verify`` found. ``ok`` is False only for integrity problems."""

    def __init__(self, path):
        self.path = path
        self.ok = True
        self.first_bad = None  # {"line": n (1-based), "seq": s or None, "reason": text}
        self.warnings = []
        self.torn_tail_bytes = 0
        self.parsed = []  # the rows verified, in file order
        self.first_seq = 0  # seq of parsed[0]: above 0 when a verified prefix was skipped
        self._count = None

    @property
    def rows(self) -> int:
        """The number of rows verified (before the first bad one, if any)."""
        return self.first_seq + len(self.parsed) if self._count is None else self._count

    def without_rows(self):
        """This report with the parsed rows dropped (cheap to pass between processes)."""
        self._count = self.rows
        self.parsed = []
        return self

    def fail(self, line, seq, reason):
        self.ok = False
        self.first_bad = {"line": line, "seq": seq, "reason": reason}

    def as_dict(self) -> dict:
        return {
            "path": str(self.path),
            "ok": self.ok,
            "rows": self.rows,
            "first_bad": self.first_bad,
            "torn_tail_bytes": self.torn_tail_bytes,
            "warnings": list(self.warnings),
        }

    def summary(self) -> str:
        name = os.path.basename(str(self.path))
        if not self.ok:
            bad = self.first_bad
            return "%s: BROKEN at line %d (seq %s): %s" % (name, bad["line"], bad["seq"], bad["reason"])
        text = "%s: ok, %d rows" % (name, self.rows)
        if self.torn_tail_bytes:
            text += ", torn tail of %d bytes (recovered at the next append)" % self.torn_tail_bytes
        return text


class ChainLog(object):
    """One append-only, hash-chained JSONL file.

    ``validate`` is called with ``(kind, row)`` before a row is written and while verifying;
    ``validate_append`` only before a row is written (deeper checks too slow to repeat on every
    verify). Each raises ``ValueError`` with a reason when the row does not match the schema.
    """

    def __init__(self, path, validate=None, validate_append=None):
        self.path = os.fspath(path)
        self.head_path = self.path + ".head"
        self._validate = validate
        self._validate_append = validate_append

    # ------------------------------------------------------------------ reading
    def read_bytes(self) -> bytes:
        try:
            with open(self.path, "rb") as handle:
                return handle.read()
        except IOError as exc:
            if exc.errno == errno.ENOENT:
                return b""
            raise

    @staticmethod
    def split(data: bytes):
        """Split file bytes into (complete lines, torn tail bytes)."""
        if not data:
            return [], b""
        parts = data.split(b"\n")
        return parts[:-1], parts[-1]

    def rows(self) -> list:
        """Every complete row, parsed. Raises ``IntegrityError`` on a line that is not JSON."""
        lines, _torn = self.split(self.read_bytes())
        out = []
        for number, line in enumerate(lines, 1):
            try:
                row = loads(line)
            except ValueError:
                raise IntegrityError(
                    "%s line %d is not valid JSON; run `attune verify` to locate the damage"
                    % (self.path, number))
            out.append(row)
        return out

    def first_row(self):
        """The first row, parsed, reading only the first line; None for an empty or missing file."""
        try:
            with open(self.path, "rb") as handle:
                line = handle.readline()
        except IOError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        if not line.endswith(b"\n"):
            return None
        try:
            return loads(line)
        except ValueError:
            raise IntegrityError("%s line 1 is not valid JSON; run `attune verify`" % self.path)

    def read_head(self):
        try:
            with open(self.head_path, "r") as handle:
                head = json.load(handle)
        except IOError as exc:
            if exc.errno == errno.ENOENT:
                return None
            raise
        except ValueError:
            return {"invalid": True}
        return head

    # ------------------------------------------------------------------ verify
    def verify(self, data: bytes = None, resume: tuple = None) -> VerifyReport:
        """Check every row, the chain and the head; stop at the first integrity problem.

        ``data`` is the file's bytes when the caller has read them already. ``resume`` is
        ``(offset, rows, prev, campaign)`` for a prefix of ``data`` the caller has verified
        before and proved unchanged (by its SHA-256): only the rows after ``offset`` are checked
        (and returned in ``parsed``), chained on from ``prev``."""
        report = VerifyReport(self.path)
        data = self.read_bytes() if data is None else data
        offset, start, prev, campaign = resume if resume is not None else (0, 0, GENESIS_PREV, None)
        report.first_seq = start
        lines, torn = self.split(data[offset:] if offset else data)
        report.torn_tail_bytes = len(torn)
        validate = self._validate
        parsed = report.parsed
        ts_ok = _TS_RE.match
        sha256 = hashlib.sha256
        for index, line in enumerate(lines, start):
            try:
                row = loads(line)
            except ValueError:
                report.fail(index + 1, None, "not valid JSON")
                return report
            if type(row) is not dict:
                report.fail(index + 1, None, "not a JSON object")
                return report
            # The common case in one expression; any doubt goes to the check that names the problem.
            seq = row.get("seq")
            if not (type(seq) is int and seq == index and row.get("prev") == prev
                    and row.get("schema_version") == SCHEMA_VERSION and type(row.get("kind")) is str
                    and (row.get("campaign") == campaign if campaign is not None
                         else type(row.get("campaign")) is str and row["campaign"])
                    and type(row.get("ts")) is str and ts_ok(row["ts"])):
                reason = self._envelope_problem(row, index, prev, campaign)
                if reason is not None:
                    report.fail(index + 1, seq, reason)
                    return report
            if validate is not None:
                try:
                    validate(row["kind"], row)
                except ValueError as exc:
                    report.fail(index + 1, seq, str(exc))
                    return report
            if campaign is None:
                campaign = row["campaign"]
            prev = sha256(line).hexdigest()
            parsed.append(row)
        def line_at(seq):
            if seq >= start:
                return lines[seq - start]
            return self.split(data[:offset])[0][seq]  # rare: the head lags behind the cached prefix
        self._check_head(report, start + len(lines), line_at)
        if torn:
            report.warnings.append(
                "torn final line of %d bytes (a writer stopped mid-append); the next append "
                "preserves it in a side file and records a recovery row" % len(torn))
        return report

    @staticmethod
    def _envelope_problem(row, index, prev, campaign):
        for key in ENVELOPE:
            if key not in row:
                return "missing field %r" % key
        if row["schema_version"] != SCHEMA_VERSION:
            return "schema_version %r is not %d" % (row["schema_version"], SCHEMA_VERSION)
        if not isinstance(row["seq"], int) or isinstance(row["seq"], bool) or row["seq"] != index:
            return "seq %r where %d was expected (a row was removed, inserted or moved)" % (row["seq"], index)
        if row["prev"] != prev:
            return "prev does not match the SHA-256 of the row before it (a row was changed, removed, inserted or moved)"
        if campaign is not None and row["campaign"] != campaign:
            return "campaign %r differs from the first row's %r" % (row["campaign"], campaign)
        if not isinstance(row["campaign"], str) or not row["campaign"]:
            return "campaign must be a non-empty string"
        if not isinstance(row["kind"], str):
            return "kind must be a string"
        try:
            check_ts(row["ts"])
        except ValueError as exc:
            return str(exc)
        return None

    def _check_head(self, report, count, line_at):
        head = self.read_head()
        if head is None:
            if count:
                report.fail(count, count - 1, "head record %s is missing" % os.path.basename(self.head_path))
            return
        if head.get("invalid") or not isinstance(head.get("seq"), int) or not isinstance(head.get("sha256"), str):
            report.fail(count, None, "head record %s is not valid" % os.path.basename(self.head_path))
            return
        seq = head["seq"]
        if seq >= count:
            report.fail(count, None, "the head records seq %d but the log ends at seq %d: rows were removed"
                        % (seq, count - 1))
            return
        if sha256_hex(line_at(seq)) != head["sha256"]:
            report.fail(seq + 1, seq, "row changed since it was written (its SHA-256 differs from the head record)")
            return
        if seq < count - 1:
            report.warnings.append(
                "%d row(s) after the head record: appended by another tool or by a writer that stopped "
                "before updating the head; they chain correctly" % (count - 1 - seq))

    # ------------------------------------------------------------------ append
    def append(self, kind: str, payload: dict, campaign: str = None, ts: str = None) -> dict:
        """Append one row and return it. ``campaign`` is required only for the first row."""
        directory = os.path.dirname(os.path.abspath(self.path))
        created = not os.path.exists(self.path)
        fd = files.open_fd(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            last = self._recover_and_read_last(fd, campaign, ts)
            row = self._make_row(last, kind, payload, campaign, ts)
            self._write_row(fd, row)
        finally:
            os.close(fd)  # closing releases the lock
        if created:
            _fsync_dir(directory)
        return row

    def append_many(self, items, campaign: str = None) -> int:
        """Append ``[(kind, payload, ts or None), ...]`` under one lock and one fsync; return the count.

        For bulk imports and benchmarks: every row is validated and chained exactly as ``append``
        does it, but the file is synced once at the end.
        """
        created = not os.path.exists(self.path)
        fd = files.open_fd(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        count = 0
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            last = self._recover_and_read_last(fd, campaign, None)
            buffer = []
            for kind, payload, ts in items:
                row = self._make_row(last, kind, payload, campaign, ts)
                data = encode_row(row)
                buffer.append(data + b"\n")
                last = (row, data)
                count += 1
                if len(buffer) >= 4096:
                    _write_all(fd, b"".join(buffer))
                    buffer = []
            if buffer:
                _write_all(fd, b"".join(buffer))
            os.fsync(fd)
            if last is not None:
                self._write_head(last[0]["seq"], sha256_hex(last[1]))
        finally:
            os.close(fd)
        if created:
            _fsync_dir(os.path.dirname(os.path.abspath(self.path)))
        return count

    def _make_row(self, last, kind, payload, campaign, ts):
        for key in ENVELOPE:
            if key in payload:
                raise InputError("payload field %r is reserved for the row envelope" % key)
        if last is None:
            if not campaign:
                raise InputError("%s does not exist yet: the first row needs a campaign id" % self.path)
            seq, prev = 0, GENESIS_PREV
        else:
            last_row, last_bytes = last
            if campaign and campaign != last_row["campaign"]:
                raise IntegrityError("%s belongs to campaign %r, not %r"
                                     % (self.path, last_row["campaign"], campaign))
            campaign = last_row["campaign"]
            seq, prev = last_row["seq"] + 1, sha256_hex(last_bytes)
        if ts is not None:
            try:
                check_ts(ts)
            except ValueError as exc:
                raise InputError("refusing to append to %s: %s" % (self.path, exc))
        row = {"schema_version": SCHEMA_VERSION, "campaign": campaign, "seq": seq,
               "ts": ts or utc_now(), "kind": kind, "prev": prev}
        row.update(payload)
        for validate in (self._validate, self._validate_append):
            if validate is None:
                continue
            try:
                validate(kind, row)
            except ValueError as exc:
                raise InputError("refusing to append to %s: %s" % (self.path, exc))
        return row

    def _write_row(self, fd, row):
        data = encode_row(row)
        _write_all(fd, data + b"\n")
        os.fsync(fd)
        self._write_head(row["seq"], sha256_hex(data))

    def _write_head(self, seq, digest):
        files.write_text(self.head_path, json.dumps({"seq": seq, "sha256": digest}))
        _fsync_dir(os.path.dirname(os.path.abspath(self.head_path)))

    def _recover_and_read_last(self, fd, campaign, ts):
        """Under the lock: preserve a torn tail if there is one, then return the last row."""
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        tail_start, last_line_start = _find_tail(fd, size)
        if tail_start < size:
            torn = _pread_all(fd, tail_start, size - tail_start)
            last = self._parse_last(fd, last_line_start, tail_start - 1) if tail_start else None
            next_seq = last[0]["seq"] + 1 if last else 0
            side = "%s.torn-%d" % (self.path, next_seq)
            suffix = 0
            while os.path.lexists(side):  # a dangling link is taken too: never written through
                suffix += 1
                side = "%s.torn-%d.%d" % (self.path, next_seq, suffix)
            files.atomic_write(side, torn)
            _fsync_dir(os.path.dirname(os.path.abspath(side)))
            os.ftruncate(fd, tail_start)
            os.fsync(fd)
            row = self._make_row(last, "recovery", {
                "torn_bytes": len(torn),
                "torn_sha256": sha256_hex(torn),
                "side_file": os.path.basename(side),
            }, campaign, ts)
            self._write_row(fd, row)
            return row, encode_row(row)
        return self._parse_last(fd, last_line_start, size - 1)

    def _parse_last(self, fd, start, end):
        data = _pread_all(fd, start, end - start)
        try:
            row = loads(data)
        except ValueError:
            raise IntegrityError("the last row of %s is not valid JSON; run `attune verify`" % self.path)
        if not isinstance(row, dict) or not isinstance(row.get("seq"), int) or "campaign" not in row:
            raise IntegrityError("the last row of %s has no envelope; run `attune verify`" % self.path)
        return row, data


def _find_tail(fd, size):
    """Return (start of the torn tail, start of the last complete line).

    The torn tail is empty (start == size) when the file ends in a newline.
    """
    end = size
    newline_positions = []
    while end > 0 and len(newline_positions) < 2:
        start = max(0, end - _TAIL_CHUNK)
        chunk = _pread_all(fd, start, end - start)
        index = len(chunk)
        while len(newline_positions) < 2:
            index = chunk.rfind(b"\n", 0, index)
            if index < 0:
                break
            newline_positions.append(start + index)
        end = start
    if not newline_positions:
        return 0, 0
    tail_start = newline_positions[0] + 1
    last_line_end = newline_positions[0]
    if len(newline_positions) > 1:
        last_line_start = newline_positions[1] + 1
    else:
        last_line_start = 0
    assert last_line_start <= last_line_end
    return tail_start, last_line_start


def _pread_all(fd, offset, length):
    chunks = []
    while length > 0:
        data = os.pread(fd, length, offset)
        if not data:
            break
        chunks.append(data)
        offset += len(data)
        length -= len(data)
    return b"".join(chunks)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(directory):
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
