"""The KubeRay backend through the official kubernetes client against an HTTP-level fake API."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import DATA
from fake_kube import FakeKube, write_kubeconfig
from factory import settings as make_settings

from attune.core.errors import CheckFailed, InputError
from attune.campaign.kuberay import KubeRayBackend, rayjob_state
from attune.core.recipe import Recipe

TEXT = (DATA / "recipes" / "megatron_rayjob.yaml").read_text()


@pytest.fixture
def kube():
    fake = FakeKube()
    yield fake
    fake.close()


@pytest.fixture
def backend(kube):
    settings = make_settings(ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT="test", ATTUNE_NAMESPACE="ml-tuning",
                             ATTUNE_IMAGE="registry.example.com/megatron:25.04", ATTUNE_SHARED_DIR="/mnt/shared", AUTOTUNE_LOG_POD="log-reader",
                             ATTUNE_RUN_PREFIX="alice-llama8b-")
    return KubeRayBackend(settings, api_client=kube.api_client())


def test_submit_names_labels_and_guards_the_rayjob(kube, backend, tmp_path):
    run_dir = tmp_path / "alice-llama8b-r002"
    run_dir.mkdir()
    backend.submit("alice-llama8b-r002", Recipe(TEXT), run_dir)
    job = kube.rayjobs[("ml-tuning", "alice-llama8b-r002")]
    assert job["metadata"]["labels"]["attune.dev/run"] == "alice-llama8b-r002"
    assert job["metadata"]["labels"]["attune.dev/campaign"] == "alice-llama8b"
    assert job["metadata"]["labels"]["attune/campaign"] == "alice-llama8b"  # the recipe's own label is kept
    assert job["spec"]["shutdownAfterJobFinishes"] is True and job["spec"]["activeDeadlineSeconds"] == 3600
    assert ("POST", "/apis/ray.io/v1/namespaces/ml-tuning/rayjobs") in kube.requests
    assert json.loads((run_dir / "rayjob.json").read_text())["metadata"]["name"] == "alice-llama8b-r002"
    with pytest.raises(InputError, match="already exists"):
        backend.submit("alice-llama8b-r002", Recipe(TEXT), run_dir)


@pytest.mark.parametrize("status, state", [
    ({"jobStatus": "", "jobDeploymentStatus": "Initializing"}, "pending"),
    ({"jobStatus": "PENDING", "jobDeploymentStatus": "Running"}, "pending"),
    ({"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}, "running"),
    ({"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}, "succeeded"),
    ({"jobStatus": "FAILED", "jobDeploymentStatus": "Complete"}, "failed"),
    ({"jobStatus": "STOPPED", "jobDeploymentStatus": "Complete"}, "failed"),
    ({"jobStatus": "RUNNING", "jobDeploymentStatus": "Complete"}, "failed"),
    ({"jobStatus": "", "jobDeploymentStatus": "Failed", "reason": "DeadlineExceeded"}, "failed"),
])
def test_status_reads_both_fields(status, state):
    assert rayjob_state(status) == state


def test_status_and_times_from_the_api(kube, backend, tmp_path):
    run_dir = tmp_path / "alice-llama8b-r003"
    run_dir.mkdir()
    backend.submit("alice-llama8b-r003", Recipe(TEXT), run_dir)
    assert backend.status(run_dir).state == "pending"
    kube.rayjobs[("ml-tuning", "alice-llama8b-r003")]["status"] = {
        "jobStatus": "FAILED", "jobDeploymentStatus": "Complete",
        "startTime": "2026-11-02T09:00:00Z", "endTime": "2026-11-02T09:10:00Z"}
    status = backend.status(run_dir)
    assert status.state == "failed" and status.ended - status.started == 600.0


def test_teardown_deletes_in_the_foreground_and_confirms_pods_are_gone(kube, backend, tmp_path):
    run_dir = tmp_path / "alice-llama8b-r004"
    run_dir.mkdir()
    backend.submit("alice-llama8b-r004", Recipe(TEXT), run_dir)
    kube.pods = {"alice-llama8b-r004-head": {"attune.dev/run": "alice-llama8b-r004"},
                 "someone-else": {"attune.dev/run": "other"}}
    status = backend.teardown(run_dir, timeout_s=5)
    assert status.state == "torn_down"
    assert kube.last_delete_body["propagationPolicy"] == "Foreground"
    assert "someone-else" in kube.pods and ("ml-tuning", "alice-llama8b-r004") not in kube.rayjobs
    # the RayCluster's own pods carry only ray.io/cluster: teardown waits for them too
    run_dir3 = tmp_path / "alice-llama8b-r009"
    run_dir3.mkdir()
    backend.submit("alice-llama8b-r009", Recipe(TEXT), run_dir3)
    kube.rayjobs[("ml-tuning", "alice-llama8b-r009")]["status"] = {"rayClusterName": "alice-llama8b-r009-raycluster-x"}
    kube.pods = {"alice-llama8b-r009-raycluster-x-head": {"ray.io/cluster": "alice-llama8b-r009-raycluster-x"}}
    assert backend.teardown(run_dir3, timeout_s=10).state == "torn_down"
    assert kube.pods == {}
    # deleting what is already gone (404) is fine
    run_dir2 = tmp_path / "alice-llama8b-r005"
    run_dir2.mkdir()
    assert backend.teardown(run_dir2, timeout_s=5).state == "torn_down"


def test_events_of_the_run_are_read(kube, backend):
    kube.events = [
        {"type": "Warning", "reason": "FailedScheduling", "kind": "Pod", "name": "alice-llama8b-r006-head-x",
         "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."},
        {"type": "Normal", "reason": "Scheduled", "kind": "Pod", "name": "other-pod", "message": "ok"}]
    events = backend.events("alice-llama8b-r006")
    assert events == ["Warning  FailedScheduling  pod/alice-llama8b-r006-head-x  0/8 nodes are available: "
                      "8 Insufficient nvidia.com/gpu."]


def test_the_log_is_read_through_the_log_pod(kube, backend, tmp_path):
    run_dir = tmp_path / "alice-llama8b-r007"
    run_dir.mkdir()
    real = (DATA / "logs" / "A_iteration" / "mlm1570_mcore_resume.log").read_bytes() * 200  # over 64 KiB
    kube.files[("log-reader", "/mnt/shared/alice-llama8b-r007/log.txt")] = real
    path = backend.log_path(run_dir)
    assert path.read_bytes() == real
    assert kube.execs == [("log-reader", ["cat", "/mnt/shared/alice-llama8b-r007/log.txt"])]
    missing = tmp_path / "alice-llama8b-r008"
    missing.mkdir()
    with pytest.raises(CheckFailed, match="No such file"):
        backend.log_path(missing)
    assert not (missing / "log.txt").exists()


def test_a_log_read_that_sticks_is_stopped_and_leaves_no_partial_copy(kube, backend, tmp_path, monkeypatch):
    import time

    from attune.campaign import kuberay

    monkeypatch.setattr(kuberay, "EXEC_SILENCE_S", 2.0)
    run_dir = tmp_path / "alice-llama8b-r010"
    run_dir.mkdir()
    remote = "/mnt/shared/alice-llama8b-r010/log.txt"
    kube.files[("log-reader", remote)] = b" [2026-09-21 10:00:00] iteration 1/20 | lm loss: 9.5\n"
    kube.stuck.add(("log-reader", remote))  # the bytes, then an open stream that says nothing more
    began = time.time()
    with pytest.raises(CheckFailed, match="reading %s through log pod log-reader sent nothing for 2 s" % remote):
        backend.log_path(run_dir)
    assert time.time() - began < 30
    assert sorted(p.name for p in run_dir.iterdir()) == []  # neither log.txt nor log.txt.partial


# ------------------------------------------------------------------ the lifecycle through the verbs
LINE = (" [2026-11-02 09:00:{sec:02d}] iteration {it:8d}/      20 | consumed samples: {cs:12d} | elapsed time per "
        "iteration (ms): {ms:.1f} | learning rate: 3.000000E-04 | global batch size:   128 | lm loss: {loss:.6E} | "
        "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |")


@pytest.fixture
def cluster_campaign(kube, tmp_path, monkeypatch):
    """A campaign on the kuberay backend whose kubeconfig points at the fake API."""
    import shutil
    from attune.campaign import ledger as campaign_mod
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(kubeconfig, kube.url)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    baseline = tmp_path / "baseline.yaml"
    shutil.copy(DATA / "recipes" / "megatron_rayjob.yaml", baseline)
    settings = make_settings(ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT="test", ATTUNE_NAMESPACE="ml-tuning",
                             ATTUNE_IMAGE="registry.example.com/megatron:25.04", ATTUNE_SHARED_DIR="/mnt/shared", AUTOTUNE_LOG_POD="log-reader",
                             ATTUNE_RUN_PREFIX="alice-llama8b-", ATTUNE_BASELINE_YAML=str(baseline))
    return campaign_mod.init(tmp_path / "c", settings, "alice-llama8b-e2e"), settings


def test_launch_finalize_on_the_cluster(kube, cluster_campaign):
    from attune.campaign import ranking, runs
    campaign, settings = cluster_campaign
    row = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    run = row["run"]
    assert row["gpus"] == 16 and ("ml-tuning", run) in kube.rayjobs
    assert runs.finalize(campaign, settings, run) is None  # pending, within the limit
    kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete",
                                                  "startTime": "2026-11-02T09:00:00Z", "endTime": "2026-11-02T09:10:00Z"}
    log = "\n".join(LINE.format(sec=i, it=i, cs=128 * i, ms=3400.0, loss=10 - 0.1 * i) for i in range(1, 21))
    kube.files[("log-reader", "/mnt/shared/%s/log.txt" % run)] = log.encode() + b"\n"
    result = runs.finalize(campaign, settings, run)
    assert result["status"] == "finished" and result["metrics"]["seq_length"] == 4096
    assert ("ml-tuning", run) not in kube.rayjobs  # torn down once recorded
    assert runs.finalize(campaign, settings, run) == result  # and finalizing again changes nothing
    assert [r["gpu_seconds"] for r in campaign.gpu_log.rows()] == [16 * 600]
    assert ranking.build(campaign.ledger.rows()).run(run).tokens == pytest.approx(128 * 4096 / (3.4 * 16))


def test_a_run_pending_past_the_limit_is_torn_down_as_unschedulable(kube, cluster_campaign):
    from attune.campaign import runs
    campaign, settings = cluster_campaign
    run = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": "PENDING", "jobDeploymentStatus": "Initializing"}
    kube.events = [{"type": "Warning", "reason": "FailedScheduling", "kind": "Pod", "name": run + "-head-abc",
                    "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]
    result = runs.finalize(campaign, settings, run, pending_after_s=0.0)
    assert result["status"] == "failed" and result["failure"]["class"] == "unschedulable"
    assert "Insufficient nvidia.com/gpu" in result["failure"]["evidence"]
    assert ("ml-tuning", run) not in kube.rayjobs


def test_resources_are_what_the_recipe_asks(backend):
    assert backend.resources(Recipe(TEXT)) == {"nodes": 2, "gpus": 16, "gpus_per_node": [8], "gpu_model": None}


def test_a_profile_run_on_the_cluster_is_wrapped_and_its_traces_come_through_the_log_pod(kube, cluster_campaign):
    import dataclasses

    from attune.campaign import runs
    campaign, settings = cluster_campaign
    base = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    with pytest.raises(InputError, match="ATTUNE_POD_SCRIPTS is not set"):
        runs.launch_repeat(campaign, settings, base, profile=True, expected_gpu_hours=3.0)
    assert [row["run"] for row in campaign.ledger.rows() if row["kind"] == "launch"] == [base]
    settings = dataclasses.replace(settings, pod_scripts="/mnt/shared/attune/scripts")
    row = runs.launch_repeat(campaign, settings, base, profile=True, expected_gpu_hours=3.0,
                      pod_hooks=[{"name": "profiler", "args": {"start": "10", "end": "12", "ranks": "0,8"}}])
    run = row["run"]
    assert row["purpose"] == "profile" and row["recipe_sha256"] == \
        [r for r in campaign.ledger.rows() if r.get("run") == base][0]["recipe_sha256"]
    entry = kube.rayjobs[("ml-tuning", run)]["spec"]["entrypoint"]
    assert entry.startswith("cd /opt/megatron && python3 /mnt/shared/attune/scripts/pod_hooks/wrap.py --hooks "
                            "profiler,gpu_facts --hook-arg profiler.end=12 --hook-arg profiler.ranks=0,8 "
                            "--hook-arg profiler.start=10 --out /mnt/shared/%s/pod_hooks -- python3 pretrain_gpt.py \\\n"
                            % run)
    assert entry.split(" -- ", 1)[1] == yaml.safe_load(
        (campaign.run_dir(base) / "recipe.yaml").read_text())["spec"]["entrypoint"].split("&& ", 1)[1]
    trace = "/mnt/shared/%s/pod_hooks/profile/rank_0.1764000000.pt.trace.json.gz" % run
    record = {"schema_version": 1, "status": "finished", "hooks": [
        {"name": "profiler", "status": "ok", "facts": {"traces": [trace]}}]}
    kube.files[("log-reader", "/mnt/shared/%s/pod_hooks/pod_hooks.json" % run)] = json.dumps(record).encode()
    kube.files[("log-reader", trace)] = b"\x1f\x8b trace bytes"
    paths = runs.traces(campaign, settings, run)
    assert [p.read_bytes() for p in paths] == [b"\x1f\x8b trace bytes"]
    assert paths[0].parent == campaign.run_dir(run) / "traces"
    assert kube.execs[-1] == ("log-reader", ["cat", trace])


def _iso(epoch):
    import datetime
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def running_job(kube, backend, tmp_path, run):
    """Submit ``run`` and mark its RayJob running; return (run_dir, job, the log's path in the log pod)."""
    run_dir = tmp_path / run
    run_dir.mkdir()
    backend.submit(run, Recipe(TEXT), run_dir)
    job = kube.rayjobs[("ml-tuning", run)]
    job["status"] = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running", "startTime": "2026-11-02T09:00:00Z"}
    return run_dir, job, "/mnt/shared/%s/log.txt" % run


def test_progress_is_the_age_of_the_log_by_the_log_pods_clock(kube, backend, tmp_path):
    run_dir, job, remote = running_job(kube, backend, tmp_path, "alice-llama8b-r010")
    assert backend.status(run_dir).seconds_without_progress is None  # no log yet: the run has not written it
    kube.mtimes[("log-reader", remote)] = 1_000_000_000
    kube.clock = 1_000_000_000 + 1234  # the cluster's clock, years away from this host's: no skew counts
    status = backend.status(run_dir)
    assert status.state == "running" and status.seconds_without_progress == 1234.0
    assert kube.execs[-1] == ("log-reader", ["sh", "-c", "stat -c %%Y %s && date +%%s && date +%%z && tail -c 65536 %s"
                                             % (remote, remote)])
    job["status"] = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}
    execs = len(kube.execs)
    assert backend.status(run_dir).seconds_without_progress is None and len(kube.execs) == execs  # only while running


