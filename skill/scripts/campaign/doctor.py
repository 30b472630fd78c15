"""``attune doctor``: can this campaign run, checked before it spends anything.

Each check is one function returning a ``Result`` (``ok``, ``failed``, ``skipped`` with its reason, or
``not_run`` when a check it needs did not pass), with a detail and, when it fails, the fix. ``CHECKS``
lists them in order with what each needs, so that nothing is reported as noise behind a failed
prerequisite (no namespace check when the context does not answer):

* ``baseline``: ``ATTUNE_BASELINE_YAML`` is a RayJob recipe this host can read;
* ``image``: every container of the baseline's pod templates (head, worker groups, submitter) names
  ``ATTUNE_IMAGE`` (``kuberay.wrong_images``, the rule a submission enforces);
* ``agent``: ``ATTUNE_AGENT=claude`` needs ``claude`` (or ``$ATTUNE_CLAUDE_BIN``) at
  ``ATTUNE_CLAUDE_VERSION`` when that is set; the planner needs nothing outside this installation;
* ``sandbox``: for ``ATTUNE_AGENT=claude``, Claude Code's Bash sandbox can start here (the campaign's
  settings require it): on Linux bubblewrap and socat on PATH and a trial ``bwrap`` with its own network
  and process namespaces succeeding (user namespaces allowed); on macOS Seatbelt's ``sandbox-exec``;
* ``confine``: for ``ATTUNE_BACKEND=local`` with ``ATTUNE_LOCAL_CONFINE=on``, a run's own bubblewrap sandbox can
  start here (``confinement.run_sandbox_unavailable``);
* ``context``: ``ATTUNE_KUBE_CONTEXT`` is in the kubeconfig and its server answers;
* ``namespace``: ``ATTUNE_NAMESPACE`` exists there and is reachable;
* ``crd``: the API serves ``rayjobs`` in ``ray.io/v1`` (API discovery: no cluster-wide read of the
  CRD objects, which namespace-scoped credentials lack);
* ``access``: SelfSubjectAccessReviews for what the campaign does: create, get and delete RayJobs,
  get and list pods, exec into the log pod, list events;
* ``scope``: what the credentials may do in the namespace (SelfSubjectRulesReview), and a ``warning``
  (which passes) when they reach beyond it: pods, RayJobs or exec in every namespace, namespaces, or the
  namespace's secrets (SelfSubjectAccessReviews), or a rule granting every verb or resource;
* ``log_pod``: ``AUTOTUNE_LOG_POD`` is Running, has one container (the exec names none) and mounts
  ``ATTUNE_SHARED_DIR`` (or a folder above it);
* ``dry_run``: the baseline RayJob, as a launch would submit it, passes a server-side dry run;
* ``ray``: for ``ATTUNE_BACKEND=ray``, the job server at ``ATTUNE_RAY_ADDRESS`` answers, runs this installation's
  Ray version, and has the GPUs the baseline asks for free;
* ``rows``: ``ATTUNE_ROWS_PATH`` hashes to ``ATTUNE_ROWS_SHA256`` (``data.preship.check_rows``).

On the local backend ``image`` and the cluster checks are skipped. The cluster checks are the slow
ones: the launcher keeps a passing result in ``.attune/cache/doctor.json`` with its session id and a
fingerprint of the settings, the baseline and ``KUBECONFIG`` (``fingerprint``), and reuses them for a
later launch of the same session (``cached``, ``remember``); the others always run. The cache is not
an integrity record: the guard keeps the agent out of ``.attune/``, and a forged cache would only
skip checks, never change a number.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional

from attune.core import confinement, files
from attune.core.errors import AttuneError

OK, FAILED, SKIPPED, NOT_RUN = "ok", "failed", "skipped", "not_run"
WARNING = "warning"  # passes, and says what the user should know (credentials that reach beyond the namespace)
CACHE = ".attune/cache/doctor.json"
SCHEMA_VERSION = 1
TIMEOUT_S = 10  # per API call: a cluster that does not answer in that time fails the check
VERSION_TIMEOUT_S = 30  # `claude --version`
DOCTOR_RUN = "doctor"  # the dry-run RayJob is named <prefix>doctor (never stored)
# What the campaign does in its namespace: (verb, API group, resource, subresource, named the log pod).
# Exec through the API is a websocket GET: RBAC asks for `get` on pods/exec, and newer API servers ask for
# `create` as well (as kubectl's exec always did), so both are needed.
ACCESS = (("create", "ray.io", "rayjobs", "", False), ("get", "ray.io", "rayjobs", "", False),
          ("delete", "ray.io", "rayjobs", "", False), ("get", "", "pods", "", False), ("list", "", "pods", "", False),
          ("create", "", "pods", "exec", True), ("get", "", "pods", "exec", True), ("list", "", "events", "", False))


@dataclasses.dataclass(frozen=True)
class Result:
    name: str
    status: str  # ok, warning, failed, skipped, not_run
    detail: str
    fix: str = ""
    facts: dict = dataclasses.field(default_factory=dict)  # what the check found, as fields (a version, a digest)
    cached: bool = False  # reused from this session's passing result

    def line(self) -> str:
        text = "%s: %s: %s" % (self.name, self.status, self.detail)
        if self.fix:
            text += "%s Fix: %s" % ("" if text.endswith(".") else ".", self.fix)
        return text + (" (cached for this session)" if self.cached else "")

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Report:
    backend: str
    results: tuple

    @property
    def ok(self) -> bool:
        return all(result.status in (OK, SKIPPED, WARNING) for result in self.results)

    @property
    def failed(self) -> list:
        return [result.name for result in self.results if result.status == FAILED]

    def result(self, name: str) -> Result:
        return next(result for result in self.results if result.name == name)

    def lines(self) -> list:
        return [result.line() for result in self.results] + ["ok: %s" % ("yes" if self.ok else "no")]

    def as_dict(self) -> dict:
        return {"ok": self.ok, "backend": self.backend, "failed": self.failed,
                "checks": [result.as_dict() for result in self.results]}


class _Probe(object):
    """What the checks share while they run: the settings, and what earlier checks found."""

    def __init__(self, settings, env: Mapping[str, str], agent_command: Optional[str]):
        self.settings, self.env, self.agent_command = settings, env, agent_command
        self.recipe = None  # the baseline as a launch submits it
        self.api = None  # the kubernetes ApiClient of the campaign's context
        self.backend = None  # the KubeRay backend on that client


def _ok(name, detail, **facts):
    return Result(name, OK, detail, facts=facts)


def _failed(name, detail, fix):
    return Result(name, FAILED, detail, fix)


def _split(name, exc) -> Result:
    """A failed result from an error whose message reads '<detail>. Fix: <fix>'."""
    text = " ".join(str(exc).split())
    detail, _, fix = text.partition(" Fix: ")
    return _failed(name, detail.rstrip("."), fix or "see the detail")


def _api_error(exc) -> str:
    """One line for an exception of the kubernetes client: the HTTP status and the server's message."""
    from kubernetes.client.rest import ApiException
    if isinstance(exc, ApiException):
        message = ""
        try:
            message = json.loads(exc.body or "{}").get("message") or ""
        except (ValueError, AttributeError):
            pass
        return "HTTP %s %s%s" % (exc.status, exc.reason, ": %s" % message if message else "")
    return "%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[:300])


