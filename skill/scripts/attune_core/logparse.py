"""Parse a training log into steps, memory reports, timers, slime records and failures.

Formats (facts in the project's reference on Megatron-LM, Megatron-Bridge and slime logs):

* Megatron-LM iteration lines (`` iteration N/ M | name: value | ...``), with or without a
  ``[timestamp]``, behind any prefix (srun labels, Ray actor tags, grep line numbers); every
  ``... loss`` field, ``nan``/``inf`` grad norms, skipped and nan counts, old and new number formats.
* Megatron-LM memory reports (``[Rank R] (after N iterations) memory (MB) | allocated: ...``).
* Megatron-LM timers: the ``(min, max) time across ranks (ms):`` block and the one-line
  ``time (ms) | name: v | ...`` form.
* Megatron-Bridge ``Step Time : 12.78s GPU utilization: 528.1MODEL_TFLOP/s/GPU`` lines.
* slime ``step N: {...}``, ``perf N: {...}`` and ``rollout N: {...}`` lines (Python repr dicts, bare
  ``nan``/``inf``, Ray ``(Actor pid=...)`` prefixes).
* Failures (``_FAILURES``): GPU memory (torch's CUDA out of memory, old and new texts, Ray-wrapped;
  NCCL, cuBLAS, cuDNN, TE, ROCm), host memory (Ray's memory monitor, a container ``OOMKilled``, the
  Linux OOM killer, torch's CPU allocator, a shell's ``Killed``), NCCL watchdog timeouts, assertion
  errors, argparse errors (``prog: error: unrecognized arguments: ...``), the last line of a traceback
  of any exception type, and frames of Megatron's argument and config validation. Lines of the
  pod-hook wrapper (``attune-pod-hooks: ...``) are never failures.

The log is read line by line (bounded memory for any size). A value the line does not print is
``None``, never a guess; a line that looks like a record but cannot be read becomes a warning
that names the line. Nothing here raises on bad input: ``refusal`` says when a file is not a log
(empty, mostly binary, or nothing recognised), for the verbs that must refuse it.
"""

from __future__ import annotations

import ast
import re
from typing import Iterable, Optional

_ITERATION = re.compile(r"(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\]\s*)?"
                        r"iteration\s+(?P<it>\d+)\s*/\s*(?P<total>\d+)\s*\|(?P<rest>.*)$")
_MEMORY = re.compile(r"\[Rank (?P<rank>\d+)\] \(after (?P<after>\d+) iterations\) memory \(MB\)\s*\|(?P<rest>.*)$")
_TIMER_BLOCK = "(min, max) time across ranks (ms):"
_TIMER_ROW = re.compile(r"^\s+(?P<name>\S+)\s*\.*:\s*\((?P<min>[-\d.eE+]+),\s*(?P<max>[-\d.eE+]+)\)\s*$")
_TIMER_INLINE = re.compile(r"time \(ms\)\s*\|(?P<rest>.*)$")
_BRIDGE = re.compile(r"Step Time\s*:\s*(?P<time>[\d.]+)s\s+GPU utilization:\s*(?P<tflops>[\d.]+)\s*"
                     r"(?P<unit>(?:MODEL_)?TFLOP/s/GPU)")
_SLIME = re.compile(r"(?:\((?P<actor>\w+) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\d.]+))?\)\s*)?"
                    r"(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]\s*)?(?:(?P<loc>[\w./-]+:\d+)\s*-\s*)?"
                    r"(?P<type>step|perf|rollout) (?P<index>\d+): (?P<dict>\{.*\})\s*$")
_SLIME_START = re.compile(r"\b(step|perf|rollout) \d+: \{")
_NON_FINITE_WORD = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")

# kind, words one of which the line must contain (a cheap test first: most lines are noise; empty: the words of a
# kind above cover this one's lines too, and each word is scanned for only once), pattern.
# The first kind that matches a line is its kind, so the order matters: Ray's host-memory
# ``ray.exceptions.OutOfMemoryError`` before the GPU ``OutOfMemoryError``, memory before exceptions.
# ``oom`` is GPU memory; ``ray_oom``, ``oomkilled``, ``host_oom`` (and ``killed`` with a SIGKILL exit) host memory.
# Every memory pattern's line holds one of these: few words, so that the scan for interesting lines stays fast.
_MEMORY_WORDS = ("emory", "MEMORY", "OOM", "oom", "Failed to CUDA", "ALLOC_FAILED", "ENOUGH_WORKSPACE",
                 "allocation failed")
