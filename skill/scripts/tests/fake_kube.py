"""An HTTP-level fake of the Kubernetes API endpoints the KubeRay backend uses, so the official
``kubernetes`` client runs end to end against it (no cluster, loopback only)."""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

RAYJOB = re.compile(r"^/apis/ray\.io/v1/namespaces/(?P<ns>[^/]+)/rayjobs(?:/(?P<name>[^/]+))?$")
PODS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods$")
POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)$")
NODE = re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$")
EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
EXEC = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<pod>[^/]+)/exec$")
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def ws_frame(payload: bytes, opcode: int = 2) -> bytes:
    """One unmasked server WebSocket frame (RFC 6455)."""
    head = bytes([0x80 | opcode])
    size = len(payload)
    if size < 126:
        head += bytes([size])
    elif size < 1 << 16:
        head += bytes([126]) + size.to_bytes(2, "big")
    else:
        head += bytes([127]) + size.to_bytes(8, "big")
    return head + payload


class FakeKube(object):
    def __init__(self):
        self.rayjobs = {}  # (ns, name) -> object
        self.pods = {}  # name -> labels
        self.events = []  # dicts: type, reason, kind, name, message
        self.requests = []  # (method, path)
        self.create_status = None  # e.g. 409 to script a conflict
        self.pod_polls_until_gone = 0
        self.files = {}  # (pod, path) -> bytes served by `cat` through exec
        self.pod_nodes = {}  # pod name -> node name
        self.pod_gpus = {}  # pod name -> nvidia.com/gpu limit
        self.node_labels = {}  # node name -> labels
        self.execs = []  # (pod, command)
        self.mtimes = {}  # (pod, path) -> modification time served by `stat -c %Y` (the file need not be in files)
        self.clock = None  # the pods' `date +%s`; None: this host's time
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self):
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length) or b"{}")

            def _status(self, code, reason):
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                                  "code": code, "message": reason})

            def do_POST(self):
                url = urlparse(self.path)
                fake.requests.append(("POST", url.path))
                match = RAYJOB.match(url.path)
                body = self._body()
                if not match:
                    return self._status(404, "NotFound")
                key = (match.group("ns"), body["metadata"]["name"])
                if fake.create_status or key in fake.rayjobs:
                    return self._status(fake.create_status or 409, "AlreadyExists")
                body.setdefault("status", {"jobStatus": "", "jobDeploymentStatus": "Initializing"})
                fake.rayjobs[key] = body
                self._send(201, body)

            def _exec(self, match, query):
                import base64
                import hashlib
                command = query.get("command", [])
                pod = match.group("pod")
                fake.execs.append((pod, command))
                accept = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + WS_GUID).encode())
                                          .digest()).decode()
                self.send_response(101)
                self.send_header("Upgrade", "websocket")
                self.send_header("Connection", "Upgrade")
                self.send_header("Sec-WebSocket-Accept", accept)
                self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
                self.end_headers()
                data, error = fake.run_command(pod, command)
                for start in range(0, len(data), 65536):
                    self.wfile.write(ws_frame(b"\x01" + data[start:start + 65536]))
                if error is not None:
                    self.wfile.write(ws_frame(b"\x02" + error))
                    status = {"status": "Failure", "reason": "NonZeroExitCode",
                              "details": {"causes": [{"reason": "ExitCode", "message": "1"}]}}
                else:
                    status = {"status": "Success"}
                self.wfile.write(ws_frame(b"\x03" + json.dumps(status).encode()))
                self.wfile.write(ws_frame(b"", opcode=8))
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self):
                url = urlparse(self.path)
                fake.requests.append(("GET", url.path))
                query = parse_qs(url.query)
                exec_match = EXEC.match(url.path)
                if exec_match and self.headers.get("Upgrade", "").lower() == "websocket":
                    return self._exec(exec_match, query)
                match = RAYJOB.match(url.path)
                if match and match.group("name"):
                    job = fake.rayjobs.get((match.group("ns"), match.group("name")))
                    return self._send(200, job) if job else self._status(404, "NotFound")
                if PODS.match(url.path):
                    selector = query.get("labelSelector", [""])[0]
                    key, _, value = selector.partition("=")
                    if fake.pod_polls_until_gone > 0:
                        fake.pod_polls_until_gone -= 1
                        if fake.pod_polls_until_gone == 0:  # foreground deletion finished
                            for name in [n for n, labels in fake.pods.items() if labels.get("doomed")]:
                                del fake.pods[name]
                    names = [name for name, labels in fake.pods.items() if labels.get(key) == value]
                    return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                            "items": [{"metadata": {"name": n}} for n in names]})
                pod_match = POD.match(url.path)
                if pod_match and pod_match.group("name") in fake.pods:
                    name = pod_match.group("name")
                    return self._send(200, {"kind": "Pod", "apiVersion": "v1",
                                            "metadata": {"name": name, "labels": fake.pods[name]},
                                            "spec": {"nodeName": fake.pod_nodes.get(name),
                                                     "containers": [{"name": "c", "resources": {"limits": (
                                                         {"nvidia.com/gpu": str(fake.pod_gpus[name])}
                                                         if name in fake.pod_gpus else {})}}]}})
                node_match = NODE.match(url.path)
                if node_match and node_match.group("name") in fake.node_labels:
                    name = node_match.group("name")
                    return self._send(200, {"kind": "Node", "apiVersion": "v1",
                                            "metadata": {"name": name, "labels": fake.node_labels[name]}})
                if EVENTS.match(url.path):
                    items = [{"metadata": {"name": "e%d" % i}, "type": e["type"], "reason": e["reason"],
                              "message": e["message"], "involvedObject": {"kind": e["kind"], "name": e["name"]}}
                             for i, e in enumerate(fake.events)]
                    return self._send(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})
                self._status(404, "NotFound")

            def do_DELETE(self):
                url = urlparse(self.path)
                fake.requests.append(("DELETE", url.path))
                match = RAYJOB.match(url.path)
                body = self._body()
                fake.last_delete_body = body
                key = (match.group("ns"), match.group("name")) if match else None
                if key not in fake.rayjobs:
                    return self._status(404, "NotFound")
                cluster = (fake.rayjobs.pop(key).get("status") or {}).get("rayClusterName")
                for name in [n for n, labels in fake.pods.items() if labels.get("attune.dev/run") == key[1]]:
                    del fake.pods[name]
                for labels in fake.pods.values():  # the cluster's pods go a few polls later
                    if cluster and labels.get("ray.io/cluster") == cluster:
                        labels["doomed"] = True
                        fake.pod_polls_until_gone = max(fake.pod_polls_until_gone, 3)
                self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def run_command(self, pod: str, command: list) -> tuple:
        """(stdout, stderr or None when it succeeded) of an exec: ``cat PATH``, ``stat -c %Y PATH``,
        ``date +%s``, or ``sh -c`` with those joined by ``&&`` (it stops at the first that fails)."""
        if command[:2] == ["sh", "-c"]:
            parts = [shlex.split(part) for part in command[2].split("&&")]
        else:
            parts = [command]
        out = b""
        for argv in parts:
            if argv[:1] == ["cat"] and (pod, argv[-1]) in self.files:
                out += self.files[(pod, argv[-1])]
            elif argv[:3] == ["stat", "-c", "%Y"] and (pod, argv[-1]) in self.mtimes:
                out += b"%d\n" % self.mtimes[(pod, argv[-1])]
            elif argv == ["date", "+%s"]:
                out += b"%d\n" % (time.time() if self.clock is None else self.clock)
            elif argv[:1] in (["cat"], ["stat"]):
                what = "%s: cannot stat '%s'" % (argv[0], argv[-1]) if argv[0] == "stat" else "cat: %s" % argv[-1]
                return out, ("%s: No such file or directory\n" % what).encode()
            else:
                return out, ("sh: %s: not found in the fake\n" % argv[:1]).encode()
        return out, None

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def api_client(self):
        from kubernetes import client
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
