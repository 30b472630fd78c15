"""Parse a training log into steps, memory reports, timers, slime records, failures and crash lines,
in memory bounded whatever the log's size.

The line formats are ``logformats``'s: Megatron-LM, Megatron-Bridge, Megatron-DeepSpeed, NeMo 1 and 2
and slime records, failure and crash lines. A value the line does not print is ``None``, never a
guess; a line that looks like a record but cannot be read becomes a warning that names the line.
Nothing here raises on bad input: ``refusal`` says when a file is not a log (empty, mostly binary, or
nothing recognised), for the verbs that must refuse it.

**Reading.** The log is read as bytes in blocks of whole lines; the lines holding a word some record
or failure needs (``WORDS``) are found with one ``bytes.find`` pass per word (C speed, about what
``grep -c`` takes for the whole pass) and only those are decoded and parsed.
A last line without its newline is a line still being written (a live log): it is not read, and
``text.partial_last_line`` says so in ``warnings`` and in ``text``, until its newline arrives. A
caller that knows the file is complete (``complete=True``: finalize after the job ended, the gate,
``attune metrics --complete``) has that line read too, but never its last field, which may have
been cut mid-number: only values followed by their separator (`` |``, ``]``, ``}``, ``)``) are read.

**Bounds** (each list in the result, with its full count in ``counts``; a list that was cut says so
in ``warnings``):

* ``steps``: the first ``STEPS_KEPT`` steps of the log, every one in full (any run ATTUNE makes: 20
  iterations; the gate's curves: up to 100). Past that: the last ``TAIL_STEPS`` steps (where the log
  ends), the first ``RUN_HEAD_STEPS`` steps of the latest run that started past the cap (its scoring
  window), and the first ``PROBLEM_STEPS`` steps that show a problem (a NaN or infinite loss or grad
  norm, a skipped or NaN iteration). ``summary`` holds statistics over every step, kept or not.
* ``memory``, ``timers``, ``bridge_steps``, ``perf``: the first ``RECORDS_KEPT`` and the last
  ``RECORDS_KEPT``; ``failures``: the first and last ``FAILURES_KEPT`` of each kind; ``errors``
  (crash lines) and ``warnings``: the first and last ``ERRORS_KEPT`` / ``WARNINGS_KEPT``.

``on_step`` (optional) is called with every step as it is read, for a caller that wants steps the
bounds drop (``attune metrics --steps``).
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from . import logformats as fmt
from .logbounds import (ERRORS_KEPT, FAILURES_KEPT, PROBLEM_STEPS, RECORDS_KEPT, RUN_HEAD_STEPS, STEPS_KEPT, TAIL_STEPS,
                        WARNINGS_KEPT, Bounded, Steps, StepStats, is_problem)
from .logformats import failure_kind, parse_bridge, parse_iteration, parse_memory

POD_HOOKS_PREFIX = fmt.POD_HOOKS_PREFIX  # lines of the in-pod hook wrapper: never a failure


# The ``cpu`` hook's start-up layer (pod_hooks/cpu.py) says so at start: the run is a real program on a CPU,
# whose memory report and TFLOP/s figure are stubs (0), so they are unavailable, never 0.
CPU_LAYER_MARK = "attune-cpu: "
CPU_UNAVAILABLE = ("unavailable: a CPU run (the attune-cpu layer): the CPU has no CUDA memory counters and Megatron's "
                   "TFLOP/s figure is not measured there")
PARTIAL_LAST_LINE = "text.partial_last_line"

FRAME_WORD = '", line '  # a traceback's frame: File "...", line N, in f
# A word every record, failure or crash line holds; a line with none of them is never parsed. Each costs a
# pass over the text (about as long as ``grep -c`` takes), so one word stands for many: "emory" for every
# out-of-memory text, "rror" for assertion, argparse and Python errors.
WORDS = ("iteration", "(ms)", "Step Time", "Epoch ", ": {", "out", "emory", "rror", "Traceback",
         # the failure kinds' other words (logformats.FAILURES): out-of-memory texts without "emory" (OOMKilled,
         # oom-kill, CUDA_ERROR_OUT_OF_MEMORY, NCCL's "Failed to CUDA calloc", cuBLAS's and cuDNN's *_STATUS_*),
         # a shell's "Killed", an exception named ...Exception
         "OOM", "oom", "MEMORY", "Failed to CUDA", "_STATUS_", "Killed", "xception",
         # a traceback's frame, where validation shows (logformats.FAILURES "validation")
         FRAME_WORD)
# The source lines a frame prints under it (an assert, a multi-line assert's condition) are not searched for:
# the FRAME_LINES lines after each frame are read one by one.
FRAME_LINES = 3
SOURCE_WORDS = ("assert ", " == 0")
_TIMEOUT = ("ime", "imed ", "ime ")  # "out" counts only after these: "timeout", "timed out", "time out"
# The log is searched as UTF-8 bytes (a text with one non-ASCII character would take 2 or 4 bytes a character
# as a str, and be slower to search); only the lines found are decoded.
_WORDS = tuple(word.encode() for word in WORDS)
_FAILURE_WORDS = tuple(word for word in WORDS if word not in ("iteration", "(ms)", "Step Time", "Epoch ", ": {")
                       ) + SOURCE_WORDS
_OUT, _TIMEOUT_BYTES, _MARK = b"out", tuple(prefix.encode() for prefix in _TIMEOUT), CPU_LAYER_MARK.encode()
MARK_CHARS = 1 << 20  # the cpu layer's mark is looked for in the log's first MiB: the layer prints it at start
CHUNK_CHARS = 8 << 20  # bytes read at a time
LINE_CHARS = CHUNK_CHARS  # a longer "line" (no newline: data, or a bar redrawn with carriage returns) is read in pieces
# Text that is not a log: characters that did not decode (U+FFFD) or NUL, as a share of those read.
# A real log holds a few stray bytes; random, compressed or columnar data about half.
BINARY_SHARE = 0.25


class _Parser(object):
    """The per-line logic; ``feed`` hands it only lines that can matter."""

    def __init__(self, on_step: Optional[Callable[[dict], None]] = None):
        self.device, self.formats, self.timer_block, self.traceback_left = None, set(), None, 0
        self.steps, self.stats, self.on_step = Steps(), StepStats(), on_step
        self.memory, self.timers = Bounded(RECORDS_KEPT, RECORDS_KEPT), Bounded(RECORDS_KEPT, RECORDS_KEPT)
        self.bridge_steps, self.perf = Bounded(RECORDS_KEPT, RECORDS_KEPT), Bounded(RECORDS_KEPT, RECORDS_KEPT)
        self.failures, self.failure_total = {}, 0
        self.errors, self.warnings = Bounded(ERRORS_KEPT, ERRORS_KEPT), Bounded(WARNINGS_KEPT, WARNINGS_KEPT)
        self.last, self.runs, self.run_start, self.redraws, self.cpu_touched = None, 1, None, 0, False
        self.offset = 0  # characters fed so far

    def step(self, step: dict, line_no: int) -> None:
        step["line_no"] = line_no
        key = (step.get("epoch") or 0, step["step"])
        if self.last is not None and step["source"] in ("nemo1", "lightning") and key == self.last[0]:
            self.redraws += 1  # tqdm redrew the bar at the same position: the same step
            return
        new_run = self.last is not None and key <= self.last[0]
        if new_run:
            self.runs += 1
            self.run_start = {"line_no": line_no, "step": step["step"], "after_step": self.last[1]["step"],
                              "after_line_no": self.last[1]["line_no"]}
            self.warnings.append("iteration %d at line %d follows iteration %d at line %d: the log holds more than "
                                 "one run (a restart or two pasted runs)"
                                 % (step["step"], line_no, self.last[1]["step"], self.last[1]["line_no"]))
        self.last = (key, step)
        if self.device == "cpu" and step["tflops_per_gpu"] is not None:
            step["tflops_per_gpu"], self.cpu_touched = None, True
        self.formats.add(step["source"])
        problem = is_problem(step)
        self.stats.add(step, problem)
        self.steps.add(step, new_run, problem)
        if self.on_step is not None:
            self.on_step(step)

    def line(self, line_no: int, line: str, cut: bool = False) -> None:
        if self.traceback_left:
            self.traceback_left -= 1
        if self.timer_block is not None:
            row = fmt.TIMER_ROW.match(line)
            if row:
                self.timer_block["values"][row.group("name")] = [float(row.group("min")), float(row.group("max"))]
                return
            self.timer_block = None
        if fmt.TIMER_BLOCK in line:
            self.timer_block = {"line_no": line_no, "format": "minmax", "values": {}}
            self.timers.append(self.timer_block)
            self.formats.add("megatron")
            return
        if CPU_LAYER_MARK in line and line.lstrip().startswith(CPU_LAYER_MARK):
            self.device = "cpu"
            return
        if not self.record(line_no, line, cut):
            return
        if not any(word in line for word in _FAILURE_WORDS):
            return  # no word any failure or crash needs (the common case: a step line)
        kind = failure_kind(line)
        if FRAME_WORD in line:
            self.traceback_left = FRAME_LINES  # the frame's source lines follow it
        if kind is not None:
            self.failure_total += 1
            self.failures.setdefault(kind, Bounded(FAILURES_KEPT, FAILURES_KEPT)).append(
                {"kind": kind, "line_no": line_no, "line": line})
        elif any(word in line for word in fmt.CRASH_WORDS) and fmt.is_crash(line):
            self.errors.append({"line_no": line_no, "line": line})

    def record(self, line_no: int, line: str, cut: bool) -> bool:
        """Read the record a line holds; whether the line may also hold a failure (text glued after a
        progress bar or an iteration line is read; a memory, timer or slime line is only that)."""
        if "iteration" in line:
            step = parse_iteration(line, cut)
            if step is not None:
                self.step(step, line_no)
                return True
            if "memory (MB)" in line:
                memory = parse_memory(line, cut)
                if memory is not None:
                    memory["line_no"] = line_no
                    self.memory.append(memory)
                    return False
        if "Epoch " in line:
            for step in fmt.parse_bar(line):
                self.step(step, line_no)
        if "time (ms)" in line:
            inline = fmt.TIMER_INLINE.search(line)
            if inline:
                values = {name: fmt.number(text) for name, text in fmt.fields(inline.group("rest"), cut).items()}
                self.timers.append({"line_no": line_no, "format": "inline_ms", "values": values})
                return False
        if "Step Time" in line:
            bridge = parse_bridge(line)
            if bridge is not None:
                bridge["line_no"] = line_no
                bridge["ordinal"] = self.bridge_steps.total + 1
                self.bridge_steps.append(bridge)
                self.formats.add("megatron-bridge")
                return False
        if ": {" in line:
            record, problem = fmt.parse_slime(line)
            if record is not None:
                record["line_no"] = line_no
                self.perf.append(record)
                self.formats.add("slime")
                return False
            if problem:
                self.warnings.append("line %d: %s" % (line_no, problem))
        return True

    def feed(self, data: bytes, line_no: int, begin: int = 0, end: Optional[int] = None,
             cut_last: bool = False) -> int:
        """Parse ``data[begin:end]`` (UTF-8, whole lines; its first line is number ``line_no``;
        ``cut_last``: its last line has no newline and may end mid-value); return the number of the line
        after it."""
        find, rfind = data.find, data.rfind
        size = len(data) if end is None else end
        starts = set()
        words = _WORDS if self.offset >= MARK_CHARS else _WORDS + (_MARK,)
        for word in words:  # one C-speed pass per word; only lines holding one are parsed
            limit = size if word is not _MARK else min(size, begin + MARK_CHARS - self.offset)
            pos = find(word, begin, limit)
            while pos >= 0:
                if word == _OUT and not data.endswith(_TIMEOUT_BYTES, begin, pos):
                    pos = find(word, pos + 3, limit)
                    continue
                starts.add(rfind(b"\n", begin, pos) + 1 or begin)
                pos = find(b"\n", pos, size)
                if pos < 0:
                    break
                pos = find(word, pos, limit)
        self.offset += size - begin
        pos = begin  # the start of line number ``line_no``
        if self.timer_block is not None or self.traceback_left:
            pos, line_no = self._rows(data, pos, size, line_no, cut_last)
        for start in sorted(starts):
            if start < pos:
                continue  # read already, as a row of a timer block
            line_no += data.count(b"\n", pos, start)
            stop = find(b"\n", start, size)
            stop = size if stop < 0 else stop
            self.line(line_no, _decode(data[start:stop]), cut_last and stop == size)
            pos, line_no = stop + 1, line_no + 1
            if self.timer_block is not None or self.traceback_left:
                pos, line_no = self._rows(data, pos, size, line_no, cut_last)
        if pos > size:  # the last line read had no newline: the next line is the rest of it
            return line_no - 1
        return line_no + data.count(b"\n", pos, size)

    def _rows(self, data: bytes, pos: int, size: int, line_no: int, cut_last: bool):
        """Timer rows and a frame's source lines carry no keyword: read the lines after a timer block's header, or
        a traceback's frame, one by one."""
        while (self.timer_block is not None or self.traceback_left) and pos < size:
            stop = data.find(b"\n", pos, size)
            stop = size if stop < 0 else stop
            self.line(line_no, _decode(data[pos:stop]), cut_last and stop == size)
            pos, line_no = stop + 1, line_no + 1
        return pos, line_no

    def result(self, text: dict) -> dict:
        failures = sorted((item for kept in self.failures.values() for item in kept.items()),
                          key=lambda failure: failure["line_no"])
        out = {"format": "+".join(sorted(self.formats)) if self.formats else None, "device": self.device,
               "steps": self.steps.items(), "memory": self.memory.items(), "timers": self.timers.items(),
               "bridge_steps": self.bridge_steps.items(), "perf": self.perf.items(), "failures": failures,
               "errors": self.errors.items(), "text": text}
        summary = self.stats.as_dict()
        summary.update(runs=self.runs, last_run_start=self.run_start, bar_redraws=self.redraws)
        out["summary"] = summary
        warnings = self.warnings.items()
        if self.warnings.dropped():
            warnings.insert(WARNINGS_KEPT, "warnings.bounded: %d more warnings not shown (the first %d and the last %d "
                                           "are)" % (self.warnings.dropped(), WARNINGS_KEPT, WARNINGS_KEPT))
        if self.steps.total > len(out["steps"]):
            warnings.append("steps.bounded: %d steps read, %d kept in full (the first %d, the first %d of the last run "
                            "begun after them, the first %d with a problem and the last %d); summary covers all"
                            % (self.steps.total, len(out["steps"]), STEPS_KEPT, RUN_HEAD_STEPS, PROBLEM_STEPS,
                               TAIL_STEPS))
        for name, kept, keep in (("memory", self.memory, RECORDS_KEPT), ("timers", self.timers, RECORDS_KEPT),
                                 ("bridge_steps", self.bridge_steps, RECORDS_KEPT), ("perf", self.perf, RECORDS_KEPT),
                                 ("errors", self.errors, ERRORS_KEPT)):
            if kept.dropped():
                warnings.append("%s.bounded: %d read, the first %d and the last %d kept" % (name, kept.total, keep, keep))
        if self.failure_total > len(failures):
            warnings.append("failures.bounded: %d read, the first %d and the last %d of each kind kept"
                            % (self.failure_total, FAILURES_KEPT, FAILURES_KEPT))
        if text.get("partial_last_line"):
            partial = text["partial_last_line"]
            warnings.append("%s: line %d has no newline yet (%d characters): not read, as a line still being written; "
                            "read it with complete=True (attune metrics --complete) once the run has ended"
                            % (PARTIAL_LAST_LINE, partial["line_no"], partial["chars"]))
        out["warnings"] = warnings
        out["counts"] = {"steps": self.steps.total, "memory": self.memory.total, "timers": self.timers.total,
                         "bridge_steps": self.bridge_steps.total, "perf": self.perf.total,
                         "failures": self.failure_total, "errors": self.errors.total, "warnings": self.warnings.total}
        if self.device == "cpu":
            _cpu_unavailable(out, self.cpu_touched)
        return out


