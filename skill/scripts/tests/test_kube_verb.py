"""`attune kube`: read-only inspection of the campaign's own objects through the official kubernetes client
against the HTTP-level fake API: a run's RayJob status, pods, events, a pod's log, and a read-only program
in a run's pod or the log pod; anything outside the campaign, and any program that can write, is refused."""

from __future__ import annotations

import json

import pytest
from test_kuberay import cluster_campaign, kube  # noqa: F401 - the fixtures

from attune import cli
from attune.campaign import runs
from attune.campaign.kube import read_only_problem
from attune.campaign.kuberay import LABEL_RUN


@pytest.fixture
def launched(kube, cluster_campaign, monkeypatch):  # noqa: F811
    campaign, settings = cluster_campaign
    run = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running",
                                                  "rayClusterName": run + "-raycluster"}
    kube.pods[run + "-raycluster-head-abc"] = {LABEL_RUN: run}
    kube.pods[run + "-raycluster-worker-def"] = {LABEL_RUN: run}
    kube.pods["someone-elses-pod"] = {LABEL_RUN: "other"}
    kube.pod_nodes[run + "-raycluster-head-abc"] = "gpu-node-1"
    kube.pod_logs[run + "-raycluster-head-abc"] = "".join("line %d\n" % i for i in range(1, 301))
    kube.events = [{"type": "Warning", "reason": "BackOff", "kind": "Pod", "name": run + "-raycluster-head-abc",
                    "message": "Back-off restarting"}]
    monkeypatch.setenv("ATTUNE_CAMPAIGN_DIR", str(campaign.dir))
    return campaign, run


def kube_cli(capsys, *args):
    code = cli.main(["kube", "--json", *args])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_get_pods_events_and_logs_of_a_run(kube, launched, capsys):  # noqa: F811
    campaign, run = launched
    code, data, _ = kube_cli(capsys, "get", run)
    assert code == 0 and data["status"]["jobStatus"] == "RUNNING"
    code, data, _ = kube_cli(capsys, "pods", run)
    assert code == 0 and [p["pod"] for p in data["pods"]] == [run + "-raycluster-head-abc", run + "-raycluster-worker-def"]
    assert data["pods"][0]["phase"] == "Running" and data["pods"][0]["node"] == "gpu-node-1"
    code, data, _ = kube_cli(capsys, "events", run)
    assert data["events"] == ["Warning  BackOff  pod/%s-raycluster-head-abc  Back-off restarting" % run]
    code, data, _ = kube_cli(capsys, "logs", run, "--tail", "3")
    assert code == 0 and data["pod"] == run + "-raycluster-head-abc" and data["log"] == "line 298\nline 299\nline 300\n"


def test_exec_runs_a_read_only_program_in_the_runs_pod_or_the_log_pod_and_records_it(kube, launched, capsys):  # noqa: F811
    campaign, run = launched
    kube.files[(run + "-raycluster-head-abc", "/opt/megatron/training/arguments.py")] = b"    group.add_argument('--overlap-grad-reduce')\n"
    code, data, _ = kube_cli(capsys, "exec", run, "--", "cat", "/opt/megatron/training/arguments.py")
    assert code == 0 and "--overlap-grad-reduce" in data["stdout"]
    kube.files[("log-reader", "/mnt/shared/x.txt")] = b"shared\n"
    code, data, _ = kube_cli(capsys, "exec", "log-pod", "--", "cat", "/mnt/shared/x.txt")
    assert code == 0 and data["pod"] == "log-reader" and data["stdout"] == "shared\n"
    assert kube.execs[-2:] == [(run + "-raycluster-head-abc", ["cat", "/opt/megatron/training/arguments.py"]),
                               ("log-reader", ["cat", "/mnt/shared/x.txt"])]
    notes = [row["text"] for row in campaign.ledger.rows() if row["kind"] == "note"]
    assert notes[-1] == "kube exec in pod log-reader: cat /mnt/shared/x.txt (exit 0)"


def test_objects_outside_the_campaign_and_writing_programs_are_refused(kube, launched, capsys):  # noqa: F811
    campaign, run = launched
    before = list(kube.execs)
    for args, message in ((["get", "other-run"], "not a run of this campaign"),
                          (["logs", run, "--pod", "someone-elses-pod"], "not a pod of run"),
                          (["exec", run, "--pod", "someone-elses-pod", "--", "cat", "/etc/hosts"], "not a pod of run"),
                          (["exec", run, "--", "sh", "-c", "echo x >> /mnt/shared/log.txt"], "not one of the read-only"),
                          (["exec", run, "--", "python3", "-c", "open('/mnt/shared/log.txt', 'a')"], "an interpreter"),
                          (["exec", run, "--", "find", "/mnt", "-delete"], "find -delete"),
                          (["exec", run, "--", "tail", "-f", "/mnt/shared/log.txt"], "never ends"),
                          (["pods", run, "--", "cat", "x"], "takes no program")):
        code, _, err = kube_cli(capsys, *args)
        assert code == 2 and message in err, (args, err)
    assert kube.execs == before


def test_the_read_only_rule():
    assert read_only_problem(["grep", "-rn", "overlap_grad_reduce", "/opt/megatron"]) is None
    assert read_only_problem(["python3", "-m", "pip", "show", "-f", "megatron-core"]) is None
    assert read_only_problem(["pip", "install", "x"]) == "pip only as pip show, pip list or pip freeze"
    assert "not one of" in read_only_problem(["vim", "-es", "x"])
    assert read_only_problem([]) == "no program given (write it after --)"


def test_the_local_backend_has_no_cluster_to_inspect(tmp_path, capsys, monkeypatch):
    from factory import settings as make_settings
    from attune.campaign import ledger as campaign_mod
    campaign = campaign_mod.init(tmp_path / "c", make_settings(ATTUNE_BACKEND="local"), "local-kube")
    monkeypatch.setenv("ATTUNE_CAMPAIGN_DIR", str(campaign.dir))
    code, _, err = kube_cli(capsys, "pods", "r001")
    assert code == 2 and "ATTUNE_BACKEND=local: there is no cluster" in err
