"""The log parser against real log text from public issue threads (tests/data/logs, see SOURCES.md).

Each ``.log`` has a hand-written ``.expected.json`` (made by reading the lines, not by this parser).
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import DATA

from attune.core import logparse, triage

LOGS = DATA / "logs"


def cases(category, keep=lambda record: True):
    out = []
    for expected in sorted((LOGS / category).glob("*.expected.json")):
        records = [r for r in json.loads(expected.read_text()) if keep(r)]
        if records:
            out.append(pytest.param(expected.with_name(expected.name.replace(".expected.json", ".log")), records,
                                    id=expected.name.replace(".expected.json", "")))
    return out


def same(actual, wanted):
    if isinstance(wanted, float) and isinstance(actual, (int, float)):
        return math.isclose(actual, wanted, rel_tol=1e-12)
    return actual == wanted


def steps_at_lines(log, expected) -> dict:
    """The parsed steps of ``log`` by line number, which must be exactly the lines ``expected`` lists."""
    steps = {step["line_no"]: step for step in logparse.parse_file(log)["steps"]}
    assert sorted(steps) == [record["line_no"] for record in expected]
    return steps


@pytest.mark.parametrize("log, expected", cases("A_iteration"))
def test_iteration_lines(log, expected):
    steps = steps_at_lines(log, expected)
    for record in expected:
        step = steps[record["line_no"]]
        for field in ("step", "elapsed_ms", "tflops_per_gpu", "lm_loss", "grad_norm", "lr", "global_batch_size",
                      "skipped", "nan"):
            assert same(step[field], record[field]), (record["line_no"], field, step[field], record[field])
        for extra in ("sop_loss", "mtp_1_loss", "load_balancing_loss"):
            if extra in record:
                losses = {name.replace(" ", "_"): value for name, value in step["losses"].items()}
                assert same(losses[extra], record[extra]), (record["line_no"], extra)


def test_two_pasted_runs_are_flagged():
    parsed = logparse.parse_file(LOGS / "A_iteration" / "mlm1570_mcore_resume.log")
    assert any("more than one run" in warning for warning in parsed["warnings"])


@pytest.mark.parametrize("log, expected", cases("B_memory_timers"))
def test_memory_and_timers(log, expected):
    parsed = logparse.parse_file(log)
    memory = {record["line_no"]: record for record in parsed["memory"]}
    timers = {record["line_no"]: record for record in parsed["timers"]}
    wanted_memory = [r for r in expected if not r.get("timer_block")]
    wanted_timers = [r for r in expected if r.get("timer_block")]
    assert sorted(memory) == [r["line_no"] for r in wanted_memory]
    assert sorted(timers) == [r["line_no"] for r in wanted_timers]
    for record in wanted_memory:
        got = memory[record["line_no"]]
        assert (got["rank"], got["after_iterations"]) == (record["rank"], record["after_iterations"])
        for field in ("allocated", "max_allocated", "reserved", "max_reserved"):
            assert same(got[field + "_mb"], record[field])
    for record in wanted_timers:
        got = timers[record["line_no"]]
        assert got["format"] == record["timers_format"]
        assert {k: list(v) if isinstance(v, list) else v for k, v in got["values"].items()} == record["values"]


@pytest.mark.parametrize("log, expected", cases("C_failures"))
def test_failures(log, expected):
    parsed = logparse.parse_file(log)
    found = {(failure["line_no"], failure["kind"]): failure["line"] for failure in parsed["failures"]}
    for record in expected:
        key = (record["line_no"], record["kind"])
        assert key in found, (key, parsed["failures"])
        assert found[key] == record["evidence_line"]


@pytest.mark.parametrize("log, expected", cases("D_slime"))
def test_slime_records(log, expected):
    parsed = logparse.parse_file(log)
    records = {record["line_no"]: record for record in parsed["perf"]}
    assert sorted(records) == [r["line_no"] for r in expected]
    for record in expected:
        got = records[record["line_no"]]
        for field in ("line_type", "index", "ray_actor", "pid", "ip", "timestamp", "logger_location"):
            assert got[field] == record[field], field
        assert got["data"].keys() == record["data"].keys()
        for key, value in record["data"].items():
            assert same(got["data"][key], value), key


@pytest.mark.parametrize("log, expected", cases("E_nemo_bridge", lambda r: r.get("format") == "bridge_step_time"))
def test_bridge_step_time(log, expected):
    parsed = logparse.parse_file(log)
    steps = {record["line_no"]: record for record in parsed["bridge_steps"]}
    assert sorted(steps) == [r["line_no"] for r in expected]
    for record in expected:
        got = steps[record["line_no"]]
        assert (got["ordinal"], got["unit"]) == (record["ordinal"], record["unit_label"])
        assert same(got["step_time_s"], record["step_time_s"]) and same(got["tflops_per_gpu"], record["tflops_per_gpu"])


def test_truncated_and_garbage_input_never_raises(tmp_path):
    log = tmp_path / "bad.log"
    log.write_bytes(b" iteration        3/      20 | elapsed time per iteration (ms): 12\xff3.0 | lm loss: \n"
                    b"(Actor pid=1) step 1: {'a': 1,\n\x00\x01garbage\n iteration 4/")
    parsed = logparse.parse_file(log)
    assert [step["step"] for step in parsed["steps"]] == [3]
    assert parsed["steps"][0]["elapsed_ms"] is None and parsed["steps"][0]["lm_loss"] is None
    assert any("line 2" in warning for warning in parsed["warnings"])


def _subset(got: dict, wanted: dict, where) -> None:
    for key, value in wanted.items():
        assert key in got, (where, key, sorted(got))
        assert same(got[key], value), (where, key, got[key], value)


@pytest.mark.parametrize("log, expected", cases("F_formats"))
def test_every_format_gives_its_steps_and_every_field(log, expected):
    """Megatron-DeepSpeed (seconds), NeMo 2 (underscored names), NeMo 1 and Lightning bars (glued text,
    redraws): each step record names every field the line prints, as printed (ms for step times)."""
    parsed = logparse.parse_file(log)
    steps = {step["line_no"]: step for step in parsed["steps"]}
    wanted = [r for r in expected if r["kind"] == "step"]
    assert sorted(steps) == [r["line_no"] for r in wanted]
    for record in wanted:
        step = steps[record["line_no"]]
        for key, value in record.items():
            if key in ("kind", "note", "line_no"):
                continue
            if key in ("fields", "losses"):
                _subset(step[key], value, (record["line_no"], key))
            else:
                assert key in step and same(step[key], value), (record["line_no"], key, step.get(key), value)
    for record in expected:
        if record["kind"] == "crash":
            assert record["line_no"] in [error["line_no"] for error in parsed["errors"]]
        elif record["kind"] == "bar_redraws":
            assert parsed["summary"]["bar_redraws"] == record["count"]
        elif record["kind"] == "triage":
            lines = log.read_text().split("\n")
            for log_lines in (lines, None):  # from the lines (a small log) and from the parse alone (a large one)
                found = triage.classify(parsed, exit_code=record["exit_code"], log_lines=log_lines)
                assert (found.cls, found.line_no) == (record["class"], record["line_no"])


@pytest.mark.parametrize("log, expected", cases("E_nemo_bridge", lambda r: r.get("format", "").startswith("nemo")))
def test_nemo_lines_are_steps(log, expected):
    steps = steps_at_lines(log, expected)
    for record in expected:
        step = steps[record["line_no"]]
        assert (step["step"], step["train_iters"], step["epoch"]) == (record["iteration"], record["max_iterations"],
                                                                     record["epoch"])
        assert same(step["global_step"], record["global_step"]) and same(step["lm_loss"], record["loss"])
        assert same(step["consumed_samples"], record["consumed_samples"])
        if record["step_time_s"] is None:
            assert step["elapsed_ms"] is None and step["elapsed_unit"] is None
        else:
            assert same(step["elapsed_ms"], record["step_time_s"] * 1000) and step["elapsed_unit"] == "s"
        for key in ("lr", "global_batch_size"):
            if key in record:
                assert same(step[key], record[key]), key
        if "val_loss" in record:
            assert same(step["losses"]["val_loss"], record["val_loss"])
        if "progress_loss" in record:  # Lightning's running loss beside NeMo's reduced_train_loss
            assert same(step["losses"]["loss"], record["progress_loss"])
            assert step["fields"]["rate"] == "%ss/it" % record["sec_per_it"]


def test_a_failure_glued_to_an_iteration_line_gives_both():
    # composed from two real lines: mlm602's iteration 2 and mlm92's OOM, as one write interleaves them
    step_line = (LOGS / "A_iteration" / "mlm602_fp16_skipped.log").read_text().split("\n")[2]
    oom_line = (LOGS / "C_failures" / "mlm92_oom_old_format.log").read_text().split("\n")[8]
    assert step_line.rstrip().endswith("|") and "CUDA out of memory" in oom_line
    parsed = logparse.parse_lines([step_line + oom_line + "\n"])
    assert [step["step"] for step in parsed["steps"]] == [2] and parsed["steps"][0]["elapsed_ms"] == 1152.3
    assert [(failure["kind"], failure["line_no"]) for failure in parsed["failures"]] == [("oom", 1)]


def test_every_failure_and_crash_word_is_found_by_the_prefilter():
    """A line is parsed only if it holds one of logparse.WORDS: each word a failure or crash needs must."""
    from attune.core import logformats
    needed = [word for kind, words, _pattern in logformats.FAILURES for word in words
              if kind != "validation"] + list(logformats.CRASH_WORDS)
    for word in needed:
        found = [w for w in logparse.WORDS if w in word]
        assert found, word
        if found == ["out"]:  # "out" counts only after "ime", "imed " or "ime "
            assert word.endswith(tuple(prefix + "out" for prefix in logparse._TIMEOUT)), word
    # validation's frames are searched for; the source lines under a frame are read as the lines after it
    validation = next(words for kind, words, _pattern in logformats.FAILURES if kind == "validation")
    assert logparse.FRAME_WORD in logparse.WORDS
    assert set(validation) <= {logparse.FRAME_WORD} | set(logparse.SOURCE_WORDS)


def test_the_source_line_under_a_frame_is_read_wherever_the_blocks_cut_the_log(monkeypatch, tmp_path):
    frames = ['[rank3]:   File "/opt/megatron/megatron/training/arguments.py", line 412, in validate_args',
              "[rank3]:     assert args.num_layers % args.pipeline_model_parallel_size == 0",
              "[rank3]: AssertionError"]
    log = tmp_path / "log.txt"
    log.write_text("noise line\n" * 50 + "\n".join(frames) + "\n" + "noise line\n" * 300)
    whole = logparse.parse_file(log, complete=True)["failures"]
    assert [f["kind"] for f in whole] == ["validation", "validation", "assertion"]
    for chunk in (7, 64, 600):  # the traceback split across reads at other places
        monkeypatch.setattr(logparse, "CHUNK_CHARS", chunk)
        assert logparse.parse_file(log, complete=True)["failures"] == whole, chunk


@pytest.mark.parametrize("log", sorted((LOGS / "A_iteration").glob("*.log")) + sorted((LOGS / "F_formats").glob("*.log"))
                         + sorted((LOGS / "E_nemo_bridge").glob("*nemo*.log")), ids=lambda path: path.name)
def test_no_field_a_step_line_prints_is_dropped(log):
    """Every ``name: value`` (or ``name=value`` in a bar) a real step line prints is somewhere in its step:
    under a known key, in ``losses`` or in ``fields``."""
    from attune.core import logformats
    lines = log.read_text().split("\n")
    parsed = logparse.parse_file(log)
    assert parsed["steps"], log
    for step in parsed["steps"]:
        line = lines[step["line_no"] - 1]
        if step["source"] in ("nemo1", "lightning"):
            inner = line[line.index("[", line.index("Epoch ")) + 1:line.index("]", line.index("Epoch "))]
            printed = [part.partition("=") for part in inner.split(", ")]
        else:
            printed = [part.partition(":") for part in line.split("iteration", 1)[1].split("|")[1:]]
        for name, sep, value in printed:
            name = name.strip()
            if not sep or not name:
                continue
            known = logformats._KNOWN_FIELDS.get(name.lower().replace("_", " "))
            where = (step["line_no"], name, value)
            if known is not None:
                assert step[known[0]] is not None or logformats.number(value) is None, where
            elif "loss" in name.lower():
                assert name in step["losses"], where
            else:
                assert logformats.snake(name) in step["fields"], where