def _cpu_unavailable(out: dict, touched: bool) -> None:
    """A CPU run's memory report and TFLOP/s: None with the reason, never the stubs' 0."""
    for record in out["memory"]:
        for key in ("allocated_mb", "max_allocated_mb", "reserved_mb", "max_reserved_mb"):
            touched = touched or record.get(key) is not None
            record[key] = None
        record["unavailable"] = CPU_UNAVAILABLE
    for step in out["steps"]:
        touched = touched or step.get("tflops_per_gpu") is not None
        step["tflops_per_gpu"] = None
    if touched:
        out["warnings"].append("memory (MB) and TFLOP/s/GPU are %s" % CPU_UNAVAILABLE)


def _decode(line: bytes) -> str:
    return line.decode("utf-8", "replace").rstrip("\r")


def _text_counts(block: str) -> int:
    """Characters that did not decode (U+FFFD) or are NUL (an ASCII text can hold only the latter)."""
    nul = block.count("\x00") if "\x00" in block else 0  # ``in`` is a memchr: fast where there is none
    return nul + (0 if block.isascii() else block.count("\ufffd"))


def _finish(parser: _Parser, carry: bytes, line_no: int, text: dict, complete: bool) -> dict:
    """Read or hold back the text after the last newline, and build the result."""
    text["partial_last_line"] = None
    if carry:
        if complete:
            parser.feed(carry, line_no, cut_last=True)
        else:
            text["partial_last_line"] = {"line_no": line_no, "chars": len(_decode(carry))}
    text["lines"] = line_no - 1 + (1 if carry else 0)
    text["complete"] = complete
    return parser.result(text)


