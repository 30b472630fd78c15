"""The in-pod wrapper and its hooks, around small local programs that print Megatron-like lines."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import SCRIPTS

from attune.pod_hooks import wrap
from attune.pod_hooks.hooks import HOOKS, Hook

WRAP = SCRIPTS / "pod_hooks" / "wrap.py"
TORCH = importlib.util.find_spec("torch") is not None
README = (SCRIPTS / "pod_hooks" / "README.md").read_text()

JOB = textwrap.dedent('''\
    import json, os, signal, sys, time
    mode = sys.argv[1]
    print(" [2025-01-01 10:00:00.000000] iteration        1/      10 | consumed samples:            8 |"
          " elapsed time per iteration (ms): 812.3 | learning rate: 3.000000E-04 | global batch size:     8 |"
          " lm loss: 1.123456E+01 | loss scale: 1.0 | number of skipped iterations:   0 |"
          " number of nan iterations:   0 |", flush=True)
    print("pod-0:12:12 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", flush=True)
    print("pod-0:12:12 [0] NCCL INFO comm 0x55d1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0")
    print("pod-0:12:12 [0] NCCL INFO Channel 00/24 :    0   1   2   3   4   5   6   7")
    print("pod-0:12:12 [0] NCCL INFO ncclCommInitRank comm 0x55d1 rank 0 nranks 8 cudaDev 0 - Init COMPLETE")
    keys = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "ATTUNE_PROFILE_STEPS", "ATTUNE_PROFILE_DIR",
            "ATTUNE_MEMORY_HISTORY", "ATTUNE_POD_HOOKS_OUT", "BOOM")
    print("ENV " + json.dumps({key: os.environ.get(key) for key in keys}), flush=True)
    if mode == "fail":
        sys.exit(1)
    if mode == "oom":
        folder = os.environ.get("ATTUNE_MEMORY_SNAPSHOT_DIR")
        if folder:
            open(os.path.join(folder, "oom_snapshot.rank0.pid7.pickle"), "wb").write(b"x")
        print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"
              " capacity of 79.11 GiB of which 1.02 GiB is free.", file=sys.stderr, flush=True)
        sys.exit(1)
    if mode == "helpers":
        from attune.pod_hooks import memory
        from attune.pod_hooks.profiler import maybe_profile
        memory.install()
        for step in range(6):
            with maybe_profile(step):
                pass
    if mode in ("sleep", "sleep-default"):
        if mode == "sleep":
            def on_term(*_):
                print("child got SIGTERM", flush=True)
                sys.exit(42)
            signal.signal(signal.SIGTERM, on_term)
        print("ready", flush=True)
        time.sleep(30)
    ''')


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return path


def _env(path=None):
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    if path is not None:
        env["PATH"] = path
    return env


def wrapped(out, hooks, entrypoint, hook_args=(), path=None):
    """Run the wrapper as a file, as a pod would, with no PYTHONPATH of its own."""
    argv = [sys.executable, str(WRAP), "--hooks", hooks, "--out", str(out)]
    for item in hook_args:
        argv += ["--hook-arg", item]
    return subprocess.run(argv + ["--"] + [str(a) for a in entrypoint], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, env=_env(path), timeout=60)


def record(out):
    return json.loads((out / "pod_hooks.json").read_text())


def hook_entry(out, name):
    return next(entry for entry in record(out)["hooks"] if entry["name"] == name)


def child_env(stdout):
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("ENV "))[4:])


def test_registry_is_a_plain_dict_of_the_five_hooks():
    assert type(HOOKS) is dict
    assert sorted(HOOKS) == ["cpu", "gpu_facts", "nccl_debug", "oom_snapshot", "profiler"]
    assert all(issubclass(cls, Hook) for cls in HOOKS.values())


@pytest.mark.parametrize("mode, code", [("ok", 0), ("fail", 1)])
def test_no_hooks_passes_output_and_exit_code_through(tmp_path, job, mode, code):
    done = wrapped(tmp_path / "out", "", [sys.executable, job, mode])
    assert done.returncode == code
    assert " iteration        1/      10 |" in done.stdout and done.stderr == ""
    row = record(tmp_path / "out")
    assert row["schema_version"] == 1 and row["status"] == "finished"
    assert row["exit_code"] == code and row["hooks"] == [] and row["signal"] is None


def test_module_form_runs_the_same(tmp_path, job):
    done = subprocess.run([sys.executable, "-m", "attune.pod_hooks.wrap", "--hooks", "nccl_debug", "--out",
                           str(tmp_path / "out"), "--", sys.executable, str(job), "ok"], cwd=str(SCRIPTS),
                          stdout=subprocess.PIPE, universal_newlines=True, env=_env(), timeout=60)
    assert done.returncode == 0 and child_env(done.stdout)["NCCL_DEBUG"] == "INFO"


def test_unknown_hook_exits_2_naming_the_valid_ones_and_runs_nothing(tmp_path, job):
    done = wrapped(tmp_path / "out", "gpu_facts,flamegraph", [sys.executable, job, "ok"])
    assert done.returncode == 2 and done.stdout == ""
    assert "unknown hook flamegraph; valid hooks: cpu, gpu_facts, nccl_debug, oom_snapshot, profiler" in done.stderr
    assert not (tmp_path / "out" / "pod_hooks.json").exists()


@pytest.mark.parametrize("argv, message", [
    (["--hooks", "profiler", "--out", "OUT", "--hook-arg", "profiler.steps=1:2", "--", "true"],
     "profiler takes dir, end, mode, ranks, start"),
    (["--hooks", "profiler", "--out", "OUT", "--hook-arg", "nccl_debug.level=INFO", "--", "true"],
     "hook 'nccl_debug' is not in --hooks"),
    (["--hooks", "profiler", "--out", "OUT", "--hook-arg", "profiler.end=3", "--", "true"],
     "profiler.end=3: expected an integer >= 11"),
    (["--hooks", "nccl_debug", "--out", "OUT", "--hook-arg", "nccl_debug", "--", "true"],
     "expected NAME.KEY=VALUE"),
    (["--hooks", "nccl_debug,nccl_debug", "--out", "OUT", "--", "true"], "named twice"),
    (["--hooks", "nccl_debug", "--out", "OUT", "true"], "no entrypoint"),
    (["--hooks", "nccl_debug", "--out", "OUT", "--"], "no entrypoint"),
])
def test_usage_errors_exit_2_before_anything_runs(tmp_path, capsys, argv, message):
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert wrap.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "pod_hooks.json").exists()


def test_an_entrypoint_that_cannot_start_exits_127_and_is_recorded(tmp_path):
    done = wrapped(tmp_path / "out", "nccl_debug", [tmp_path / "no-such-program"])
    assert done.returncode == 127 and "cannot start the entrypoint" in done.stderr
    row = record(tmp_path / "out")
    assert row["exit_code"] == 127 and "FileNotFoundError" in row["entrypoint_error"]


def _fake_nvidia_smi(folder):
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text("#!%s\n" % sys.executable + textwrap.dedent('''\
        import sys
        if sys.argv[1:] == ["topo", "-m"]:
            print("\\tGPU0\\tGPU1\\tCPU Affinity\\nGPU0\\t X \\tNV18\\t0-55\\nGPU1\\tNV18\\t X \\t0-55")
        else:
            print("NVIDIA H200, 1980 MHz, 1980 MHz, 143771 MiB")
            print("NVIDIA H200, [N/A], 1980 MHz, 143771 MiB")
        '''))
    script.chmod(0o755)
    return folder


def test_gpu_facts_records_gpus_topology_env_and_nccl_init_lines(tmp_path, job):
    fake = _fake_nvidia_smi(tmp_path / "bin")
    out = tmp_path / "out"
    done = wrapped(out, "nccl_debug,gpu_facts", [sys.executable, job, "ok"],
                   path="%s%s%s" % (fake, os.pathsep, os.environ.get("PATH", "")))
    assert done.returncode == 0
    entry = hook_entry(out, "gpu_facts")
    assert entry["status"] == "ok"
    facts = json.loads((out / "gpu_facts.json").read_text())
    assert facts["schema_version"] == 1 and facts["nvidia_smi"] == str(fake / "nvidia-smi")
    assert facts["gpus"][0] == {"raw": "NVIDIA H200, 1980 MHz, 1980 MHz, 143771 MiB", "name": "NVIDIA H200",
                                "clocks_sm_mhz": 1980, "clocks_max_sm_mhz": 1980, "memory_total_mib": 143771}
    assert facts["gpus"][1]["clocks_sm_mhz"] is None
    assert "GPU0\t X \tNV18" in facts["topo"]
    assert facts["env"]["NCCL_DEBUG"] == "INFO"  # the child's env, after nccl_debug
    assert [line.split("NCCL INFO ")[1][:20] for line in facts["nccl_init_lines"]] == [
        "NCCL version 2.21.5+", "comm 0x55d1 rank 0 n", "ncclCommInitRank com"]


def test_gpu_facts_without_nvidia_smi_says_so(tmp_path, job):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = wrapped(tmp_path / "out", "gpu_facts", [sys.executable, job, "fail"], path=str(empty))
    assert done.returncode == 1
    entry = hook_entry(tmp_path / "out", "gpu_facts")
    assert entry["status"] == "ok" and entry["facts"]["nvidia_smi"] == "nvidia-smi not found"
    assert "gpus" not in entry["facts"] and len(entry["facts"]["nccl_init_lines"]) == 3


def test_nccl_debug_sets_the_childs_env_with_configurable_subsystems(tmp_path, job):
    done = wrapped(tmp_path / "out", "nccl_debug", [sys.executable, job, "ok"],
                   hook_args=["nccl_debug.subsys=INIT,GRAPH"])
    env = child_env(done.stdout)
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH"
    assert env["ATTUNE_POD_HOOKS_OUT"] == str((tmp_path / "out").resolve())
    assert hook_entry(tmp_path / "out", "nccl_debug")["facts"]["set"]["NCCL_DEBUG_SUBSYS"] == "INIT,GRAPH"


def test_oom_snapshot_notes_the_oom_and_the_snapshot_file(tmp_path, job):
    out = tmp_path / "out"
    done = wrapped(out, "oom_snapshot", [sys.executable, job, "oom"])
    assert done.returncode == 1 and "CUDA out of memory" in done.stderr
    assert child_env(done.stdout)["ATTUNE_MEMORY_HISTORY"] == "100000"
    entry = hook_entry(out, "oom_snapshot")
    assert entry["status"] == "ok" and entry["facts"]["oom"] is True
    assert entry["facts"]["oom_lines"][0].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert entry["facts"]["snapshots"] == [str(out.resolve() / "memory" / "oom_snapshot.rank0.pid7.pickle")]
    assert record(out)["exit_code"] == 1


def test_oom_snapshot_without_an_oom_finds_none(tmp_path, job):
    done = wrapped(tmp_path / "out", "oom_snapshot", [sys.executable, job, "ok"])
    entry = hook_entry(tmp_path / "out", "oom_snapshot")
    assert done.returncode == 0 and entry["status"] == "ok" and entry["facts"]["oom"] is False


@pytest.mark.skipif(TORCH, reason="torch is installed: the helpers profile for real "
                                  "(test_profiler_writes_a_trace_from_a_cpu_torch_loop)")
def test_helpers_in_a_job_without_torch_are_recorded_as_skipped(tmp_path, job):
    out = tmp_path / "out"
    done = wrapped(out, "profiler,oom_snapshot", [sys.executable, job, "helpers"],
                   hook_args=["profiler.start=2", "profiler.end=4"])
    assert done.returncode == 0, done.stderr
    env = child_env(done.stdout)
    assert env["ATTUNE_PROFILE_STEPS"] == "2:4" and env["ATTUNE_PROFILE_DIR"] == str(out.resolve() / "profile")
    for name in ("profiler", "oom_snapshot"):
        entry = hook_entry(out, name)
        assert (entry["status"], entry["reason"]) == ("skipped", "torch not importable in the job"), entry
        assert "%s skipped: torch not importable in the job" % name in done.stderr


class _Boom(Hook):
    ARGS = {"phase": ("before", "the phase that raises")}

    def before(self, ctx):
        ctx.env["BOOM"] = "half-done"
        self.facts["tried"] = True
        if self.args["phase"] == "before":
            raise RuntimeError("cannot reach the shared volume")

    def after(self, ctx, exit_code, log_tail):
        raise RuntimeError("after exit %d" % exit_code)


def test_a_hook_that_raises_is_recorded_and_the_run_goes_on(tmp_path, job, monkeypatch, capsys):
    monkeypatch.setitem(HOOKS, "boom", _Boom)
    monkeypatch.setitem(HOOKS, "boom_late", _Boom)
    out = tmp_path / "out"
    code = wrap.main(["--hooks", "boom,nccl_debug,boom_late", "--out", str(out), "--hook-arg",
                      "boom_late.phase=after", "--", sys.executable, str(job), "fail"])
    captured = capsys.readouterr()
    assert code == 1  # the program's, not the hooks'
    assert "attune-pod-hooks: boom failed: RuntimeError: cannot reach the shared volume" in captured.err
    assert "attune-pod-hooks: boom_late failed: RuntimeError: after exit 1" in captured.err
    env = child_env(captured.out)
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["BOOM"] == "half-done"  # from boom_late, whose before() went through; boom's was dropped
    boom, nccl, late = record(out)["hooks"]
    assert (boom["status"], boom["phase"], boom["facts"]) == ("failed", "before", {"tried": True})
    assert boom["error"] == "RuntimeError: cannot reach the shared volume"
    assert nccl["status"] == "ok"
    assert (late["status"], late["phase"], late["error"]) == ("failed", "after", "RuntimeError: after exit 1")
    assert record(out)["exit_code"] == 1


def test_a_hook_failing_before_leaves_the_childs_env_untouched(tmp_path, job, monkeypatch, capsys):
    monkeypatch.setitem(HOOKS, "boom", _Boom)
    assert wrap.main(["--hooks", "boom", "--out", str(tmp_path / "out"), "--", sys.executable,
                      str(job), "ok"]) == 0
    assert child_env(capsys.readouterr().out)["BOOM"] is None


@pytest.mark.parametrize("mode, code, sig", [("sleep", 42, None), ("sleep-default", 143, "SIGTERM")])
def test_sigterm_to_the_wrapper_reaches_the_child(tmp_path, job, mode, code, sig):
    out = tmp_path / "out"
    wrapper = subprocess.Popen([sys.executable, str(WRAP), "--hooks", "nccl_debug", "--out", str(out), "--",
                                sys.executable, str(job), mode], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, universal_newlines=True, env=_env())
    try:
        deadline = time.monotonic() + 20
        for line in wrapper.stdout:
            if line.strip() == "ready" or time.monotonic() > deadline:
                break
        wrapper.send_signal(signal.SIGTERM)
        rest, _err = wrapper.communicate(timeout=20)
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
    assert wrapper.returncode == code
    assert ("child got SIGTERM" in rest) == (mode == "sleep")
    row = record(out)
    assert (row["exit_code"], row["signal"], row["status"]) == (code, sig, "finished")


def test_profiler_appends_megatron_flags_to_pretrain_gpt(tmp_path):
    script = tmp_path / "pretrain_gpt.py"
    script.write_text(textwrap.dedent('''\
        import json, os, sys
        print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
        tb = sys.argv[sys.argv.index("--tensorboard-dir") + 1]
        open(os.path.join(tb, "rank_0.1700000000000000000.pt.trace.json"), "w").write("{}")
        '''))
    out = tmp_path / "out"
    done = wrapped(out, "profiler", [sys.executable, script, "--tensor-model-parallel-size", "2"],
                   hook_args=["profiler.start=3", "profiler.end=5", "profiler.ranks=0,7"])
    assert done.returncode == 0, done.stderr
    argv = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("ARGV "))[5:])
    profile = str(out.resolve() / "profile")
    assert argv == ["--tensor-model-parallel-size", "2", "--profile", "--use-pytorch-profiler",
                    "--profile-step-start", "3", "--profile-step-end", "5", "--profile-ranks", "0", "7",
                    "--tensorboard-dir", profile]
    entry = hook_entry(out, "profiler")
    assert entry["status"] == "ok" and entry["facts"]["mode"] == "megatron" and "warnings" not in entry
    assert entry["facts"]["traces"] == [os.path.join(profile, "rank_0.1700000000000000000.pt.trace.json")]
    assert record(out)["launched"][-len(argv):] == argv


def test_profiler_keeps_a_jobs_own_tensorboard_dir(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import json, sys\nprint('ARGV ' + json.dumps(sys.argv[1:]))\n")
    tensorboard = tmp_path / "tb"
    done = wrapped(tmp_path / "out", "profiler", [sys.executable, script, "--tensorboard-dir=%s" % tensorboard])
    argv = json.loads(done.stdout.split("ARGV ", 1)[1])
    assert argv[-2:] == ["--profile-ranks", "0"] and not any(a == "--tensorboard-dir" for a in argv)
    entry = hook_entry(tmp_path / "out", "profiler")
    assert entry["facts"]["trace_dirs"] == [str(tensorboard), str(tmp_path / "torch_profile")]
    assert entry["status"] == "ok" and entry["warnings"][0].startswith("no trace file in %s" % tensorboard)


TORCH_JOB = textwrap.dedent('''\
    import torch
    from attune.pod_hooks.profiler import maybe_profile
    weight = torch.randn(64, 64)
    for step in range(6):
        with maybe_profile(step):
            (torch.randn(32, 64) @ weight).relu().sum()
    print("done", flush=True)
    ''')


@pytest.mark.skipif(not TORCH, reason="torch is not installed")
def test_profiler_writes_a_trace_from_a_cpu_torch_loop(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(TORCH_JOB)
    out = tmp_path / "out"
    done = wrapped(out, "profiler", [sys.executable, script], hook_args=["profiler.start=2", "profiler.end=4"])
    assert done.returncode == 0, done.stderr
    traces = sorted((out / "profile").glob("rank_0.*.pt.trace.json.gz"))
    assert len(traces) == 1, list((out / "profile").iterdir())
    steps = set(re.findall(r"ProfilerStep#(\d+)", gzip.open(str(traces[0]), "rt").read()))
    assert {"2", "3"} <= steps <= {"1", "2", "3", "4"}
    entry = hook_entry(out, "profiler")
    assert entry["status"] == "ok" and entry["facts"]["traces"] == [str(traces[0].resolve())]


class _FakeProfile:
    """torch.profiler.profile's schedule and step semantics, enough to drive maybe_profile without torch."""

    made = []

    def __init__(self, activities, schedule, on_trace_ready, **_options):
        self.schedule, self.on_trace_ready = schedule, on_trace_ready
        self.step_num, self.current_action, self.steps = 0, schedule(0), []
        _FakeProfile.made.append(self)

    def start(self):
        self.started = (self.step_num, self.current_action)
        self.steps.append(self.step_num)

    def step(self):
        previous = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        if previous == "RECORD_AND_SAVE":
            self.on_trace_ready(self)
        self.steps.append(self.step_num)

    def stop(self):
        self.stopped = True


