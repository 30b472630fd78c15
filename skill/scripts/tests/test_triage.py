"""Failure triage on real failure logs (tests/data/logs) and on Kubernetes event texts."""

from __future__ import annotations

import re

import pytest
from conftest import DATA, REPO

from attune_core import logparse, triage

LOGS = DATA / "logs"


def classify_file(path, **kwargs):
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    return triage.classify(logparse.parse_file(path), log_lines=lines, **kwargs)


@pytest.mark.parametrize("name, cls, line_no", [
    ("C_failures/mlm92_oom_old_format.log", "oom", 9),
    ("C_failures/slime1767_ray_task_error_oom.log", "oom", 15),
    ("C_failures/tau2_monitor_slime_cuda_oom.log", "oom", 2),
    ("C_failures/easyr1_185_raylet_oom.log", "oom", 1),
    ("C_failures/kuberay4287_head_oomkilled.log", "oom", 5),
    ("C_failures/mlm935_nccl_watchdog_distbackenderror.log", "nccl_timeout", 2),
    ("C_failures/verl7040_cuda_device_max_connections.log", "config_error", 1),
    ("C_failures/gbs_assert_quoted_in_notes.log", "config_error", 1),
    ("A_iteration/megds396_gradnorm_nan.log", "nan_loss", 1),
])
def test_real_failures_are_classed_with_their_evidence_line(name, cls, line_no):
    path = LOGS / name
    found = classify_file(path, exit_code=1)
    assert found is not None and found.cls == cls, found
    assert found.line_no == line_no
    assert found.evidence == path.read_text().split("\n")[line_no - 1].strip()
    assert found.next_step == triage.CLASSES[cls][1]


def test_a_clean_log_is_no_failure_and_an_exit_code_alone_is_a_crash():
    path = LOGS / "A_iteration" / "epfl11_slow.log"
    assert classify_file(path) is None
    assert classify_file(path, exit_code=0) is None
    found = classify_file(path, exit_code=139)
    assert found.cls == "crash" and found.source == "exit_code"


def test_fp16_skipped_iterations_are_not_nan_loss():
    assert classify_file(LOGS / "A_iteration" / "mlm602_fp16_skipped.log") is None


def test_events_come_first():
    log = LOGS / "C_failures" / "mlm92_oom_old_format.log"
    # Kubernetes event messages in the form `kubectl get events` prints them
    unschedulable = "Warning  FailedScheduling  pod/x  0/8 nodes are available: 8 Insufficient nvidia.com/gpu."
    pull = "Warning  Failed  pod/x  Failed to pull image \"registry.example/megatron:bad\": not found"
    assert classify_file(log, events=[pull, unschedulable]).cls == "unschedulable"
    assert classify_file(log, events=[pull]).cls == "image_pull"
    assert classify_file(log, events=["Normal  Pulled  pod/x  Successfully pulled image"]).cls == "oom"


def test_hang_needs_the_limit_to_pass():
    path = LOGS / "A_iteration" / "epfl11_slow.log"
    assert classify_file(path, seconds_without_progress=100, hang_after_s=900) is None
    found = classify_file(path, seconds_without_progress=1200, hang_after_s=900)
    assert found.cls == "hang" and "after iteration 185" in found.evidence


def test_every_class_is_documented():
    text = (REPO / "skill" / "references" / "failure_triage.md").read_text()
    documented = re.findall(r"^## `(\w+)`", text, re.M)
    assert documented == list(triage.CLASSES)


ITERATION = (" [2026-11-02 09:00:{sec:02d}] iteration {it:8d}/      20 | consumed samples: {cs:12d} | elapsed time per "
             "iteration (ms): 3400.0 | learning rate: 3.000000E-04 | global batch size:   128 | lm loss: 9.0E+00 | "
             "loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |")


def completed_log(extra=()):
    """A run that logged all 20 of its iterations, then ``extra`` lines."""
    return [ITERATION.format(sec=i, it=i, cs=128 * i) for i in range(1, 21)] + list(extra)


def classify_lines(lines, **kwargs):
    return triage.classify(logparse.parse_lines(line + "\n" for line in lines), log_lines=lines, **kwargs)


def test_an_oomkilled_event_is_the_cause_of_a_logged_nccl_timeout():
    log = LOGS / "C_failures" / "mlm935_nccl_watchdog_distbackenderror.log"
    event = "Warning  OOMKilled  pod/x-worker-3  Container ray-worker was OOMKilled"
    found = classify_file(log, exit_code=1, events=["Normal  Pulled  pod/x  Successfully pulled image", event])
    assert (found.cls, found.source, found.evidence) == ("oom", "events", event)
    assert classify_file(log, exit_code=1).cls == "nccl_timeout"


@pytest.mark.parametrize("line", [
    "pretrain_gpt.py: error: unrecognized arguments: --foo",
    "[rank0]: pretrain_gpt.py: error: argument --num-layers: invalid int value: 'x'",
])
def test_an_argparse_error_is_a_config_error(line):
    lines = ["usage: pretrain_gpt.py [-h] [--num-layers NUM_LAYERS] ...", line]
    found = classify_lines(lines, exit_code=2)
    assert (found.cls, found.line_no, found.evidence) == ("config_error", 2, line.strip())


def test_events_do_not_fail_a_run_that_exited_0_with_its_iterations():
    transient = ["Warning  FailedScheduling  pod/x-head  0/8 nodes are available: 8 Insufficient nvidia.com/gpu.",
                 "Warning  Failed  pod/x-worker  Failed to pull image \"registry.example/megatron:1\": timeout",
                 "Warning  OOMKilled  pod/x-old  Container was OOMKilled"]
    assert classify_lines(completed_log(), exit_code=0, events=transient) is None
    assert classify_lines(completed_log(), exit_code=1, events=transient).cls == "unschedulable"
    assert classify_lines([], exit_code=0, events=transient).cls == "unschedulable"  # nothing ran


def test_pod_hook_lines_are_never_failure_evidence():
    from pod_hooks.status import PREFIX
    hook_lines = ["%s profiler failed: RuntimeError: no trace written" % PREFIX,
                  "%s oom_snapshot failed: AssertionError: must be set" % PREFIX,
                  "%s memory warning: torch.OutOfMemoryError: CUDA out of memory (a hook's own)" % PREFIX,
                  "%s nccl_debug failed: ProcessGroupNCCL Timeout reading a file" % PREFIX]
    assert classify_lines(completed_log(hook_lines), exit_code=0) is None
    assert logparse.parse_lines(line + "\n" for line in hook_lines)["failures"] == []
    # the run's own error lines still count, and a hook's line never stands in for the exit code
    assert classify_lines(completed_log(hook_lines), exit_code=1).source == "exit_code"
    assert classify_lines(completed_log(["RuntimeError: boom"] + hook_lines), exit_code=1).evidence == \
        "RuntimeError: boom"


def test_exit_0_after_the_last_iteration_is_finished_whatever_prints_after_it():
    shutdown = ["[exiting program at iteration 20]", "Exception ignored in: <function Pool.__del__ at 0x7f>",
                "Traceback (most recent call last):", "TypeError: 'NoneType' object is not callable"]
    assert classify_lines(completed_log(shutdown), exit_code=0) is None
    # the same lines after 15 of 20 iterations, or with a failed exit, are still a crash
    assert classify_lines(completed_log()[:15] + shutdown, exit_code=0).cls == "crash"
    assert classify_lines(completed_log(shutdown), exit_code=1).evidence == shutdown[-1]