def _status_of(exc) -> Optional[int]:
    return getattr(exc, "status", None)


# ---------------------------------------------------------------------------------------- checks
def check_baseline(p: _Probe) -> Result:
    from attune.core.workload import enforce

    from .candidates import load_baseline
    path = Path(p.settings.baseline_yaml)
    if not path.is_file():
        return _failed("baseline", "ATTUNE_BASELINE_YAML=%s: no such file here" % path,
                       "point it at the baseline RayJob YAML")
    try:
        p.recipe = enforce(load_baseline(p.settings))
    except AttuneError as exc:
        return _split("baseline", exc)
    return _ok("baseline", "%s is a RayJob running %s on %d GPU(s)" % (path, p.recipe.command.program,
                                                                      p.recipe.gpus()))


def check_image(p: _Probe) -> Result:
    import yaml

    from .kuberay import _images, wrong_images
    if p.settings.backend != "kuberay":
        return Result("image", SKIPPED, "ATTUNE_BACKEND=%s runs no container image" % p.settings.backend)
    spec = (yaml.safe_load(p.recipe.render()) or {}).get("spec") or {}
    found = _images(spec)
    if not found:
        return _failed("image", "the baseline's pod templates name no container",
                       "give the baseline's head and worker groups their containers, with image %s" % p.settings.image)
    wrong = wrong_images(spec, p.settings.image)
    if wrong:
        return _failed("image", "the baseline runs image(s) other than ATTUNE_IMAGE=%s: %s"
                       % (p.settings.image, "; ".join(wrong)),
                       "name ATTUNE_IMAGE in every container of the baseline's pod templates (or, for a new "
                       "campaign, set ATTUNE_IMAGE to the image the baseline uses)")
    return _ok("image", "all %d container(s) of the baseline run ATTUNE_IMAGE=%s" % (len(found), p.settings.image))


