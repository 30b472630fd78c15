"""Stream the events of a Chrome-trace file as torch.profiler / Kineto writes it (``.json`` or ``.json.gz``).

The file is read in chunks and never held whole. The keys before ``traceEvents`` (``schemaVersion``,
``deviceProperties``, ``distributedInfo`` ...) and after it are parsed as the trace's metadata;
the events come out one list per chunk. Two ways to cut a chunk into events:

* the fast path: Kineto writes one event per indented block that ends with a line holding exactly
  two spaces and ``}``; a chunk cut after such a line is a sequence of whole events, parsed by one
  call of the JSON parser;
* any other layout (compact JSON, another writer) falls back to decoding one object at a time.

A file that ends early (a truncated trace) yields the events before the cut and a warning naming
the file; the caller reports a partial result.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

try:
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    _fast_loads = json.loads

CHUNK_CHARS = 2 << 20
_KEY = '"traceEvents"'
_SPACE = re.compile(r"[\s,]*")
_EVENT_END = "\n  }"  # Kineto: an event's closing brace, indented by two spaces, alone on its line


class TraceReader(object):
    """``for events in reader:`` yields lists of event dicts; ``metadata`` and ``warnings`` fill in as it reads."""

    def __init__(self, path, chunk_chars: int = CHUNK_CHARS):
        self.path = Path(path)
        self.chunk_chars = chunk_chars
        self.metadata = {}
        self.warnings = []
        self.truncated = False
        self.events_read = 0

    def _open(self):
        with open(self.path, "rb") as probe:
            magic = probe.read(2)
        if magic == b"\x1f\x8b":
            return gzip.open(self.path, "rt", encoding="utf-8", errors="replace")
        return open(self.path, "r", encoding="utf-8", errors="replace")

    def __iter__(self):
        try:
            with self._open() as handle:
                yield from self._events(handle)
        except (OSError, EOFError) as exc:  # a damaged gzip stream: keep what was read
            self.truncated = True
            self.warnings.append("%s: unreadable after %d events (%s); the result is partial"
                                 % (self.path, self.events_read, exc))

    def _events(self, handle):
        buf = ""
        eof = False
        # 1. the header: everything before "traceEvents"
        while _KEY not in buf and not eof:
            block = handle.read(self.chunk_chars)
            eof = not block
            buf += block
        at = buf.find(_KEY)
        if at < 0:
            self._header(buf, final=True)
            self.warnings.append("%s: no traceEvents array; not a Chrome trace" % self.path)
            return
        self._header(buf[:at], final=False)
        bracket = buf.find("[", at + len(_KEY))
        while bracket < 0 and not eof:
            block = handle.read(self.chunk_chars)
            eof = not block
            buf += block
            bracket = buf.find("[", at + len(_KEY))
        if bracket < 0:
            self._truncated("before its traceEvents array")
            return
        buf, pos = buf[bracket + 1:], 0
        decoder = json.JSONDecoder()
        # 2. the events
        while True:
            pos = _SPACE.match(buf, pos).end()
            if pos < len(buf) and buf[pos] == "]":
                self._trailer(buf[pos + 1:], handle)
                return
            cut = buf.rfind(_EVENT_END, pos)
            if cut >= 0 and buf.startswith("{", pos):
                end = cut + len(_EVENT_END)
                try:
                    events = _fast_loads("[" + buf[pos:end] + "]")
                except ValueError:
                    events = None
                if events is not None:
                    self.events_read += len(events)
                    yield events
                    pos = end
                    if not eof:
                        buf, pos = buf[pos:], 0
                        block = handle.read(self.chunk_chars)
                        eof = not block
                        buf += block
                    continue
            # the slow path: one object at a time, to the end of what is buffered
            events = []
            while pos < len(buf):
                pos = _SPACE.match(buf, pos).end()
                if pos >= len(buf) or buf[pos] == "]":
                    break
                try:
                    event, pos = decoder.raw_decode(buf, pos)
                except ValueError:
                    break
                events.append(event)
            if events:
                self.events_read += len(events)
                yield events
            if pos < len(buf) and buf[pos] == "]":
                continue
            if eof:
                if buf[pos:].strip():
                    self._truncated("inside its traceEvents array")
                else:
                    self._truncated("before its traceEvents array closed")
                return
            buf, pos = buf[pos:], 0
            block = handle.read(self.chunk_chars)
            eof = not block
            buf += block

    def _truncated(self, where: str) -> None:
        self.truncated = True
        self.warnings.append("%s: the file ends %s, after %d events; the result is partial"
                             % (self.path, where, self.events_read))

    def _header(self, text: str, final: bool) -> None:
        body = text.strip()
        if body.startswith("{"):
            body = body[1:]
        body = body.rstrip().rstrip(",")
        if not body.strip():
            return
        try:
            self.metadata.update(json.loads("{" + body + "}"))
        except ValueError:
            self.warnings.append("%s: its header (before traceEvents) is not valid JSON; metadata ignored" % self.path)

    def _trailer(self, rest: str, handle) -> None:
        """Keys after the events array (some writers put distributedInfo there)."""
        tail = rest + handle.read()
        body = tail.strip().lstrip(",").rstrip()
        if body.endswith("}"):
            body = body[:-1]
        if not body.strip():
            return
        try:
            self.metadata.update(json.loads("{" + body + "}"))
        except ValueError:
            self.warnings.append("%s: the keys after traceEvents are not valid JSON; ignored" % self.path)
