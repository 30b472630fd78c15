"""finalize: log + backend facts -> one GPU-hour charge and one result row, whatever the retries."""

from __future__ import annotations

import shutil

from conftest import DATA
from factory import Builder

from attune.campaign import ranking
from attune.campaign.finalize import RunFacts, finalize

LINE = (" [2026-11-02 09:00:{sec:02d}] iteration {it:8d}/      20 | consumed samples: {cs:12d} | elapsed time per "
        "iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): 401.2 | learning rate: 3.000000E-04 | "
        "global batch size:   128 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 1.234 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |")


def megatron_log(path, iterations=range(1, 21), ms=3400.0):
    """A log in Megatron-LM's iteration-line format (SYNTHETIC numbers)."""
    lines = [LINE.format(sec=i % 60, it=i, cs=i * 128, ms=(9000.0 if i == 1 else ms), loss=10.5 - 0.1 * i)
             for i in iterations]
    path.write_text("some startup noise\n" + "\n".join(lines) + "\n[exiting program at iteration 20]\n")
    return path


def setup(tmp_path):
    b = Builder(tmp_path / "c")
    b.launch("r001", "baseline", "base", gpus=8)
    return b


def test_a_good_run_is_finished_scored_and_charged_once(tmp_path):
    b = setup(tmp_path)
    facts = RunFacts("r001", megatron_log(tmp_path / "log.txt"), 0, 1000.0, 1450.0, 8, seq_length=4096)
    row = finalize(b.campaign, facts)
    assert row["status"] == "finished" and row["metrics"]["iter"] == list(range(1, 21))
    assert row["metrics"]["global_batch_size"] == 128 and row["metrics"]["seq_length"] == 4096
    ranked = ranking.build(b.campaign.ledger.rows())
    assert abs(ranked.run("r001").tokens - 128 * 4096 / (3.4 * 8)) < 1e-6
    before = (b.campaign.ledger.read_bytes(), b.campaign.gpu_log.read_bytes())
    assert finalize(b.campaign, facts) == row
    assert (b.campaign.ledger.read_bytes(), b.campaign.gpu_log.read_bytes()) == before
    assert [r["gpu_seconds"] for r in b.campaign.gpu_log.rows()] == [3600]


def test_a_crash_after_the_charge_is_finished_by_a_retry(tmp_path):
    b = setup(tmp_path)
    b.campaign.charge("r001", 8, 450.0, what="run")  # the charge landed, then the process died
    row = finalize(b.campaign, RunFacts("r001", megatron_log(tmp_path / "log.txt"), 0, 1000.0, 1450.0, 8, 4096))
    assert row["status"] == "finished"
    assert len(b.campaign.gpu_log.rows()) == 1


def test_an_oom_is_failed_with_its_evidence(tmp_path):
    b = setup(tmp_path)
    log = tmp_path / "oom.log"
    shutil.copy(DATA / "logs" / "C_failures" / "mlm92_oom_old_format.log", log)
    row = finalize(b.campaign, RunFacts("r001", log, 1, 0.0, 60.0, 8))
    assert row["status"] == "failed" and row["failure"]["class"] == "oom"
    assert row["failure"]["evidence"].startswith("RuntimeError: CUDA out of memory. Tried to allocate 9.33 GiB")
    assert row["failure"]["memory"] == "gpu" and "selective-recompute" in row["failure"]["next_step"]
    assert ranking.build(b.campaign.ledger.rows()).run_status(ranking.build(b.campaign.ledger.rows()).run("r001")) \
        == "run failed: oom (GPU memory)"


def test_a_host_oom_gets_host_advice_and_says_so_in_the_leaderboard(tmp_path):
    b = setup(tmp_path)
    log = tmp_path / "log.txt"
    shutil.copy(DATA / "logs" / "C_failures" / "flingbot11_ray_oom_exception.log", log)
    row = finalize(b.campaign, RunFacts("r001", log, 1, 0.0, 60.0, 8))
    failure = row["failure"]
    assert (failure["class"], failure["memory"], failure["line_no"]) == ("oom", "host", 10)
    assert "recompute" not in failure["next_step"].split("cannot help")[1]  # no GPU lever after the warning
    assert "ATTUNE_LOCAL_MEMORY_MB" in failure["next_step"]
    assert ranking.build(b.campaign.ledger.rows()).run_status(ranking.build(b.campaign.ledger.rows()).run("r001")) \
        == "run failed: oom (host memory)"


