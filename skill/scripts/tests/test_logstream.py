"""The log parser at any size: the same result however the file is read, the partial-last-line rule,
and the bounds on what it keeps (logparse's docstring, **Reading** and **Bounds**)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from conftest import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attune import cli
from attune.core import logbounds, logparse, triage
from attune.campaign.finalize import metrics_columns

LOGS = DATA / "logs"
REAL = sorted(LOGS.glob("*/*.log"))
# A real Megatron-LM line (tests/data/logs/A_iteration/mlm602_fp16_skipped.log, line 3) with its iteration,
# step time and loss replaced: every number below is SYNTHETIC.
LINE = (" iteration {it:8d}/ 2753818 | consumed samples: {cs:12d} | elapsed time per iteration (ms): {ms:.1f} | "
        "learning rate: 1.000E-04 | global batch size:     8 | lm loss: {loss} | loss scale: 16384.0 | "
        "number of skipped iterations:   {skipped} | number of nan iterations:   0 |\n")


def line(it, ms=None, loss="1.000000E+01", skipped=0):
    return LINE.format(it=it, cs=8 * it, ms=1000.0 + it if ms is None else ms, loss=loss, skipped=skipped)


def without_path(parsed):
    return {key: value for key, value in parsed.items() if key != "path"}


@pytest.mark.parametrize("chunk", [7, 64, 4096])
@pytest.mark.parametrize("log", REAL, ids=[path.name for path in REAL])
def test_a_log_parses_the_same_whole_or_streamed_in_any_chunks(log, chunk, monkeypatch):
    whole = logparse.parse_lines([log.read_text(encoding="utf-8", errors="replace")], complete=True)
    monkeypatch.setattr(logparse, "CHUNK_CHARS", chunk)
    assert without_path(logparse.parse_file(log, complete=True)) == whole


def test_a_last_line_without_its_newline_is_not_read_until_it_ends(tmp_path):
    log = tmp_path / "log.txt"
    head = line(1) + line(2)
    cut = line(3)[:line(3).index("(ms): ") + len("(ms): 10")]  # mid-number: 1003.0 printed as far as "10"
    log.write_text(head + cut)
    parsed = logparse.parse_file(log)
    assert [step["step"] for step in parsed["steps"]] == [1, 2]
    assert parsed["text"]["partial_last_line"] == {"line_no": 3, "chars": len(cut)}
    assert any(w.startswith("text.partial_last_line: line 3 has no newline") for w in parsed["warnings"])
    assert logparse.refusal(parsed) is None
    complete = logparse.parse_file(log, complete=True)  # the run ended there: its last line is read, not its cut field
    assert [step["step"] for step in complete["steps"]] == [1, 2, 3]
    assert complete["steps"][2]["elapsed_ms"] is None and complete["steps"][2]["consumed_samples"] == 24
    assert complete["text"]["partial_last_line"] is None
    log.write_text(head + line(3))  # the newline arrived
    assert [step["elapsed_ms"] for step in logparse.parse_file(log)["steps"]] == [1001.0, 1002.0, 1003.0]


def test_a_finished_log_without_a_final_newline_keeps_every_terminated_field(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(line(1) + line(2).rstrip("\n"))  # Megatron ends every field with " |"
    steps = logparse.parse_file(log, complete=True)["steps"]
    assert [(step["step"], step["elapsed_ms"], step["nan"]) for step in steps] == [(1, 1001.0, 0), (2, 1002.0, 0)]


def test_a_cut_nemo2_line_never_gives_its_cut_step_time():
    real = (LOGS / "F_formats" / "nemo2_speech14850_rank_prefix.log").read_text().split("\n")[0]
    cut = real[:real.index("train_step_timing in s: ") + len("train_step_timing in s: 27")]  # 27.01 cut to 27
    for parsed in (logparse.parse_lines([cut], complete=True), logparse.parse_lines([cut])):
        assert all(step["elapsed_ms"] is None for step in parsed["steps"])
    step = logparse.parse_lines([cut], complete=True)["steps"][0]
    assert (step["step"], step["lm_loss"], step["global_batch_size"]) == (8, 10.22, 512)


@pytest.fixture
def small_bounds(monkeypatch):
    for name, value in (("STEPS_KEPT", 10), ("TAIL_STEPS", 5), ("RUN_HEAD_STEPS", 3), ("PROBLEM_STEPS", 2),
                        ("RECORDS_KEPT", 2), ("FAILURES_KEPT", 2), ("ERRORS_KEPT", 2), ("WARNINGS_KEPT", 2)):
        for module in (logparse, logbounds):  # the parser's bounds, and the bounded containers' own
            if hasattr(module, name):
                monkeypatch.setattr(module, name, value)


def test_past_the_cap_only_the_tail_the_problems_and_a_late_runs_start_are_kept(small_bounds):
    text = [line(n) for n in range(1, 31)]
    text[19] = line(20, loss="nan")  # a problem past the cap
    text[21] = line(22, skipped=1)
    text[22] = line(23, loss="inf")
    text += [line(n) for n in range(1, 9)]  # a restart past the cap
    parsed = logparse.parse_lines(text)
    kept = [(step["line_no"], step["step"]) for step in parsed["steps"]]
    assert kept == ([(n, n) for n in range(1, 11)] + [(20, 20), (22, 22)]  # head, the first 2 problems
                    + [(31, 1), (32, 2), (33, 3)] + [(n, n - 30) for n in range(34, 39)])  # the new run's start, tail
    summary = parsed["summary"]
    assert summary["steps"] == 38 and parsed["counts"]["steps"] == 38 and summary["problem_steps"] == 3
    assert summary["runs"] == 2 and summary["last_run_start"] == {"line_no": 31, "step": 1, "after_step": 30,
                                                                  "after_line_no": 30}
    assert summary["skipped_iterations"] == 1
    assert any(w.startswith("steps.bounded: 38 steps read, 20 kept in full") for w in parsed["warnings"])
    last, start = logparse.last_run(parsed)
    assert [step["step"] for step in last] == list(range(1, 9)) and start["line_no"] == 31
    found = triage.classify(parsed, exit_code=0)
    assert (found.cls, found.line_no) == ("nan_loss", 20)  # the first problem, though past the cap


def test_the_summary_covers_every_step_exactly(small_bounds):
    times = [3.0, 1.0, 2.0, 5.0, 4.0, 4.0] * 5  # 30 steps, median of 30 values: (3.0 + 4.0) / 2
    parsed = logparse.parse_lines([line(n, ms=ms) for n, ms in enumerate(times, 1)])
    assert len(parsed["steps"]) < 30
    assert parsed["summary"]["elapsed_ms"] == {"count": 30, "mean": 19.0 / 6, "min": 1.0, "max": 5.0, "median": 3.5}
    assert parsed["summary"]["first"] == {"step": 1, "line_no": 1} and parsed["summary"]["last"]["step"] == 30


def test_a_median_over_too_many_distinct_times_is_not_made_up(monkeypatch):
    monkeypatch.setattr(logbounds, "MEDIAN_VALUES", 3)
    times = logparse.parse_lines([line(n, ms=float(n)) for n in range(1, 6)])["summary"]["elapsed_ms"]
    assert times["median"] is None and "more than 3 distinct step times" in times["median_unavailable"]
    assert (times["min"], times["max"], times["count"]) == (1.0, 5.0, 5)


def test_failures_errors_records_and_warnings_keep_their_first_and_last(small_bounds):
    oom = (LOGS / "C_failures" / "mlm92_oom_old_format.log").read_text().split("\n")[8] + "\n"
    memory = (LOGS / "A_iteration" / "mlm602_fp16_skipped.log").read_text().split("\n")[1] + "\n"
    crash = "Traceback (most recent call last):\n"
    cut_slime = "(MegatronTrainRayActor pid=1) step 1: {'train/loss': 1.0,\n"
    parsed = logparse.parse_lines([oom, memory, crash, cut_slime] * 6)
    assert [f["line_no"] for f in parsed["failures"]] == [1, 5, 17, 21] and parsed["counts"]["failures"] == 6
    assert [m["line_no"] for m in parsed["memory"]] == [2, 6, 18, 22] and parsed["counts"]["memory"] == 6
    assert [e["line_no"] for e in parsed["errors"]] == [3, 7, 19, 23] and parsed["counts"]["errors"] == 6
    warnings = parsed["warnings"]
    assert warnings[0].startswith("line 4:") and warnings[1].startswith("line 8:")
    assert warnings[2] == "warnings.bounded: 2 more warnings not shown (the first 2 and the last 2 are)"
    assert warnings[3].startswith("line 20:") and warnings[4].startswith("line 24:")
    for name in ("failures.bounded", "memory.bounded", "errors.bounded"):
        assert any(w.startswith(name) for w in warnings), name


def test_a_long_run_is_scored_on_its_kept_window(small_bounds):
    parsed = logparse.parse_lines([line(n) for n in range(1, 101)])
    metrics, warnings = metrics_columns(parsed, 1024, 8)
    assert metrics["iter"][:10] == list(range(1, 11)) and metrics["iter"][-5:] == list(range(96, 101))
    assert metrics["step_ms"][4] == 1005.0 and not warnings


def test_metrics_prints_the_chosen_steps_in_full_whatever_was_kept(small_bounds, tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text("".join(line(n) for n in range(1, 51)))
    assert cli.main(["metrics", str(log), "--json", "--steps", "20:24"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [step["step"] for step in shown["steps"]] == [20, 21, 22, 23, 24]
    assert shown["steps"][0]["elapsed_ms"] == 1020.0 and shown["counts"]["steps"] == 50
    assert cli.main(["metrics", str(log), "--steps", "49:"]) == 0
    out = capsys.readouterr().out
    assert "steps: 50 (iterations 1-50)" in out and "steps_kept: 15 in full" in out
    chosen = [json.loads(text.split("step: ", 1)[1]) for text in out.splitlines() if text.startswith("step: {")]
    assert [step["step"] for step in chosen] == [49, 50]
    assert cli.main(["metrics", str(log), "--steps", "5-9"]) == 2
    assert "--steps 5-9: expected A:B" in capsys.readouterr().err


def test_metrics_reads_a_live_logs_last_line_only_when_told_it_is_complete(tmp_path, capsys):
    log = tmp_path / "log.txt"
    log.write_text(line(1) + line(2).rstrip("\n"))
    assert cli.main(["metrics", str(log)]) == 0
    out = capsys.readouterr().out
    assert "steps: 1 (iterations 1-1)" in out and "warning: text.partial_last_line: line 2" in out
    assert cli.main(["metrics", str(log), "--complete"]) == 0
    assert "steps: 2 (iterations 1-2)" in capsys.readouterr().out


@pytest.mark.parametrize("chunk, span", [(5, 3), (7, 2), (64, 16), (1 << 20, 1 << 16)])
def test_characters_and_undecodable_bytes_are_counted_exactly_however_the_bytes_are_cut(tmp_path, monkeypatch,
                                                                                        chunk, span):
    bar = (LOGS / "F_formats" / "nemo1_grok_bar_step_timing.log").read_bytes()  # "█": 3 bytes each
    data = (bar + b"bad \xff\xfe and cut \xe2\x96 here\n" + "\ufffd\x00 literal\n".encode() + bar
            + b"\xf0\x9f\x98" + b"\n" + b"\xe2\x96\x88\xe2")  # a 4-byte char cut short, and one at the very end
    log = tmp_path / "log.txt"
    log.write_bytes(data)
    monkeypatch.setattr(logparse, "CHUNK_CHARS", chunk)
    monkeypatch.setattr(logparse._Counter, "SPAN", span)
    text = logparse.parse_file(log)["text"]
    decoded = data.decode("utf-8", "replace")
    assert (text["bytes"], text["chars"]) == (len(data), len(decoded))
    assert text["undecodable"] == decoded.count("\ufffd") + decoded.count("\x00")


def test_a_bar_redrawn_with_carriage_returns_only_loses_no_step_however_long_the_line(tmp_path, monkeypatch):
    real = (LOGS / "F_formats" / "nemo1_grok_bar_step_timing.log").read_text().rstrip("\n")
    # the real bar, redrawn at positions 1-200 on one line as tqdm writes to a file (SYNTHETIC positions)
    text = "\r".join(real.replace("50/50", "%d/200" % n) for n in range(1, 201)) + "\n"
    log = tmp_path / "log.txt"
    log.write_text(text)
    monkeypatch.setattr(logparse, "CHUNK_CHARS", 300)
    monkeypatch.setattr(logparse, "LINE_CHARS", 600)  # the line is read in pieces of a few bars
    parsed = logparse.parse_file(log)
    assert [step["step"] for step in parsed["steps"]] == list(range(1, 201))
    assert {step["line_no"] for step in parsed["steps"]} == {1} and parsed["text"]["lines"] == 1
    assert all(step["elapsed_ms"] == 24000.0 for step in parsed["steps"])


REAL_LINES = sorted({line.encode() + b"\n" for path in REAL for line in path.read_text().split("\n") if line})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.one_of(st.sampled_from(REAL_LINES), st.binary(max_size=40)), max_size=30),
       chunk=st.integers(min_value=1, max_value=300), complete=st.booleans())
def test_any_mix_of_real_lines_and_garbage_parses_the_same_in_any_chunks(parts, chunk, complete):
    """The same result, or (a file whose first block is mostly binary) a refusal after that block."""
    data = b"".join(parts)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.txt"
        log.write_bytes(data)
        whole = logparse.parse_lines([data.decode("utf-8", "replace")], complete=complete)
        saved = logparse.CHUNK_CHARS
        logparse.CHUNK_CHARS = chunk
        try:
            streamed = logparse.parse_file(log, complete=complete)
        finally:
            logparse.CHUNK_CHARS = saved
    text = streamed["text"]
    if text["stopped"]:  # the first block was mostly binary: refused without reading on, by design
        assert text["bytes"] == chunk and logparse.refusal(streamed).startswith("mostly binary")
        return
    assert (text["bytes"], text["chars"]) == (len(data), len(data.decode("utf-8", "replace")))
    del text["bytes"], whole["text"]["bytes"]  # the decoded text re-encodes to other bytes where bytes were invalid
    assert without_path(streamed) == whole