def _heartbeat(epoch, zone_s):
    import time
    return ("W%s.250000 26719 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1346] The node has failed "
            "to send a keep-alive heartbeat to the rendezvous\n"
            % time.strftime("%m%d %H:%M:%S", time.gmtime(epoch + zone_s))).encode()


@pytest.mark.parametrize("zone, zone_s, job_zone_s, expected", [
    ("+0000", 0, 0, 600 - 60.25),  # dated by the first keep-alive warning after the job's last line
    ("-0500", -5 * 3600, -5 * 3600, 600 - 60.25),  # the pods' local time, whatever their zone
    ("+0000", 0, 3 * 3600, 45.0),  # stamps of another zone than the log pod's: not trusted, the log's age
])
def test_launcher_chatter_at_the_end_of_the_log_is_not_progress(kube, backend, tmp_path, zone, zone_s, job_zone_s,
                                                                 expected):
    # a stuck job: its last iteration line, then a minute later torchrun's keep-alive warnings every 5 s
    run_dir, job, remote = running_job(kube, backend, tmp_path, "alice-llama8b-r011")
    last_own = 1_790_000_000  # the job's last line; the cluster's clock, far from this host's
    beats = b"".join(_heartbeat(last_own + 60 + 5 * i, job_zone_s) for i in range(100))
    kube.files[("log-reader", remote)] = b" [2026-09-21 10:00:00] iteration 5/20 | lm loss: 9.5\n" * 2000 + beats
    kube.mtimes[("log-reader", remote)] = last_own + 60 + 5 * 99
    kube.clock, kube.zone = last_own + 600, zone
    assert backend.status(run_dir).seconds_without_progress == pytest.approx(expected, abs=0.01)


