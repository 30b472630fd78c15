"""Job-side helper of the ``profiler`` hook for plain torch loops: ``maybe_profile(step)``.

Megatron-LM and slime profile themselves from flags the hook appends; any other program reads the
hook's settings from the environment through this helper::

    from attune.pod_hooks.profiler import maybe_profile

    for step in range(num_steps):
        with maybe_profile(step):
            train_step()

- ``ATTUNE_PROFILE_STEPS=N:M``: steps N to M-1 are recorded, with step N-1 as warm-up, as Megatron's
  ``--profile-step-start N --profile-step-end M`` do.
- ``ATTUNE_PROFILE_DIR``: where ``torch.profiler.tensorboard_trace_handler`` writes
  ``rank_<R>.<time_ns>.pt.trace.json.gz``.
- ``ATTUNE_PROFILE_RANKS=0,1``: the global ranks (``RANK``) that profile; default 0.

Without ``ATTUNE_PROFILE_STEPS`` the helper does nothing and never imports torch. Each step is one
``ProfilerStep#<step>`` annotation, numbered as the job numbers its steps. Nothing here raises into
the job: a failure to profile is logged to stderr and left in the status file for the hook.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator, Optional, Tuple

from . import helper_status as status

STEPS_ENV = "ATTUNE_PROFILE_STEPS"
DIR_ENV = "ATTUNE_PROFILE_DIR"
RANKS_ENV = "ATTUNE_PROFILE_RANKS"
HOOK = "profiler"


def parse_steps(text: str) -> Tuple[int, int]:
    """``"N:M"`` as (N, M) with 0 <= N < M; ValueError naming the rule otherwise."""
    try:
        start, end = (int(part) for part in text.split(":"))
    except ValueError:
        raise ValueError("profile steps %r: expected N:M, e.g. 10:12" % text) from None
    if not 0 <= start < end:
        raise ValueError("profile steps %r: need 0 <= N < M (steps N..M-1 are recorded)" % text)
    return start, end


class _Session:
    """The one profiler of this process: created at the warm-up step, gone after the window."""

    def __init__(self) -> None:
        self.window = None  # type: Optional[Tuple[int, int, str]]
        self.prof = None
        self.done = False
        text = os.environ.get(STEPS_ENV)
        if not text:
            self.done = True
            return
        try:
            start, end = parse_steps(text)
            ranks = {int(r) for r in os.environ.get(RANKS_ENV, "0").split(",") if r.strip()}
        except ValueError as err:
            self._fail(err)
            return
        if status.rank() not in ranks:
            self.done = True
            return
        self.window = (start, end, os.environ.get(DIR_ENV) or os.path.join(os.getcwd(), "profile"))

    def _fail(self, err: BaseException) -> None:
        print("%s %s failed: %s: %s" % (status.PREFIX, HOOK, type(err).__name__, err), file=sys.stderr)
        status.write(HOOK, "failed", error="%s: %s" % (type(err).__name__, err))
        self.done, self.prof = True, None

    def begin(self, step: int) -> None:
        if self.done or self.prof is not None or self.window is None:
            return
        start, end, directory = self.window
        if step >= end:
            self.done = True
            return
        if step < max(start - 1, 0):
            return
        try:
            import torch.profiler as tp
        except ImportError:
            status.write(HOOK, "skipped", reason="torch not importable in the job")
            self.done = True
            return
        try:
            import torch

            activities = [tp.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(tp.ProfilerActivity.CUDA)
            os.makedirs(directory, exist_ok=True)
            # Megatron's schedule, on the job's own step numbers.
            schedule = tp.schedule(wait=max(start - 1, 0), warmup=1 if start > 0 else 0,
                                   active=end - start, repeat=1)
            prof = tp.profile(activities=activities, schedule=schedule, record_shapes=True,
                              profile_memory=True,
                              on_trace_ready=tp.tensorboard_trace_handler(
                                  directory, worker_name="rank_%d" % status.rank(), use_gzip=True))
            # step_num names the ProfilerStep# annotation; current_action follows it.
            prof.step_num = step
            prof.current_action = prof.schedule(step)
            prof.start()
            self.prof = prof
        except Exception as err:  # the job goes on unprofiled; the hook records the failure
            self._fail(err)

    def end(self, step: int) -> None:
        if self.prof is None or self.window is None:
            return
        try:
            self.prof.step()
            if step >= self.window[1] - 1:
                self.prof.stop()
                self.prof, self.done = None, True
                status.write(HOOK, "ok", directory=self.window[2], last_step=step)
        except Exception as err:
            self._fail(err)


_SESSION = None  # type: Optional[_Session]


@contextlib.contextmanager
def maybe_profile(step: int) -> Iterator[None]:
    """Wrap one training step; profiles it when it lies in the hook's window on a selected rank."""
    global _SESSION
    if _SESSION is None:
        _SESSION = _Session()
    _SESSION.begin(step)
    yield
    _SESSION.end(step)
