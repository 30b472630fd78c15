"""The run lifecycle on the local backend, with real processes printing Megatron-LM lines."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time

import pytest
from conftest import DATA
from factory import local_campaign, settings as make_settings, wait as factory_wait

from attune.campaign import ledger as campaign_mod
from attune import cli
from attune.campaign import ranking, runs
from attune.core.errors import CheckFailed, InputError

RECIPE = (DATA / "recipes" / "local_fake_megatron.yaml").read_text()


@pytest.fixture
def campaign(tmp_path):
    yield from local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=DATA / "fake_megatron.py"),
                              "loc-", "loc-test")


def wait(campaign, settings, run, states, timeout=30.0):
    return factory_wait(campaign, settings, run, states, timeout)


def candidate(campaign, mode):
    assert cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline",
                     "--env", "FAKE_MODE=%s" % mode, "--lever", "other: FAKE_MODE", "--hypothesis", mode,
                     "--gate-will-fail"]) == 0
    return sorted(os.listdir(campaign.dir / "runs"))[-1]


def running_candidate(campaign, settings, mode):
    """Launch the baseline, then a candidate in FAKE_MODE ``mode``; return the candidate once it runs."""
    runs.launch_baseline(campaign, settings)
    run = candidate(campaign, mode)
    runs.launch_candidate(campaign, settings, run)
    wait(campaign, settings, run, ("running",))
    return run


def test_baseline_runs_finishes_and_is_scored(campaign):
    campaign, settings = campaign
    row = runs.launch_baseline(campaign, settings)
    assert row["purpose"] == "baseline" and row["gpus"] == 1 and row["backend"] == "local"
    wait(campaign, settings, row["run"], ("succeeded",))
    result = runs.finalize(campaign, settings, row["run"])
    assert result["status"] == "finished" and result["metrics"]["iter"] == list(range(1, 21))
    ranked = ranking.build(campaign.ledger.rows())
    assert ranked.run(row["run"]).tokens == pytest.approx(8 * 128 / ((500.0 + 12) / 1000 * 1))
    assert runs.finalize(campaign, settings, row["run"]) == result  # idempotent
    assert "--exit-interval 20" in (campaign.run_dir(row["run"]) / "recipe.yaml").read_text()
    assert runs.launch_baseline(campaign, settings)["purpose"] == "repeat"


def test_hang_is_torn_down_and_triaged(campaign):
    campaign, settings = campaign
    run = running_candidate(campaign, settings, "hang")
    time.sleep(1.0)
    assert runs.finalize(campaign, settings, run, hang_after_s=300) is None  # not yet hung
    result = runs.finalize(campaign, settings, run, hang_after_s=0.5)
    assert result["status"] == "timeout" and result["failure"]["class"] == "hang"
    assert runs.poll(campaign, settings, run).state == "torn_down"
    pid = int((campaign.run_dir(run) / "pid").read_text())
    assert not runs.backends._group_alive(pid)


@pytest.mark.parametrize("record", ["process.json", "pid file only"])
def test_a_pid_reused_by_another_process_is_never_called_the_run_or_signalled(campaign, record):
    # the run's processes end without a record (killed from outside), and the system gives the run's pid to an
    # unrelated process that leads its own group: the record's number now names that process. The run is lost;
    # tearing it down must not signal the unrelated group (a stale pid once took down a whole Ray cluster)
    import signal
    import subprocess
    campaign, settings = campaign
    run = running_candidate(campaign, settings, "hang")
    run_dir = campaign.run_dir(run)
    own = int((run_dir / "pid").read_text())
    os.killpg(own, signal.SIGKILL)
    deadline = time.time() + 10
    while runs.backends._group_alive(own) and time.time() < deadline:
        time.sleep(0.05)
    stranger = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        time.sleep(0.2)
        (run_dir / "pid").write_text(str(stranger.pid))
        if record == "process.json":
            identity = json.loads((run_dir / "process.json").read_text())
            assert identity["pid"] == own and identity["start_ticks"] > 0
            (run_dir / "process.json").write_text(json.dumps(dict(identity, pid=stranger.pid)))
        else:  # a run recorded before process.json: the pid file was written when the run started
            (run_dir / "process.json").unlink()
            os.utime(str(run_dir / "pid"), (time.time() - 60, time.time() - 60))
        assert runs.poll(campaign, settings, run).state == "lost"
        assert runs.teardown(campaign, settings, run).state == "lost"
        assert stranger.poll() is None  # still running: never signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_a_run_is_recognised_as_its_own_process(campaign):
    campaign, settings = campaign
    run = running_candidate(campaign, settings, "hang")
    run_dir = campaign.run_dir(run)
    assert json.loads((run_dir / "process.json").read_text())["pid"] == int((run_dir / "pid").read_text())
    assert runs.poll(campaign, settings, run).state == "running"
    (run_dir / "process.json").unlink()  # a run recorded before process.json: matched by when it started
    assert runs.poll(campaign, settings, run).state == "running"
    assert runs.teardown(campaign, settings, run).state == "torn_down"


def _escaped_worker(run_dir) -> int:
    """The host pid of the worker FAKE_MODE=escape started (its own escaped.pid holds its pid as the job sees it,
    which in a confined run's pid namespace is not the host's): the run's one process running ``sleep 600``."""
    for pid in runs.backends._marked(run_dir):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as handle:
                if handle.read() == b"sleep\x00600\x00":
                    return pid
        except OSError:
            pass
    raise AssertionError("no escaped worker among the run's processes %s" % runs.backends._marked(run_dir))