def check_agent(p: _Probe) -> Result:
    if p.agent_command:
        return Result("agent", SKIPPED, "the agent is the launcher's --agent-command, not checked")
    if p.settings.agent == "planner":
        return _ok("agent", "ATTUNE_AGENT=planner runs with this Python (%s); it needs nothing else" % sys.executable)
    from attune.core.settings import TESTED_CLAUDE_VERSION
    pin = p.settings.claude_version
    install = "npm install -g @anthropic-ai/claude-code@%s" % (pin if pin.count(".") == 2 else TESTED_CLAUDE_VERSION)
    given = p.env.get("ATTUNE_CLAUDE_BIN")
    binary = given or shutil.which("claude", path=p.env.get("PATH"))
    if not binary:
        return _failed("agent", "ATTUNE_AGENT=claude: claude is not on PATH and ATTUNE_CLAUDE_BIN is not set",
                       "install Claude Code (%s) or set ATTUNE_CLAUDE_BIN to its binary" % install)
    if not os.access(binary, os.X_OK) or not os.path.isfile(binary):
        return _failed("agent", "ATTUNE_CLAUDE_BIN=%s: not an executable file" % binary,
                       "point ATTUNE_CLAUDE_BIN at the claude binary, or unset it to use the one on PATH")
    try:
        proc = subprocess.run([binary, "--version"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=VERSION_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return _failed("agent", "%s --version did not run: %s" % (binary, exc), "reinstall Claude Code (%s)" % install)
    out = proc.stdout.decode("utf-8", "replace")
    match = re.search(r"\b(\d+(?:\.\d+)+)\b", out)
    if proc.returncode != 0 or not match:
        return _failed("agent", "%s --version exited %d printing %r" % (binary, proc.returncode, out.strip()[:200]),
                       "reinstall Claude Code (%s)" % install)
    version = match.group(1)
    if pin and not (version == pin or version.startswith(pin + ".")):
        return _failed("agent", "%s is Claude Code %s, not ATTUNE_CLAUDE_VERSION=%s" % (binary, version, pin),
                       "install it (%s) and point ATTUNE_CLAUDE_BIN at it, or, for a new campaign, set "
                       "ATTUNE_CLAUDE_VERSION=%s to accept this one" % (install, version))
    return _ok("agent", "%s is Claude Code %s (%s)" % (
        binary, version, "ATTUNE_CLAUDE_VERSION=%s" % pin if pin else
        "ATTUNE_CLAUDE_VERSION is not set; the harness is tested with %s" % TESTED_CLAUDE_VERSION),
        version=version, binary=binary)


def check_sandbox(p: _Probe) -> Result:
    """Claude Code's Bash sandbox can start here (the campaign's settings require it: no session runs without)."""
    if p.agent_command or p.settings.agent != "claude":
        return Result("sandbox", SKIPPED, "the agent is %s, which does not run in Claude Code's sandbox"
                      % ("the launcher's --agent-command" if p.agent_command else "ATTUNE_AGENT=%s" % p.settings.agent))
    missing = confinement.sandbox_unavailable(p.env)
    if missing:
        return _failed("sandbox", "Claude Code's sandbox cannot start here: %s" % "; ".join(what for what, _ in missing),
                       "; ".join(fix for _, fix in missing))
    return _ok("sandbox", "Claude Code's sandbox can start here (%s)" % (
        "Seatbelt" if sys.platform == "darwin" else "bubblewrap and socat, user namespaces allowed"))


def check_confine(p: _Probe) -> Result:
    """``ATTUNE_BACKEND=local`` with ``ATTUNE_LOCAL_CONFINE=on``: a run's own bubblewrap sandbox can start here (the
    local backend refuses every launch otherwise, and never runs a job unconfined)."""
    settings = p.settings
    if settings.backend != "local":
        return Result("confine", SKIPPED, "ATTUNE_BACKEND=%s: its jobs run on the cluster" % settings.backend)
    if getattr(settings, "local_confine", "on") == "off":
        return Result("confine", SKIPPED, "ATTUNE_LOCAL_CONFINE=off: local runs run unconfined, on purpose")
    from . import localrun
    problem = confinement.run_sandbox_unavailable(shutil.which("bwrap", path=p.env.get("PATH")), localrun.sandbox_argv)
    if problem is not None:
        return _failed("confine", "a local run's sandbox cannot start here: %s" % problem[0],
                       "%s; or set ATTUNE_LOCAL_CONFINE=off in a new campaign's config.env to run local jobs "
                       "unconfined on purpose" % problem[1])
    return _ok("confine", "a local run's bubblewrap sandbox starts here (each run writes only its own folders and "
                          "reaches no network beyond its own loopback)")


def check_context(p: _Probe) -> Result:
    from kubernetes import client, config
    settings = p.settings
    path = p.env.get("KUBECONFIG") or None  # read now: the client reads it only at its import
    where = "KUBECONFIG=%s" % path if path else "the default kubeconfig (~/.kube/config)"
    try:
        contexts, _active = config.list_kube_config_contexts(config_file=path)
    except (config.ConfigException, OSError) as exc:
        return _failed("context", "cannot read %s: %s" % (where, " ".join(str(exc).split())[:300]),
                       "point KUBECONFIG at the kubeconfig that has context %s" % settings.kube_context)
    names = sorted(context["name"] for context in contexts or [])
    if settings.kube_context not in names:
        return _failed("context", "ATTUNE_KUBE_CONTEXT=%s is not a context of %s (it has: %s)"
                       % (settings.kube_context, where, ", ".join(names) or "none"),
                       "set ATTUNE_KUBE_CONTEXT to one `kubectl config get-contexts -o name` lists, or point "
                       "KUBECONFIG at the file that has it")
    configuration = client.Configuration()
    configuration.retries = 1  # a cluster that does not answer fails here, not after urllib3's retries
    try:
        p.api = config.new_client_from_config(config_file=path, context=settings.kube_context,
                                              client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        return _failed("context", "context %s cannot be loaded: %s" % (settings.kube_context, exc),
                       "check it with `kubectl --context %s version`" % settings.kube_context)
    server = p.api.configuration.host
    try:
        version = client.VersionApi(p.api).get_code(_request_timeout=TIMEOUT_S)
    except Exception as exc:  # the client raises urllib3's errors as they are
        return _failed("context", "context %s (server %s) does not answer: %s" % (settings.kube_context, server,
                                                                               _api_error(exc)),
                       "check that the cluster is up and reachable from here and that the credentials are valid "
                       "(`kubectl --context %s version`)" % settings.kube_context)
    from .kuberay import KubeRayBackend
    p.backend = KubeRayBackend(settings, api_client=p.api)
    return _ok("context", "context %s answers (server %s, Kubernetes %s)" % (settings.kube_context, server,
                                                                            version.git_version),
               server=server, kubernetes=version.git_version)


def check_namespace(p: _Probe) -> Result:
    from kubernetes import client
    namespace, context = p.settings.namespace, p.settings.kube_context
    core = client.CoreV1Api(p.api)
    try:
        found = core.read_namespace(namespace, _request_timeout=TIMEOUT_S)
        return _ok("namespace", "namespace %s is %s" % (namespace, (found.status and found.status.phase) or "there"))
    except Exception as exc:
        status, first = _status_of(exc), _api_error(exc)
    if status == 404:
        return _failed("namespace", "namespace %s does not exist in context %s" % (namespace, context),
                       "create it, or set ATTUNE_NAMESPACE to one `kubectl --context %s get ns` lists" % context)
    if status == 403:  # namespace-scoped credentials may not read the namespace object: try what runs need
        try:
            core.list_namespaced_pod(namespace, limit=1, _request_timeout=TIMEOUT_S)
            return _ok("namespace", "namespace %s answers (its object is not readable, HTTP 403; its pods are "
                                    "listable)" % namespace)
        except Exception as exc:
            first = "%s; listing its pods: %s" % (first, _api_error(exc))
    return _failed("namespace", "namespace %s is not reachable in context %s: %s" % (namespace, context, first),
                   "use credentials with access to namespace %s (a RoleBinding there), or set ATTUNE_NAMESPACE to the "
                   "campaign's namespace" % namespace)


def check_crd(p: _Probe) -> Result:
    from kubernetes import client

    from .kuberay import GROUP, PLURAL, VERSION
    fix = ("install the KubeRay operator with its CRDs (ray.io/v1 RayJob; e.g. `helm install kuberay-operator "
           "kuberay/kuberay-operator`), or use the context of a cluster that has it")
    try:
        found = client.CustomObjectsApi(p.api).get_api_resources(GROUP, VERSION, _request_timeout=TIMEOUT_S)
    except Exception as exc:
        if _status_of(exc) == 404:
            return _failed("crd", "the API serves no %s/%s: the RayJob CRD is not installed" % (GROUP, VERSION), fix)
        return _failed("crd", "API discovery of %s/%s failed: %s" % (GROUP, VERSION, _api_error(exc)), fix)
    names = sorted(resource.name for resource in found.resources or [])
    if PLURAL not in names:
        return _failed("crd", "%s/%s serves no %s (it serves: %s)" % (GROUP, VERSION, PLURAL, ", ".join(names) or
                                                                       "nothing"), fix)
    return _ok("crd", "%s/%s serves %s" % (GROUP, VERSION, PLURAL))


def check_access(p: _Probe) -> Result:
    from kubernetes import client
    settings = p.settings
    api = client.AuthorizationV1Api(p.api)
    denied = []
    for verb, group, resource, sub, named in ACCESS:
        body = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=settings.namespace, verb=verb, group=group, resource=resource, subresource=sub or None,
                name=settings.log_pod if named else None)))
        try:
            review = api.create_self_subject_access_review(body, _request_timeout=TIMEOUT_S)
        except Exception as exc:
            return _failed("access", "cannot ask what the campaign may do (SelfSubjectAccessReview: %s)"
                           % _api_error(exc), "use credentials that may create selfsubjectaccessreviews "
                                              "(every authenticated user may, by default)")
        if not (review.status and review.status.allowed):
            what = "%s %s%s%s" % (verb, resource, "." + group if group else "", "/" + sub if sub else "")
            denied.append(what + (" (%s)" % settings.log_pod if named else ""))
    if denied:
        return _failed("access", "denied in namespace %s: %s" % (settings.namespace, ", ".join(denied)),
                       "grant them to the user of context %s in namespace %s: a Role with rayjobs.ray.io create, get, "
                       "delete; pods get, list; pods/exec create, get; events list; and a RoleBinding"
                       % (settings.kube_context, settings.namespace))
    return _ok("access", "allowed in namespace %s: %d verbs on rayjobs, pods, pods/exec and events"
               % (settings.namespace, len(ACCESS)))


