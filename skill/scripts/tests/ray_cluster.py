"""A real Ray cluster for the tests: one Ray head in a private network namespace, on its loopback only.

Ray does not stay on loopback: even with ``--node-ip-address=127.0.0.1 --dashboard-host=127.0.0.1`` its GCS, raylet
and agents listen on every interface. So the head runs inside ``unshare --net`` (a network namespace of its own,
``lo`` brought up), where nothing outside can reach it, with a temp dir of its own. Only the dashboard's job server
is brought out, through a Unix socket (``socat`` inside the namespace) and a forwarder on this host's 127.0.0.1
(``socat`` outside). Stopping never uses ``ray stop`` (it kills every Ray process on the host by name): it ends, by
pid, every process in the cluster's network namespace (Ray's idle workers re-parent to pid 1 in process groups of
their own, so a process group is not enough), then the forwarder, and checks that none is left and that nothing
listens on the forwarded port any more.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

START = """set -e
ip link set lo up
export RAY_USAGE_STATS_ENABLED=0 RAY_JOB_START_TIMEOUT_SECONDS={start_timeout}
"{ray}" start --head --node-ip-address=127.0.0.1 --port=6379 --dashboard-host=127.0.0.1 --dashboard-port=8265 \\
  --num-cpus={cpus} --num-gpus=0 --object-store-memory=100000000 --temp-dir="{temp}" --disable-usage-stats \\
  > "{root}/ray-start.log" 2>&1
exec socat UNIX-LISTEN:"{sock}",fork TCP:127.0.0.1:8265
"""


class RayCluster(object):
    def __init__(self, root: Path, cpus: int = 2, start_timeout_s: int = 15):
        self.root = Path(root)
        self.cpus, self.start_timeout_s = cpus, start_timeout_s
        self.holder = self.forwarder = None
        self.netns = None
        self.port = None
        self.short = None

    @property
    def address(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def start(self, timeout_s: float = 180.0) -> "RayCluster":
        for tool in ("unshare", "socat", "ip"):
            if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
                raise RuntimeError("the Ray test cluster needs %s on PATH (util-linux, socat, iproute2)" % tool)
        ray = Path(sys.executable).parent / "ray"
        if not ray.exists():
            raise RuntimeError("no `ray` beside %s: install the ray extra (pip install -e '.[ray]')" % sys.executable)
        self.root.mkdir(parents=True, exist_ok=True)
        # Ray's sockets live under its temp dir, and a Unix socket's path is at most 107 bytes: a short dir of its
        # own, whatever the test's temporary path
        self.short = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
        sock, temp = self.short / "dash.sock", self.short / "t"
        script = self.root / "start.sh"
        script.write_text(START.format(start_timeout=self.start_timeout_s, ray=ray, cpus=self.cpus, temp=temp,
                                       root=self.root, sock=sock))
        env = dict(os.environ, PATH=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        unshare = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--net", "--map-root-user"]
        self.holder = subprocess.Popen(unshare + ["bash", str(script)], start_new_session=True, env=env,
                                       stdin=subprocess.DEVNULL, stdout=open(self.root / "holder.log", "wb"),
                                       stderr=subprocess.STDOUT)
        deadline = time.time() + timeout_s
        while not sock.exists():
            if self.holder.poll() is not None or time.time() > deadline:
                log = (self.root / "ray-start.log")
                detail = log.read_text()[-2000:] if log.exists() else (self.root / "holder.log").read_text()[-2000:]
                self.stop(check=False)
                raise RuntimeError("the Ray head did not start (exit %s): %s" % (self.holder.poll(), detail))
            time.sleep(0.5)
        self.netns = os.readlink("/proc/%d/ns/net" % self.holder.pid)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.forwarder = subprocess.Popen(
            ["socat", "TCP-LISTEN:%d,bind=127.0.0.1,fork,reuseaddr" % self.port, "UNIX-CONNECT:%s" % sock],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while True:
            try:
                with urllib.request.urlopen(self.address + "/api/version", timeout=5) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                pass
            if time.time() > deadline:
                self.stop(check=False)
                raise RuntimeError("the Ray dashboard did not answer at %s" % self.address)
            time.sleep(0.5)

    def alive(self) -> bool:
        """Whether the cluster still answers: its holder runs and its job server replies."""
        if self.holder is None or self.holder.poll() is not None or self.forwarder is None or \
                self.forwarder.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(self.address + "/api/version", timeout=10) as resp:
                return resp.status == 200
        except OSError:
            return False

    def describe(self) -> str:
        """What is left of the cluster, for a report when it stopped answering."""
        return "holder %s, forwarder %s, %d process(es) in its network namespace" % (
            "running" if self.holder is not None and self.holder.poll() is None else
            "exited %s" % (self.holder.poll() if self.holder is not None else None),
            "running" if self.forwarder is not None and self.forwarder.poll() is None else "exited",
            len(self.processes()))

    def processes(self) -> list:
        """The pids in the cluster's network namespace."""
        if self.netns is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink("/proc/%s/ns/net" % entry) == self.netns:
                        found.append(int(entry))
                except OSError:
                    continue
        return found

    def listening(self) -> bool:
        if self.port is None:
            return False
        with socket.socket() as probe:
            probe.settimeout(1.0)
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self, check: bool = True) -> None:
        """End every process this cluster started, by pid; with ``check``, fail if any is left or the forwarded
        port still answers."""
        for proc in (self.forwarder,):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(10)
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
            pids = self.processes()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.time() + wait_s
            while self.processes() and time.time() < deadline:
                if self.holder is not None:
                    self.holder.poll()  # reap the holder once it exits
                time.sleep(0.2)
            if not self.processes():
                break
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(10)
        left, listening = self.processes(), self.listening()
        if check and (left or listening):
            raise AssertionError("the Ray test cluster left %s%s" % (
                "processes %s in its network namespace" % left if left else "",
                " and a listener on 127.0.0.1:%d" % self.port if listening else ""))
        if getattr(self, "short", None) is not None:
            shutil.rmtree(self.short, ignore_errors=True)