@pytest.mark.parametrize("how", ["teardown", "lost"])
@pytest.mark.parametrize("confine", ["on", "off"])
def test_a_worker_in_a_session_of_its_own_is_ended_with_its_run(tmp_path, how, confine):
    # torchrun starts its workers in sessions of their own: a KILL of the run's group (or of the launcher) leaves
    # them running, holding the host's GPUs under the next run. Every process of a run carries ATTUNE_LOCAL_RUN,
    # and teardown ends them all; a run lost (its leader killed from outside) has what it left behind ended too.
    # Confined, the run's pid namespace ends them as soon as its first process ends
    import signal
    made = local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=DATA / "fake_megatron.py"), "loc-",
                          "loc-test", ATTUNE_LOCAL_CONFINE=confine)
    campaign, settings = next(made)
    try:
        run = running_candidate(campaign, settings, "escape")
        run_dir = campaign.run_dir(run)
        deadline = time.time() + 30
        while not (run_dir / "work" / "escaped.pid").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        worker = _escaped_worker(run_dir)
        if confine == "off":
            assert worker == int((run_dir / "work" / "escaped.pid").read_text())
        leader = int((run_dir / "pid").read_text())
        assert runs.backends._alive(worker) and worker not in runs.backends._group_members(leader)
        if how == "lost":
            os.killpg(int((run_dir / "pid").read_text()), signal.SIGKILL)
            deadline = time.time() + 10
            while runs.poll(campaign, settings, run).state != "lost" and time.time() < deadline:
                time.sleep(0.05)
            if confine == "off":
                assert runs.backends._alive(worker)  # the group's end did not end it
            assert runs.teardown(campaign, settings, run).state == "lost"
        else:
            assert runs.teardown(campaign, settings, run).state == "torn_down"
        assert not runs.backends._alive(worker) and runs.backends._marked(run_dir) == []
    finally:
        for _ in made:  # tears its runs down
            pass


def test_a_stuck_job_whose_launcher_keeps_printing_is_a_hang(campaign):
    campaign, settings = campaign
    run = running_candidate(campaign, settings, "hang-heartbeat")
    deadline = time.time() + 30
    while "keep-alive" not in (campaign.run_dir(run) / "log.txt").read_text() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)
    status = runs.poll(campaign, settings, run)
    log_age = time.time() - (campaign.run_dir(run) / "log.txt").stat().st_mtime
    assert log_age < 1.0 < status.seconds_without_progress  # the log grows; the job does not
    result = runs.finalize(campaign, settings, run, hang_after_s=1.0)
    assert result["status"] == "timeout" and result["failure"]["class"] == "hang"


def _chatter(stamp):
    return ("W%s.%06d 26719 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1346] The node has failed to "
            "send a keep-alive heartbeat to the rendezvous\n"
            % (time.strftime("%m%d %H:%M:%S", time.localtime(stamp)), int(stamp % 1 * 1e6)))


