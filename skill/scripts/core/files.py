"""Reading the small files a user names (settings, recipes, rules, job files, the lever catalog).

Each is read whole and strictly: it must exist, be a file, hold something and be UTF-8 text, or
``read_text`` raises one ``InputError`` line naming the file, what is wrong with it and the fix.
Large observed files (training logs, traces) are streamed by their own parsers instead, which
tolerate stray bytes (``logparse``, ``profile_analyzer.reader``).
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError


def read_text(path, what: str, fix: str) -> str:
    """The text of ``path``, a ``what`` (e.g. "RayJob YAML recipe"); ``fix`` is said after any problem."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError("%s: no such file. Fix: %s" % (path, fix))
    except IsADirectoryError:
        raise InputError("%s: is a directory, not a %s. Fix: %s" % (path, what, fix))
    except OSError as exc:
        raise InputError("%s: cannot read it (%s). Fix: %s" % (path, exc.strerror or exc, fix))
    if not data.strip():
        raise InputError("%s: is empty, not a %s. Fix: %s" % (path, what, fix))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("%s: not UTF-8 text (byte 0x%02x at line %d), so not a %s. Fix: %s"
                         % (path, data[exc.start], data.count(b"\n", 0, exc.start) + 1, what, fix))
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError("%s: binary (a NUL byte at line %d), not a %s. Fix: %s"
                         % (path, text.count("\n", 0, nul) + 1, what, fix))
    return text


def one_line(exc: BaseException) -> str:
    """An exception's message squeezed onto one line (library messages often span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def yaml_problem(exc) -> str:
    """A PyYAML error as ``line L: what`` (its message alone often names no place)."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or one_line(exc)
    return "line %d: %s" % (mark.line + 1, problem) if mark is not None else str(problem)


def atomic_write(path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: a temporary file beside it, synced, then renamed over it."""
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