def parse_lines(lines: Iterable[str], complete: bool = False, on_step=None) -> dict:
    """Parse an iterable of lines (each ending in a newline but perhaps the last), as ``parse_file``
    parses a file of that text (without its ``path``)."""
    parser = _Parser(on_step)
    whole = "".join(lines)
    data = whole.encode("utf-8", "surrogateescape")
    text = {"chars": len(whole), "undecodable": _text_counts(whole), "stopped": False, "bytes": len(data)}
    cut = data.rfind(b"\n") + 1
    return _finish(parser, data[cut:], parser.feed(data, 1, 0, cut), text, complete)


class _Counter(object):
    """Characters read and those that did not decode (U+FFFD) or are NUL, counted as the bytes arrive, in
    spans of ``SPAN`` bytes: an ASCII span needs no decoding; valid UTF-8 is decoded once, strictly, and
    counted as bytes; only a span with undecodable bytes is decoded with replacement characters and
    counted as text. (A log's non-ASCII text is a few progress bars or messages: most spans are ASCII.)"""

    SPAN = 1 << 16

    def __init__(self, text: dict):
        self.text, self.pending = text, b""  # the start of a character cut by the span's end

    def add(self, block: bytes, final: bool = False) -> None:
        if not self.pending and block.isascii():
            self._ascii(block)
            return
        span = self.SPAN
        for start in range(0, len(block), span):
            piece = block[start:start + span]
            if not self.pending and piece.isascii():
                self._ascii(piece)
            else:
                self._decode(piece, final and start + span >= len(block))
        if final and self.pending:
            self._decode(b"", True)

    def _ascii(self, data: bytes) -> None:
        self.text["chars"] += len(data)
        self.text["undecodable"] += data.count(b"\x00") if b"\x00" in data else 0

    def _decode(self, data: bytes, final: bool) -> None:
        text = self.text
        data = self.pending + data
        cut = len(data) if final else _char_end(data)
        data, self.pending = data[:cut], data[cut:]
        try:
            text["chars"] += len(data.decode("utf-8"))
            text["undecodable"] += data.count(b"\xef\xbf\xbd") + (data.count(b"\x00") if b"\x00" in data else 0)
        except UnicodeDecodeError:
            chars = data.decode("utf-8", "replace")
            text["chars"] += len(chars)
            text["undecodable"] += _text_counts(chars)