_PREFIX = r"^(?:\s*(?:\d+:|\[[^\]]*\]:?|\([^)]*\)|traceback:|E ))*\s*"  # grep -n, [rank3]:, (Actor pid=1)
_FAILURES = (
    ("nccl_timeout", ("imeout", "imed out", "ime out"),
     re.compile(r"Watchdog caught collective operation timeout|NCCL (?:communicator|operation) "
                r"timed? ?out|ProcessGroupNCCL.*[Tt]imeout|"
                r"gloo\S*\] Timed out waiting \d+ms for (?:recv|send) operation")),  # gloo (CPU) collectives
    # Ray's memory monitor: the raylet's summary, the exception and its "Memory on the node" detail
    ("ray_oom", _MEMORY_WORDS,
     re.compile(r"killed due to memory pressure \(OOM\)|Task was killed due to the node running low on memory|"
                r"ray\.exceptions\.OutOfMemoryError|Memory on the node .* exceeds the memory usage threshold|"
                r"\bRayOutOfMemoryError\b|Worker exit type: NODE_OUT_OF_MEMORY")),  # older Ray; an actor's death
    ("oomkilled", (), re.compile(r"\bOOMKilled\b")),
    ("host_oom", (),
     re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)|"  # torch's CPU allocator
                r"^\s*(?:\[rank\d+\]:\s*)?MemoryError\b|"  # Python's own
                r"Out of memory: Kill(?:ed)? process|\boom-kill:|invoked oom-killer|"  # the Linux OOM killer (dmesg)
                r"Detected \d+ oom[-_]kill event|"  # slurm's report of the cgroup OOM killer
                r"Failed to CUDA host alloc|"  # NCCL's pinned host buffers
                r"^attune-local: out of memory")),  # the local backend's memory limit
    # GPU memory, as each layer reports it: torch, its C++ core, NCCL, cuBLAS, cuDNN, Transformer Engine, ROCm
    ("oom", (),
     re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA (?:driver )?[Ee]rror: out of memory|HIP out of memory|"
                r"CUBLAS Error: the resource allocation failed|"  # Transformer Engine's NVTE_CHECK_CUDA/CUBLAS
                r"Cuda failure (?:\d+ )?'out of memory'|Failed to CUDA (?:calloc|malloc)|"  # NCCL's WARN lines
                r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|CUDNN_STATUS_NOT_ENOUGH_WORKSPACE|"
                r"cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|hipErrorOutOfMemory|"
                r"TorchMemorySaver::malloc return OOM|"
                r"Not enough memory\. Please try to increase --mem-fraction-static")),  # SGLang's KV cache (slime)
    ("killed", ("Killed",), re.compile(r"^\s*(?:\S+: line \d+: +\d+ +)?Killed(?:\s|$)")),  # the shell's report of a SIGKILL
    ("assertion", (), re.compile(r"\bAssertionError\b")),
    ("argparse", ("error: ",),
     re.compile(r": error: (?:unrecognized arguments: |argument \S+: )")),
    # the last line of a Python traceback, an exception of any type
    ("exception", ("Error", "Exception"),
     re.compile(_PREFIX + r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?:\([\w.]+\))?(?::|\s*$)")),
    # a traceback frame in Megatron's (or slime's) argument and config validation, or the source line of a
    # divisibility assert: what the exception after it means
    ("validation", ('", line ', "assert ", " == 0"),
     re.compile(r'(?:^|[/"\s])(?:arguments|argument_utils|transformer_config|model_parallel_config|'
                r'num_microbatches_calculator)\.py", line \d+, in \w+|'
                r'\.py", line \d+, in (?:validate_args|__post_init__|initialize_model_parallel|_?validate\w*)\b|' +
                _PREFIX + r"(?:assert .*(?:%.*==\s*0|divisible|multiple of)|"
                r"\(?[\w.\[\]]+ % [\w.\[\]()]+ == 0\)?\s*(?:,|\\|and|or)?\s*$)")),  # a multi-line assert's condition
)
# Lines of the in-pod hook wrapper (pod_hooks/wrap.py): they report on hooks, never on the run.
POD_HOOKS_PREFIX = "attune-pod-hooks:"
# The ``cpu`` hook's start-up layer (pod_hooks/cpu.py) says so at start: the run is a real program on a CPU,
# whose memory report and TFLOP/s figure are stubs (0), so they are unavailable, never 0.
CPU_LAYER_MARK = "attune-cpu: "
CPU_UNAVAILABLE = ("unavailable: a CPU run (the attune-cpu layer): the CPU has no CUDA memory counters and Megatron's "
                   "TFLOP/s figure is not measured there")

