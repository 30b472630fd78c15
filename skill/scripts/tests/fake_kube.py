"""An HTTP-level fake of the Kubernetes API endpoints the KubeRay backend and ``attune doctor`` use, so
the official ``kubernetes`` client runs end to end against it (no cluster, loopback only).

Scriptable: ``forbidden`` paths answer 403 to every method; ``namespaces`` that exist; ``ray_resources``
served by the ``ray.io/v1`` discovery document (empty: the group is not installed, 404); ``denied``
``(verb, resource[/subresource])`` pairs a SelfSubjectAccessReview answers with ``allowed: false``;
``dry_run_rejection`` ``(code, message)`` for a RayJob created with ``dryRun=All`` (which otherwise is
validated and answered without being stored); per pod its ``pod_phase`` (default Running),
``pod_mounts`` (volume mount paths) and ``pod_containers`` (container names, default one).
"""

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
POD_LOG = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")
NODE = re.compile(r"^/api/v1/nodes/(?P<name>[^/]+)$")
EVENTS = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events$")
EXEC = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<pod>[^/]+)/exec$")
NAMESPACE = re.compile(r"^/api/v1/namespaces/(?P<name>[^/]+)$")
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SSRR = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
# what a namespace-scoped Role for a campaign grants (the README's example), as a SelfSubjectRulesReview lists it
CAMPAIGN_RULES = [{"verbs": ["create", "get", "list", "delete"], "apiGroups": ["ray.io"], "resources": ["rayjobs"]},
                  {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log", "events"]},
                  {"verbs": ["create", "get"], "apiGroups": [""], "resources": ["pods/exec"]}]
RAY_DISCOVERY = "/apis/ray.io/v1"
KINDS = {"rayjobs": "RayJob", "rayclusters": "RayCluster", "rayservices": "RayService"}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
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


def write_kubeconfig(path, server: str, namespace: str = "ml-tuning"):
    """A kubeconfig at ``path`` whose one context, ``test``, points at ``server`` (e.g. ``FakeKube().url``)."""
    context = "{cluster: fake, user: u%s}" % (", namespace: %s" % namespace if namespace else "")
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: test\n"
                    "clusters: [{name: fake, cluster: {server: '%s'}}]\n"
                    "users: [{name: u, user: {token: not-a-secret}}]\n"
                    "contexts: [{name: test, context: %s}]\n" % (server, context))
    return path