def check_scope(p: _Probe) -> Result:
    """What the campaign's credentials may do (SelfSubjectRulesReview in the namespace), and a warning when they
    reach beyond it (``confinement.credential_scope``)."""
    settings = p.settings
    try:
        scope = confinement.credential_scope(p.api, settings.namespace, TIMEOUT_S)
    except confinement.ReviewError as exc:
        return _failed("scope", "cannot ask what the campaign may do (%s: %s)" % (exc.review, _api_error(exc.cause)),
                       "use credentials that may create %ss (every authenticated user may, by default)"
                       % exc.review.lower())
    if scope["beyond_namespace"] or scope["wildcard_rules"]:
        return Result("scope", WARNING, "the credentials of context %s reach beyond what a campaign needs: %s" % (
            settings.kube_context, "; ".join(scope["beyond_namespace"] + ["a rule granting %s" % w
                                                                         for w in scope["wildcard_rules"]])),
            "run the campaign as a service account bound to a Role in namespace %s only (README: Safety, "
            "\"Credentials for one namespace\")" % settings.namespace, scope)
    return _ok("scope", "the credentials of context %s are held to namespace %s (%d rules there; nothing in other "
               "namespaces, no secrets)" % (settings.kube_context, settings.namespace, scope["rules"]), **scope)