def _char_end(data: bytes) -> int:
    """Where the last whole UTF-8 character of ``data`` ends (a block may end inside one)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # a lead byte: the character needs 2, 3 or 4 bytes
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


def _piece(parser: _Parser, data: bytes, line_no: int) -> tuple:
    """A line longer than ``LINE_CHARS`` so far, read in pieces: up to its last carriage return (where
    tqdm redraws a bar: nothing is cut), else all of it, its last value perhaps cut. Returns the line
    number and what is left to carry."""
    if len(data) < LINE_CHARS:
        return line_no, data  # keep reading until it ends
    split = data.rfind(b"\r") + 1
    if split:
        return parser.feed(data, line_no, 0, split), data[split:]
    return parser.feed(data, line_no, cut_last=True), b""


def parse_file(path, complete: bool = False, on_step=None) -> dict:
    """Parse a log file in blocks of whole lines (memory bounded by the block and the bounds, not the
    file); undecodable bytes are replaced, not fatal, and counted in ``text`` (``bytes`` and ``chars`` read,
    ``undecodable``: U+FFFD or NUL, ``stopped``: reading ended early because the first block was mostly
    binary, ``lines``, ``complete``, ``partial_last_line``). ``refusal`` says whether the result is a
    log at all; ``complete`` and ``on_step``: the module docstring."""
    parser = _Parser(on_step)
    line_no = 1
    text = {"chars": 0, "undecodable": 0, "stopped": False, "bytes": 0}
    counter = _Counter(text)
    carry = b""
    with open(path, "rb") as handle:
        while True:
            block = handle.read(CHUNK_CHARS)
            if not block:
                counter.add(b"", final=True)
                break
            first = text["bytes"] == 0
            text["bytes"] += len(block)
            counter.add(block)
            if first and text["undecodable"] > BINARY_SHARE * text["chars"] and len(block) == CHUNK_CHARS:
                text["stopped"] = True  # a large file that starts as binary: no need to read the rest
                break
            begin = 0
            if carry:  # the line the last block ended in: finish it first
                newline = block.find(b"\n")
                if newline < 0:
                    line_no, carry = _piece(parser, carry + block, line_no)
                    continue
                line_no, carry, begin = parser.feed(carry + block[:newline + 1], line_no), b"", newline + 1
            cut = block.rfind(b"\n", begin) + 1
            if cut == 0:
                line_no, carry = _piece(parser, block[begin:], line_no)
                continue
            line_no = parser.feed(block, line_no, begin, cut)  # in place: no copy of the block
            carry = block[cut:]
    result = _finish(parser, carry, line_no, text, complete)
    result["path"] = str(path)
    return result


def refusal(parsed: dict) -> Optional[str]:
    """Why a parsed file is not a training log, or None when it is one: it is empty, mostly binary,
    or holds no record and no failure this parser recognises (a valid log with no iteration but a
    recognised failure, an OOM say, is a log)."""
    text = parsed.get("text") or {}
    chars, undecodable = text.get("chars", 0), text.get("undecodable", 0)
    if not chars:
        return "is empty"
    if undecodable > BINARY_SHARE * chars:
        return "mostly binary (%d%% of the %s characters read are not UTF-8 text)" % (
            round(100.0 * undecodable / chars), "first %d" % chars if text.get("stopped") else "%d" % chars)
    warnings = [w for w in parsed.get("warnings", ()) if not w.startswith(PARTIAL_LAST_LINE)]
    if not warnings and not any(parsed.get(key) for key in ("steps", "memory", "timers", "bridge_steps", "perf",
                                                            "failures")):
        return "holds no Megatron-LM, Megatron-Bridge or slime record and no failure this parser recognises"
    return None


def _key(step: dict) -> tuple:
    return step.get("epoch") or 0, step["step"]


def last_run_start(steps: list) -> int:
    """Index of the first step of the log's last run: after the last place where the iteration number
    went back (a restarted pod, or two runs in one log); 0 when the log holds one run."""
    start = 0
    for index in range(1, len(steps)):
        if _key(steps[index]) <= _key(steps[index - 1]):
            start = index
    return start


def last_run(parsed: dict) -> tuple:
    """The kept steps of the log's last run, and where it starts (``summary.last_run_start``: line,
    iteration and the iteration before it; None when the log holds one run). The restart is found
    while reading, so it is right even where the steps around it were not kept."""
    steps = parsed.get("steps", [])
    start = (parsed.get("summary") or {}).get("last_run_start")
    if start is None:
        index = last_run_start(steps)  # a result built by hand, without a summary
        if not index:
            return steps, None
        start = {"line_no": steps[index]["line_no"], "step": steps[index]["step"],
                 "after_step": steps[index - 1]["step"], "after_line_no": steps[index - 1]["line_no"]}
    return [step for step in steps if step["line_no"] >= start["line_no"]], start
