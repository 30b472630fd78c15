"""The Ray backend: a run is one Ray job submission on a Ray cluster that already runs (self-managed Ray, a
managed Ray service, Ray on a Slurm allocation), through Ray's own ``JobSubmissionClient`` at
``ATTUNE_RAY_ADDRESS`` (the dashboard's job address, ``http://HOST:8265``).

The recipe is the same RayJob YAML the ``kuberay`` and ``local`` backends run: its ``spec.entrypoint`` is the job's
entrypoint, its ``spec.runtimeEnvYAML`` the job's ``runtime_env`` (``env_vars``, ``working_dir``, ...) and its
``spec.entrypointNumCpus`` / ``entrypointNumGpus`` / ``entrypointResources`` what the entrypoint asks of the
cluster (KubeRay's RayJob fields of the same names). The run id is the job's ``submission_id``; Ray refuses a
second job with one that exists, and the backend says so; a submission whose answer was lost (a timeout, a dropped
link) is known by the token its metadata carries (``attune_submission``), and stands. What was submitted is kept in
``runs/<run>/ray.json``. Every request waits at most ``REQUEST_TIMEOUT_S`` (Ray's client sets no limit).

Status reads the job's status, ``driver_exit_code`` and ``message`` (the reason Ray gives for a failure, which
triage reads). Ray's ``start_time`` is when the job was submitted: a job that waited for resources is charged its
wait, and one that never left PENDING nothing. The job's logs are copied into ``runs/<run>/log.txt`` at every look
while it runs (rewritten only when they grew, so the file's age is the job's silence, for hang detection) and once
more at its end. Teardown stops the job (Ray stops a running job in about 2 s), records its start and end times
(``teardown.json``) and deletes the job's record from the cluster. A job still PENDING cannot be stopped by Ray;
it is recorded as torn down, charged nothing, and Ray ends it after its own start timeout
(``RAY_JOB_START_TIMEOUT_SECONDS`` on the head, 15 minutes by default).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Optional

import yaml

from attune.core import files
from attune.core.errors import CheckFailed, InputError
from attune.core.recipe import Recipe

from . import backends as backends_mod
from .backends import BACKENDS, REQUEST_TIMEOUT_S, Status

STATES = {"PENDING": "pending", "RUNNING": "running", "SUCCEEDED": "succeeded", "FAILED": "failed",
          "STOPPED": "failed"}
ENTRYPOINT_FIELDS = (("entrypointNumCpus", "entrypoint_num_cpus"), ("entrypointNumGpus", "entrypoint_num_gpus"),
                     ("entrypointMemory", "entrypoint_memory"), ("entrypointResources", "entrypoint_resources"))
# Ray's words for a job that never got the resources its entrypoint asked for (its driver never started)
NEVER_STARTED = ("JOB_SUPERVISOR_ACTOR_START_TIMEOUT", "JOB_SUPERVISOR_ACTOR_UNSCHEDULABLE")


def client_for(address: str):
    """Ray's job submission client for ``address``; an ``InputError`` naming the setting when Ray is not installed
    or the address does not answer."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise InputError("ATTUNE_BACKEND=ray needs the ray package here. Fix: `pip install 'ray[default]'` into "
                         "the interpreter the campaign runs (the version of the cluster's Ray)")
    for name in ("ray", "ray.dashboard", "ray.dashboard.modules.dashboard_sdk", "ray._private.runtime_env.packaging"):
        logging.getLogger(name).setLevel(logging.WARNING)  # "Uploading package ..." is not the CLI's to print
    class TimedClient(JobSubmissionClient):
        """Ray's client, every request of it (the version check included) with ``REQUEST_TIMEOUT_S``: all of them
        go through ``_do_request``, which passes its keywords on to ``requests.request``."""

        def _do_request(self, *args, **kwargs):
            kwargs.setdefault("timeout", REQUEST_TIMEOUT_S)
            return super(TimedClient, self)._do_request(*args, **kwargs)

    try:
        return TimedClient(address)
    except Exception as exc:  # ConnectionError, ValueError (a malformed address), RuntimeError from HTTP
        raise InputError("ATTUNE_RAY_ADDRESS=%s: no Ray job server answers there (%s). Fix: give the Ray "
                         "dashboard's address, http://HOST:8265, of a cluster that runs" % (address, _one_line(exc)))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _not_found(exc: BaseException) -> bool:
    text = str(exc)
    return "404" in text or "does not exist" in text