def check_log_pod(p: _Probe) -> Result:
    from kubernetes import client
    settings = p.settings
    pod_name, shared = settings.log_pod, settings.shared_dir.rstrip("/") or "/"
    see = "`kubectl --context %s -n %s describe pod %s`" % (settings.kube_context, settings.namespace, pod_name)
    try:
        pod = client.CoreV1Api(p.api).read_namespaced_pod(pod_name, settings.namespace, _request_timeout=TIMEOUT_S)
    except Exception as exc:
        if _status_of(exc) == 404:
            return _failed("log_pod", "no pod %s in namespace %s" % (pod_name, settings.namespace),
                           "start the log pod (a pod that mounts the shared volume read-only; "
                           "skill/references/measurement.md section 1), or set AUTOTUNE_LOG_POD to its name")
        return _failed("log_pod", "reading pod %s failed: %s" % (pod_name, _api_error(exc)), "see %s" % see)
    phase = (pod.status and pod.status.phase) or "unknown"
    if phase != "Running":
        return _failed("log_pod", "pod %s is %s, not Running" % (pod_name, phase), "make it run (%s)" % see)
    containers = pod.spec.containers or []
    if len(containers) != 1:
        return _failed("log_pod", "pod %s has %d containers (%s); the campaign's exec names none, which the API "
                                  "accepts only for a pod with one" % (pod_name, len(containers),
                                                                       ", ".join(c.name for c in containers)),
                       "give the log pod a single container")
    mounts = [mount.mount_path.rstrip("/") or "/" for mount in containers[0].volume_mounts or []]
    holding = [m for m in mounts if shared == m or shared.startswith(m.rstrip("/") + "/")]
    if not holding:
        return _failed("log_pod", "pod %s mounts nothing at ATTUNE_SHARED_DIR=%s or above it (its mounts: %s)"
                       % (pod_name, settings.shared_dir, ", ".join(mounts) or "none"),
                       "mount the shared volume in the log pod at ATTUNE_SHARED_DIR (or a folder above it), or set "
                       "ATTUNE_SHARED_DIR to where the log pod and the run pods see it")
    return _ok("log_pod", "pod %s is Running and mounts %s, which holds ATTUNE_SHARED_DIR=%s"
               % (pod_name, max(holding, key=len), settings.shared_dir))