class FakeKube(object):
    def __init__(self):
        self.rayjobs = {}  # (ns, name) -> object
        self.pods = {}  # name -> labels
        self.events = []  # dicts: type, reason, kind, name, message
        self.requests = []  # (method, path)
        self.create_status = None  # e.g. 409 to script a conflict
        self.pod_polls_until_gone = 0
        self.files = {}  # (pod, path) -> bytes served by `cat` through exec
        self.stuck = set()  # (pod, path) whose `cat` sends the file's bytes and then holds the stream open, silent
        self.released = threading.Event()  # set by close(): stuck streams end
        self.pod_logs = {}  # pod -> its log text (GET .../pods/NAME/log, tailLines honoured)
        self.pod_nodes = {}  # pod name -> node name
        self.pod_gpus = {}  # pod name -> nvidia.com/gpu limit
        self.node_labels = {}  # node name -> labels
        self.execs = []  # (pod, command)
        self.mtimes = {}  # (pod, path) -> modification time served by `stat -c %Y` (the file need not be in files)
        self.clock = None  # the pods' `date +%s`; None: this host's time
        self.zone = "+0000"  # the pods' `date +%z`: their local time's offset from UTC
        self.forbidden = set()  # paths that answer 403 to every method
        self.namespaces = set()  # namespaces that exist (GET /api/v1/namespaces/NAME)
        self.ray_resources = ["rayjobs", "rayclusters", "rayservices"]  # what discovery of ray.io/v1 serves
        self.denied = set()  # (verb, "resource" or "resource/subresource") a SelfSubjectAccessReview denies
        # what a SelfSubjectAccessReview allows outside the campaign's namespace (every namespace: namespace ""),
        # and whether it allows reading secrets: by default the credentials are namespace-scoped and read none
        self.cluster_wide = set()
        self.secrets_readable = False
        self.rules = [dict(rule) for rule in CAMPAIGN_RULES]  # the SelfSubjectRulesReview's resourceRules
        self.rules_reviews = []  # the namespace of each SelfSubjectRulesReview
        self.access_reviews = []  # the resourceAttributes of every SelfSubjectAccessReview asked
        self.dry_run_rejection = None  # (code, message) answered to a dryRun=All RayJob creation
        self.dry_runs = []  # the bodies of dry-run creations (never stored)
        self.pod_phase = {}  # pod name -> status.phase (default Running)
        self.pod_terminated = {}  # pod name -> [(container, reason, exit code)]: containerStatuses[].lastState.terminated
        self.pod_mounts = {}  # pod name -> volume mount paths of its container
        self.pod_containers = {}  # pod name -> container names (default one, "c")
        self.version = {"major": "1", "minor": "31", "gitVersion": "v1.31.0", "gitCommit": "0" * 40,
                        "gitTreeState": "clean", "buildDate": "2024-08-13T07:28:49Z", "goVersion": "go1.22.5",
                        "compiler": "gc", "platform": "linux/amd64"}  # GET /version
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

            def _status(self, code, reason, message=None):
                self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                                  "code": code, "message": message or reason})

            def _forbidden(self, method, path):
                fake.requests.append((method, path))
                if path in fake.forbidden:
                    self._status(403, "Forbidden", "%s %s is forbidden in the fake" % (method, path))
                    return True
                return False

            def _review(self, body):
                attributes = (body.get("spec") or {}).get("resourceAttributes") or {}
                fake.access_reviews.append(attributes)
                resource = attributes.get("resource", "")
                if attributes.get("subresource"):
                    resource += "/" + attributes["subresource"]
                allowed = (attributes.get("verb"), resource) not in fake.denied
                if not attributes.get("namespace"):
                    allowed = (attributes.get("verb"), resource) in fake.cluster_wide
                if resource == "secrets":
                    allowed = allowed and fake.secrets_readable
                body["status"] = {"allowed": allowed, "reason": "" if allowed else "denied by the fake's RBAC"}
                self._send(201, body)

            def _dry_run(self, namespace, body):
                fake.dry_runs.append(body)
                if fake.dry_run_rejection:
                    code, message = fake.dry_run_rejection
                    return self._status(code, "Invalid", message)
                metadata = body.get("metadata") or {}
                problems = []
                if body.get("apiVersion") != "ray.io/v1" or body.get("kind") != "RayJob":
                    problems.append("apiVersion/kind: must be ray.io/v1 RayJob")
                if not DNS_SUBDOMAIN.match(metadata.get("name") or ""):
                    problems.append("metadata.name: Invalid value: %r" % metadata.get("name"))
                if metadata.get("namespace") not in (None, namespace):
                    problems.append("metadata.namespace: does not match the request's namespace")
                if not isinstance(body.get("spec"), dict):
                    problems.append("spec: Required value")
                if problems:
                    return self._status(422, "Invalid", 'RayJob.ray.io "%s" is invalid: %s'
                                        % (metadata.get("name"), "; ".join(problems)))
                self._send(201, body)

            def do_POST(self):
                url = urlparse(self.path)
                body = self._body()
                if self._forbidden("POST", url.path):
                    return
                match = RAYJOB.match(url.path)
                if url.path == SSAR:
                    return self._review(body)
                if url.path == SSRR:
                    fake.rules_reviews.append((body.get("spec") or {}).get("namespace"))
                    body["status"] = {"resourceRules": fake.rules, "nonResourceRules": [], "incomplete": False}
                    return self._send(201, body)
                if not match:
                    return self._status(404, "NotFound")
                key = (match.group("ns"), body["metadata"]["name"])
                if fake.create_status or key in fake.rayjobs:
                    return self._status(fake.create_status or 409, "AlreadyExists")
                if parse_qs(url.query).get("dryRun") == ["All"]:
                    return self._dry_run(match.group("ns"), body)
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
                if command[:1] == ["cat"] and (pod, command[-1]) in fake.stuck:
                    self.wfile.flush()
                    fake.released.wait()
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
                if self._forbidden("GET", url.path):
                    return
                query = parse_qs(url.query)
                exec_match = EXEC.match(url.path)
                if exec_match and self.headers.get("Upgrade", "").lower() == "websocket":
                    return self._exec(exec_match, query)
                match = RAYJOB.match(url.path)
                if match and match.group("name"):
                    job = fake.rayjobs.get((match.group("ns"), match.group("name")))
                    return self._send(200, job) if job else self._status(404, "NotFound")
                if url.path in ("/version", "/version/"):
                    return self._send(200, fake.version)
                if url.path == RAY_DISCOVERY:
                    if not fake.ray_resources:
                        return self._status(404, "NotFound", "the server could not find the requested resource")
                    return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "ray.io/v1",
                                            "resources": [{"name": name, "singularName": name[:-1], "namespaced": True,
                                                           "kind": KINDS.get(name, name), "verbs": [
                                                               "create", "delete", "get", "list", "patch", "watch"]}
                                                          for name in fake.ray_resources]})
                ns_match = NAMESPACE.match(url.path)
                if ns_match:
                    name = ns_match.group("name")
                    if name not in fake.namespaces:
                        return self._status(404, "NotFound", 'namespaces "%s" not found' % name)
                    return self._send(200, {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": name},
                                            "status": {"phase": "Active"}})
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
                                            "items": [{"metadata": {"name": n}, "status": {"containerStatuses": [
                                                {"name": c, "image": "img", "imageID": "img@sha256:0", "ready": False,
                                                 "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                                 "lastState": {"terminated": {"reason": r, "exitCode": e}}}
                                                for c, r, e in fake.pod_terminated.get(n, [])]}} for n in names]})
                log_match = POD_LOG.match(url.path)
                if log_match and log_match.group("name") in fake.pods:
                    lines = fake.pod_logs.get(log_match.group("name"), "").splitlines(True)
                    tail = query.get("tailLines", [""])[0]
                    body = "".join(lines[-int(tail):] if tail.isdigit() else lines).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                pod_match = POD.match(url.path)
                if pod_match and pod_match.group("name") in fake.pods:
                    name = pod_match.group("name")
                    limits = {"nvidia.com/gpu": str(fake.pod_gpus[name])} if name in fake.pod_gpus else {}
                    mounts = [{"name": "v%d" % i, "mountPath": path} for i, path in enumerate(fake.pod_mounts.get(name, []))]
                    containers = [{"name": c, "resources": {"limits": limits}, "volumeMounts": mounts}
                                  for c in fake.pod_containers.get(name, ["c"])]
                    return self._send(200, {"kind": "Pod", "apiVersion": "v1",
                                            "metadata": {"name": name, "labels": fake.pods[name]},
                                            "spec": {"nodeName": fake.pod_nodes.get(name), "containers": containers},
                                            "status": {"phase": fake.pod_phase.get(name, "Running")}})
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
                body = self._body()
                if self._forbidden("DELETE", url.path):
                    return
                match = RAYJOB.match(url.path)
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
        ``date +%s``, ``date +%z``, ``tail -c N PATH``, or ``sh -c`` with those joined by ``&&`` (it stops at the
        first that fails)."""
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
            elif argv == ["date", "+%z"]:
                out += self.zone.encode() + b"\n"
            elif argv[:2] == ["tail", "-c"] and len(argv) == 4 and argv[2].isdigit() and (
                    (pod, argv[-1]) in self.files or (pod, argv[-1]) in self.mtimes):
                out += self.files.get((pod, argv[-1]), b"")[-int(argv[2]):]
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
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