@pytest.mark.parametrize("stamp_age, expected", [(40.0, 40.0), (None, 300.0), (9000.0, 300.0)])
def test_the_last_job_line_before_launcher_chatter_is_dated_by_the_chatters_stamp(tmp_path, stamp_age, expected):
    # last looked at 300 s ago; since then the job printed one line and torchrun began its keep-alive warnings.
    # The job's line is dated by the first warning's own time stamp (it came before it), not by the last look,
    # which may be minutes late when the looks are slow; a line without a stamp, or a stamp that disagrees with
    # what is known (before the last known progress), falls back to the last look.
    now = time.time()
    log = tmp_path / "log.txt"
    first = _chatter(now - stamp_age) if stamp_age is not None else "W keep-alive heartbeat (no stamp)\n"
    log.write_text(" iteration 5/20 | lm loss: 9.5\n" + first + _chatter(now - 1.0))
    os.utime(str(log), (now - 1.0, now - 1.0))
    (tmp_path / "progress.json").write_text(json.dumps({"offset": 0, "since": now - 1000.0, "checked": now - 300.0}))
    quiet = runs.backends._seconds_without_progress(tmp_path, log, now - 2000.0)
    assert expected - 0.5 <= quiet <= expected + 5.0


def test_a_run_whose_memory_runs_away_is_killed_at_the_limit_as_oom(tmp_path):
    # a job whose memory grows without end would fill the host (real Megatron-LM on the CPU with
    # --recompute-modules mlp: 200 MB/s a rank) until everything on it crawls; the local run kills it at the limit
    made = local_campaign(tmp_path, RECIPE.format(python=sys.executable, script=DATA / "fake_megatron.py"), "mem-",
                          "mem-test", ATTUNE_LOCAL_MEMORY_MB="300")
    campaign, settings = next(made)
    try:
        runs.launch_baseline(campaign, settings)
        run = candidate(campaign, "leak")
        runs.launch_candidate(campaign, settings, run)
        assert json.loads((campaign.run_dir(run) / "local.json").read_text())["memory_limit_mb"] == 300.0
        wait(campaign, settings, run, ("failed",))
        assert json.loads((campaign.run_dir(run) / "exit.json").read_text())["memory_killed"] is True
        result = runs.finalize(campaign, settings, run)
        assert result["status"] == "failed" and result["failure"]["class"] == "oom"
        assert "over the 300 MiB a local run may hold" in result["failure"]["evidence"]
        assert result["failure"]["memory"] == "host" and "ATTUNE_LOCAL_MEMORY_MB" in result["failure"]["next_step"]
        assert runs.backends.memory_limit_mb() > 0  # the default: 85% of this host's memory
    finally:
        for _ in made:  # tears its runs down
            pass


def test_killed_and_oom_runs_fail_with_a_class(campaign):
    campaign, settings = campaign
    runs.launch_baseline(campaign, settings)
    killed, oom = candidate(campaign, "killed"), candidate(campaign, "oom")
    for run in (killed, oom):
        runs.launch_candidate(campaign, settings, run)
        wait(campaign, settings, run, ("failed",))
    dead = runs.finalize(campaign, settings, killed)
    assert dead["status"] == "failed" and dead["failure"]["class"] == "crash"
    assert "exited with code 137" in dead["failure"]["evidence"]  # confined: 128 + SIGKILL, as bwrap reports it
    short = runs.finalize(campaign, settings, oom)
    assert short["failure"]["class"] == "oom" and "CUDA out of memory" in short["failure"]["evidence"]
    assert short["failure"]["memory"] == "gpu"


def test_teardown_of_a_running_run(campaign):
    campaign, settings = campaign
    run = running_candidate(campaign, settings, "hang")
    assert cli.main(["teardown", run, "--campaign", str(campaign.dir)]) == 0
    assert runs.poll(campaign, settings, run).state == "torn_down"


