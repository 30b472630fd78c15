"""Named log cases (tests/data/log_cases): real excerpts and what must become of them."""

from __future__ import annotations

from conftest import DATA

from attune_core import logparse, triage
from attune_core.finalize import metrics_columns
from attune_core.measure import score_run

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