def test_a_run_whose_log_stopped_is_torn_down_as_a_hang_and_charged_its_time(kube, cluster_campaign):
    import time

    from attune.campaign import runs
    campaign, settings = cluster_campaign
    run = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    started = int(time.time()) - 2000
    kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running",
                                                  "startTime": _iso(started)}
    remote = "/mnt/shared/%s/log.txt" % run
    kube.files[("log-reader", remote)] = "\n".join(
        LINE.format(sec=i, it=i, cs=128 * i, ms=3400.0, loss=10 - 0.1 * i) for i in range(1, 8)).encode() + b"\n"
    kube.mtimes[("log-reader", remote)] = 5_000
    kube.clock = 5_000 + 600
    assert runs.finalize(campaign, settings, run) is None  # quiet for 600 s: under the 900 s limit
    kube.clock = 5_000 + 1000
    result = runs.finalize(campaign, settings, run)
    assert result["status"] == "timeout" and result["failure"]["class"] == "hang"
    assert "no new iteration for 1000 s (limit 900 s), after iteration 7" == result["failure"]["evidence"]
    assert ("ml-tuning", run) not in kube.rayjobs
    charged = [r["gpu_seconds"] for r in campaign.gpu_log.rows()]
    assert len(charged) == 1 and 16 * 2000 <= charged[0] <= 16 * 2100  # from the RayJob's start to the teardown


