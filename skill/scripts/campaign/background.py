"""Run one function in a forked child process while the caller goes on (used to keep `status` and
`rank` fast on large ledgers: the GPU-hour log is verified and the chart drawn on the second core).

The child gets its inputs by inheritance (fork) and, optionally, one more pickled message sent
later with ``send``; it returns one picklable value through a pipe. Where ``os.fork`` does not
exist, or the caller has other threads, the function simply runs in the caller: a forked child
has only the forking thread, so a lock another thread held at the fork (the import lock, a
logging handler's, a buffered stream's) stays held in the child forever, and the caller would
wait on it forever. A child that dies or raises makes ``result`` raise ``BackgroundError``, and
the caller decides what to do; nothing is lost silently.
"""

from __future__ import annotations

import os
import pickle
import threading
import traceback


class BackgroundError(RuntimeError):
    """The child failed; the message carries its traceback."""


class Background(object):
    def __init__(self, func, *args, wants_message: bool = False, prepare=None):
        """Start ``func(*args[, message])`` in a child; ``prepare()`` runs in the child first
        (before it waits for the message), e.g. to import a slow library meanwhile."""
        self._func = func
        self._args = args
        self._wants_message = wants_message
        self._local = None
        self._pid = None
        if not hasattr(os, "fork") or threading.active_count() > 1:
            self._local = "pending"
            return
        result_read, result_write = os.pipe()
        message_read, message_write = os.pipe() if wants_message else (None, None)
        try:
            pid = os.fork()
        except OSError:  # no process to spare (limits, memory): do the work in the caller instead
            for fd in (result_read, result_write, message_read, message_write):
                if fd is not None:
                    os.close(fd)
            self._local = "pending"
            return
        if pid == 0:  # the child: never returns into the caller's code
            code = 0
            try:
                os.close(result_read)
                if message_write is not None:
                    os.close(message_write)
                extra = ()
                if prepare is not None:
                    prepare()
                if message_read is not None:
                    with os.fdopen(message_read, "rb") as handle:
                        extra = (pickle.load(handle),)
                payload = ("ok", func(*(args + extra)))
            except BaseException:  # report everything, including SystemExit, to the parent
                payload = ("error", traceback.format_exc())
                code = 1
            try:
                with os.fdopen(result_write, "wb") as handle:
                    pickle.dump(payload, handle, protocol=pickle.HIGHEST_PROTOCOL)
            finally:
                os._exit(code)
        os.close(result_write)
        if message_read is not None:
            os.close(message_read)
        self._pid = pid
        self._result_read = result_read
        self._message_write = message_write

    def send(self, message) -> None:
        """Give the child its one message (only with ``wants_message=True``)."""
        assert self._wants_message
        if self._pid is None:
            self._local = ("message", message)
            return
        with os.fdopen(self._message_write, "wb") as handle:
            pickle.dump(message, handle, protocol=pickle.HIGHEST_PROTOCOL)
        self._message_write = None

    def cancel(self) -> None:
        """Stop waiting for the child: it sees no message, fails, and is reaped; errors ignored."""
        try:
            self.result()
        except BackgroundError:
            pass

    def result(self):
        """Wait for the child and return what the function returned."""
        if self._pid is None:
            extra = (self._local[1],) if isinstance(self._local, tuple) else ()
            return self._func(*(self._args + extra))
        if self._message_write is not None:  # never sent: let the child see end of file
            os.close(self._message_write)
            self._message_write = None
        with os.fdopen(self._result_read, "rb") as handle:
            data = handle.read()
        _pid, status = os.waitpid(self._pid, 0)
        if not data:
            raise BackgroundError("the background process ended without a result (status %d)" % status)
        kind, value = pickle.loads(data)
        if kind == "error":
            raise BackgroundError("the background process failed:\n" + value)
        return value