def test_topology_of_local_runs(campaign, capsys):
    import json
    campaign, settings = campaign
    first = runs.launch_baseline(campaign, settings)["run"]
    wait(campaign, settings, first, ("succeeded",))
    assert cli.main(["topology", first, "--campaign", str(campaign.dir), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["asked"]["gpus"] == 1 and summary["got"]["nccl_ranks"] is None  # no NCCL lines: unknown
    assert (campaign.run_dir(first) / "topology.json").is_file()
    second = runs.launch_baseline(campaign, settings)["run"]
    wait(campaign, settings, second, ("succeeded",))
    assert cli.main(["topology", second, "--campaign", str(campaign.dir)]) == 0
    assert cli.main(["topology", "nope", "--campaign", str(campaign.dir)]) == 2


def test_a_candidate_runs_through_its_pod_hooks(campaign):
    campaign, settings = campaign
    runs.launch_baseline(campaign, settings)
    assert cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--env",
                     "TORCH_CPP_LOG_LEVEL=INFO", "--lever", "other: TORCH_CPP_LOG_LEVEL", "--hypothesis", "hooks",
                     "--gate-will-fail",
                     "--pod-hook", "gpu_facts", "--pod-hook", "nccl_debug:level=WARN,subsys=INIT"]) == 0
    run = sorted(os.listdir(campaign.dir / "runs"))[-1]
    record = json.loads((campaign.run_dir(run) / "candidate.json").read_text())
    assert record["pod_hooks"] == [{"name": "gpu_facts"}, {"name": "nccl_debug",
                                                           "args": {"level": "WARN", "subsys": "INIT"}}]
    row = runs.launch_candidate(campaign, settings, run)
    assert row["pod_hooks"] == record["pod_hooks"] and row["recipe_sha256"] == record["recipe_sha256"]
    command = json.loads((campaign.run_dir(run) / "local.json").read_text())["command"]
    assert "pod_hooks/wrap.py --hooks gpu_facts,nccl_debug" in command
    assert "--hook-arg nccl_debug.level=WARN --hook-arg nccl_debug.subsys=INIT" in command
    wait(campaign, settings, run, ("succeeded",))
    result = runs.finalize(campaign, settings, run)
    assert result["status"] == "finished" and result["metrics"]["iter"] == list(range(1, 21))
    hooks = json.loads((campaign.run_dir(run) / "pod_hooks" / "pod_hooks.json").read_text())
    assert hooks["status"] == "finished" and hooks["exit_code"] == 0
    assert hooks["launched"][-1] == "20" and "--seed" in hooks["launched"] and hooks["launched"] == hooks["entrypoint"]  # the training argv, unchanged
    by_name = {hook["name"]: hook for hook in hooks["hooks"]}
    assert by_name["nccl_debug"]["status"] == "ok" and by_name["nccl_debug"]["facts"]["set"]["NCCL_DEBUG"] == "WARN"
    assert by_name["gpu_facts"]["status"] in ("ok", "skipped")
    campaign.append("gate", run=run, verdict="fail", against="loc-r001", reasons=["config: numeric"])
    with pytest.raises(CheckFailed, match="failed the correctness gate: it can never lead"):
        runs.launch_repeat(campaign, settings, run, confirm=True)
    assert runs.launch_repeat(campaign, settings, run)["purpose"] == "repeat"  # a plain repeat is still allowed


def test_an_unknown_hook_is_refused_before_anything_is_written(campaign, capsys):
    campaign, settings = campaign
    before = sorted(os.listdir(campaign.dir / "runs")) if (campaign.dir / "runs").exists() else []
    assert cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--set",
                     "seed=3", "--lever", "other: --seed", "--hypothesis", "x", "--pod-hook", "flamegraph"]) == 2
    assert "unknown hook flamegraph; valid hooks: cpu, gpu_facts, nccl_debug, oom_snapshot, profiler" in \
        capsys.readouterr().err
    assert cli.main(["launch", "--campaign", str(campaign.dir), "--baseline", "--pod-hook",
                     "profiler:start=late"]) == 2
    assert "--pod-hook: profiler.start=late: expected an integer" in capsys.readouterr().err
    after = sorted(os.listdir(campaign.dir / "runs")) if (campaign.dir / "runs").exists() else []
    assert after == before and not campaign.ledger.rows()[1:]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (the pod extra): no real trace can be recorded")