_KNOWN_FIELDS = {
    "elapsed time per iteration (ms)": ("elapsed_ms", float),
    "throughput per GPU (TFLOP/s/GPU)": ("tflops_per_gpu", float),
    "learning rate": ("lr", float),
    "global batch size": ("global_batch_size", int),
    "lm loss": ("lm_loss", float),
    "number of skipped iterations": ("skipped", int),
    "number of nan iterations": ("nan", int),
    "loss scale": ("loss_scale", float),
    "consumed samples": ("consumed_samples", int),
}


def _number(text: str):
    """A printed number as int or float; ``nan``/``inf`` stay the strings printed; else None."""
    text = text.strip()
    lowered = text.lower()
    if lowered in ("nan", "inf", "-inf", "+inf"):
        return lowered.lstrip("+")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def _fields(rest: str) -> dict:
    out = {}
    for part in rest.split("|"):
        name, sep, value = part.partition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out


def parse_iteration(line: str) -> Optional[dict]:
    match = _ITERATION.search(line)
    if match is None:
        return None
    fields = _fields(match.group("rest"))
    step = {"step": int(match.group("it")), "train_iters": int(match.group("total")),
            "timestamp": match.group("ts"), "elapsed_ms": None, "tflops_per_gpu": None, "lm_loss": None,
            "grad_norm": None, "lr": None, "global_batch_size": None, "skipped": None, "nan": None,
            "losses": {}}
    for name, text in fields.items():
        if name in _KNOWN_FIELDS:
            key, kind = _KNOWN_FIELDS[name]
            value = _number(text)
            if isinstance(value, str):
                step[key] = value
            elif value is not None:
                step[key] = kind(value)
        elif name == "grad norm":
            value = _number(text)
            step["grad_norm"] = float(value) if isinstance(value, (int, float)) else value
        elif "loss" in name:
            value = _number(text)
            if value is not None:
                step["losses"][name] = float(value) if isinstance(value, (int, float)) else value
    return step


def parse_memory(line: str) -> Optional[dict]:
    match = _MEMORY.search(line)
    if match is None:
        return None
    fields = _fields(match.group("rest"))
    record = {"rank": int(match.group("rank")), "after_iterations": int(match.group("after"))}
    for name, key in (("allocated", "allocated_mb"), ("max allocated", "max_allocated_mb"),
                      ("reserved", "reserved_mb"), ("max reserved", "max_reserved_mb")):
        value = _number(fields.get(name, ""))
        record[key] = float(value) if isinstance(value, (int, float)) else None
    return record


def parse_bridge(line: str) -> Optional[dict]:
    match = _BRIDGE.search(line)
    if match is None:
        return None
    return {"step_time_s": float(match.group("time")), "tflops_per_gpu": float(match.group("tflops")),
            "unit": match.group("unit")}


def _literal_dict(text: str):
    """A Python repr dict with bare nan/inf, as data; non-finite numbers become strings."""
    marked = _NON_FINITE_WORD.sub(lambda m: "'__nonfinite__%s%s'" % (m.group(1), m.group(2)), text)
    value = ast.literal_eval(marked)
    if not isinstance(value, dict):
        raise ValueError("not a dict")
    return {key: (item[len("__nonfinite__"):] if isinstance(item, str) and item.startswith("__nonfinite__")
                  else item) for key, item in value.items()}


