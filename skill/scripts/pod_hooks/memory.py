"""Job-side helper of the ``oom_snapshot`` hook: ``install()`` records CUDA memory history.

Call it once, early in the training process (after CUDA is usable, before the model is built)::

    from attune.pod_hooks import memory
    memory.install()

When the wrapper's ``oom_snapshot`` hook set ``ATTUNE_MEMORY_HISTORY`` (the number of allocation
events to keep), this turns on ``torch.cuda.memory._record_memory_history`` and, on a CUDA
out-of-memory error, dumps ``torch.cuda.memory._dump_snapshot`` to
``ATTUNE_MEMORY_SNAPSHOT_DIR/oom_snapshot.rank<R>.pid<P>.pickle`` (open it at pytorch.org/memory_viz).
Without the variable it does nothing and never imports torch. It returns whether recording is on;
it never raises into the job: torch missing or CUDA unavailable is reported as ``skipped``, any
other error as ``failed``, in the status file the hook reads after the run.
"""

from __future__ import annotations

import os
import sys

from . import helper_status as status

HISTORY_ENV = "ATTUNE_MEMORY_HISTORY"
DIR_ENV = "ATTUNE_MEMORY_SNAPSHOT_DIR"
HOOK = "oom_snapshot"


def snapshot_path() -> str:
    directory = os.environ.get(DIR_ENV) or os.getcwd()
    return os.path.join(directory, "oom_snapshot.rank%d.pid%d.pickle" % (status.rank(), os.getpid()))


def install() -> bool:
    """Turn on memory history and the dump on OOM when the hook asked for it; True when on."""
    entries = os.environ.get(HISTORY_ENV)
    if not entries:
        return False
    try:
        import torch
    except ImportError:
        status.write(HOOK, "skipped", reason="torch not importable in the job")
        return False
    try:
        if not torch.cuda.is_available():
            status.write(HOOK, "skipped", reason="CUDA not available in the job")
            return False
        path = snapshot_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.cuda.memory._record_memory_history(max_entries=int(entries))

        def dump(*_args: object) -> None:
            try:
                torch.cuda.memory._dump_snapshot(path)
                print("%s %s: memory snapshot written to %s" % (status.PREFIX, HOOK, path), file=sys.stderr)
            except Exception as err:
                status.write(HOOK, "failed", error="dump: %s: %s" % (type(err).__name__, err))

        observer = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
        if observer is not None:
            observer(dump)
        else:  # older torch: dump when the OOM reaches the top of the program
            previous = sys.excepthook

            def hook(kind, value, traceback):  # type: ignore[no-untyped-def]
                if "out of memory" in str(value):
                    dump()
                previous(kind, value, traceback)

            sys.excepthook = hook
        status.write(HOOK, "ok", snapshot=path, max_entries=int(entries))
        return True
    except Exception as err:
        print("%s %s failed: %s: %s" % (status.PREFIX, HOOK, type(err).__name__, err), file=sys.stderr)
        status.write(HOOK, "failed", error="%s: %s" % (type(err).__name__, err))
        return False
