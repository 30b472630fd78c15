"""Read one line of a training log: the record formats ``logparse`` knows, one function each.

Formats (facts in the project's reference on Megatron-LM, Megatron-Bridge and slime logs, and the
real lines under tests/data/logs, each with its source):

* Iteration lines `` iteration N/ M | name: value | ...`` of Megatron-LM and Megatron-Bridge, with or
  without a ``[timestamp]``, behind any prefix (srun labels, Ray actor tags, grep line numbers); every
  ``... loss`` field, ``nan``/``inf`` grad norms, skipped and nan counts, old and new number formats.
* Megatron-DeepSpeed's version of that line: ``elapsed time per iteration (s): 105.22`` (seconds; forks
  print ``(ms)``) and its own fields (``consumed tokens``, ``samples per second``, ``TFLOPs``, ...).
* NeMo 2's ``Training epoch E, iteration N/M | lr: ... | global_batch_size: ... | reduced_train_loss: ...
  | train_step_timing in s: ...`` (underscored names, seconds).
* NeMo 1's Lightning progress bar ``Epoch E: 10%|█ | N/M [00:10<01:30, ..., reduced_train_loss=...,
  global_step=..., consumed_samples=..., train_step_timing in s=...]`` (and any Lightning ``Epoch`` bar
  that shows a loss), every redraw of it on one line (tqdm separates them with carriage returns), with
  text glued after its closing bracket. Its step is the bar's position N, as printed.
* Megatron-LM memory reports, one-line timers, Megatron-Bridge ``Step Time`` lines, slime
  ``step``/``perf``/``rollout`` dicts, and failure lines (``failure_kind``) and crash lines (``is_crash``).

Step times are ``elapsed_ms`` whatever the unit printed, with the unit in ``elapsed_unit``; a field the
line does not print is ``None``, never a guess; every other field the line prints is kept in
``fields`` under its name in snake case.
"""

from __future__ import annotations

import ast
import re
from decimal import Decimal, InvalidOperation
from typing import Optional

_ITERATION = re.compile(r"(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\]\s*)?"
                        r"iteration\s+(?P<it>\d+)\s*/\s*(?P<total>\d+)\s*\|(?P<rest>.*)$")
_EPOCH = re.compile(r"Training epoch (\d+), $")
# NeMo 1 / Lightning: "Epoch 0:  1%|▏ | 795/77225 [9:07:58<878:01:48, 41.36s/it, k=v, ...]" or "Epoch 1: : 1it [...]"
_BAR = re.compile(r"Epoch (?P<epoch>\d+):[^|\[\r]*?(?:\|[^|\r]*\|)?\s*(?P<it>\d+)(?:/(?P<total>\d+)|it)\s*"
                  r"\[(?P<inner>[^\[\]\r]*)\]")
_NEMO_BAR_FIELDS = ("reduced_train_loss", "global_step", "consumed_samples", "train_step_timing in s")
_MEMORY = re.compile(r"\[Rank (?P<rank>\d+)\] \(after (?P<after>\d+) iterations\) memory \(MB\)\s*\|(?P<rest>.*)$")
TIMER_BLOCK = "(min, max) time across ranks (ms):"
TIMER_ROW = re.compile(r"^\s+(?P<name>\S+)\s*\.*:\s*\((?P<min>[-\d.eE+]+),\s*(?P<max>[-\d.eE+]+)\)\s*$")
TIMER_INLINE = re.compile(r"time \(ms\)\s*\|(?P<rest>.*)$")
_BRIDGE = re.compile(r"Step Time\s*:\s*(?P<time>[\d.]+)s\s+GPU utilization:\s*(?P<tflops>[\d.]+)\s*"
                     r"(?P<unit>(?:MODEL_)?TFLOP/s/GPU)")
_SLIME = re.compile(r"(?:\((?P<actor>\w+) pid=(?P<pid>\d+)(?:, ip=(?P<ip>[\d.]+))?\)\s*)?"
                    r"(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]\s*)?(?:(?P<loc>[\w./-]+:\d+)\s*-\s*)?"
                    r"(?P<type>step|perf|rollout) (?P<index>\d+): (?P<dict>\{.*\})\s*$")
_SLIME_START = re.compile(r"\b(step|perf|rollout) \d+: \{")
_NON_FINITE_WORD = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
_SNAKE = re.compile(r"[^0-9a-z]+")