def test_teardown_keeps_the_rayjobs_times(kube, backend, tmp_path):
    run_dir = tmp_path / "alice-llama8b-r011"
    run_dir.mkdir()
    backend.submit("alice-llama8b-r011", Recipe(TEXT), run_dir)
    kube.rayjobs[("ml-tuning", "alice-llama8b-r011")]["status"] = {
        "jobStatus": "FAILED", "jobDeploymentStatus": "Complete",
        "startTime": "2026-11-02T09:00:00Z", "endTime": "2026-11-02T09:10:00Z"}
    status = backend.teardown(run_dir, timeout_s=5)
    assert status.state == "torn_down" and status.ended - status.started == 600.0
    assert backend.teardown(run_dir, timeout_s=5) == status  # a second teardown keeps what the first read
    assert backend.status(run_dir) == status


def test_events_do_not_fail_a_run_that_completed(kube, cluster_campaign):
    from attune.campaign import runs
    campaign, settings = cluster_campaign
    run = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    kube.events = [
        {"type": "Warning", "reason": "FailedScheduling", "kind": "Pod", "name": run + "-head-abc",
         "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."},
        {"type": "Warning", "reason": "Failed", "kind": "Pod", "name": run + "-worker-0",
         "message": "Failed to pull image \"img\": rpc error: context deadline exceeded"}]
    kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete",
                                                  "startTime": "2026-11-02T09:00:00Z", "endTime": "2026-11-02T09:10:00Z"}
    log = "\n".join(LINE.format(sec=i, it=i, cs=128 * i, ms=3400.0, loss=10 - 0.1 * i) for i in range(1, 21))
    kube.files[("log-reader", "/mnt/shared/%s/log.txt" % run)] = log.encode() + b"\n"
    result = runs.finalize(campaign, settings, run)
    assert result["status"] == "finished" and "failure" not in result


