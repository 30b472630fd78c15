"""``attune kube``: read-only inspection of the campaign's own cluster objects, for an agent whose commands
run in a sandbox without network (kubectl and the Kubernetes API are out of its reach).

* ``get RUN``: the run's RayJob status as the cluster reports it;
* ``pods RUN``: the run's pods (labelled with the run, or of its RayCluster) with phase and node;
* ``events RUN``: the events of the RayJob and its pods, and the containers killed for memory;
* ``logs RUN [--pod POD] [--tail N]``: a pod's log (default: the run's head pod, else its first);
* ``exec RUN|--log-pod -- PROGRAM ARGS...``: a read-only program in one of the run's pods or the log pod,
  run without a shell: ``cat``, ``head``, ``tail`` (not following), ``grep``, ``ls``, ``wc``, ``stat``, ``du``,
  ``find`` (no ``-exec``, ``-delete`` or ``-fprint``), ``pip``/``python -m pip`` ``show``, ``list`` or ``freeze``.
  A program that can write (an interpreter, a shell, an editor) is refused: a run's pods write its log, which
  the campaign scores.

Every object is the campaign's: a run of this campaign (``runs/RUN``), in the campaign's context and
namespace, or the log pod. Each ``exec`` is recorded in the ledger (a ``note`` row). On the local backend
there is no cluster: the run is a process on this host and its files can be read directly.
"""

from __future__ import annotations

import os
from typing import Optional

from attune.core.errors import CheckFailed, InputError

READ_ONLY = frozenset(("cat", "head", "tail", "grep", "egrep", "fgrep", "ls", "wc", "stat", "du", "find", "pip",
                       "pip3", "python", "python3"))
FIND_ACTIONS = frozenset(("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"))
PIP_READS = frozenset(("show", "list", "freeze"))
DEFAULT_TAIL = 200


def read_only_problem(argv: list) -> Optional[str]:
    """Why ``argv`` is not a read-only program call (None when it is)."""
    if not argv:
        return "no program given (write it after --)"
    program = os.path.basename(argv[0])
    if program not in READ_ONLY:
        return "%s is not one of the read-only programs (%s)" % (argv[0], ", ".join(sorted(READ_ONLY)))
    args = argv[1:]
    if program == "find":
        actions = [arg for arg in args if arg in FIND_ACTIONS]
        if actions:
            return "find %s can run programs or write files" % " ".join(actions)
    if program == "tail" and any(arg in ("-f", "-F", "--follow") or arg.startswith("--follow=") for arg in args):
        return "tail --follow never ends"
    if program in ("pip", "pip3") and (not args or args[0] not in PIP_READS):
        return "pip only as pip show, pip list or pip freeze"
    if program in ("python", "python3") and (args[:2] != ["-m", "pip"] or len(args) < 3 or args[2] not in PIP_READS):
        return "python only as python -m pip show, list or freeze (an interpreter can write)"
    return None


class Inspector(object):
    """The campaign's view of its own objects on the cluster, through the KubeRay backend's client."""

    def __init__(self, campaign, settings, backend=None):
        if settings.backend != "kuberay":
            raise InputError("ATTUNE_BACKEND=%s: there is no cluster; the run is a process on this host, its log is "
                             "runs/RUN/log.txt, and the host's files can be read directly" % settings.backend)
        if backend is None:
            from .kuberay import KubeRayBackend
            backend = KubeRayBackend(settings)
        self.campaign, self.settings, self.backend = campaign, settings, backend

    def _run(self, run: str) -> str:
        if not run or not (self.campaign.dir / "runs" / run).is_dir():
            raise InputError("%s: not a run of this campaign (no runs/%s). Fix: name a run from `attune status`"
                             % (run, run))
        return run

    def get(self, run: str) -> dict:
        job = self.backend._get(self._run(run))
        if job is None:
            raise CheckFailed("RayJob %s is not on the cluster (namespace %s): torn down, or never created"
                              % (run, self.settings.namespace))
        return {"run": run, "namespace": self.settings.namespace, "status": job.get("status") or {}}

    def pods(self, run: str) -> list:
        out = []
        for name in self.backend.pods(self._run(run)):
            pod = self.backend.core.read_namespaced_pod(name, self.settings.namespace)
            out.append({"pod": name, "phase": pod.status.phase if pod.status else None,
                        "node": pod.spec.node_name if pod.spec else None})
        return out

    def events(self, run: str) -> list:
        return self.backend.events(self._run(run))

    def _pod(self, run: Optional[str], pod: Optional[str], log_pod: bool) -> str:
        if log_pod:
            if not self.settings.log_pod:
                raise InputError("--log-pod: this campaign has no AUTOTUNE_LOG_POD")
            return self.settings.log_pod
        names = self.backend.pods(self._run(run))
        if pod is None:
            if not names:
                raise CheckFailed("run %s has no pods on the cluster now" % run)
            heads = [name for name in names if "-head" in name]
            return (heads or names)[0]
        if pod not in names:
            raise InputError("--pod %s: not a pod of run %s (its pods: %s)" % (pod, run, ", ".join(names) or "none"))
        return pod

    def logs(self, run: str, pod: Optional[str] = None, tail: int = DEFAULT_TAIL) -> dict:
        from kubernetes.client.rest import ApiException
        name = self._pod(run, pod, False)
        try:
            text = self.backend.core.read_namespaced_pod_log(name, self.settings.namespace, tail_lines=tail)
        except ApiException as exc:
            raise CheckFailed("the log of pod %s cannot be read: HTTP %s %s" % (name, exc.status, exc.reason))
        return {"run": run, "pod": name, "tail": tail, "log": text}

    def exec(self, run: Optional[str], argv: list, pod: Optional[str] = None, log_pod: bool = False) -> dict:
        problem = read_only_problem(argv)
        if problem:
            raise InputError("kube exec: %s. Fix: read with cat, head, tail, grep, ls, find or pip show" % problem)
        name = self._pod(run, pod, log_pod)
        code, out, err = self.backend._exec(list(argv), pod=name)
        self.campaign.append("note", text="kube exec in pod %s: %s (exit %s)" % (name, " ".join(argv), code))
        return {"pod": name, "command": list(argv), "exit_code": code, "stdout": out, "stderr": err}
