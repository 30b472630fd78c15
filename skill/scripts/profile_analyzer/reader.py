"""Stream the events of a Chrome-trace file as torch.profiler / Kineto writes it (``.json`` or ``.json.gz``).

The file is read in chunks and never held whole. The keys before ``traceEvents`` (``schemaVersion``,
``deviceProperties``, ``distributedInfo`` ...) and after it are parsed as the trace's metadata;
the events come out one list per chunk. Two ways to cut a chunk into events:

* the fast path: Kineto writes one event per indented block that ends with a line holding exactly
  two spaces and ``}``; a chunk cut after such a line is a sequence of whole events, parsed by one
  call of the JSON parser;
* any other layout (compact JSON, another writer) falls back to decoding one object at a time.

A file that ends early (a truncated trace) yields the events before the cut and a warning naming
the file; the caller reports a partial result. A file that is not a trace at all (it does not start
as a JSON object, or has no ``traceEvents`` key within its first HEADER_CHARS characters) yields
nothing and says why in ``refusal``; it is never read further.
"""

from __future__ import annotations

import codecs
import json
import re
import zlib
from pathlib import Path

try:
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - exercised where orjson is not installed
    _fast_loads = json.loads

CHUNK_CHARS = 2 << 20
HEADER_CHARS = 64 << 20  # Kineto's keys before the events (device properties, distributed info) are a few KB
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
        self.refusal = None  # why the file is not a Chrome trace, or None

    def _open(self):
        with open(self.path, "rb") as probe:
            magic = probe.read(2)
        if magic == b"\x1f\x8b":
            return _GzipText(self.path)
        return open(self.path, "r", encoding="utf-8", errors="replace")

    def __iter__(self):
        try:
            with self._open() as handle:
                yield from self._events(handle)
                damage = getattr(handle, "damage", None)
        except OSError as exc:
            damage = str(exc)
        if damage and not self.truncated:  # the events before the damage were read; say the rest was not
            self.truncated = True
            self.warnings.append("%s: unreadable after %d events (%s); the result is partial"
                                 % (self.path, self.events_read, damage))

    def _events(self, handle):
        buf = ""
        eof = False
        # 1. the header: everything before "traceEvents"
        opened = False  # the first character that is not white space was a "{"
        while _KEY not in buf and not eof and len(buf) < HEADER_CHARS:
            block = handle.read(self.chunk_chars)
            eof = not block
            buf += block
            if not opened and block.strip():
                if not buf.lstrip().startswith("{"):
                    self.refusal = "it does not start with a JSON object"
                    return
                opened = True
        at = buf.find(_KEY)
        if at < 0:
            self.refusal = ("it is empty" if not buf.strip() else "a JSON object without a traceEvents array" if eof
                            else "no traceEvents key in its first %d characters" % len(buf))
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


class _GzipText(object):
    """A gzip file read as text in pieces: a stream cut short or damaged gives the text decompressed
    before the damage (``damage`` says what), where ``gzip.open`` would raise and lose the piece."""

    PIECE = 1 << 20  # bytes read, and bytes decompressed, at a time

    def __init__(self, path):
        self.raw = open(path, "rb")
        self.inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = []
        self.size = 0
        self.done = False
        self.damage = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.raw.close()

    def _more(self) -> None:
        data = b""
        try:
            if self.inflate.unconsumed_tail:
                data = self.inflate.decompress(self.inflate.unconsumed_tail, self.PIECE)
            elif self.inflate.eof and self.inflate.unused_data:  # a second gzip member
                rest = self.inflate.unused_data
                self.inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data = self.inflate.decompress(rest, self.PIECE)
            else:
                block = self.raw.read(self.PIECE)
                if not block:
                    self.done = True
                    if not self.inflate.eof:
                        self.damage = "the gzip stream ends early"
                else:
                    data = self.inflate.decompress(block, self.PIECE)
        except zlib.error as exc:
            self.done, self.damage = True, "damaged gzip data: %s" % exc
        text = self.decoder.decode(data, final=self.done)
        if text:
            self.pending.append(text)
            self.size += len(text)

    def read(self, size: int = -1) -> str:
        while not self.done and (size < 0 or self.size < size):
            self._more()
        text = "".join(self.pending)
        out, rest = (text, "") if size < 0 else (text[:size], text[size:])
        self.pending, self.size = ([rest] if rest else []), len(rest)
        return out