def runtime_env(recipe: Recipe) -> dict:
    """The job's ``runtime_env``: the recipe's ``runtimeEnvYAML`` with its ``env_vars`` as the recipe's environment
    (``Recipe.env``: the YAML's, then any ``NAME=value`` before the program)."""
    out = recipe.runtime_env()
    env = recipe.env()
    if env:
        out["env_vars"] = env
    return out


def entrypoint_resources(recipe: Recipe) -> dict:
    """What the entrypoint asks of the cluster, from the RayJob's ``entrypointNumCpus``, ``entrypointNumGpus``,
    ``entrypointMemory`` and ``entrypointResources`` (a JSON object, as KubeRay takes it)."""
    spec = yaml.safe_load(recipe.text).get("spec") or {}
    out = {}
    for field, keyword in ENTRYPOINT_FIELDS:
        value = spec.get(field)
        if value is None:
            continue
        if field == "entrypointResources":
            try:
                value = json.loads(value) if isinstance(value, str) else value
            except ValueError as exc:
                raise InputError("%s: spec.entrypointResources is not a JSON object (%s). Fix: e.g. "
                                 "'{\"custom\": 1}'" % (recipe.source, exc))
            if not isinstance(value, dict):
                raise InputError("%s: spec.entrypointResources is not a JSON object. Fix: e.g. '{\"custom\": 1}'"
                                 % recipe.source)
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise InputError("%s: spec.%s is %r, not a number of at least 0. Fix: write a number there"
                             % (recipe.source, field, value))
        out[keyword] = value
    return out