def check_dry_run(p: _Probe) -> Result:
    from .kuberay import GROUP, PLURAL, VERSION
    settings = p.settings
    name = settings.run_prefix + DOCTOR_RUN
    try:
        body = p.backend.body(name, p.recipe)
        p.backend.custom.create_namespaced_custom_object(GROUP, VERSION, settings.namespace, PLURAL, body,
                                                         dry_run="All", _request_timeout=TIMEOUT_S)
    except AttuneError as exc:
        return _split("dry_run", exc)
    except Exception as exc:
        if _status_of(exc) == 409:  # the name is taken: that is checked after the object was validated
            return _ok("dry_run", "the baseline RayJob passes a server-side dry run (as %s, a name already taken)"
                       % name)
        return _failed("dry_run", "the API server refuses the baseline RayJob (dry run as %s): %s"
                       % (name, _api_error(exc)),
                       "fix the baseline recipe (ATTUNE_BASELINE_YAML) until `kubectl --context %s -n %s create "
                       "--dry-run=server -f %s` passes" % (settings.kube_context, settings.namespace,
                                                           settings.baseline_yaml))
    return _ok("dry_run", "the baseline RayJob passes a server-side dry run in namespace %s" % settings.namespace)


def check_ray(p: _Probe) -> Result:
    """``ATTUNE_BACKEND=ray``: the job server at ``ATTUNE_RAY_ADDRESS`` answers, its Ray is this installation's
    (a client and cluster of different versions can refuse each other's job requests), and the cluster has the GPUs
    the baseline asks for free."""
    settings = p.settings
    if settings.backend != "ray":
        return Result("ray", SKIPPED, "ATTUNE_BACKEND=%s: no Ray cluster to check" % settings.backend)
    from .raybackend import version_and_gpus
    try:
        facts = version_and_gpus(settings.ray_address)
    except AttuneError as exc:
        return _split("ray", exc)
    try:
        import ray
        local = ray.__version__
    except ImportError:
        return _failed("ray", "the cluster at %s runs Ray %s, and this interpreter has no ray package"
                       % (settings.ray_address, facts["ray_version"]),
                       "pip install 'ray[default]==%s' into the interpreter the campaign runs" % facts["ray_version"])
    if local != facts["ray_version"]:
        return _failed("ray", "the cluster at %s runs Ray %s, this installation %s" % (
            settings.ray_address, facts["ray_version"], local),
            "install the cluster's version here: pip install 'ray[default]==%s'" % facts["ray_version"])
    need = p.recipe.gpus() if p.recipe is not None else 0
    detail = "Ray %s at %s: %g of %g GPU(s) free, %g of %g CPU(s)" % (
        local, settings.ray_address, facts["gpus_free"], facts["gpus"], facts["cpus_free"], facts["cpus"])
    if need > facts["gpus_free"]:
        return _failed("ray", detail + "; the baseline asks for %d" % need,
                       "free GPUs on the cluster (or wait for them) before the campaign starts")
    return _ok("ray", detail, **facts)


