"""Prints Megatron-LM iteration lines (SYNTHETIC numbers) for the local backend's tests.

FAKE_MODE: ok (20 iterations, exit 0), hang (5 iterations, then sleeps), escape (5 iterations, then starts a
worker in a session of its own, its pid in escaped.pid, and sleeps), hang-heartbeat (5 iterations, then
torchrun's rendezvous keep-alive warnings every 0.2 s and no progress), killed (5 iterations, then
SIGKILL to itself), leak (5 iterations, then memory that grows by 1 GB/s), oom (a CUDA out-of-memory
error, exit 1), forge (a program that turns on its campaign after 3 iterations: it appends forged iteration lines
to its own log.txt by path, writes the campaign's ledger, the user's shell start-up file and a canary in HOME,
prints what it can read of the user's credentials, calls the cluster's API server its kubeconfig names, and leaves
a process behind; then ends as ok does), torch (each iteration is a real CPU torch step of a small MLP, inside pod_hooks.profiler.maybe_profile when the profiler hook exposed
it; the lines carry the step's measured time).
"""

import contextlib
import os
import signal
import sys
import time

LINE = (" [2026-11-02 09:00:{sec:02d}] iteration {it:8d}/      20 | consumed samples: {cs:12d} | elapsed time "
        "per iteration (ms): {ms:.1f} | learning rate: 3.000000E-04 | global batch size:     8 | lm loss: "
        "{loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |")
mode = os.environ.get("FAKE_MODE", "ok")


def forge():
    """Every way a run could shape its own evidence or reach past its run: each attempt says what it got."""
    run = os.environ.get("ATTUNE_LOCAL_RUN", ".")
    home = os.path.expanduser("~")
    forged = LINE.format(sec=59, it=20, cs=160, ms=1.0, loss=1.0).replace("iteration", "iteration FORGED-BY-PATH")
    targets = [(os.path.join(run, "log.txt"), forged + "\n"), (os.path.join(run, "exit.json"), "{}"),
               (os.path.join(run, "..", "..", "ledger.jsonl"), "{}\n"), (os.path.join(home, ".bashrc"), "forged\n"),
               (os.path.join(home, "forge-canary"), "x")]
    for path, text in targets:
        try:
            with open(path, "a") as handle:
                handle.write(text)
            print("forge: wrote", path, flush=True)
        except OSError as exc:
            print("forge: could not write %s (%s)" % (path, exc.strerror), flush=True)
    for path in (os.path.join(home, ".aws", "credentials"), os.environ.get("KUBECONFIG") or "",
                 os.path.join(home, ".kube", "config"), "/proc/1/environ"):
        try:
            with open(path, "rb") as handle:
                print("forge: read %s: %r" % (path, handle.read()[:400]), flush=True)
        except OSError as exc:
            print("forge: could not read %s (%s)" % (path, exc.strerror), flush=True)
    import re
    import socket
    for path in (os.environ.get("KUBECONFIG") or "", os.path.join(home, ".kube", "config")):
        try:
            server = re.search(r"server: '?https?://([^:/']+):(\d+)", open(path).read())
            with socket.create_connection((server.group(1), int(server.group(2))), timeout=2) as conn:
                conn.sendall(b"GET /api/v1/namespaces/ml-tuning/pods HTTP/1.0\r\n\r\n")
                print("forge: reached the API server", flush=True)
        except (OSError, AttributeError) as exc:
            print("forge: could not reach the API server (%s)" % exc, flush=True)
    if os.fork() == 0:  # a process left behind, which would act after the run ended
        os.setsid()
        time.sleep(3)
        try:
            with open(os.path.join(home, "forge-late-canary"), "w") as handle:
                handle.write("x")
        finally:
            os._exit(0)


print("argv:", " ".join(sys.argv[1:]), flush=True)
if mode == "torch":
    import torch

    try:
        from attune.pod_hooks.profiler import maybe_profile
    except ImportError:
        def maybe_profile(step):
            return contextlib.nullcontext()
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
for it in range(1, 21):
    if mode == "torch":
        began = time.perf_counter()
        with maybe_profile(it):
            loss = model(data).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(LINE.format(sec=it, it=it, cs=8 * it, ms=(time.perf_counter() - began) * 1000, loss=loss.item()),
              flush=True)
        continue
    if it == 6 and mode == "hang":
        time.sleep(600)
    if it == 6 and mode == "escape":  # a worker in a session of its own, as torchrun starts its workers; then stuck
        import subprocess
        worker = subprocess.Popen(["sleep", "600"], start_new_session=True)
        with open("escaped.pid", "w") as handle:
            handle.write(str(worker.pid))
        time.sleep(600)
    if it == 6 and mode == "hang-heartbeat":  # stuck, while the launcher keeps printing (as torchrun does)
        for beat in range(3000):
            stamp = time.time()  # stamped as torch stamps its warnings: local time, microseconds, no year
            print("W%s.%06d 26719 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1346] The "
                  "node 'localhost_26719_0' has failed to send a keep-alive heartbeat to the rendezvous"
                  % (time.strftime("%m%d %H:%M:%S", time.localtime(stamp)), int(stamp % 1 * 1e6)), flush=True)
            time.sleep(0.2)
    if it == 6 and mode == "leak":  # memory that runs away, 20 MB every 20 ms, until something stops it
        held = []
        for _ in range(100000):
            held.append(bytearray(20 * 2 ** 20))
            time.sleep(0.02)
    if it == 6 and mode == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if it == 4 and mode == "forge":
        forge()
    if it == 3 and mode == "oom":
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
              "capacity of 79.18 GiB of which 1.00 GiB is free.", flush=True)
        sys.exit(1)
    print(LINE.format(sec=it, it=it, cs=8 * it, ms=500.0 + it, loss=10.0 - 0.1 * it), flush=True)
    time.sleep(0.01)