class RayBackend(object):
    name = "ray"

    def __init__(self, settings, client=None):
        self.settings = settings
        self.address = getattr(settings, "ray_address", "") or ""
        self._client = client

    @property
    def client(self):
        if self._client is None:
            if not self.address:
                raise InputError("ATTUNE_RAY_ADDRESS is not set: ATTUNE_BACKEND=ray needs the Ray job server's "
                                 "address. Fix: set ATTUNE_RAY_ADDRESS=http://HOST:8265")
            self._client = client_for(self.address)
        return self._client

    def submission(self, run: str, recipe: Recipe) -> dict:
        """The keyword arguments of ``submit_job`` for ``run``. The metadata's ``attune_submission`` is new for each
        submission, so a job found under the run's id after a submission failed to answer is known for this one."""
        out = {"entrypoint": recipe.command.text.strip(), "submission_id": run, "runtime_env": runtime_env(recipe),
               "metadata": {"attune_run": run, "attune_campaign": (self.settings.run_prefix or "").rstrip("-"),
                            "attune_submission": uuid.uuid4().hex}}
        out.update(entrypoint_resources(recipe))
        return out

    def check(self, recipe: Recipe) -> None:
        """What the backend refuses in a recipe (``InputError``), before a launch writes anything."""
        self.submission((self.settings.run_prefix or "") + "check", recipe)

    def submit(self, run: str, recipe: Recipe, run_dir: Path) -> None:
        if (run_dir / "ray.json").exists():
            raise InputError("run %s was submitted already (%s exists)" % (run, run_dir / "ray.json"))
        kwargs = self.submission(run, recipe)
        files.write_text(run_dir / "ray.json", json.dumps(dict(kwargs, address=self.address), indent=2))
        try:
            self.client.submit_job(**kwargs)
        except Exception as exc:
            found = self._found(run)
            if found is not None and (found.metadata or {}).get("attune_submission") == \
                    kwargs["metadata"]["attune_submission"]:
                return  # the job server took this submission and its answer was lost (a timeout, a dropped link)
            if found is not None:
                raise InputError("a Ray job with submission id %s exists already on %s: the run id is taken on the "
                                 "cluster. Fix: a new run id (another ATTUNE_RUN_PREFIX), or delete that job there"
                                 % (run, self.address))
            raise CheckFailed("submitting Ray job %s to %s failed: %s" % (run, self.address, _one_line(exc)))

    def _found(self, run: str):
        """The job's record on the cluster; None when there is none or it cannot be read."""
        try:
            return self.client.get_job_info(run)
        except Exception:
            return None

    def _info(self, run: str):
        try:
            return self.client.get_job_info(run)
        except Exception as exc:
            if _not_found(exc):
                return None
            raise CheckFailed("reading Ray job %s at %s failed: %s" % (run, self.address, _one_line(exc)))

    @staticmethod
    def _state(info) -> str:
        status = getattr(info.status, "value", info.status)
        return STATES.get(str(status), "pending")

    @staticmethod
    def _ran(info, run_dir: Path) -> bool:
        """Whether the job's driver started: seen running (``ray_running.json``, written at the first look that
        found it RUNNING), succeeded, or ended with an exit code of its own. A job that ended otherwise (stopped
        while PENDING, its entrypoint never placed, its runtime env never set up) held nothing."""
        status = str(getattr(info.status, "value", info.status))
        if status in ("RUNNING", "SUCCEEDED") or info.driver_exit_code is not None:
            return True
        return (run_dir / "ray_running.json").exists()

    def status(self, run_dir: Path) -> Status:
        run = run_dir.name
        torn = run_dir / "teardown.json"
        if torn.exists():
            data = json.loads(torn.read_text())
            return Status("torn_down", None, data.get("started"), data["ended"])
        info = self._info(run)
        if info is None:
            return Status("lost")
        state = self._state(info)
        if state == "running" and not (run_dir / "ray_running.json").exists():
            files.write_text(run_dir / "ray_running.json", json.dumps({"seen": time.time()}))
        started = info.start_time / 1000.0 if info.start_time and self._ran(info, run_dir) else None
        ended = info.end_time / 1000.0 if info.end_time else None
        if state == "succeeded":
            code = 0
        elif state == "failed":
            code = info.driver_exit_code if info.driver_exit_code is not None else 1
        else:
            code = None
        quiet = None
        if state == "running":
            log = self._copy_logs(run, run_dir)
            if log is not None:
                quiet = backends_mod._seconds_without_progress(run_dir, log, started)
        message = info.message if state == "failed" and isinstance(info.message, str) else None
        return Status(state, code, started, ended, quiet, message)

    def _copy_logs(self, run: str, run_dir: Path) -> Optional[Path]:
        """The job's logs as ``runs/<run>/log.txt``, rewritten only when they changed; None when Ray has none."""
        try:
            text = self.client.get_job_logs(run)
        except Exception as exc:
            if _not_found(exc):
                return None
            raise CheckFailed("reading the logs of Ray job %s at %s failed: %s" % (run, self.address, _one_line(exc)))
        target = run_dir / "log.txt"
        data = text.encode("utf-8")
        if target.exists() and target.stat().st_size == len(data) and target.read_bytes() == data:
            return target
        files.atomic_write(target, data)
        return target

    def log_path(self, run_dir: Path) -> Path:
        """The run's log, copied out of Ray (``runs/<run>/log.txt``); the copy taken before the job's record was
        deleted when it is gone."""
        target = run_dir / "log.txt"
        copied = None if (run_dir / "teardown.json").exists() else self._copy_logs(run_dir.name, run_dir)
        if copied is not None:
            return copied
        if target.exists():
            return target
        raise CheckFailed("Ray job %s has no logs at %s (it never started, or its record was deleted before they "
                          "were copied)" % (run_dir.name, self.address))

    def events(self, run: str) -> list:
        """What Ray says of a job whose entrypoint it could never place (its start timed out, or it is
        unschedulable), as an Unschedulable event (triage's word for it); nothing otherwise."""
        info = self._info(run)
        if info is None or info.driver_exit_code is not None:
            return []
        if str(getattr(info.error_type, "value", info.error_type) or "") in NEVER_STARTED:
            return ["Unschedulable: the Ray job never started: %s" % " ".join(str(info.message or "").split())[:500]]
        return []

    resources = staticmethod(BACKENDS["local"].resources)

    def cluster_facts(self, run: str) -> dict:
        """A Ray job names the node its driver ran on, not the nodes its workers used: nothing to check here."""
        return {}

    def _delete(self, run: str, settle_s: float = 15.0) -> None:
        """Delete a finished job's record on the cluster until it stays gone. Ray's job supervisor writes the
        stopped job's status once more as it exits (``put_status`` reads the record and writes it back), which can
        land after a delete and put the record back; so the record must be absent on two looks a second apart, and
        is deleted again while it is not (for at most ``settle_s``)."""
        deadline, absent = time.time() + settle_s, 0
        while absent < 2 and time.time() < deadline:
            if self._info(run) is None:
                absent += 1
            else:
                absent = 0
                try:
                    self.client.delete_job(run)
                except Exception as exc:
                    if not _not_found(exc):
                        raise CheckFailed("deleting Ray job %s at %s failed: %s" % (run, self.address,
                                                                                   _one_line(exc)))
            if absent < 2:
                time.sleep(1.0)

    def teardown(self, run_dir: Path, grace_s: float = 30.0) -> Status:
        """Stop the job, copy its logs, record its times in ``teardown.json`` and delete its record on the
        cluster."""
        run = run_dir.name
        if (run_dir / "teardown.json").exists():
            return self.status(run_dir)
        info = self._info(run)
        if info is not None and self._state(info) in ("pending", "running"):
            try:
                self.client.stop_job(run)
            except Exception as exc:
                if not _not_found(exc):
                    raise CheckFailed("stopping Ray job %s at %s failed: %s" % (run, self.address, _one_line(exc)))
            deadline = time.time() + grace_s
            while time.time() < deadline:
                info = self._info(run)
                if info is None or self._state(info) not in ("pending", "running") or \
                        not self._ran(info, run_dir):
                    break
                time.sleep(0.5)
        record = {"started": None, "ended": time.time(), "torn_down": time.time(), "state": None}
        if info is not None:
            self._copy_logs(run, run_dir)
            state = self._state(info)
            record.update(state=str(getattr(info.status, "value", info.status)),
                          started=info.start_time / 1000.0 if info.start_time and self._ran(info, run_dir) else None,
                          ended=info.end_time / 1000.0 if info.end_time else time.time())
            if state not in ("pending", "running"):
                self._delete(run)
            else:  # still PENDING: Ray cannot stop it; it ends it after its start timeout
                record["left_pending"] = True
        files.write_text(run_dir / "teardown.json", json.dumps(record))
        return self.status(run_dir)


