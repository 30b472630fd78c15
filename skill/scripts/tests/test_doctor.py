"""`attune doctor` through the real CLI, against the HTTP-level fake Kubernetes API and a fake `claude`."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest
from conftest import DATA, REPO
from fake_kube import FakeKube, write_kubeconfig

from attune.campaign import ledger as campaign_mod
from attune import cli
from attune.core import confinement
from attune.campaign import doctor
from attune.core import settings as settings_mod

RECIPE = (DATA / "recipes" / "megatron_rayjob.yaml").read_text()
LOCAL_RECIPE = (DATA / "recipes" / "local_fake_megatron.yaml").read_text()
IMAGE = "registry.example.com/megatron:25.04"
CLUSTER_CHECKS = ["context", "namespace", "crd", "access", "scope", "log_pod", "dry_run"]


def fake_claude(path, version="2.1.332"):
    path.write_text("#!/bin/sh\necho '%s (Claude Code)'\n" % version)
    path.chmod(0o755)
    return path


@pytest.fixture
def kube():
    """The fake API answering everything a campaign in namespace ml-tuning needs."""
    fake = FakeKube()
    fake.namespaces.add("ml-tuning")
    fake.pods["log-reader"] = {}
    fake.pod_mounts["log-reader"] = ["/mnt/shared"]
    yield fake
    fake.close()


@pytest.fixture
def cluster(kube, tmp_path, monkeypatch):
    """Settings of a KubeRay campaign in the environment, its kubeconfig pointing at the fake API."""
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, kube.url)
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(RECIPE)
    env = {"KUBECONFIG": str(kubeconfig), "ATTUNE_BACKEND": "kuberay", "ATTUNE_KUBE_CONTEXT": "test",
           "ATTUNE_NAMESPACE": "ml-tuning", "ATTUNE_IMAGE": IMAGE, "ATTUNE_SHARED_DIR": "/mnt/shared/attune",
           "AUTOTUNE_LOG_POD": "log-reader", "ATTUNE_RUN_PREFIX": "alice-llama8b-",
           "ATTUNE_BASELINE_YAML": str(baseline),
           "AUTOTUNE_GPUH_BUDGET": "100", "ATTUNE_CLAUDE_VERSION": "2.1.332",
           "ATTUNE_CLAUDE_BIN": str(fake_claude(tmp_path / "claude"))}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return baseline


def doctor_cli(capsys, *args):
    """(exit code, the JSON report, stderr) of `attune doctor --json ARGS`."""
    code = cli.main(["doctor", "--json", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else None, err


def statuses(report) -> dict:
    return {check["name"]: check["status"] for check in report["checks"]}


def check(report, name) -> dict:
    return next(item for item in report["checks"] if item["name"] == name)


def test_everything_answering_passes(cluster, kube, capsys):
    code, report, err = doctor_cli(capsys)
    assert code == 0, [c["detail"] for c in report["checks"] if c["status"] == "failed"]
    assert report["ok"] is True and report["failed"] == [] and report["backend"] == "kuberay"
    assert statuses(report) == {"baseline": "ok", "image": "ok", "agent": "ok", "sandbox": "ok", "confine": "skipped",
                                "context": "ok",
                                "namespace": "ok",
                                "crd": "ok", "access": "ok", "scope": "ok", "log_pod": "ok", "dry_run": "ok",
                                "ray": "skipped", "rows": "skipped"}
    assert check(report, "agent")["facts"]["version"] == "2.1.332"
    # the dry run validated the baseline as a launch submits it, and stored nothing
    assert not kube.rayjobs and [body["metadata"]["name"] for body in kube.dry_runs] == ["alice-llama8b-doctor"]
    head = kube.dry_runs[0]["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["template"]["spec"]["containers"][0]["image"] == IMAGE
    asked = {(a["verb"], a["resource"] + ("/" + a["subresource"] if a.get("subresource") else "")): a
             for a in kube.access_reviews if a.get("namespace") == "ml-tuning" and a["resource"] != "secrets"}
    assert {("create", "rayjobs"), ("get", "rayjobs"), ("delete", "rayjobs"), ("create", "pods/exec"),
            ("get", "pods/exec"), ("list", "pods")} <= set(asked)
    assert asked[("create", "pods/exec")]["name"] == "log-reader"
    beyond = [(a["verb"], a["resource"]) for a in kube.access_reviews if a.get("namespace") != "ml-tuning"]
    assert beyond == [("list", "pods"), ("create", "rayjobs"), ("delete", "rayjobs"), ("create", "pods"),
                      ("list", "namespaces")]  # the scope check asks about every namespace, and nothing else does
    assert kube.rules_reviews == ["ml-tuning"] and check(report, "scope")["facts"]["rules"] == 3


def test_credentials_that_reach_beyond_the_namespace_are_a_warning_that_passes(cluster, kube, capsys):
    kube.cluster_wide = {("list", "pods"), ("create", "rayjobs")}
    kube.secrets_readable = True
    kube.rules.append({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
    code, report, _ = doctor_cli(capsys)
    assert code == 0 and report["ok"] is True
    scope = check(report, "scope")
    assert scope["status"] == "warning"
    assert scope["facts"]["beyond_namespace"] == ["list pods in every namespace", "create rayjobs.ray.io in every "
                                                  "namespace", "get secrets in namespace ml-tuning"]
    assert scope["facts"]["wildcard_rules"] == ["* on *"]
    assert "service account bound to a Role in namespace ml-tuning" in scope["fix"]


def test_the_text_form_is_one_line_per_check(cluster, kube, capsys):
    assert cli.main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [c.name for c in doctor.CHECKS] + ["ok"]
    assert lines[-1] == "ok: yes" and lines[5].startswith("context: ok: context test answers")


def test_a_context_that_does_not_exist_fails_and_nothing_behind_it_runs(cluster, kube, capsys, monkeypatch):
    monkeypatch.setenv("ATTUNE_KUBE_CONTEXT", "no-such-context")
    code = cli.main(["doctor"])
    out, err = capsys.readouterr()
    assert code == 1 and "attune doctor: failed: context" in err
    line = next(line for line in out.splitlines() if line.startswith("context:"))
    assert line.startswith("context: failed: ATTUNE_KUBE_CONTEXT=no-such-context is not a context of KUBECONFIG=")
    assert "(it has: test). Fix: set ATTUNE_KUBE_CONTEXT to one `kubectl config get-contexts -o name` lists" in line
    for name in ("namespace", "crd", "access", "log_pod", "dry_run"):
        assert "%s: not_run: needs " % name in out, name
    assert "baseline: ok" in out and "image: ok" in out and "agent: ok" in out
    assert kube.requests == []  # the cluster was never asked


def test_a_context_whose_server_does_not_answer_fails(cluster, kube, capsys):
    kube.close()  # the kubeconfig's server is gone
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["context"]
    assert "does not answer" in check(report, "context")["detail"] and check(report, "namespace")["status"] == "not_run"


@pytest.mark.parametrize("setup, needle", [
    (lambda kube: kube.namespaces.clear(), "namespace ml-tuning does not exist in context test"),
    (lambda kube: kube.forbidden.update({"/api/v1/namespaces/ml-tuning", "/api/v1/namespaces/ml-tuning/pods"}),
     "namespace ml-tuning is not reachable in context test: HTTP 403"),
])
def test_a_namespace_missing_or_forbidden_fails(cluster, kube, capsys, setup, needle):
    setup(kube)
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["namespace"]
    assert needle in check(report, "namespace")["detail"] and check(report, "namespace")["fix"]
    assert {name: statuses(report)[name] for name in ("crd", "access", "log_pod", "dry_run")} == {
        "crd": "ok", "access": "not_run", "log_pod": "not_run", "dry_run": "not_run"}


def test_a_namespace_whose_object_is_not_readable_but_whose_pods_are_passes(cluster, kube, capsys):
    kube.forbidden.add("/api/v1/namespaces/ml-tuning")
    code, report, _ = doctor_cli(capsys)
    assert code == 0 and "its pods are listable" in check(report, "namespace")["detail"]


@pytest.mark.parametrize("served, needle", [([], "the API serves no ray.io/v1: the RayJob CRD is not installed"),
                                            (["rayclusters"], "ray.io/v1 serves no rayjobs (it serves: rayclusters)")])
def test_a_missing_rayjob_crd_fails(cluster, kube, capsys, served, needle):
    kube.ray_resources = served
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["crd"]
    assert check(report, "crd")["detail"] == needle and "KubeRay operator" in check(report, "crd")["fix"]
    assert statuses(report)["dry_run"] == "not_run" and statuses(report)["access"] == "ok"


def test_denied_access_names_each_verb_and_the_fix(cluster, kube, capsys):
    kube.denied = {("delete", "rayjobs"), ("create", "pods/exec")}
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["access"]
    result = check(report, "access")
    assert result["detail"] == "denied in namespace ml-tuning: delete rayjobs.ray.io, create pods/exec (log-reader)"
    assert "a Role with rayjobs.ray.io create, get, delete" in result["fix"]
    assert statuses(report)["dry_run"] == "not_run" and statuses(report)["log_pod"] == "ok"


@pytest.mark.parametrize("setup, needle", [
    (lambda kube: kube.pod_phase.update({"log-reader": "Pending"}), "pod log-reader is Pending, not Running"),
    (lambda kube: kube.pod_mounts.update({"log-reader": ["/data", "/mnt/shared/other"]}),
     "pod log-reader mounts nothing at ATTUNE_SHARED_DIR=/mnt/shared/attune or above it (its mounts: /data, "
     "/mnt/shared/other)"),
    (lambda kube: kube.pods.clear(), "no pod log-reader in namespace ml-tuning"),
    (lambda kube: kube.pod_containers.update({"log-reader": ["reader", "sidecar"]}),
     "pod log-reader has 2 containers (reader, sidecar)"),
])
def test_a_log_pod_that_cannot_read_the_logs_fails(cluster, kube, capsys, setup, needle):
    setup(kube)
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["log_pod"]
    assert check(report, "log_pod")["detail"].startswith(needle) and check(report, "log_pod")["fix"]


@pytest.mark.parametrize("edit, needle", [
    (lambda text: text.replace("- name: ray-head\n              image: %s\n" % IMAGE, "- name: ray-head\n"),
     "head container ray-head (no image)"),
    (lambda text: text.replace("image: %s" % IMAGE, "image: registry.example.com/megatron:nightly"),
     "head container ray-head registry.example.com/megatron:nightly; group gpu-workers container ray-worker "
     "registry.example.com/megatron:nightly"),
])
def test_a_baseline_without_the_campaigns_image_fails(cluster, kube, capsys, edit, needle):
    cluster.write_text(edit(RECIPE))
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["image"]
    assert needle in check(report, "image")["detail"] and "ATTUNE_IMAGE" in check(report, "image")["fix"]
    assert statuses(report)["dry_run"] == "not_run" and not kube.dry_runs


def test_a_baseline_the_api_server_rejects_fails_the_dry_run(cluster, kube, capsys):
    kube.dry_run_rejection = (422, 'RayJob.ray.io "alice-llama8b-doctor" is invalid: spec.rayClusterSpec.'
                                   'workerGroupSpecs[0].replicas: Invalid value: -1')
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["dry_run"]
    result = check(report, "dry_run")
    assert "HTTP 422" in result["detail"] and "replicas: Invalid value: -1" in result["detail"]
    assert "--dry-run=server -f %s" % cluster in result["fix"]
    assert not kube.rayjobs


def test_a_missing_baseline_fails_and_what_reads_it_does_not_run(cluster, kube, capsys):
    cluster.unlink()
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["baseline"]
    assert statuses(report)["image"] == "not_run" and statuses(report)["dry_run"] == "not_run"


def test_claude_missing_fails(cluster, kube, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("ATTUNE_CLAUDE_BIN")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["agent", "sandbox"]  # nothing is on that PATH
    result = check(report, "agent")
    assert result["detail"] == "ATTUNE_AGENT=claude: claude is not on PATH and ATTUNE_CLAUDE_BIN is not set"
    assert "npm install -g @anthropic-ai/claude-code@2.1.332" in result["fix"]


def test_claude_on_path_is_found(cluster, kube, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("ATTUNE_CLAUDE_BIN")
    folder = tmp_path / "bin"
    folder.mkdir()
    fake_claude(folder / "claude")
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % folder)
    code, report, _ = doctor_cli(capsys)
    assert code == 0 and check(report, "agent")["facts"]["binary"] == str(folder / "claude")


@pytest.mark.parametrize("found, pin, ok", [("2.0.14", "2.1.332", False), ("2.1.332", "2.1", True),
                                            ("2.10.1", "2.1", False), ("3.0.0", "", True)])
def test_the_claude_version_is_compared_with_the_pin(cluster, kube, capsys, monkeypatch, tmp_path, found, pin, ok):
    monkeypatch.setenv("ATTUNE_CLAUDE_BIN", str(fake_claude(tmp_path / "claude-x", found)))
    monkeypatch.setenv("ATTUNE_CLAUDE_VERSION", pin)
    code, report, _ = doctor_cli(capsys)
    result = check(report, "agent")
    assert (code == 0) is ok and (result["status"] == "ok") is ok, result
    if not ok:
        assert result["detail"].endswith("is Claude Code %s, not ATTUNE_CLAUDE_VERSION=%s" % (found, pin))
        assert "ATTUNE_CLAUDE_VERSION=%s to accept this one" % found in result["fix"]
    elif not pin:
        assert "the harness is tested with %s" % settings_mod.TESTED_CLAUDE_VERSION in result["detail"]


def test_the_planner_needs_no_cli(cluster, kube, capsys, monkeypatch):
    monkeypatch.setenv("ATTUNE_AGENT", "planner")
    monkeypatch.delenv("ATTUNE_CLAUDE_BIN")
    monkeypatch.setenv("PATH", "/nonexistent")
    code, report, _ = doctor_cli(capsys)
    assert code == 0 and "needs nothing else" in check(report, "agent")["detail"]


def _rows_file(path, first_token=1):
    np = pytest.importorskip("numpy")
    pytest.importorskip("pyarrow")
    from attune.data import rows as rows_mod
    ids = np.arange(first_token, first_token + 16, dtype=np.int32)
    batch = (2, ids, np.ones(16, np.uint8), np.array([0, 2, 4], np.int32), np.array([0, 8, 0, 8], np.int32))
    return rows_mod.write(path, [batch], {"seq_length": 8})


def test_the_rows_are_read_through_the_log_pod_and_hashed(cluster, kube, capsys, monkeypatch, tmp_path):
    sha = _rows_file(tmp_path / "rows.parquet")
    kube.files[("log-reader", "/mnt/shared/attune/rows.parquet")] = (tmp_path / "rows.parquet").read_bytes()
    monkeypatch.setenv("ATTUNE_ROWS_PATH", "/mnt/shared/attune/rows.parquet")
    monkeypatch.setenv("ATTUNE_ROWS_SHA256", sha)
    code, report, _ = doctor_cli(capsys)
    assert code == 0 and check(report, "rows")["facts"] == {"rows_sha256": sha}
    monkeypatch.setenv("ATTUNE_ROWS_SHA256", "0" * 64)
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["rows"]
    assert "hash to %s" % sha in check(report, "rows")["detail"] and "attune rows sha" in check(report, "rows")["fix"]
    kube.pod_phase["log-reader"] = "Failed"
    code, report, _ = doctor_cli(capsys)
    assert report["failed"] == ["log_pod"] and statuses(report)["rows"] == "not_run"


@pytest.fixture
def local(tmp_path, monkeypatch):
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(LOCAL_RECIPE.format(python=sys.executable, script=DATA / "fake_megatron.py"))
    for key, value in {"ATTUNE_BACKEND": "local", "ATTUNE_RUN_PREFIX": "loc-", "ATTUNE_BASELINE_YAML": str(baseline),
                       "AUTOTUNE_BUDGET": "20", "ATTUNE_AGENT": "planner"}.items():
        monkeypatch.setenv(key, value)
    return tmp_path


def test_the_local_backend_checks_what_applies(local, capsys, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(local / "none"))
    code, report, _ = doctor_cli(capsys)
    assert code == 0 and report["backend"] == "local"
    assert statuses(report) == dict({name: "skipped" for name in CLUSTER_CHECKS}, baseline="ok", image="skipped",
                                    agent="ok", sandbox="skipped", confine="ok", ray="skipped", rows="skipped")
    assert check(report, "context")["detail"] == "ATTUNE_BACKEND=local: no cluster to check"


def test_the_local_backend_fails_when_its_runs_cannot_be_confined(local, capsys, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(local / "none"))
    monkeypatch.setenv("PATH", str(local))  # no bwrap here
    code, report, _ = doctor_cli(capsys)
    confine = check(report, "confine")
    assert code == 1 and confine["status"] == "failed" and "bubblewrap (bwrap) is not on PATH" in confine["detail"]
    assert "ATTUNE_LOCAL_CONFINE=off" in confine["fix"]
    monkeypatch.setenv("ATTUNE_LOCAL_CONFINE", "off")
    code, report, _ = doctor_cli(capsys)
    assert check(report, "confine")["status"] == "skipped" and "unconfined" in check(report, "confine")["detail"]


def _tools(folder, bwrap_script):
    folder.mkdir()
    for name, script in (("bwrap", bwrap_script), ("socat", "#!/bin/sh\nexit 0\n")):
        if script:
            (folder / name).write_text(script)
            (folder / name).chmod(0o755)
    return str(folder)


def test_the_sandbox_check_names_what_is_missing_and_how_to_install_it(tmp_path):
    missing = confinement.sandbox_unavailable({"PATH": _tools(tmp_path / "none", None)}, platform="linux")
    assert [what for what, _ in missing] == ["bubblewrap (bwrap) is not on PATH"]
    assert "apt-get install bubblewrap" in missing[0][1]
    refused = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    missing = confinement.sandbox_unavailable({"PATH": _tools(tmp_path / "userns", refused)}, platform="linux")
    assert missing[0][0] == "bwrap cannot make a sandbox here (bwrap: No permissions to create new namespace)"
    assert "unprivileged_userns_clone" in missing[0][1]
    assert confinement.sandbox_unavailable({"PATH": ""}, platform="win32")[0][0].endswith("not on win32")


def test_the_sandbox_check_skips_an_agent_that_is_not_claude(local, capsys, monkeypatch):
    monkeypatch.setenv("ATTUNE_AGENT", "planner")
    code, report, _ = doctor_cli(capsys)
    assert check(report, "sandbox")["status"] == "skipped" and "ATTUNE_AGENT=planner" in check(report, "sandbox")["detail"]


def test_the_local_backend_checks_the_rows_hash(local, capsys, monkeypatch):
    sha = _rows_file(local / "rows.parquet")
    monkeypatch.setenv("ATTUNE_ROWS_PATH", str(local / "rows.parquet"))
    monkeypatch.setenv("ATTUNE_ROWS_SHA256", sha)
    assert doctor_cli(capsys)[0] == 0
    _rows_file(local / "rows.parquet", first_token=5)  # the rows changed under the campaign
    code, report, _ = doctor_cli(capsys)
    assert code == 1 and report["failed"] == ["rows"]


def test_the_json_shape(local, capsys):
    code, report, _ = doctor_cli(capsys)
    assert set(report) == {"ok", "backend", "failed", "checks"}
    assert [item["name"] for item in report["checks"]] == [c.name for c in doctor.CHECKS]
    for item in report["checks"]:
        assert set(item) == {"name", "status", "detail", "fix", "facts", "cached"}
        assert item["status"] in ("ok", "failed", "skipped", "not_run") and item["detail"]


def test_a_campaign_directory_is_checked_with_its_frozen_settings(cluster, kube, capsys, monkeypatch, tmp_path):
    frozen = settings_mod.load(dict(os.environ, ATTUNE_KUBE_CONTEXT="gone"))
    campaign_mod.init(tmp_path / "c", frozen, "alice-llama8b-doc")
    code = cli.main(["doctor", "--campaign", str(tmp_path / "c")])  # the environment's context is ignored
    out = capsys.readouterr().out
    assert code == 1 and "context: failed: ATTUNE_KUBE_CONTEXT=gone is not a context" in out


def test_settings_from_a_config_file_before_init(cluster, kube, capsys, monkeypatch, tmp_path):
    config = tmp_path / "config.env"
    config.write_text("ATTUNE_NAMESPACE=elsewhere\n")
    monkeypatch.delenv("ATTUNE_NAMESPACE")
    code, report, _ = doctor_cli(capsys, "--config", str(config))
    assert code == 1 and report["failed"] == ["namespace"]


@pytest.mark.parametrize("args", [[], ["--config", "/nonexistent/config.env"]])
def test_bad_input_exits_2(tmp_path, capsys, args):
    code = cli.main(["doctor", "--campaign", str(tmp_path / "none"), *args])
    assert code == 2 and "attune doctor: " in capsys.readouterr().err


def test_a_passing_result_is_reused_only_in_its_session_with_the_same_settings(cluster, kube, tmp_path):
    settings = settings_mod.load()
    digest = doctor.fingerprint(settings)
    report = doctor.run(settings)
    assert report.ok and doctor.remember(tmp_path, "s1", digest, report) == tmp_path / doctor.CACHE
    reused = doctor.cached(tmp_path, "s1", digest)
    assert sorted(reused) == sorted(CLUSTER_CHECKS)
    assert doctor.cached(tmp_path, "s2", digest) is None and doctor.cached(tmp_path, None, digest) is None
    kube.requests.clear()
    again = doctor.run(settings, reuse=reused)
    assert again.ok and kube.requests == [] and not kube.dry_runs[1:]  # the cluster was not asked again
    assert [r.name for r in again.results if r.cached] == CLUSTER_CHECKS
    assert all(not r.cached for r in again.results if r.name in ("baseline", "image", "agent", "rows"))
    cluster.write_text(RECIPE.replace("replicas: 2", "replicas: 3", 1))  # another baseline: another fingerprint
    assert doctor.fingerprint(settings) != digest
    failing = doctor.run(settings_mod.load(dict(os.environ, ATTUNE_KUBE_CONTEXT="gone")))
    assert not failing.ok and doctor.remember(tmp_path, "s3", digest, failing) is None
    assert doctor.cached(tmp_path, "s1", digest) is not None  # a failing run leaves the passing record alone
    record = json.loads((tmp_path / doctor.CACHE).read_text())
    record["checks"] = [item for item in record["checks"] if item["name"] != "context"]
    (tmp_path / doctor.CACHE).write_text(json.dumps(record))
    assert doctor.cached(tmp_path, "s1", digest) is None  # all the cluster checks or none
    (tmp_path / doctor.CACHE).write_text("not json")
    assert doctor.cached(tmp_path, "s1", digest) is None


def test_the_tested_claude_version_is_the_one_ci_installs():
    pin = settings_mod.TESTED_CLAUDE_VERSION
    assert "@anthropic-ai/claude-code@%s " % pin in (REPO / ".ci" / "run").read_text()
    e2e = (REPO / "harness" / "tests" / "test_e2e_claude.py").read_text()
    assert re.search(r'^CLAUDE_VERSION = "%s"$' % re.escape(pin), e2e, re.M)