def test_a_profile_run_records_real_traces_that_profile_reads(campaign, capsys):
    campaign, settings = campaign
    base = runs.launch_baseline(campaign, settings)["run"]
    wait(campaign, settings, base, ("succeeded",))
    runs.finalize(campaign, settings, base)
    run = candidate(campaign, "torch")
    runs.launch_candidate(campaign, settings, run)
    wait(campaign, settings, run, ("succeeded",))
    runs.finalize(campaign, settings, run)
    capsys.readouterr()
    assert cli.main(["launch", "--campaign", str(campaign.dir), "--profile-of", run,
                     "--pod-hook", "profiler:start=3,end=5", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["launch"]
    assert row["purpose"] == "profile" and row["parent"] == run
    assert row["pod_hooks"] == [{"name": "profiler", "args": {"end": "5", "start": "3"}}, {"name": "gpu_facts"}]
    wait(campaign, settings, row["run"], ("succeeded",), timeout=60.0)
    assert runs.finalize(campaign, settings, row["run"])["status"] == "finished"
    assert cli.main(["profile", "--campaign", str(campaign.dir), "--run", row["run"], "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["files"]) == 1 and result["files"][0].endswith(".pt.trace.json.gz")
    assert sorted(result["aggregate"]["step_time_us"]) == ["3", "4"]
    assert result["diagnosis"] == [] and any(w.startswith("no GPU kernel in the traces") for w in result["warnings"])
    ranked = ranking.build(campaign.ledger.rows())
    assert not ranked.run(row["run"]).score.rankable  # the profiler slows the steps it records
    assert cli.main(["profile", "--campaign", str(campaign.dir), "--run", base]) == 2
    assert "not launched through the profiler hook" in capsys.readouterr().err


def test_every_launch_checks_the_rows_where_the_run_reads_them(tmp_path):
    np = pytest.importorskip("numpy")
    pytest.importorskip("pyarrow")
    from attune.data import rows as rows_mod

    def write(first_token):
        ids = np.arange(first_token, first_token + 16, dtype=np.int32)
        batch = (2, ids, np.ones(16, np.uint8), np.array([0, 2, 4], np.int32), np.array([0, 8, 0, 8], np.int32))
        return rows_mod.write(tmp_path / "rows.parquet", [batch], {"seq_length": 8})

    sha = write(1)
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(RECIPE.format(python=sys.executable, script=DATA / "fake_megatron.py"))
    settings = make_settings(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX="loc-", AUTOTUNE_GPUH_BUDGET="",
                             AUTOTUNE_BUDGET="20", ATTUNE_ROWS_PATH=str(tmp_path / "rows.parquet"),
                             ATTUNE_ROWS_SHA256=sha)
    campaign = campaign_mod.init(tmp_path / "c", settings, "loc-rows")
    row = runs.launch_baseline(campaign, settings)
    assert row["rows_sha256"] == sha
    env = json.loads((campaign.run_dir(row["run"]) / "local.json").read_text())["env"]
    assert env["ATTUNE_ROWS_SHA256"] == sha and env["ATTUNE_ROWS_PATH"] == str(tmp_path / "rows.parquet")
    assert "ATTUNE_ROWS" not in (campaign.run_dir(row["run"]) / "recipe.yaml").read_text()
    wait(campaign, settings, row["run"], ("succeeded",))
    write(2)  # the rows changed under the campaign
    with pytest.raises(InputError, match="ATTUNE_ROWS_SHA256=%s: the rows at .* hash to [0-9a-f]{64}" % sha):
        runs.launch_baseline(campaign, settings)
    assert [r["run"] for r in campaign.ledger.rows() if r["kind"] == "launch"] == [row["run"]]



def test_a_local_run_takes_its_training_environment_from_its_recipe_not_the_launching_shell(tmp_path, monkeypatch):
    # a variable that changes what training computes or how fast, set in whatever shell launched (or resumed) the
    # campaign, must not reach the job: its result would then depend on that shell, not on its recipe
    script = tmp_path / "dump_env.py"  # the job: writes the environment it was given
    script.write_text("import json, os\njson.dump(dict(os.environ), open('job_env.json', 'w'))\n")
    recipe = RECIPE.format(python=sys.executable, script=script).replace("FAKE_MODE: ok", "NCCL_ALGO: Ring")
    assert "NCCL_ALGO: Ring" in recipe
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    monkeypatch.setenv("NCCL_ALGO", "Tree")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/attune-test-lib")  # the host's plumbing: kept
    monkeypatch.setenv("ATTUNE_TEST_UNLISTED", "kept")  # not a training variable: kept
    monkeypatch.setenv("ATTUNE_SIM_FAULT", "hang")  # the SIMULATED workload's inputs are the recipe's too
    made = local_campaign(tmp_path, recipe, "env-", "env-test")
    campaign, settings = next(made)
    try:
        run = runs.launch_baseline(campaign, settings)["run"]
        wait(campaign, settings, run, ("succeeded",))
        job = json.loads((campaign.run_dir(run) / "work" / "job_env.json").read_text())
        assert job["NCCL_ALGO"] == "Ring", "the recipe's value wins"
        assert "OMP_NUM_THREADS" not in job and "TORCHDYNAMO_DISABLE" not in job and "ATTUNE_SIM_FAULT" not in job
        assert job["LD_LIBRARY_PATH"] == "/opt/attune-test-lib" and job["ATTUNE_TEST_UNLISTED"] == "kept"
        assert job["ATTUNE_RUN_ID"] == run
        spec = json.loads((campaign.run_dir(run) / "local.json").read_text())
        assert {"OMP_NUM_THREADS", "TORCHDYNAMO_DISABLE"} <= set(spec["unset"]), "what was left out is on record"
        assert "NCCL_ALGO" not in spec["unset"] and "LD_LIBRARY_PATH" not in spec["unset"]
    finally:
        for _ in made:
            pass