def test_the_backends_message_explains_a_run_whose_log_does_not(tmp_path):
    b = setup(tmp_path)
    log = megatron_log(tmp_path / "log.txt", iterations=range(1, 4))
    message = ("Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
               + (DATA / "logs" / "C_failures" / "slime1845_raylet_oom_checkpoint.log").read_text())
    row = finalize(b.campaign, RunFacts("r001", log, 1, 0.0, 60.0, 8, backend_message=message))
    failure = row["failure"]
    assert (failure["class"], failure["memory"], failure["source"], failure["line_no"]) == ("oom", "host", "backend",
                                                                                             None)
    assert "killed due to memory pressure (OOM)" in failure["evidence"]


def test_a_restarted_log_is_scored_on_its_last_run(tmp_path):
    b = setup(tmp_path)
    log = tmp_path / "log.txt"
    megatron_log(log, iterations=range(1, 8), ms=9999.0)
    first = log.read_text()
    megatron_log(log)
    log.write_text(first + log.read_text())
    row = finalize(b.campaign, RunFacts("r001", log, 0, 0.0, 900.0, 8, 4096))
    assert row["metrics"]["iter"] == list(range(1, 21)) and 9999.0 not in row["metrics"]["step_ms"]
    assert any("restarts at line" in warning for warning in row["warnings"])


def test_no_log_and_a_bad_exit_is_a_crash(tmp_path):
    b = setup(tmp_path)
    row = finalize(b.campaign, RunFacts("r001", tmp_path / "missing.txt", 137, 0.0, 10.0, 8))
    assert row["status"] == "failed" and row["failure"]["class"] == "crash"
    assert "no log at" in row["warnings"][0]


def test_a_step_too_short_to_time_is_warned_about():
    from attune.campaign.finalize import metrics_columns

    def parsed(ms):
        return {"steps": [{"step": i, "elapsed_ms": ms, "global_batch_size": 8, "lm_loss": 1.0, "skipped": 0,
                           "nan": 0, "line_no": i} for i in range(1, 21)]}
    _metrics, warnings = metrics_columns(parsed(0.4), 128, 1)
    assert warnings == ["the median step takes 0.40 ms: Megatron prints it to 0.1 ms, so one printed digit moves "
                        "tokens/s/GPU by 25% or more; the score is dominated by rounding"]
    assert metrics_columns(parsed(512.0), 128, 1)[1] == []


def test_a_failing_pod_hook_does_not_fail_a_run_that_finished(tmp_path, capsys):
    from attune.pod_hooks import wrap
    from attune.pod_hooks.hooks import Hook

    class Broken(Hook):
        def after(self, ctx, exit_code, log_tail):
            raise RuntimeError("no trace was written under /mnt/shared/r001/pod_hooks/profile")
    hook = Broken("profiler", {})
    assert not wrap._call(hook, {}, "after", lambda: hook.after(None, 0, []))
    hook_line = capsys.readouterr().err  # what the wrapper prints, as it lands at the end of the log
    assert hook_line.startswith("attune-pod-hooks: profiler failed: RuntimeError: ")
    log = megatron_log(tmp_path / "log.txt")
    log.write_text(log.read_text() + hook_line)
    b = setup(tmp_path)
    row = finalize(b.campaign, RunFacts("r001", log, 0, 1000.0, 1450.0, 8, seq_length=4096))
    assert row["status"] == "finished" and "failure" not in row


def test_a_log_too_large_to_hold_as_lines_is_triaged_from_the_parse(tmp_path, monkeypatch):
    from attune.campaign import finalize as finalize_mod
    monkeypatch.setattr(finalize_mod, "CRASH_SCAN_BYTES", 100)  # any log is "large": no lines are held
    b = setup(tmp_path)
    log = megatron_log(tmp_path / "log.txt", iterations=range(1, 8))
    crash = (DATA / "logs" / "F_formats" / "nemo1_speech3493_bar_then_error.log").read_text()  # real crash lines
    log.write_text(log.read_text() + crash)
    row = finalize(b.campaign, RunFacts("r001", log, 1, 0.0, 60.0, 8, 4096))
    assert row["status"] == "failed" and row["failure"]["class"] == "crash"
    assert row["failure"]["evidence"] == "Traceback (most recent call last):"
    assert row["metrics"]["iter"] == list(range(1, 8)) + [32]  # the progress bar before the error is a step too
