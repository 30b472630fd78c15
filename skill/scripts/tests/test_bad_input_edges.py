"""Bad input beside the table of ``test_bad_input.py``: logs and traces cut short, too large or too long in a line,
levers outside the catalog, the real script's one-line refusals, and refusals in JSON."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest
from conftest import DATA, SCRIPTS
from test_bad_input import MINIMAL, RECIPE, REPORT_MD, assert_refused, attune, config_verbs, gz, trace_text
from test_bad_input import campaign  # noqa: F401  (the fixture its lever tests use)


def test_a_log_with_a_failure_and_no_iteration_is_a_log(tmp_path):
    code, out, err = attune("metrics", DATA / "logs" / "C_failures" / "mlm92_oom_old_format.log")
    assert code == 0 and "triage: oom" in out, err


def test_a_log_cut_before_its_first_record_is_refused(tmp_path):
    head = tmp_path / "log.txt"
    head.write_bytes(b"using world size: 8, data-parallel size: 8\n> building GPT model ...\n")
    assert_refused(attune("metrics", head), head, "no record")


def test_a_large_binary_file_is_refused_without_reading_it_all(tmp_path, monkeypatch):
    from attune.core import logparse
    monkeypatch.setattr(logparse, "CHUNK_CHARS", 1024)
    path = tmp_path / "core.bin"
    path.write_bytes(random.Random(3).randbytes(1 << 20))
    parsed = logparse.parse_file(path)
    assert parsed["text"]["stopped"] and parsed["text"]["bytes"] == 1024
    assert logparse.refusal(parsed).startswith("mostly binary")


def test_a_line_longer_than_any_buffer_is_read_in_pieces(tmp_path, monkeypatch):
    from attune.core import logparse
    monkeypatch.setattr(logparse, "CHUNK_CHARS", 64)
    monkeypatch.setattr(logparse, "LINE_CHARS", 256)
    path = tmp_path / "log.txt"
    line = b" iteration        1/      20 | lm loss: 1.0E+01 |\n"
    path.write_bytes(b"x" * 5000 + b"\n" + line)
    parsed = logparse.parse_file(path)
    assert [step["line_no"] for step in parsed["steps"]] == [2]


def test_a_trace_cut_before_its_first_event_is_refused(tmp_path):
    text = trace_text()
    path = tmp_path / "rank0.json"
    path.write_bytes(text[:text.index(b"ProfilerStep#1")])
    assert_refused(attune("profile", path), path, "no event")


@pytest.mark.parametrize("name", ["rank0.json", "rank0.json.gz"])
def test_a_trace_cut_short_is_refused_unless_partial_is_asked_for(tmp_path, name):
    text = trace_text()
    data = gz(text) if name.endswith(".gz") else text
    path = tmp_path / name
    path.write_bytes(data[:len(data) * 3 // 4])
    assert_refused(attune("profile", path), path, "the trace ends early")
    code, out, err = attune("profile", path, "--partial", "--json")
    result = json.loads(out)
    assert code == 0 and result["partial"] is True and any(str(path) in w for w in result["warnings"]), err


def test_a_real_trace_without_gpu_kernels_keeps_its_warning(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_bytes(trace_text(kernels=False))
    code, out, err = attune("profile", path)
    assert code == 0 and "no GPU kernel in the traces" in out and "bottleneck: none above" in out, err


@pytest.mark.parametrize("lever, recorded", [("other:--manual-gc", "other: --manual-gc"),
                                             ("other: --manual-gc", "other: --manual-gc"), ("manual-gc", "manual-gc")])
def test_a_lever_is_a_catalog_id_or_other(lever, recorded, campaign):
    code, out, err = attune("candidate", "new", "--campaign", campaign.dir, "--parent", "baseline", "--set", "manual-gc",
                            "--lever", lever, "--hypothesis", "h", "--json")
    assert code == 0 and json.loads(out)["lever"] == recorded, err


def test_a_lever_outside_the_catalog_is_refused(campaign):
    code, _out, err = attune("candidate", "new", "--campaign", campaign.dir, *MINIMAL["candidate"][1:5],
                             "--lever", "fp8-bogus", "--hypothesis", "h")
    assert code == 2 and "lever 'fp8-bogus' is not in %s (did you mean fp8-" % (campaign.dir / "levers.md") in err, err
    assert len(err.strip().splitlines()) == 1 and not (campaign.dir / "runs" / "alice-x-r001").exists()


def test_the_real_script_prints_one_line_and_no_traceback(tmp_path):
    """The same contract through ``python attune.py``, as the agent and the harness run it."""
    empty, report = tmp_path / "empty.log", tmp_path / "REPORT.md"
    empty.write_bytes(b"")
    report.write_text(REPORT_MD)
    latin = tmp_path / "recipe.yaml"
    latin.write_bytes(b"# caf\xe9\n" + RECIPE)
    for argv, named in ((["metrics", empty], empty), (["profile", report], report), (["project", latin], latin),
                        (["metrics", report], report)):
        proc = subprocess.run([sys.executable, str(SCRIPTS / "attune.py"), *map(str, argv)], capture_output=True,
                              text=True)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and str(named) in lines[0], (argv, proc.stderr)
        assert proc.stdout == ""


@pytest.mark.parametrize("verb", config_verbs())
def test_with_json_a_refusal_answers_in_json_too(verb, tmp_path):
    """Every verb that reads settings, asked for ``--json`` and refused (here: a campaign folder that is not
    one), still prints its one stderr line and answers one JSON object on stdout: the error's verb, exit code,
    kind, message and fix."""
    where = tmp_path / "not-a-campaign"
    where.mkdir()
    (where / "ledger.jsonl").write_bytes(b"\x00\x01 not a ledger\n")
    code, out, err = attune(verb, "--campaign", where, "--json", *MINIMAL[verb])
    assert code not in (0, None) and "Traceback" not in err, (verb, code, err)
    error = json.loads(out.strip().splitlines()[-1])["error"]
    assert error["verb"] == verb and error["exit_code"] == code and error["message"]
    assert error["kind"].endswith("Error") or error["kind"] in ("CheckFailed", "IntegrityError")
    assert error["message"] in " ".join(line.split(": ", 1)[1] for line in err.strip().splitlines())
