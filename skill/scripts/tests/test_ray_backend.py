"""The Ray backend (ATTUNE_BACKEND=ray) against a real Ray cluster: a Ray head started for the session in a private
network namespace on loopback (``ray_cluster.py``), its job server reached through Ray's own JobSubmissionClient.
A run's lifecycle (success, an exit code, a hang torn down, a stop), a submission id that exists, a job the
cluster cannot place, and a short campaign through the CLI; the fixture ends every process it started and checks
that none is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import DATA, SCRIPTS
from factory import local_campaign, settings as make_settings, wait
from ray_cluster import RayCluster

from attune import cli
from attune.campaign import backends, runs
from attune.core.errors import InputError
from attune.core.recipe import Recipe

pytestmark = pytest.mark.slow

FAKE = (DATA / "recipes" / "local_fake_megatron.yaml").read_text().format(python=sys.executable,
                                                                           script=DATA / "fake_megatron.py")
LLAMA = SCRIPTS / "simulate" / "recipes" / "llama3_70b_h100x64.yaml"
SIM = SCRIPTS / "simulate" / "sim_megatron.py"


@pytest.fixture(scope="session")
def ray_session(tmp_path_factory):
    """The session's Ray cluster (``{"cluster": RayCluster}``), started by the first test that needs it."""
    held = {"cluster": None, "root": tmp_path_factory.mktemp("ray-cluster"), "starts": 0}
    previous = signal.getsignal(signal.SIGTERM)

    def terminated(signum, frame):  # a CI run stopped from outside still ends the cluster it started
        if held["cluster"] is not None:
            held["cluster"].stop(check=False)
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
    signal.signal(signal.SIGTERM, terminated)
    try:
        yield held
    finally:
        signal.signal(signal.SIGTERM, previous)
        if held["cluster"] is not None:
            held["cluster"].stop(check=True)  # every process it started ended, nothing listening: else an error


@pytest.fixture
def ray_cluster(ray_session):
    """A Ray cluster that answers: the session's, started again (and the old one ended by pid, checked gone) when
    it stopped answering between tests, with a warning that says what was left of it."""
    cluster = ray_session["cluster"]
    if cluster is not None and not cluster.alive():
        import warnings
        warnings.warn("the Ray test cluster stopped answering between tests (%s): it is started again"
                      % cluster.describe())
        cluster.stop(check=True)
        cluster = None
    if cluster is None:
        ray_session["starts"] += 1
        cluster = RayCluster(ray_session["root"] / ("c%d" % ray_session["starts"]), cpus=2,
                             start_timeout_s=15).start()
        ray_session["cluster"] = cluster
    return cluster


def ray_settings(cluster, **extra):
    return make_settings(ATTUNE_BACKEND="ray", ATTUNE_RAY_ADDRESS=cluster.address, **extra)


def recipe_with(text: str, mode: str = "ok", spec_extra: str = "") -> Recipe:
    text = text.replace("FAKE_MODE: ok", "FAKE_MODE: %s" % mode)
    if spec_extra:
        text = text.replace("spec:\n  entrypoint:", "spec:\n%s  entrypoint:" % spec_extra, 1)
    return Recipe(text)


