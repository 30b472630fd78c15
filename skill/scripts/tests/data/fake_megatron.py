"""Prints Megatron-LM iteration lines (SYNTHETIC numbers) for the local backend's tests.

FAKE_MODE: ok (20 iterations, exit 0), hang (5 iterations, then sleeps), killed (5 iterations, then
SIGKILL to itself), oom (a CUDA out-of-memory error, exit 1).
"""

import os
import signal
import sys
import time

LINE = (" [2026-11-02 09:00:{sec:02d}] iteration {it:8d}/      20 | consumed samples: {cs:12d} | elapsed time "
        "per iteration (ms): {ms:.1f} | learning rate: 3.000000E-04 | global batch size:     8 | lm loss: "
        "{loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |")
mode = os.environ.get("FAKE_MODE", "ok")
print("argv:", " ".join(sys.argv[1:]), flush=True)
for it in range(1, 21):
    if it == 6 and mode == "hang":
        time.sleep(600)
    if it == 6 and mode == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if it == 3 and mode == "oom":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
              "capacity of 79.18 GiB of which 1.00 GiB is free.", flush=True)
        sys.exit(1)
    print(LINE.format(sec=it, it=it, cs=8 * it, ms=500.0 + it, loss=10.0 - 0.1 * it), flush=True)
    time.sleep(0.01)