def test_a_run_torn_down_before_finalize_is_charged_from_its_start(kube, cluster_campaign):
    import time

    from attune.campaign import runs
    campaign, settings = cluster_campaign
    run = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    started = int(time.time()) - 300
    kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running",
                                                  "startTime": _iso(started)}
    runs.teardown(campaign, settings, run)  # by hand, before any finalize
    result = runs.finalize(campaign, settings, run)
    assert result["status"] == "failed"
    charged = [r["gpu_seconds"] for r in campaign.gpu_log.rows()]
    assert len(charged) == 1 and 16 * 300 <= charged[0] <= 16 * 400


def test_a_recipe_running_another_image_than_the_campaigns_is_refused(kube, backend, tmp_path):
    text = (DATA / "recipes" / "megatron_rayjob.yaml").read_text().replace(
        "name: ray-worker\n                image: registry.example.com/megatron:25.04",
        "name: ray-worker\n                image: registry.example.com/megatron:nightly")
    run_dir = tmp_path / "alice-llama8b-r009"
    run_dir.mkdir()
    with pytest.raises(InputError, match="container image\\(s\\) other than ATTUNE_IMAGE=registry.example.com/"
                                         "megatron:25.04: group gpu-workers container ray-worker "
                                         "registry.example.com/megatron:nightly"):
        backend.submit("alice-llama8b-r009", Recipe(text), run_dir)
    assert not kube.rayjobs