def check_rows(p: _Probe) -> Result:
    settings = p.settings
    if not settings.rows_path:
        return Result("rows", SKIPPED, "ATTUNE_ROWS_PATH is not set: the campaign declares no rows")
    try:
        from attune.campaign.rows_check import check_rows as digest_of
        digest = digest_of(settings)
    except AttuneError as exc:
        return _split("rows", exc)
    except ImportError as exc:
        return _failed("rows", "cannot hash the rows here: %s" % exc,
                       "install the data extra (pip install -e '.[data]')")
    return _ok("rows", "ATTUNE_ROWS_PATH=%s hashes to ATTUNE_ROWS_SHA256 (%s...)" % (settings.rows_path, digest[:16]),
               rows_sha256=digest)


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    run: Callable
    needs: tuple = ()
    cluster: bool = False  # kuberay only, and slow: reused from a passing result of the same session


CHECKS = (
    Check("baseline", check_baseline),
    Check("image", check_image, ("baseline",)),
    Check("agent", check_agent),
    Check("sandbox", check_sandbox),
    Check("confine", check_confine),
    Check("context", check_context, cluster=True),
    Check("namespace", check_namespace, ("context",), cluster=True),
    Check("crd", check_crd, ("context",), cluster=True),
    Check("access", check_access, ("namespace",), cluster=True),
    Check("scope", check_scope, ("namespace",), cluster=True),
    Check("log_pod", check_log_pod, ("namespace",), cluster=True),
    Check("dry_run", check_dry_run, ("baseline", "image", "crd", "access"), cluster=True),
    Check("ray", check_ray, ("baseline",)),
    Check("rows", check_rows, ("log_pod",)),  # read through the log pod on KubeRay
)


