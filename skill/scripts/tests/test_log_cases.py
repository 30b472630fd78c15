"""Named log cases (tests/data/log_cases): real excerpts and what must become of them."""

from __future__ import annotations

from conftest import DATA

from attune.core import logparse, triage
from attune.campaign.finalize import metrics_columns
from attune.core.measure import score_run

LOGS = DATA / "logs"


def parse(name):
    path = LOGS / name
    return logparse.parse_file(path), path.read_text().split("\n")


def test_every_case_folder_names_a_real_log():
    for case in sorted(p for p in (DATA / "log_cases").iterdir() if p.is_dir()):
        text = (case / "CASE.md").read_text()
        name = text.split("Log: `logs/", 1)[1].split("`", 1)[0]
        assert (LOGS / name).is_file(), case.name


def test_oom():
    parsed, lines = parse("C_failures/mlm92_oom_old_format.log")
    assert [(f["kind"], f["line_no"]) for f in parsed["failures"]] == [("oom", 9)]
    found = triage.classify(parsed, exit_code=1, log_lines=lines)
    assert found.cls == "oom" and found.line_no == 9


def test_nan():
    parsed, lines = parse("A_iteration/megds396_gradnorm_nan.log")
    assert [step["grad_norm"] for step in parsed["steps"]] == ["nan", "nan", "nan"]
    assert triage.classify(parsed, exit_code=0, log_lines=lines).cls == "nan_loss"


def test_truncated():
    parsed, _ = parse("A_iteration/epfl11_slow.log")
    assert [step["step"] for step in parsed["steps"]] == [122, 123, 124, 125, 182, 183, 184, 185]
    metrics, _ = metrics_columns(parsed, 2048, 8)
    assert score_run("finished", metrics).why == "iteration(s) 5-19 of the window 5-19 missing"


def test_restarted():
    parsed, _ = parse("A_iteration/mlm1570_mcore_resume.log")
    assert any("more than one run" in warning for warning in parsed["warnings"])
    metrics, warnings = metrics_columns(parsed, 4096, 8)
    assert metrics["iter"] == [1, 2, 3] and metrics["step_ms"][0] == parsed["steps"][3]["elapsed_ms"]
    assert warnings and "only the last run is scored" in warnings[0]


def test_interleaved_ranks():
    parsed, _ = parse("A_iteration/leonardo_opensciref_srun_prefix.log")
    assert [(m["rank"], m["after_iterations"]) for m in parsed["memory"]] == [(0, 50)]
    assert [step["step"] for step in parsed["steps"]] == [50, 100, 150, 200, 250, 300, 350]


def test_host_oom():
    parsed, lines = parse("C_failures/flingbot11_ray_oom_exception.log")
    assert [(f["kind"], f["line_no"]) for f in parsed["failures"]] == [("ray_oom", 10), ("ray_oom", 11)]
    found = triage.classify(parsed, exit_code=1, log_lines=lines)
    assert (found.cls, found.memory, found.line_no) == ("oom", "host", 10)
    assert "recompute" not in found.next_step.split("cannot help")[1] and "micro" not in found.next_step.split(
        "cannot help")[1]


def test_config_error_any_exception():
    parsed, lines = parse("C_failures/nemo11480_parallel_state_runtimeerror.log")
    assert [(f["kind"], f["line_no"]) for f in parsed["failures"]] == [("validation", 1), ("exception", 3)]
    found = triage.classify(parsed, exit_code=1, log_lines=lines)
    assert (found.cls, found.line_no) == ("config_error", 3)


def test_gpu_oom_outside_torch():
    parsed, lines = parse("C_failures/nccl1235_nccl_cuda_failure_oom.log")
    assert [(f["kind"], f["line_no"]) for f in parsed["failures"]] == [("oom", 14), ("oom", 16)]
    found = triage.classify(parsed, exit_code=1, log_lines=lines)
    assert (found.cls, found.memory, found.line_no) == ("oom", "gpu", 14)
