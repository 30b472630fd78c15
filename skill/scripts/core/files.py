"""Reading the small files a user names, and the one safe way every verb writes a file.

Reading: each file (settings, recipes, rules, job files, the lever catalog) is read whole and
strictly: it must exist, be a file, hold something and be UTF-8 text, or ``read_text`` raises one
``InputError`` line naming the file, what is wrong with it and the fix. Large observed files
(training logs, traces) are streamed by their own parsers instead, which tolerate stray bytes
(``logparse``, ``profile_analyzer.reader``).

Writing: the agent can create files beside most records a verb writes (the campaign's top level,
``notes.md``, ``scratch/``), and verbs run with the user's rights outside its sandbox, so a verb
must never write through a symbolic link the agent planted. Every write goes through this module:

* ``atomic_write`` / ``write_text`` / ``replacing``: replace a whole file. The temporary file is
  created exclusively (``O_CREAT|O_EXCL|O_NOFOLLOW``) under a random name beside the target, so no
  name the agent could predict is ever opened; it is synced, then renamed over the target, and
  removed on any failure.
* ``append`` / ``open_fd``: add to a file (the ledger, ``levers.md``) opened with ``O_NOFOLLOW``.
* ``replace``: rename one file over another (a withdrawn recipe).

Each refuses, with ``LinkRefused`` (an ``InputError``: exit code 2), a path that is itself a
symbolic link, naming the path, where it points and the fix. A link in a parent folder is
followed: the sandbox, not this module, keeps the agent out of the folders above the campaign.

Standard library and Python 3.7 syntax only: the ledger (``chainlog``) writes through it and the
harness hooks import the ledger.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from .errors import InputError

FILE_MODE = 0o644    # what a verb's records are created with (mkstemp's own 0600 would hide them from a reader)
FOLDER_MODE = 0o755  # what ``make_folders`` creates folders with (before the umask)
_NAME_KEEP = 100     # characters of the target's name kept in a temporary name (a name is at most 255 bytes)


class LinkRefused(InputError):
    """A verb was asked to write to a path that is a symbolic link: it writes nothing."""


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


def refuse_link(path) -> None:
    """Raise ``LinkRefused`` when ``path`` itself is a symbolic link (dangling or not)."""
    if os.path.islink(str(path)):
        try:
            target = os.readlink(str(path))
        except OSError:
            target = "?"
        raise LinkRefused("%s: is a symbolic link (to %s); attune writes no file through a link. "
                          "Fix: remove the link (rm %s) and run the command again." % (path, target, path))


@contextlib.contextmanager
def replacing(path, mode: int = FILE_MODE):
    """A binary file object to write ``path``'s new content into; when the block ends without an error,
    the content is synced and renamed over ``path`` (created or replaced whole), else thrown away.

    For writers that want a file object (pyarrow, ``torch.save``, matplotlib); ``atomic_write`` is the
    same for bytes in hand. Refuses a ``path`` that is a symbolic link (``LinkRefused``).
    """
    path = str(path)
    refuse_link(path)
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + name[:_NAME_KEEP] + ".", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(os.dup(fd), "wb") as handle:  # a copy: some writers close the file object they are given
            yield handle
        os.fsync(fd)
        # a link planted at ``path`` since the check is replaced itself by the rename, never followed
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def atomic_write(path, data: bytes, mode: int = FILE_MODE) -> None:
    """Write ``data`` to ``path`` whole or not at all: an exclusive, randomly named temporary file beside
    it, synced, then renamed over it. Refuses a ``path`` that is a symbolic link (``LinkRefused``)."""
    with replacing(path, mode) as handle:
        handle.write(data)


def write_text(path, text: str, mode: int = FILE_MODE) -> None:
    """``atomic_write`` of ``text`` as UTF-8."""
    atomic_write(path, text.encode("utf-8"), mode)


def open_fd(path, flags: int, mode: int = FILE_MODE) -> int:
    """``os.open(path, flags)`` that never follows a link at ``path`` (``O_NOFOLLOW``): a file descriptor
    for a writer that needs one (a locked append); ``LinkRefused`` when ``path`` is a link."""
    refuse_link(path)
    try:
        return os.open(str(path), flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # planted between the check and the open
            refuse_link(path)
        raise


def append(path, data: bytes) -> None:
    """Add ``data`` at the end of ``path`` (created when missing) and sync it; never through a link."""
    fd = open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(source, target) -> None:
    """Rename ``source`` over ``target``; refuses when either is a symbolic link."""
    refuse_link(source)
    refuse_link(target)
    os.replace(str(source), str(target))


def make_folders(path) -> None:
    """Create the folder ``path`` and any missing parents (``FOLDER_MODE``); nothing when it exists."""
    os.makedirs(str(path), FOLDER_MODE, exist_ok=True)


def make_temp_folder(parent) -> str:
    """A new folder of an unpredictable name in ``parent`` (made first, where missing), for a tree written whole and
    then renamed into place."""
    make_folders(parent)
    return tempfile.mkdtemp(dir=str(parent), prefix=".tmp-")