def _fake_schedule(wait, warmup, active, repeat):
    def action(step):
        if step >= (wait + warmup + active) * repeat:
            return "NONE"
        if step < wait:
            return "NONE"
        if step < wait + warmup:
            return "WARMUP"
        return "RECORD_AND_SAVE" if step == wait + warmup + active - 1 else "RECORD"
    return action


def test_maybe_profile_follows_megatrons_schedule_on_the_jobs_step_numbers(tmp_path, monkeypatch):
    import types

    from attune.pod_hooks import profiler, helper_status as status

    def handler(directory, worker_name, use_gzip):
        return lambda prof: Path(directory, "%s.1.pt.trace.json.gz" % worker_name).write_text("{}")

    fake = types.ModuleType("torch.profiler")
    fake.ProfilerActivity = types.SimpleNamespace(CPU="cpu", CUDA="cuda")
    fake.profile, fake.schedule, fake.tensorboard_trace_handler = _FakeProfile, _fake_schedule, handler
    torch = types.ModuleType("torch")
    torch.profiler, torch.cuda = fake, types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.profiler", fake)
    monkeypatch.setattr(profiler, "_SESSION", None)
    monkeypatch.setattr(_FakeProfile, "made", [])
    monkeypatch.setenv("ATTUNE_PROFILE_STEPS", "3:5")
    monkeypatch.setenv("ATTUNE_PROFILE_DIR", str(tmp_path / "profile"))
    monkeypatch.setenv("ATTUNE_POD_HOOKS_OUT", str(tmp_path))
    for step in range(8):
        with profiler.maybe_profile(step):
            pass
    (prof,) = _FakeProfile.made
    assert prof.started == (2, "WARMUP") and prof.steps == [2, 3, 4, 5] and prof.stopped
    assert [p.name for p in (tmp_path / "profile").iterdir()] == ["rank_0.1.pt.trace.json.gz"]
    (row,) = status.read(tmp_path, "profiler")
    assert (row["status"], row["last_step"]) == ("ok", 4)


def test_readme_documents_every_hook_and_argument():
    for name, cls in HOOKS.items():
        assert "### `%s`" % name in README, name
        for key in cls.ARGS:
            assert "`%s.%s`" % (name, key) in README, (name, key)
    for text in ("pod_hooks.json", "gpu_facts.json", "maybe_profile", "memory.install()", "ATTUNE_PROFILE_STEPS",
                 "ATTUNE_PROFILE_DIR", "ATTUNE_MEMORY_HISTORY", "candidate.json", "never kills the run",
                 "python3 -m attune.pod_hooks.wrap"):
        assert text in README, text