# kind, words one of which the line must contain (a cheap test first: most lines are noise; empty: the words of a
# kind above cover this one's lines too, and each word is scanned for only once), pattern.
# The first kind that matches a line is its kind, so the order matters: Ray's host-memory
# ``ray.exceptions.OutOfMemoryError`` before the GPU ``OutOfMemoryError``, memory before exceptions.
# ``oom`` is GPU memory; ``ray_oom``, ``oomkilled``, ``host_oom`` (and ``killed`` with a SIGKILL exit) host memory.
# Every memory pattern's line holds one of these: few words, so that the scan for interesting lines stays fast.
_MEMORY_WORDS = ("emory", "MEMORY", "OOM", "oom", "Failed to CUDA", "_STATUS_", "rror")
_PREFIX = r"^(?:\s*(?:\d+:|\[[^\]]*\]:?|\([^)]*\)|traceback:|E ))*\s*"  # grep -n, [rank3]:, (Actor pid=1)
FAILURES = (
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
# A line that shows a process ending in an error no failure kind names (a Python traceback, Hydra's
# "Error executing job", a C++ abort): the evidence a crash leaves, kept for triage.
# "terminate called", torchrun's "exitcode" and a shell's "(core dumped)" come with or after a line naming an Error
CRASH_WORDS = ("Traceback", "rror")
_CRASH = re.compile(r"Traceback \(most recent call last\)|Error executing job|\b\w+Error: |Segmentation fault|"
                    r"core dumped|terminate called|ChildFailedError|exitcode\s*:\s*-?[1-9]")
# Lines of the in-pod hook wrapper (pod_hooks/wrap.py): they report on hooks, never on the run.
POD_HOOKS_PREFIX = "attune-pod-hooks:"

# A field's name, lower case with "_" read as " " (NeMo spells Megatron's names with underscores),
# to (key, kind, scale to ms): kind int, float or "ms" (a step time, scaled to milliseconds).
_KNOWN_FIELDS = {
    "elapsed time per iteration (ms)": ("elapsed_ms", "ms", "ms"),
    "elapsed time per iteration (s)": ("elapsed_ms", "ms", "s"),
    "train step timing in s": ("elapsed_ms", "ms", "s"),
    "throughput per gpu (tflop/s/gpu)": ("tflops_per_gpu", float, None),
    "tflops per gpu": ("tflops_per_gpu", float, None),
    "learning rate": ("lr", float, None),
    "lr": ("lr", float, None),
    "global batch size": ("global_batch_size", int, None),
    "lm loss": ("lm_loss", float, None),
    "reduced train loss": ("lm_loss", float, None),
    "grad norm": ("grad_norm", float, None),
    "number of skipped iterations": ("skipped", int, None),
    "number of nan iterations": ("nan", int, None),
    "loss scale": ("loss_scale", float, None),
    "consumed samples": ("consumed_samples", None, None),  # NeMo 1 prints it rounded, as a float: kept as printed
    "global step": ("global_step", None, None),
}
# Fields only Megatron-DeepSpeed prints on its iteration line.
_MEGATRON_DEEPSPEED = ("elapsed time per iteration (s)", "samples per second", "tflops", "consumed tokens",
                       "actual seqlen")


_NON_FINITE_TEXT = {"nan": "nan", "inf": "inf", "-inf": "-inf", "+inf": "inf"}


def number(text: str):
    """A printed number as int or float; ``nan``/``inf`` stay the strings printed; else None."""
    text = text.strip()
    if text.isascii() and (text.isdigit() or (text[:1] in ("-", "+") and text[1:].isdigit())):
        return int(text)
    try:
        value = float(text)
    except ValueError:
        return None
    if value - value != 0.0:  # nan or inf: the text printed, as data can carry it
        return _NON_FINITE_TEXT.get(text.lower(), value)
    return value


def _seconds_to_ms(text: str):
    """``"105.22"`` seconds as 105220.0 ms: scaled in decimal, so no binary rounding is added."""
    try:
        return float(Decimal(text.strip()) * 1000)
    except (InvalidOperation, ValueError):
        return None


def fields(rest: str, cut: bool = False) -> dict:
    """``name: value | name: value`` as a dict. ``cut``: the text may end mid-field (a line without its
    newline), so the part after the last ``|`` is not read."""
    parts = rest.split("|")
    if cut:
        parts = parts[:-1]
    out = {}
    for part in parts:
        name, sep, value = part.partition(":")
        if sep:
            out[name.strip()] = value.strip()
    return out


def snake(name: str) -> str:
    return _SNAKE.sub("_", name.lower()).strip("_")


def new_step(step: int, train_iters: Optional[int], source: str) -> dict:
    return {"step": step, "train_iters": train_iters, "timestamp": None, "elapsed_ms": None, "elapsed_unit": None,
            "tflops_per_gpu": None, "lm_loss": None, "grad_norm": None, "lr": None, "global_batch_size": None,
            "skipped": None, "nan": None, "loss_scale": None, "consumed_samples": None, "losses": {}, "fields": {},
            "source": source}


# name printed -> how it is read: (key, kind, unit) of _KNOWN_FIELDS, or "loss", or "field"; and its snake
# case name; bounded, since the names come from the log
_FIELD_INFO = {}
_FIELD_INFO_MAX = 4096


def _field_info(name: str) -> tuple:
    info = _FIELD_INFO.get(name)
    if info is None:
        key = name.lower().replace("_", " ")
        known = _KNOWN_FIELDS.get(key)
        info = (known, "loss" in key, snake(name), key == "tflops", key in _MEGATRON_DEEPSPEED)
        if len(_FIELD_INFO) < _FIELD_INFO_MAX:
            _FIELD_INFO[name] = info
    return info


def read_field(step: dict, name: str, text: str, info: Optional[tuple] = None) -> None:
    """Put one printed field into ``step``: a known one under its key, a loss into ``losses``, the rest
    into ``fields``."""
    known, is_loss, snake_name, is_tflops, _megds = info or _field_info(name)
    if known is not None:
        field, kind, unit = known
        if kind is float or kind is int:  # the common case, without the general number() below
            try:
                value = kind(text)
            except ValueError:
                pass
            else:
                if value - value == 0:  # finite: nan and inf go the general way, to keep their text
                    step[field] = value
                    return
        if kind == "ms":
            value = _seconds_to_ms(text) if unit == "s" else number(text)
            if isinstance(value, str) or value is None:
                step[field] = value
            else:
                step[field], step["elapsed_unit"] = float(value), unit
            return
        value = number(text)
        if value is None or isinstance(value, str) or kind is None:
            step[field] = value
        elif kind is int and isinstance(value, float) and not value.is_integer():
            step["fields"][snake_name] = value  # a count printed with a fraction: not the count it names
        else:
            step[field] = kind(value)
        return
    value = number(text)
    if is_loss:
        if value is not None:
            step["losses"][name] = float(value) if isinstance(value, (int, float)) else value
        return
    if is_tflops and step["source"] == "megatron-deepspeed":
        step["megds_tflops"] = value  # Megatron-DeepSpeed's own estimate: not Megatron's throughput per GPU
    step["fields"][snake_name] = text if value is None else value


def parse_iteration(line: str, cut: bool = False) -> Optional[dict]:
    """A Megatron-LM, Megatron-Bridge, Megatron-DeepSpeed or NeMo 2 iteration line, or None."""
    match = _ITERATION.search(line)
    if match is None:
        return None
    parts = match.group("rest").split("|")
    if cut:
        parts.pop()  # after the last "|": perhaps cut mid-value
    pairs = []
    for part in parts:
        name, sep, value = part.partition(":")
        if sep:
            pairs.append((name.strip(), value.strip()))
    infos = [_field_info(name) for name, _value in pairs]
    epoch = _EPOCH.search(line, 0, match.start())
    if epoch:
        source = "nemo2"
    elif any(info[4] for info in infos):
        source = "megatron-deepspeed"
    else:
        source = "megatron"
    step = new_step(int(match.group("it")), int(match.group("total")), source)
    step["timestamp"] = match.group("ts")
    if epoch:
        step["epoch"] = int(epoch.group(1))
    for (name, text), info in zip(pairs, infos):
        read_field(step, name, text, info)
    return step


def parse_bar(line: str):
    """Every NeMo 1 (Lightning) progress-bar state on the line that prints a training metric, one by one
    (a bar redrawn with carriage returns only can fill a whole block)."""
    for match in _BAR.finditer(line):
        inner = match.group("inner").split(", ")
        pairs = [part.partition("=") for part in inner]
        names = [name.strip() for name, sep, _ in pairs if sep]
        nemo = any(name in _NEMO_BAR_FIELDS for name in names)
        if not nemo and not any("loss" in name for name in names):
            continue  # a bar with no training metric (data loading, a validation pass): not a step report
        total = match.group("total")
        step = new_step(int(match.group("it")), int(total) if total else None, "nemo1" if nemo else "lightning")
        step["epoch"] = int(match.group("epoch"))
        for index, (name, sep, value) in enumerate(pairs):
            if sep:
                read_field(step, name.strip(), value)
            elif index == 0:
                step["fields"]["elapsed_remaining"] = name.strip()
            elif name.strip().endswith(("s/it", "it/s")):
                step["fields"]["rate"] = name.strip()
        yield step


def parse_memory(line: str, cut: bool = False) -> Optional[dict]:
    match = _MEMORY.search(line)
    if match is None:
        return None
    printed = fields(match.group("rest"), cut)
    record = {"rank": int(match.group("rank")), "after_iterations": int(match.group("after"))}
    for name, key in (("allocated", "allocated_mb"), ("max allocated", "max_allocated_mb"),
                      ("reserved", "reserved_mb"), ("max reserved", "max_reserved_mb")):
        value = number(printed.get(name, ""))
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
    for kind, words, pattern in FAILURES:
        if (not words or any(word in line for word in words)) and pattern.search(line):
            return kind
    return None


def is_crash(line: str) -> bool:
    return bool(_CRASH.search(line)) and not line.lstrip().startswith(POD_HOOKS_PREFIX)
