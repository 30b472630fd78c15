"""What confines a campaign's agent and its runs, as ``attune doctor`` checks it: whether Claude Code's Bash sandbox
and a local run's own sandbox can start on this host, and what the campaign's Kubernetes credentials may do beyond
its namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Mapping

BWRAP_TIMEOUT_S = 30  # the trial bwrap


class ReviewError(Exception):
    """An access or rules review the API would not answer: ``review`` names which, ``cause`` is the error."""

    def __init__(self, review: str, cause: Exception):
        Exception.__init__(self, "%s: %s" % (review, cause))
        self.review, self.cause = review, cause


BWRAP_MISSING = ("bubblewrap (bwrap) is not on PATH",
                 "install it (apt-get install bubblewrap, or dnf install bubblewrap)")
USERNS_FIX = ("allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 "
              "kernel.apparmor_restrict_unprivileged_userns=0), or run where a container does not forbid them")


def trial(argv: list) -> "str | None":
    """Run a trial sandbox (``argv`` ends in its program, ``true``): None when it ran, else why not (one line)."""
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=BWRAP_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if proc.returncode == 0 else (proc.stdout.decode("utf-8", "replace").strip()[:300]
                                              or "exit %d" % proc.returncode)


def sandbox_unavailable(env: Mapping[str, str], platform: str = None) -> list:
    """What stops Claude Code's sandbox from starting here, each ``(what, fix)``; empty when it can start."""
    platform = platform or sys.platform
    path = env.get("PATH")
    if platform == "darwin":
        return [] if shutil.which("sandbox-exec", path=path) else [
            ("sandbox-exec (Seatbelt) is not on PATH", "run on a macOS with /usr/bin/sandbox-exec")]
    if not platform.startswith("linux"):
        return [("Claude Code's sandbox runs on Linux, WSL2 and macOS, not on %s" % platform,
                 "run the campaign on Linux or macOS")]
    missing = []
    bwrap = shutil.which("bwrap", path=path)
    if not bwrap:
        missing.append(BWRAP_MISSING)
    if not shutil.which("socat", path=path):
        missing.append(("socat is not on PATH", "install it (apt-get install socat, or dnf install socat)"))
    if bwrap:
        failure = trial([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                         "--unshare-pid", "true"])
        if failure is not None:
            missing.append(("bwrap cannot make a sandbox here (%s)" % failure, USERNS_FIX))
    return missing


def run_sandbox_unavailable(bwrap, sandbox_argv, platform: str = None):
    """Why a confined local run cannot start here, as ``(what, fix)``, or None when it can: ``bwrap`` (its path; None
    where it is not on PATH) runs ``true`` in the sandbox a run gets (``sandbox_argv(bwrap, writable, tmp, cwd)``,
    ``campaign/localrun.py``), on folders of its own."""
    platform = platform or sys.platform
    if not platform.startswith("linux"):
        return ("a confined local run needs bubblewrap, which runs on Linux, not on %s" % platform,
                "run the campaign's local jobs on a Linux host")
    if not bwrap:
        return BWRAP_MISSING
    top = tempfile.mkdtemp(prefix="attune-confine-")
    try:
        work, tmp = os.path.join(top, "work"), os.path.join(top, "tmp")
        os.mkdir(work)
        os.mkdir(tmp)
        failure = trial(sandbox_argv(bwrap, [work], tmp, work) + ["true"])
    finally:
        shutil.rmtree(top, ignore_errors=True)
    return None if failure is None else ("bwrap cannot make a sandbox here (%s)" % failure, USERNS_FIX)



# what the campaign's credentials should not be able to do: anything outside its namespace (namespace "" asks
# about every namespace), and reading the namespace's secrets
BEYOND = (("list", "", "pods", "", ""), ("create", "ray.io", "rayjobs", "", ""), ("delete", "ray.io", "rayjobs", "", ""),
          ("create", "", "pods", "exec", ""), ("list", "", "namespaces", "", ""), ("get", "", "secrets", "", None))


def _wildcards(rules) -> list:
    """The rules of a SelfSubjectRulesReview that grant every verb or every resource."""
    out = []
    for rule in rules or []:
        verbs, resources = rule.verbs or [], rule.resources or []
        if "*" in verbs or "*" in resources:
            out.append("%s on %s" % (",".join(verbs), ",".join(resources)))
    return out

def credential_scope(api_client, namespace: str, timeout_s: float) -> dict:
    """``rules`` (how many the SelfSubjectRulesReview lists in ``namespace``), ``beyond_namespace`` (what of
    ``BEYOND`` SelfSubjectAccessReviews allow), ``wildcard_rules`` and ``incomplete``; ``ReviewError`` when the
    API does not answer a review."""
    from kubernetes import client
    api = client.AuthorizationV1Api(api_client)
    try:
        review = api.create_self_subject_rules_review(client.V1SelfSubjectRulesReview(
            spec=client.V1SelfSubjectRulesReviewSpec(namespace=namespace)), _request_timeout=timeout_s)
    except Exception as exc:
        raise ReviewError("SelfSubjectRulesReview", exc)
    rules = (review.status.resource_rules if review.status else None) or []
    beyond = []
    for verb, group, resource, sub, where in BEYOND:
        body = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace if where is None else where, verb=verb, group=group, resource=resource,
                subresource=sub or None)))
        try:
            allowed = api.create_self_subject_access_review(body, _request_timeout=timeout_s).status.allowed
        except Exception as exc:
            raise ReviewError("SelfSubjectAccessReview", exc)
        if allowed:
            beyond.append("%s %s%s%s%s" % (verb, resource, "." + group if group else "", "/" + sub if sub else "",
                                           " in namespace %s" % namespace if where is None else " in every namespace"))
    return {"rules": len(rules), "beyond_namespace": beyond, "wildcard_rules": _wildcards(rules),
            "incomplete": bool(review.status and review.status.incomplete)}