def parse_slime(line: str):
    """(record, None) for a slime step/perf/rollout line, (None, reason) when it cannot be read,
    (None, None) when the line is something else."""
    match = _SLIME.search(line)
    if match is None:
        if _SLIME_START.search(line):
            return None, "slime record cut off before its closing brace (a truncated or interleaved line)"
        return None, None
    try:
        data = _literal_dict(match.group("dict"))
    except (ValueError, SyntaxError) as exc:
        return None, "slime %s line whose dict cannot be read (%s)" % (match.group("type"), exc.__class__.__name__)
    return {"line_type": match.group("type"), "index": int(match.group("index")), "data": data,
            "ray_actor": match.group("actor"), "pid": int(match.group("pid")) if match.group("pid") else None,
            "ip": match.group("ip"), "timestamp": match.group("ts"), "logger_location": match.group("loc")}, None


def failure_kind(line: str) -> Optional[str]:
    if line.lstrip().startswith(POD_HOOKS_PREFIX):
        return None
    for kind, words, pattern in _FAILURES:
        if (not words or any(word in line for word in words)) and pattern.search(line):
            return kind
    return None


class _Parser(object):
    """The per-line logic; the drivers below hand it only lines that can matter."""

    def __init__(self):
        self.out = {"format": None, "device": None, "steps": [], "memory": [], "timers": [], "bridge_steps": [],
                    "perf": [], "failures": [], "warnings": []}
        self.formats = set()
        self.timer_block = None

    def line(self, line_no: int, line: str) -> None:
        out = self.out
        if self.timer_block is not None:
            row = _TIMER_ROW.match(line)
            if row:
                self.timer_block["values"][row.group("name")] = [float(row.group("min")), float(row.group("max"))]
                return
            self.timer_block = None
        if _TIMER_BLOCK in line:
            self.timer_block = {"line_no": line_no, "format": "minmax", "values": {}}
            out["timers"].append(self.timer_block)
            self.formats.add("megatron")
            return
        if CPU_LAYER_MARK in line and line.lstrip().startswith(CPU_LAYER_MARK):
            out["device"] = "cpu"
            return
        if "iteration" in line:
            step = parse_iteration(line)
            if step is not None:
                step["line_no"] = line_no
                out["steps"].append(step)
                self.formats.add("megatron")
                return
        if "memory (MB)" in line:
            memory = parse_memory(line)
            if memory is not None:
                memory["line_no"] = line_no
                out["memory"].append(memory)
                return
        if "time (ms)" in line:
            inline = _TIMER_INLINE.search(line)
            if inline:
                values = {name: _number(text) for name, text in _fields(inline.group("rest")).items()}
                out["timers"].append({"line_no": line_no, "format": "inline_ms", "values": values})
                return
        if "Step Time" in line:
            bridge = parse_bridge(line)
            if bridge is not None:
                bridge["line_no"] = line_no
                bridge["ordinal"] = len(out["bridge_steps"]) + 1
                out["bridge_steps"].append(bridge)
                self.formats.add("megatron-bridge")
                return
        if ": {" in line:
            record, problem = parse_slime(line)
            if record is not None:
                record["line_no"] = line_no
                out["perf"].append(record)
                self.formats.add("slime")
                return
            if problem:
                out["warnings"].append("line %d: %s" % (line_no, problem))
        kind = failure_kind(line)
        if kind is not None:
            out["failures"].append({"kind": kind, "line_no": line_no, "line": line})

    def feed(self, text: str, line_no: int) -> int:
        """Parse ``text`` (whole lines; its first line is number ``line_no``); return the number
        of the line after it. Lines with none of the words any record or failure needs are
        skipped by one regular-expression scan (most of a large log is chatter)."""
        pos, size = 0, len(text)
        while pos < size:
            if self.timer_block is not None:  # timer rows carry no keyword: read them one by one
                end = text.find("\n", pos)
                end = size if end < 0 else end
                self.line(line_no, text[pos:end].rstrip("\r"))
                line_no, pos = line_no + 1, end + 1
                continue
            match = _INTERESTING.search(text, pos)
            if match is None:
                return line_no + text.count("\n", pos)
            before = text.rfind("\n", pos, match.start())
            start = pos if before < 0 else before + 1
            line_no += text.count("\n", pos, start)
            end = text.find("\n", match.end())
            end = size if end < 0 else end
            self.line(line_no, text[start:end].rstrip("\r"))
            line_no, pos = line_no + 1, end + 1
        return line_no

    def result(self) -> dict:
        self.out["format"] = "+".join(sorted(self.formats)) if self.formats else None
        if self.out["device"] == "cpu":
            _cpu_unavailable(self.out)
        _warn_about_steps(self.out)
        return self.out