def run(settings, env: Mapping[str, str] = None, agent_command: str = None, reuse: dict = None) -> Report:
    """Run every check in order; ``reuse`` (from ``cached``) holds passing cluster results to take as they are."""
    env = os.environ if env is None else env
    probe = _Probe(settings, env, agent_command)
    done = {}
    for check in CHECKS:
        if check.cluster and settings.backend != "kuberay":
            result = Result(check.name, SKIPPED, "ATTUNE_BACKEND=%s: no cluster to check" % settings.backend)
        elif check.cluster and reuse and check.name in reuse:
            result = dataclasses.replace(reuse[check.name], cached=True)
        else:
            blocked = [need for need in check.needs if done[need].status in (FAILED, NOT_RUN)]
            if blocked:
                result = Result(check.name, NOT_RUN, "needs %s, which did not pass" % ", ".join(blocked))
            else:
                try:
                    result = check.run(probe)
                except Exception as exc:  # a crashing check fails, and says why
                    result = _failed(check.name, "the check raised %s: %s" % (type(exc).__name__, exc),
                                     "report it with the detail")
        done[check.name] = result
    return Report(settings.backend, tuple(done[check.name] for check in CHECKS))


# ---------------------------------------------------------------------------------------- the session cache
def fingerprint(settings, env: Mapping[str, str] = None) -> str:
    """What the cluster checks' results depend on: the settings, the baseline's bytes and ``KUBECONFIG``."""
    env = os.environ if env is None else env
    digest = hashlib.sha256(settings.as_given().render_env().encode("utf-8"))  # the frozen copies have the same bytes
    try:
        digest.update(hashlib.sha256(Path(settings.baseline_yaml).read_bytes()).digest())
    except OSError:
        digest.update(b"no baseline")
    digest.update(("\0KUBECONFIG=%s" % env.get("KUBECONFIG", "")).encode("utf-8"))
    return digest.hexdigest()


def cached(directory, session: Optional[str], digest: str) -> Optional[dict]:
    """The cluster results a passing doctor recorded for ``session`` with the same fingerprint, by name;
    None when there are none (another session, other settings, no cache, an unreadable one)."""
    if not session:
        return None
    try:
        data = json.loads((Path(directory) / CACHE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION or data.get("session") != session \
            or data.get("fingerprint") != digest:
        return None
    names = {check.name for check in CHECKS if check.cluster}
    try:
        results = {item["name"]: Result(**item) for item in data.get("checks") or [] if item.get("name") in names}
    except TypeError:
        return None
    # all of them or none: a cluster check run anew needs the client the context check makes
    return results if set(results) == names and all(r.status in (OK, WARNING) for r in results.values()) else None


def remember(directory, session: str, digest: str, report: Report) -> Optional[Path]:
    """Record a passing report's cluster results for ``session`` (written atomically); nothing for a failing one."""
    if not report.ok or not session:
        return None
    names = {check.name for check in CHECKS if check.cluster}
    checks = [dataclasses.replace(result, cached=False).as_dict() for result in report.results
              if result.name in names and result.status in (OK, WARNING)]
    path = Path(directory) / CACHE
    checked = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    files.make_folders(path.parent)
    files.write_text(path, json.dumps({"schema_version": SCHEMA_VERSION, "session": session, "fingerprint": digest,
                                       "checked": checked, "checks": checks}, indent=2, sort_keys=True) + "\n")
    return path
