"""Golden tests on real Megatron-LM output: pretrain_gpt.py (core_v0.16.1) run on this kind of host's CPU through
the cpu pod hook, succeeding and failing in the ways a campaign meets (data/megatron_cpu/, made by its
make_logs.py; each NAME.expected.json was written by reading NAME.log)."""

from __future__ import annotations

import json

import pytest

from conftest import DATA

from attune.core import logparse, triage

FOLDER = DATA / "megatron_cpu"
CASES = sorted(path.name[:-len(".expected.json")] for path in FOLDER.glob("*.expected.json"))


def test_every_log_has_its_expectation_and_its_making():
    logs = sorted(path.stem for path in FOLDER.glob("*.log"))
    assert logs == CASES and len(CASES) >= 6
    for name in CASES:
        assert json.loads((FOLDER / ("%s.case.json" % name)).read_text())["made_by"].endswith(name)


@pytest.mark.parametrize("name", CASES)
def test_parse_and_triage(name):
    expected = json.loads((FOLDER / ("%s.expected.json" % name)).read_text())
    case = json.loads((FOLDER / ("%s.case.json" % name)).read_text())
    path = FOLDER / ("%s.log" % name)
    parsed = logparse.parse_file(path)
    assert parsed["format"] == expected["format"] and parsed["device"] == "cpu"
    steps = parsed["steps"]
    assert [step["step"] for step in steps] == list(range(1, expected["last_step"] + 1))
    if steps:
        assert all(step["tflops_per_gpu"] is None and step["elapsed_ms"] > 0 for step in steps)
        assert steps[0]["lm_loss"] == pytest.approx(expected["first_loss"])
    assert all(record["allocated_mb"] is None for record in parsed["memory"])
    lines = path.read_text().split("\n")
    found = triage.classify(parsed, exit_code=case["exit_code"], log_lines=lines,
                            seconds_without_progress=expected.get("seconds_without_progress"), hang_after_s=20.0)
    if expected["triage"] is None:
        assert found is None
    else:
        assert found is not None and found.cls == expected["triage"]["class"], found
        assert expected["triage"]["evidence"] in found.evidence
        if expected["triage"].get("line_no"):
            assert found.line_no == expected["triage"]["line_no"]
        assert found.memory == expected["triage"].get("memory")
