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