def test_a_failed_rayjobs_message_is_triaged_when_the_log_says_nothing(kube, cluster_campaign):
    from attune.campaign import runs
    campaign, settings = cluster_campaign
    run = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    tail = (DATA / "logs" / "C_failures" / "flingbot11_ray_oom_exception.log").read_text()  # real Ray text
    kube.rayjobs[("ml-tuning", run)]["status"] = {
        "jobStatus": "FAILED", "jobDeploymentStatus": "Complete", "reason": "AppFailed",
        "message": "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 "
                   "chars):\n" + tail, "startTime": "2026-11-02T09:00:00Z", "endTime": "2026-11-02T09:10:00Z"}
    log = "\n".join(LINE.format(sec=i, it=i, cs=128 * i, ms=3400.0, loss=10 - 0.1 * i) for i in range(1, 4))
    kube.files[("log-reader", "/mnt/shared/%s/log.txt" % run)] = log.encode() + b"\n"
    assert "message" not in runs.poll(campaign, settings, run).as_dict()  # polls stay one line a field
    failure = runs.finalize(campaign, settings, run)["failure"]
    assert (failure["class"], failure["memory"], failure["source"]) == ("oom", "host", "backend")
    assert failure["evidence"].startswith("ray.exceptions.OutOfMemoryError: Task was killed")


def test_a_container_the_kernel_killed_for_memory_is_host_oom(kube, cluster_campaign):
    from attune.campaign import runs
    campaign, settings = cluster_campaign
    run = runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"]
    kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": "FAILED", "jobDeploymentStatus": "Complete",
                                                  "startTime": "2026-11-02T09:00:00Z", "endTime": "2026-11-02T09:10:00Z"}
    # the dump of kuberay4287_head_oomkilled.log: lastState.terminated with exitCode 137, reason OOMKilled
    kube.pods = {run + "-head": {"attune.dev/run": run}, run + "-worker-0": {"attune.dev/run": run}}
    kube.pod_terminated = {run + "-head": [("ray-head", "OOMKilled", 137)],
                           run + "-worker-0": [("ray-worker", "Error", 1)]}
    log = "\n".join(LINE.format(sec=i, it=i, cs=128 * i, ms=3400.0, loss=10 - 0.1 * i) for i in range(1, 4))
    kube.files[("log-reader", "/mnt/shared/%s/log.txt" % run)] = log.encode() + b"\n"
    failure = runs.finalize(campaign, settings, run)["failure"]
    assert (failure["class"], failure["memory"], failure["source"]) == ("oom", "host", "events")
    assert failure["evidence"] == "Warning  OOMKilled  pod/%s-head  container ray-head terminated: OOMKilled, " \
                                  "exit code 137" % run