def version_and_gpus(address: str, timeout_s: float = 10.0) -> dict:
    """``{"ray_version", "gpus", "gpus_free", "cpus", "cpus_free"}`` of the cluster at ``address``, from its
    dashboard (``/api/version``, ``/api/cluster_status``); an ``InputError`` when it does not answer."""
    import urllib.error
    import urllib.request

    def get(path):
        with urllib.request.urlopen(address.rstrip("/") + path, timeout=timeout_s) as resp:
            return json.loads(resp.read().decode("utf-8"))
    try:
        version = get("/api/version")
        nodes = get("/api/v0/nodes?limit=10000")
        status = get("/api/cluster_status")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise InputError("ATTUNE_RAY_ADDRESS=%s: the Ray dashboard does not answer (%s). Fix: give the address of "
                         "a running cluster's dashboard, http://HOST:8265" % (address, _one_line(exc)))
    alive = [node for node in ((((nodes.get("data") or {}).get("result") or {}).get("result")) or [])
             if node.get("state") == "ALIVE"]
    # what is in use comes from the autoscaler's report, which a cluster that just started has not written yet:
    # then nothing is counted in use
    usage = ((((status.get("data") or {}).get("clusterStatus") or {}).get("loadMetricsReport") or {})
             .get("usage") or {})
    out = {"ray_version": version.get("ray_version"), "nodes": len(alive)}
    for key, name in (("GPU", "gpus"), ("CPU", "cpus")):
        total = sum(float((node.get("resources_total") or {}).get(key) or 0.0) for node in alive)
        used = float((usage.get(key) or [0.0, 0.0])[0])
        out[name], out[name + "_free"] = total, max(0.0, total - used)
    return out


BACKENDS["ray"] = RayBackend
