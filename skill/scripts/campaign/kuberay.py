"""The KubeRay backend: RayJobs through the official ``kubernetes`` client (``ray.io/v1``).

Only the campaign's context and namespace are used. Every RayJob is named after its run and
labelled with the campaign's run prefix and the run id; ``shutdownAfterJobFinishes``, a TTL and
``activeDeadlineSeconds`` (a hang guard) are set when the recipe leaves them out. Status reads
both ``jobStatus`` and ``jobDeploymentStatus`` (``Complete`` also covers a FAILED or STOPPED job), and
for a failed job its ``message`` (the tail of the driver's log, as Ray reports it), which triage reads.
Teardown deletes with foreground propagation and confirms the RayJob's pods are gone.

Logs are read from the shared volume through the log pod (``AUTOTUNE_LOG_POD``, which mounts it
read-only), by exec through the API: never from anything the agent wrote. A run's log is
``$ATTUNE_SHARED_DIR/<run>/log.txt``, as the run's entrypoint writes it. While a RayJob runs, its
progress (seconds since the log last changed, for hang detection) is read there too, against the
log pod's own clock. Teardown records the RayJob's start and end times (``teardown.json``) before
deleting it, so a run torn down before it ended is still charged its time.

Every API call has ``REQUEST_TIMEOUT_S`` (the client sets none: an API server that takes the connection and never
answers would hold every verb forever), and a call the server never answered is a ``CheckFailed`` naming it. An exec
stream (a log read, ``kube exec``) silent for ``EXEC_SILENCE_S`` is closed and is a ``CheckFailed``, and a log copy
it was writing is removed.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import time
from pathlib import Path
from typing import Optional

import yaml

from attune.core.errors import CheckFailed, InputError
from attune.core import files
from attune.core.files import one_line
from attune.core.recipe import Recipe

from . import backends as backends_mod
from .backends import BACKENDS, REQUEST_TIMEOUT_S, Status

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayjobs"
DEFAULTS = {"shutdownAfterJobFinishes": True, "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 3600}
LABEL_CAMPAIGN, LABEL_RUN = "attune.dev/campaign", "attune.dev/run"
# seconds an exec stream may stay open without sending a byte before it is closed as stuck (a command hung on the
# shared volume)
EXEC_SILENCE_S = 300.0


def _drain(resp, on_stdout, errors: list, what: str) -> None:
    """Read an exec stream to its end: stdout to ``on_stdout``, stderr into ``errors``. A stream open and silent for
    ``EXEC_SILENCE_S`` is closed and is a ``CheckFailed`` naming ``what``."""
    heard = time.monotonic()
    while resp.is_open():
        resp.update(timeout=5)
        if resp.peek_stdout():
            on_stdout(resp.read_stdout())
            heard = time.monotonic()
        if resp.peek_stderr():
            errors.append(resp.read_stderr())
            heard = time.monotonic()
        if time.monotonic() - heard > EXEC_SILENCE_S:
            resp.close()
            raise CheckFailed("%s sent nothing for %.0f s and was stopped: the command is stuck (a shared volume "
                              "that does not answer?). Fix: check the volume from the pod, then retry"
                              % (what, EXEC_SILENCE_S))


class TimedApi(object):
    """A ``kubernetes`` API object whose calls each wait at most ``REQUEST_TIMEOUT_S`` and whose transport failures
    (urllib3's errors: no answer, a dropped connection) are a ``CheckFailed`` naming the server and the call. The
    ``connect_*`` methods are given as they are: exec streams (``kubernetes.stream.stream``) need the bound method,
    and read their own answers with timeouts of their own."""

    def __init__(self, api):
        self._api = api

    def __getattr__(self, name):
        attr = getattr(self._api, name)
        if name.startswith("connect_") or not callable(attr):
            return attr

        def call(*args, **kwargs):
            import urllib3
            kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
            try:
                return attr(*args, **kwargs)
            except urllib3.exceptions.HTTPError as exc:
                raise CheckFailed("the Kubernetes API at %s did not answer %s: %s. Fix: check that the API server "
                                  "answers (`kubectl get --raw /version`)" % (self._api.api_client.configuration.host,
                                                                           name, one_line(exc)[:300]))
        return call


def _epoch(text: Optional[str]) -> Optional[float]:
    if not text:
        return None
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def rayjob_state(status: dict) -> str:
    """pending, running, succeeded or failed from a RayJob's status (both fields read)."""
    job = (status or {}).get("jobStatus") or ""
    deployment = (status or {}).get("jobDeploymentStatus") or ""
    if job == "SUCCEEDED":
        return "succeeded"
    if job in ("FAILED", "STOPPED") or deployment in ("Failed", "ValidationFailed"):
        return "failed"
    if deployment == "Complete":  # Complete without SUCCEEDED is a job that did not succeed
        return "failed"
    if job == "RUNNING":
        return "running"
    return "pending"


def _images(spec: dict) -> list:
    """``[(where, image)]`` of every container and init container in the RayJob's pod templates."""
    cluster = spec.get("rayClusterSpec") or {}
    groups = [("head", cluster.get("headGroupSpec") or {})] + [
        ("group %s" % (group.get("groupName") or index), group)
        for index, group in enumerate(cluster.get("workerGroupSpecs") or [])]
    submitter = (spec.get("submitterPodTemplate") or {})
    if submitter:
        groups.append(("submitter", {"template": submitter}))
    out = []
    for where, group in groups:
        pod = ((group.get("template") or {}).get("spec") or {})
        for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
            out.append(("%s container %s" % (where, container.get("name")), container.get("image")))
    return out


def wrong_images(spec: dict, image: str) -> list:
    """``"<where> <image>"`` for every container of the RayJob's pod templates (``spec``) that does not run
    ``image``, one that names no image included: a RayJob with any is refused at submission, and
    ``attune doctor`` checks the baseline with this before the campaign starts."""
    return ["%s %s" % (where, found or "(no image)") for where, found in _images(spec) if found != image]


TAIL_BYTES = 65536  # the end of a log read to date its last line of the job's own


class KubeRayBackend(object):
    name = "kuberay"

    def __init__(self, settings, api_client=None):
        self.settings = settings
        if api_client is None:
            from kubernetes import config
            path = os.environ.get("KUBECONFIG") or None  # read now: the client reads it only at its import
            try:
                api_client = config.new_client_from_config(config_file=path, context=settings.kube_context)
            except (config.ConfigException, OSError) as exc:
                raise InputError("ATTUNE_KUBE_CONTEXT=%s: cannot load it from the kubeconfig (%s). Fix: check "
                                 "`kubectl config get-contexts` and KUBECONFIG" % (settings.kube_context, exc))
        from kubernetes import client
        self.custom = TimedApi(client.CustomObjectsApi(api_client))
        self.core = TimedApi(client.CoreV1Api(api_client))
        self.namespace = settings.namespace

    def check(self, recipe: Recipe) -> None:
        """What the backend refuses in a recipe (``InputError``), before a launch writes anything."""
        self.body(self.settings.run_prefix + "check", recipe)

    def body(self, run: str, recipe: Recipe) -> dict:
        manifest = yaml.safe_load(recipe.with_name(run).render())
        metadata = manifest.setdefault("metadata", {})
        metadata["namespace"] = self.namespace
        labels = metadata.setdefault("labels", {}) or {}
        labels.update({LABEL_CAMPAIGN: self.settings.run_prefix.rstrip("-"), LABEL_RUN: run})
        metadata["labels"] = labels
        spec = manifest.setdefault("spec", {})
        for key, value in DEFAULTS.items():
            spec.setdefault(key, value)
        wrong = wrong_images(spec, self.settings.image)
        if wrong:
            raise InputError("RayJob %s: container image(s) other than ATTUNE_IMAGE=%s: %s. Fix: the campaign runs "
                             "one image: set it in the baseline recipe's pod templates (or ATTUNE_IMAGE to the image "
                             "the baseline uses, for a new campaign)" % (run, self.settings.image, "; ".join(wrong)))
        return manifest

    def submit(self, run: str, recipe: Recipe, run_dir: Path) -> None:
        from kubernetes.client.rest import ApiException
        body = self.body(run, recipe)
        files.write_text(run_dir / "rayjob.json", json.dumps(body, indent=2))
        try:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)
        except ApiException as exc:
            if exc.status == 409:
                raise InputError("RayJob %s already exists in namespace %s: the run id is taken on the cluster"
                                 % (run, self.namespace))
            raise CheckFailed("creating RayJob %s failed: HTTP %s %s" % (run, exc.status, exc.reason))

    def _get(self, run: str) -> Optional[dict]:
        from kubernetes.client.rest import ApiException
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, run)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def status(self, run_dir: Path) -> Status:
        run = run_dir.name
        if (run_dir / "teardown.json").exists():  # the RayJob is gone: its times as teardown read them
            torn = json.loads((run_dir / "teardown.json").read_text())
            return Status("torn_down", None, torn.get("started"), torn["ended"])
        job = self._get(run)
        if job is None:
            return Status("lost")
        status = job.get("status") or {}
        state = rayjob_state(status)
        code = 0 if state == "succeeded" else (1 if state == "failed" else None)
        quiet = self.seconds_since_log_changed(run) if state == "running" else None
        message = status.get("message") if state == "failed" else None
        return Status(state, code, _epoch(status.get("startTime")), _epoch(status.get("endTime")), quiet,
                      message if isinstance(message, str) else None)

    def seconds_since_log_changed(self, run: str) -> Optional[float]:
        """Seconds since the job last printed a line of its own, or None while there is no log. Read in one
        exec in the log pod: the log's ``stat -c %Y``, the pod's ``date +%s`` and ``date +%z`` and the log's last
        64 KiB, so a clock skew between this host and the cluster cannot fake a hang. Launcher chatter at the
        end of the log (torchrun's rendezvous keep-alive warnings, which a stuck job's launcher prints every
        few seconds) does not count as progress: the job's last line is dated by the first chatter line's own
        stamp (``backends.quiet_from_tail``); without one, the log's age."""
        log = shlex.quote(self.remote_log(run))
        code, out, _err = self._exec(["sh", "-c", "stat -c %%Y %s && date +%%s && date +%%z && tail -c %d %s"
                                      % (log, TAIL_BYTES, log)])
        head = out.encode("utf-8", "replace").split(b"\n", 3)
        if code not in (0, None) or len(head) < 3 or not all(n.strip().isdigit() for n in head[:2]):
            return None  # no log yet (the run has not started writing it)
        mtime, now = float(int(head[0])), float(int(head[1]))
        zone = head[2].strip().decode("ascii", "replace")
        offset = None
        if len(zone) == 5 and zone[0] in "+-" and zone[1:].isdigit():
            offset = (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[3:]) * 60)
        tail = head[3] if len(head) > 3 else b""
        if offset is None:
            return max(0.0, now - mtime)
        return backends_mod.quiet_from_tail(tail, mtime, now, offset, cut=len(tail) >= TAIL_BYTES * 0.9)

    def _exec(self, command: list, pod: Optional[str] = None) -> tuple:
        """Run ``command`` in ``pod`` (default: the log pod): (exit code, stdout, stderr), the output as text."""
        from kubernetes.client.rest import ApiException
        from kubernetes.stream import stream
        pod = pod or self.settings.log_pod
        try:
            resp = stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace,
                          command=command, stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
        except ApiException as exc:
            raise CheckFailed("exec %s in %s %s failed: HTTP %s %s"
                              % (" ".join(command), "log pod" if pod == self.settings.log_pod else "pod", pod,
                                 exc.status, exc.reason))
        out, err = [], []
        _drain(resp, out.append, err, "exec %s in pod %s" % (" ".join(command), pod))
        out.append(resp.read_stdout() or "")
        code = resp.returncode
        resp.close()
        return code, "".join(out), "".join(err)

    def events(self, run: str) -> list:
        """Warning and normal event messages of the RayJob and its pods, oldest first; then, for each container of
        the run's pods that the kernel killed for its memory limit, a line in the same form (Kubernetes records
        that in the pod's status, ``containerStatuses[].state/lastState.terminated.reason: OOMKilled``, not
        always as an event)."""
        items = self.core.list_namespaced_event(self.namespace).items
        out = []
        for event in items:
            name = event.involved_object.name or ""
            if name == run or name.startswith(run + "-"):
                out.append("%s  %s  %s/%s  %s" % (event.type, event.reason, (event.involved_object.kind or "").lower(),
                                                 name, event.message))
        return out + self.oom_killed(run)

    def oom_killed(self, run: str) -> list:
        """``Warning  OOMKilled  pod/NAME  container C terminated: OOMKilled, exit code 137`` for each container of
        the run's pods whose current or last termination was the kernel's OOM kill."""
        cluster = self._cluster(run)
        selectors = ["%s=%s" % (LABEL_RUN, run)] + (["ray.io/cluster=%s" % cluster] if cluster else [])
        out, seen = [], set()
        for selector in selectors:
            for pod in self.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
                if pod.metadata.name in seen:
                    continue
                seen.add(pod.metadata.name)
                for container in ((pod.status.container_statuses if pod.status else None) or []):
                    for state in (container.state, container.last_state):
                        terminated = state.terminated if state is not None else None
                        if terminated is not None and terminated.reason == "OOMKilled":
                            out.append("Warning  OOMKilled  pod/%s  container %s terminated: OOMKilled, exit code %s"
                                       % (pod.metadata.name, container.name, terminated.exit_code))
        return out

    def _cluster(self, run: str) -> Optional[str]:
        job = self._get(run) or {}
        return (job.get("status") or {}).get("rayClusterName")

    def pods(self, run: str, cluster: Optional[str] = None) -> list:
        """The run's pods: labelled with the run, or belonging to its RayCluster."""
        cluster = cluster or self._cluster(run)
        selectors = ["%s=%s" % (LABEL_RUN, run)] + (["ray.io/cluster=%s" % cluster] if cluster else [])
        names = set()
        for selector in selectors:
            names.update(pod.metadata.name for pod in self.core.list_namespaced_pod(
                self.namespace, label_selector=selector).items)
        return sorted(names)

    def teardown(self, run_dir: Path, timeout_s: float = 300.0) -> Status:
        from kubernetes import client
        from kubernetes.client.rest import ApiException
        run = run_dir.name
        if (run_dir / "teardown.json").exists():  # torn down already: what it recorded stands
            return self.status(run_dir)
        job = (self._get(run) or {}).get("status") or {}  # remembered: once the RayJob is gone its status is too
        cluster = job.get("rayClusterName")
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, run,
                body=client.V1DeleteOptions(propagation_policy="Foreground"))
        except ApiException as exc:
            if exc.status != 404:
                raise
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if not self.pods(run, cluster) and self._get(run) is None:
                ended = _epoch(job.get("endTime")) or time.time()
                files.write_text(run_dir / "teardown.json", json.dumps(
                    {"started": _epoch(job.get("startTime")), "ended": ended, "torn_down": time.time()}))
                return self.status(run_dir)
            time.sleep(1.0)
        raise CheckFailed("RayJob %s: pods still present %.0f s after deletion" % (run, timeout_s))

    resources = staticmethod(BACKENDS["local"].resources)

    def cluster_facts(self, run: str) -> dict:
        """The nodes the run's pods were placed on and their GPU model labels."""
        from attune.core.topology import from_cluster
        return from_cluster(self.core, self.namespace, self.pods(run))

    def remote_log(self, run: str) -> str:
        return "%s/%s/log.txt" % (self.settings.shared_dir.rstrip("/"), run)

    def log_path(self, run_dir: Path) -> Path:
        """Copy the run's log out of the log pod into ``runs/<run>/log.txt`` (streamed) and return it."""
        return self.copy_out(self.remote_log(run_dir.name), run_dir / "log.txt")

    def copy_out(self, remote: str, target: Path) -> Path:
        """Stream ``remote`` (a path on the shared volume, as the log pod sees it) into ``target``."""
        from kubernetes.stream import stream
        target = Path(target)
        resp = stream(self.core.connect_get_namespaced_pod_exec, self.settings.log_pod, self.namespace,
                      command=["cat", remote], stderr=True, stdin=False, stdout=True, tty=False,
                      _preload_content=False, binary=True)
        errors = []
        with files.replacing(target) as handle:  # a failed copy leaves the previous one in place
            _drain(resp, handle.write, errors, "reading %s through log pod %s" % (remote, self.settings.log_pod))
            handle.write(resp.read_stdout() or b"")
            code = resp.returncode
            resp.close()
            if code not in (0, None):
                detail = b"".join(errors).decode("utf-8", "replace").strip()
                raise CheckFailed("reading %s through log pod %s failed (exit %s): %s"
                                  % (remote, self.settings.log_pod, code, detail))
        return target


BACKENDS["kuberay"] = KubeRayBackend