def test_the_replay_reads_every_log_again_through_the_log_pod(kube, cluster_campaign):
    from attune.campaign import replay, runs
    campaign, settings = cluster_campaign
    finished, failed = (runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)["run"] for _ in "ab")
    for run, state, steps in ((finished, "SUCCEEDED", 20), (failed, "FAILED", 3)):
        kube.rayjobs[("ml-tuning", run)]["status"] = {"jobStatus": state, "jobDeploymentStatus": "Complete",
                                                      "startTime": "2026-11-02T09:00:00Z",
                                                      "endTime": "2026-11-02T09:10:00Z"}
        log = "\n".join(LINE.format(sec=i, it=i, cs=128 * i, ms=3400.0, loss=10 - 0.1 * i) for i in range(1, steps + 1))
        kube.files[("log-reader", "/mnt/shared/%s/log.txt" % run)] = log.encode() + b"\n"
        runs.finalize(campaign, settings, run)
    kube.create_status = 403
    with pytest.raises(CheckFailed, match="closed as submit_failed"):
        runs.launch_baseline(campaign, settings, expected_gpu_hours=3.0)
    closed = campaign.ledger.rows()[-1]["run"]
    # the RayJobs are gone, their exit codes with them: the finished row is derived with exit code 0, the failed
    # one on what its log gives, and the closed launch has no log
    assert not kube.rayjobs
    (campaign.run_dir(finished) / "log.txt").write_text("an edited local copy\n")  # never what the replay reads
    del kube.execs[:]
    assert replay.replay(campaign, settings).summary() == "3 result rows and 0 gate rows re-derived from their evidence"
    assert sorted(kube.execs) == sorted(("log-reader", ["cat", "/mnt/shared/%s/log.txt" % run])
                                        for run in (finished, failed, closed))
    kube.files[("log-reader", "/mnt/shared/%s/log.txt" % closed)] = b"it ran after all\n"
    mismatch = replay.replay(campaign, settings).mismatch
    assert (mismatch.run, mismatch.field, mismatch.note) == (closed, "failure.class",
                                                             "the run has a log, so its submission did not fail")
    del kube.files[("log-reader", "/mnt/shared/%s/log.txt" % closed)]
    remote = "/mnt/shared/%s/log.txt" % finished
    kube.files[("log-reader", remote)] = kube.files[("log-reader", remote)].replace(b"3400.0", b"1700.0")
    mismatch = replay.replay(campaign, settings).mismatch
    assert (mismatch.run, mismatch.field, mismatch.recorded, mismatch.derived) == (finished, "metrics.step_ms[0]",
                                                                                   3400.0, 1700.0)
    assert mismatch.evidence == "%s (through log pod log-reader)" % remote
    del kube.files[("log-reader", remote)]
    mismatch = replay.replay(campaign, settings).mismatch
    assert mismatch.field == "evidence" and mismatch.evidence == "%s (through log pod log-reader)" % remote
    assert "No such file" in mismatch.note


def test_an_api_server_that_takes_the_connection_and_never_answers_is_an_error_within_the_timeout(monkeypatch,
                                                                                                   tmp_path):
    import socket
    import time

    from kubernetes import client

    from attune.campaign import kuberay

    monkeypatch.setattr(kuberay, "REQUEST_TIMEOUT_S", (2.0, 2.0))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the connection; nothing ever reads or answers
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:%d" % silent.getsockname()[1]
    configuration.retries = 0
    settings = make_settings(ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT="test", ATTUNE_NAMESPACE="ml-tuning",
                             ATTUNE_IMAGE="registry.example.com/megatron:25.04", ATTUNE_SHARED_DIR="/mnt/shared",
                             AUTOTUNE_LOG_POD="log-reader", ATTUNE_RUN_PREFIX="alice-llama8b-")
    backend = KubeRayBackend(settings, api_client=client.ApiClient(configuration))
    run_dir = tmp_path / "alice-llama8b-r009"
    run_dir.mkdir()
    began = time.time()
    try:
        with pytest.raises(CheckFailed, match="the Kubernetes API at %s did not answer get_namespaced_custom_object: "
                           ".*timed out" % configuration.host):
            backend.status(run_dir)
    finally:
        silent.close()
    assert time.time() - began < 30