def _cpu_unavailable(out: dict) -> None:
    """A CPU run's memory report and TFLOP/s: None with the reason, never the stubs' 0."""
    touched = False
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


_INTERESTING = re.compile("|".join(re.escape(word) for word in (
    ("iteration", "memory (MB)", "time (ms)", "Step Time", ": {", _TIMER_BLOCK, CPU_LAYER_MARK)
    + tuple(word for _kind, words, _pattern in _FAILURES for word in words))))
CHUNK_CHARS = 8 << 20


def parse_lines(lines: Iterable[str]) -> dict:
    """Parse an iterable of lines (each ending in a newline but perhaps the last)."""
    parser = _Parser()
    parser.feed("".join(lines), 1)
    return parser.result()


# Text that is not a log: characters that did not decode (U+FFFD) or NUL, as a share of those read.
# A real log holds a few stray bytes; random, compressed or columnar data about half.
BINARY_SHARE = 0.25
LINE_CHARS = 8 * CHUNK_CHARS  # a longer "line" (data without newlines) is parsed in pieces of this size


def parse_file(path) -> dict:
    """Parse a log file in chunks of whole lines (memory bounded by the chunk and the records
    found, not the file); undecodable bytes are replaced, not fatal, and counted in
    ``text`` (``chars``, ``undecodable``: U+FFFD or NUL, ``stopped``: reading ended early because
    the first chunk was mostly binary). ``refusal`` says whether the result is a log at all."""
    parser = _Parser()
    line_no = 1
    text = {"chars": 0, "undecodable": 0, "stopped": False}
    with open(path, "r", encoding="utf-8", errors="replace", newline="") as handle:
        carry = ""
        while True:
            block = handle.read(CHUNK_CHARS)
            if not block:
                break
            first = text["chars"] == 0
            text["chars"] += len(block)
            text["undecodable"] += block.count("\ufffd") + block.count("\x00")
            if first and text["undecodable"] > BINARY_SHARE * text["chars"] and len(block) == CHUNK_CHARS:
                text["stopped"] = True  # a large file that starts as binary: no need to read the rest
                break
            block = carry + block
            cut = block.rfind("\n") + 1
            if cut == 0 and len(block) < LINE_CHARS:  # one line longer than a chunk: keep reading until it ends
                carry = block
                continue
            cut = cut or len(block)
            carry = block[cut:]
            line_no = parser.feed(block[:cut], line_no)
        if carry:
            parser.feed(carry, line_no)
    result = parser.result()
    result["path"] = str(path)
    result["text"] = text
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
    if not any(parsed.get(key) for key in ("steps", "memory", "timers", "bridge_steps", "perf", "failures",
                                          "warnings")):
        return "holds no Megatron-LM, Megatron-Bridge or slime record and no failure this parser recognises"
    return None


def last_run_start(steps: list) -> int:
    """Index of the first step of the log's last run: after the last place where the iteration number
    went back (a restarted pod, or two runs in one log); 0 when the log holds one run."""
    start = 0
    for index in range(1, len(steps)):
        if steps[index]["step"] <= steps[index - 1]["step"]:
            start = index
    return start


def _warn_about_steps(out: dict) -> None:
    seen = {}
    for step in out["steps"]:
        number = step["step"]
        if number in seen:
            out["warnings"].append("iteration %d appears at lines %d and %d: the log holds more than one run "
                                   "(a restart or two pasted runs)" % (number, seen[number], step["line_no"]))
        seen[number] = step["line_no"]