def follow(backend, run_dir, states, timeout=120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = backend.status(run_dir)
        if status.state in states:
            return status
        time.sleep(0.5)
    raise AssertionError("run %s never reached %s (last: %s)" % (run_dir.name, states, status))


@pytest.fixture
def backend(ray_cluster):
    return backends.get("ray", ray_settings(ray_cluster))


def test_a_run_succeeds_and_its_log_and_times_come_from_ray(backend, tmp_path):
    run_dir = tmp_path / "rb-ok"
    run_dir.mkdir()
    backend.submit("rb-ok", recipe_with(FAKE), run_dir)
    submitted = json.loads((run_dir / "ray.json").read_text())
    assert submitted["submission_id"] == "rb-ok" and submitted["runtime_env"]["env_vars"]["FAKE_MODE"] == "ok"
    status = follow(backend, run_dir, ("succeeded", "failed"))
    assert status.state == "succeeded" and status.exit_code == 0
    assert status.started is not None and status.ended >= status.started
    log = backend.log_path(run_dir).read_text()
    assert log.count("lm loss:") == 20
    torn = backend.teardown(run_dir)
    assert torn.state == "torn_down" and torn.started == status.started and torn.ended == status.ended
    assert backend._info("rb-ok") is None  # the job's record is deleted on the cluster
    assert backend.log_path(run_dir).read_text() == log  # the copy taken before the deletion stands


def test_an_exit_code_is_the_drivers_and_ray_says_why(backend, tmp_path):
    run_dir = tmp_path / "rb-exit"
    run_dir.mkdir()
    script = tmp_path / "exit3.py"
    script.write_text("import sys\nprint('boom')\nsys.exit(3)\n")
    text = FAKE.replace(str(DATA / "fake_megatron.py"), str(script))
    backend.submit("rb-exit", Recipe(text), run_dir)
    status = follow(backend, run_dir, ("succeeded", "failed"))
    assert status.state == "failed" and status.exit_code == 3
    assert "exit code 3" in status.message
    assert "boom" in backend.log_path(run_dir).read_text()
    backend.teardown(run_dir)


def test_a_submission_id_that_exists_is_refused_by_name(backend, tmp_path):
    first, second = tmp_path / "a" / "rb-dup", tmp_path / "b" / "rb-dup"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    backend.submit("rb-dup", recipe_with(FAKE), first)
    with pytest.raises(InputError, match="a Ray job with submission id rb-dup exists already on http://127.0.0.1"):
        backend.submit("rb-dup", recipe_with(FAKE), second)
    follow(backend, first, ("succeeded",))
    backend.teardown(first)


class LostAnswer(object):
    """The real client, whose submit_job reaches the job server and then loses the answer (as a read timeout or a
    dropped link does)."""

    def __init__(self, real):
        self.real = real

    def submit_job(self, **kwargs):
        import requests
        self.real.submit_job(**kwargs)
        raise requests.exceptions.ReadTimeout("Read timed out. (read timeout=60.0)")

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_submission_whose_answer_is_lost_is_the_runs_and_another_with_its_id_is_refused(backend, ray_cluster,
                                                                                          tmp_path):
    from attune.campaign.raybackend import RayBackend

    lossy = RayBackend(ray_settings(ray_cluster), client=LostAnswer(backend.client))
    first, second = tmp_path / "a" / "rb-lost", tmp_path / "b" / "rb-lost"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    lossy.submit("rb-lost", recipe_with(FAKE), first)  # the job server has it: the launch stands
    assert follow(lossy, first, ("succeeded", "failed")).state == "succeeded"
    with pytest.raises(InputError, match="a Ray job with submission id rb-lost exists already"):
        lossy.submit("rb-lost", recipe_with(FAKE), second)  # that job is not this submission's
    lossy.teardown(first)


def test_a_job_server_that_takes_the_connection_and_never_answers_is_an_error_within_the_timeout(monkeypatch):
    import socket

    from attune.campaign import raybackend

    monkeypatch.setattr(raybackend, "REQUEST_TIMEOUT_S", (2.0, 2.0))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the connection; nothing ever reads or answers
    address = "http://127.0.0.1:%d" % silent.getsockname()[1]
    began = time.time()
    try:
        with pytest.raises(InputError, match="ATTUNE_RAY_ADDRESS=%s: no Ray job server answers there .*timed out"
                           % address):
            raybackend.client_for(address)
    finally:
        silent.close()
    assert time.time() - began < 30


def test_a_hung_run_is_torn_down_and_charged_what_it_used(ray_cluster, tmp_path):
    for campaign, made in local_campaign(tmp_path, FAKE.replace("FAKE_MODE: ok", "FAKE_MODE: hang"), "rh-",
                                         "ray-hang", ATTUNE_BACKEND="ray", ATTUNE_RAY_ADDRESS=ray_cluster.address):
        run = runs.launch_baseline(campaign, made)["run"]
        backend = backends.get("ray", made)
        try:
            wait(campaign, made, run, ("running",), timeout=120)
            deadline, row = time.time() + 60, None
            while row is None and time.time() < deadline:  # None while it still prints (its 5 iterations)
                time.sleep(1.0)
                row = runs.finalize(campaign, made, run, hang_after_s=2.0)
        finally:
            backend.teardown(campaign.run_dir(run))
        assert row is not None and row["status"] == "timeout" and row["failure"]["class"] == "hang", row
        assert "after iteration 5" in row["failure"]["evidence"]
        assert backend.status(campaign.run_dir(run)).state == "torn_down"
        assert backend._info(run) is None
        charge = [r for r in campaign.gpu_log.rows() if r["run"] == run][0]
        assert 0 < charge["seconds"] < 120


def test_a_stop_ends_a_running_job_within_seconds(backend, tmp_path):
    run_dir = tmp_path / "rb-stop"
    run_dir.mkdir()
    backend.submit("rb-stop", recipe_with(FAKE, mode="hang"), run_dir)
    follow(backend, run_dir, ("running",))
    began = time.time()
    torn = backend.teardown(run_dir, grace_s=30.0)
    assert torn.state == "torn_down" and time.time() - began < 20
    record = json.loads((run_dir / "teardown.json").read_text())
    assert record["state"] == "STOPPED" and record["started"] is not None


def test_a_job_the_cluster_cannot_place_is_unschedulable_and_charged_nothing(ray_cluster, tmp_path):
    text = FAKE.replace("spec:\n  entrypoint:", "spec:\n  entrypointNumCpus: 64\n  entrypoint:", 1)
    for campaign, made in local_campaign(tmp_path, text, "ru-", "ray-unsched", ATTUNE_BACKEND="ray",
                                         ATTUNE_RAY_ADDRESS=ray_cluster.address):
        run = runs.launch_baseline(campaign, made)["run"]
        assert json.loads((campaign.run_dir(run) / "ray.json").read_text())["entrypoint_num_cpus"] == 64
        time.sleep(2.0)
        assert runs.poll(campaign, made, run).state == "pending"
        row = runs.finalize(campaign, made, run, pending_after_s=1.0)
        assert row["failure"]["class"] == "unschedulable", row
        charge = [r for r in campaign.gpu_log.rows() if r["run"] == run][0]
        assert charge["seconds"] == 0


def test_a_short_campaign_through_the_cli_on_the_simulated_workload(ray_cluster, tmp_path, capsys):
    text = LLAMA.read_text().format(python=sys.executable, sim=SIM)
    for campaign, _made in local_campaign(tmp_path, text, "rc-", "ray-campaign", ATTUNE_BACKEND="ray",
                                          ATTUNE_RAY_ADDRESS=ray_cluster.address):
        where = ["--campaign", str(campaign.dir)]

        def verb(*argv):
            code = cli.main(list(argv) + where + ["--json"])
            return code, json.loads(capsys.readouterr().out)

        def follow_run(run):
            deadline = time.time() + 120
            while time.time() < deadline:
                code, polled = verb("poll", run)
                if polled["done"]:
                    break
                time.sleep(0.5)
            code, result = verb("finalize", run)
            assert code == 0, result
            return result

        code, launched = verb("launch", "--baseline")
        assert code == 0 and launched["launch"]["backend"] == "ray"
        base = follow_run(launched["launch"]["run"])
        assert base["result"]["status"] == "finished" and base["score"]["simulated"]
        code, record = verb("candidate", "new", "--parent", "baseline", "--set", "tp-comm-overlap", "--lever",
                            "tp-comm-overlap", "--hypothesis", "TP overlap hides the TP collectives")
        assert code == 0
        code, launched = verb("launch", record["run"])
        assert code == 0
        assert follow_run(record["run"])["result"]["status"] == "finished"
        code, _ranked = verb("rank")
        assert code == 0
        code, verified = verb("verify")
        assert code == 0
        spent = sum(r["gpu_seconds"] for r in campaign.gpu_log.rows() if "gpu_seconds" in r) / 3600.0
        code, status = verb("status")
        budget = status["budget"]
        assert budget["in_flight"] == [] and budget["spent"] == 2 and abs(budget["gpu_hours_spent"] - spent) < 0.01


def test_doctor_names_the_ray_version_and_free_gpus(ray_cluster, tmp_path):
    from attune.campaign import doctor
    from attune.campaign.raybackend import version_and_gpus
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(FAKE)
    report = doctor.run(ray_settings(ray_cluster, ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_AGENT="planner"))
    checked = report.result("ray")
    import ray
    assert checked.status == doctor.FAILED and "Ray %s at %s: 0 of 0 GPU(s) free, 2 of 2 CPU(s)" % (
        ray.__version__, ray_cluster.address) in checked.detail and "the baseline asks for 1" in checked.detail
    assert report.result("context").status == doctor.SKIPPED
    facts = version_and_gpus(ray_cluster.address)
    assert facts["ray_version"] == ray.__version__ and facts["gpus"] == 0 and facts["cpus"] == 2
    with pytest.raises(InputError, match="ATTUNE_RAY_ADDRESS=http://127.0.0.1:9: the Ray dashboard does not answer"):
        version_and_gpus("http://127.0.0.1:9", timeout_s=2)


QWEN = SCRIPTS / "simulate" / "recipes" / "qwen3_30b_a3b_h100x16.yaml"


def test_the_planner_runs_two_candidates_at_once_on_ray_and_the_ledger_verifies(ray_cluster, tmp_path, capsys):
    """ATTUNE_MAX_IN_FLIGHT=2 on the Ray backend: the planner launches a second one-lever candidate against the same
    leader before the first has a result; the ledger verifies and what the budget says was spent is the sum of the
    charges."""
    text = QWEN.read_text().format(python=sys.executable, sim=SIM)
    for campaign, _made in local_campaign(tmp_path, text, "rk-", "ray-k2", ATTUNE_BACKEND="ray",
                                          ATTUNE_RAY_ADDRESS=ray_cluster.address, ATTUNE_MAX_IN_FLIGHT="2",
                                          AUTOTUNE_BUDGET="7", ATTUNE_AGENT="planner"):
        proc = subprocess.run([sys.executable, "-m", "attune.planner.agent", "--campaign", str(campaign.dir),
                               "--session", "ray-k2"], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = campaign.ledger.rows()
        seq = {(row["kind"], row["run"]): row["seq"] for row in rows if row["kind"] in ("launch", "result")}
        candidates = [row for row in rows if row["kind"] == "launch" and row["purpose"] == "candidate"]
        together = [(a["run"], b["run"]) for a in candidates for b in candidates
                    if a["seq"] < b["seq"] < seq.get(("result", a["run"]), 0) and a.get("parent") == b.get("parent")]
        assert together, [(r["run"], r["seq"]) for r in candidates]
        assert all(row["backend"] == "ray" for row in rows if row["kind"] == "launch")
        assert cli.main(["verify", "--campaign", str(campaign.dir)]) == 0
        capsys.readouterr()
        assert cli.main(["status", "--campaign", str(campaign.dir), "--json"]) == 0
        budget = json.loads(capsys.readouterr().out)["budget"]
        charged = sum(r["gpu_seconds"] for r in campaign.gpu_log.rows() if "gpu_seconds" in r) / 3600.0
        finalized = sum(1 for row in rows if row["kind"] == "result")
        assert budget["in_flight"] == [] and budget["spent"] == finalized
        assert abs(budget["gpu_hours_spent"] - charged) < 0.01


def test_real_megatron_on_the_cpu_runs_through_the_ray_backend(ray_cluster, tmp_path):
    """Megatron-LM's own pretrain_gpt.py (a tiny GPT, 2 ranks on the CPU, through the cpu pod hook) as a Ray job:
    finalized as a cpu run with its 20 real iterations, read from the job's logs."""
    from test_megatron_real import SMALLER, _megatron
    sys.path.insert(0, str(SCRIPTS.parents[1] / "harness"))
    import megatron_cpu
    megatron = _megatron()
    missing = megatron_cpu.missing_packages()
    assert not missing, "the real-Megatron tests need %s: pip install -e '.[megatron]'" % " ".join(missing)
    megatron_cpu.build_helpers(megatron)
    text = Recipe(megatron_cpu.recipe_text(megatron), "baseline.yaml").apply(SMALLER).render()
    for campaign, made in local_campaign(tmp_path, text, "rm-", "ray-megatron", ATTUNE_BACKEND="ray",
                                         ATTUNE_RAY_ADDRESS=ray_cluster.address, ATTUNE_POD_HOOKS="cpu"):
        launch = runs.launch_baseline(campaign, made)
        backend = backends.get("ray", made)
        try:
            status = wait(campaign, made, launch["run"], ("succeeded", "failed", "lost"), timeout=600)
            log = campaign.run_dir(launch["run"]) / "log.txt"
            assert status.state == "succeeded", log.read_text()[-3000:] if log.exists() else status
            result = runs.finalize(campaign, made, launch["run"])
        finally:
            backend.teardown(campaign.run_dir(launch["run"]))
        assert launch["cpu"] is True and launch["backend"] == "ray"
        assert result["status"] == "finished" and result["cpu"] is True
        assert result["metrics"]["iter"] == list(range(1, 21)) and result["metrics"]["gpus"] == 2
        assert "iteration       20/      20" in log.read_text()


def test_a_candidate_whose_runtime_env_carries_the_agents_code_never_reaches_the_cluster(ray_cluster, tmp_path):
    """The launch-time runtime_env check (core/envpolicy.py) on a real Ray cluster. Candidates written by hand into
    runs/ (an agent that got past `candidate new`) whose runtime_env ships the campaign's scratch/ (its working_dir,
    or a py_modules entry by a file:// URI) are refused before launch: no job with their id on the job server, no
    launch row, and the canary that scratch/sitecustomize.py writes when the job's Python starts does not exist.
    The same runtime_env submitted straight to the backend, past the check, does run it: the attack is real."""
    for campaign, made in local_campaign(tmp_path, FAKE, "rv-", "ray-env", ATTUNE_BACKEND="ray",
                                         ATTUNE_RAY_ADDRESS=ray_cluster.address):
        scratch = campaign.dir / "scratch"
        scratch.mkdir(exist_ok=True)
        canary = tmp_path / "canary"
        (scratch / "sitecustomize.py").write_text("import pathlib\npathlib.Path(%r).write_text('ran')\n" % str(canary))
        (scratch / "evil").mkdir()
        (scratch / "evil" / "__init__.py").write_text("")
        forged = {"rv-r098": FAKE.replace("    env_vars:\n", "    working_dir: %s\n    env_vars:\n" % scratch),
                  "rv-r099": FAKE.replace("    env_vars:\n", "    py_modules: [\"file://%s\"]\n    env_vars:\n"
                                          % (scratch / "evil"))}
        backend = backends.get("ray", made)
        control = tmp_path / "rv-control"
        control.mkdir()
        backend.submit("rv-control", Recipe(forged["rv-r098"]), control)
        try:
            follow(backend, control, ("succeeded", "failed"))
        finally:
            backend.teardown(control)
        assert canary.read_text() == "ran"  # past the check, the job runs the agent's code
        canary.unlink()
        baseline = runs.launch_baseline(campaign, made)["run"]
        try:
            for run, text in forged.items():
                directory = campaign.run_dir(run)
                directory.mkdir(parents=True)
                (directory / "recipe.yaml").write_text(text)
                (directory / "candidate.json").write_text(json.dumps({"run": run, "parent": "baseline", "change": [],
                                                                      "lever": "other: x", "hypothesis": "h"}))
                rows = campaign.ledger.rows()
                with pytest.raises(InputError, match="run %s refused before launch, nothing started: runtime_env "
                                                     "(working_dir|py_modules)" % run):
                    runs.launch_candidate(campaign, made, run)
                assert campaign.ledger.rows() == rows  # no launch row
                assert sorted(os.listdir(directory)) == ["candidate.json", "recipe.yaml"]  # no ray.json
            jobs = {job.submission_id for job in backend.client.list_jobs()}
            assert baseline in jobs and not jobs & set(forged)
            follow(backend, campaign.run_dir(baseline), ("succeeded", "failed"))
        finally:
            backend.teardown(campaign.run_dir(baseline))
        assert not canary.exists()
