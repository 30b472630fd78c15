"""``attune lesson``: entries in the catalog's format, every number from the ledger, append-only."""

from __future__ import annotations

import json

import pytest
from factory import Builder

from attune import cli
from attune.core import levers
from attune.core.errors import EXIT_CHECK_FAILED, EXIT_OK


@pytest.fixture
def built(tmp_path):
    b = Builder(tmp_path / "c", campaign_id="alice-llama8b")
    b.baseline(3, 1000.0)
    for run, lever, step in (("r004", "overlap-grad-reduce", 900.0), ("r006", "ddp-bucket-size", 1100.0),
                             ("r007", "manual-gc", 995.0)):
        b.launch(run, "candidate", run, parent="r001", lever=lever, hypothesis="h")
        b.result(run, step)
    b.launch("r005", "confirm", "r004", parent="r004")
    b.result("r005", 900.0)
    b.launch("r008", "candidate", "r008", parent="r001", lever="micro-batch-size")
    b.result("r008", status="failed", failure={"class": "oom", "evidence": "CUDA out of memory", "source": "log"})
    b.launch("r009", "candidate", "r009", parent="r001", lever="micro-batch-size")
    b.result("r009", status="failed", failure={"class": "unschedulable", "evidence": "Insufficient", "source": "events"})
    return b


def lesson(b, run, *extra, text="llama8b, 8 GPUs, TP2: as measured"):
    return cli.main(["lesson", run, "--campaign", str(b.campaign.dir), "--text", text, "--json", *extra])


def test_a_new_campaign_gets_its_own_copy_of_the_catalog(built):
    assert (built.campaign.dir / "levers.md").read_text() == levers.CATALOG.read_text()


def test_an_ungated_winner_must_be_gated_first_then_it_is_kept(built, capsys):
    assert lesson(built, "r004") == EXIT_CHECK_FAILED
    assert "gate it first (`attune gate --run r004`)" in capsys.readouterr().err
    built.gate("r004")
    before = (built.campaign.dir / "levers.md").read_text()
    assert lesson(built, "r004") == EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    entry = printed["lesson"]
    after = (built.campaign.dir / "levers.md").read_text()
    assert after.startswith(before) and after.count("# Campaign lessons") - before.count("# Campaign lessons") == 1
    found = levers.parse_lessons(after)[-1]
    assert found["lever"] == "overlap-grad-reduce" and found["campaign"] == "alice-llama8b"
    assert found["Runs"] == "r004 (candidate), r005 (confirm)"
    assert found["Result"] == ("+11.11% (95% CI +11.11% to +11.11%; 2 vs 3 runs) tokens/s/GPU vs parent; a candidate "
                               "needs +1.00% over the leader with 2 runs; gate pass")
    assert found["Verdict"] == "kept" and found["Lesson"] == "llama8b, 8 GPUs, TP2: as measured"
    assert levers.parse(after) == levers.parse(before)  # the catalog entries are untouched
    row = built.campaign.ledger.rows()[-1]  # the lesson as its own row: the fields, no prose to parse
    assert {key: row[key] for key in ("kind", "run", "lever", "verdict", "text")} == {
        "kind": "lesson", "run": "r004", "lever": "overlap-grad-reduce", "verdict": "kept",
        "text": "llama8b, 8 GPUs, TP2: as measured"}
    assert row["result"] == found["Result"] and row["gain"] == pytest.approx(1000.0 / 900.0 - 1)
    assert {key: printed[key] for key in ("verdict", "gain", "result", "written")} == {
        "verdict": "kept", "gain": row["gain"], "result": row["result"], "written": True}
    assert entry in after
    assert lesson(built, "r004") == 2  # one lesson per tested change
    assert "has a lesson already" in capsys.readouterr().err


@pytest.mark.parametrize("run, verdict, result", [
    ("r006", "hurt", "-9.09% (95% CI -9.09% to -9.09%; 1 vs 3 runs) tokens/s/GPU vs parent; a candidate needs "
                     "+1.00% over the leader with 2 runs; gate not run"),
    ("r007", "rejected", "+0.50% (95% CI +0.50% to +0.50%; 1 vs 3 runs) tokens/s/GPU vs parent; a candidate needs "
                         "+1.00% over the leader with 2 runs; gate not run"),
    ("r008", "hurt", "failed (oom); no tokens/s/GPU"),
])
def test_the_verdict_and_result_come_from_the_ledger(built, capsys, run, verdict, result):
    assert lesson(built, run) == EXIT_OK
    found = levers.parse_lessons((built.campaign.dir / "levers.md").read_text())[-1]
    assert (found["Verdict"], found["Result"]) == (verdict, result)
    row = built.campaign.ledger.rows()[-1]
    assert (row["kind"], row["verdict"], row["result"]) == ("lesson", verdict, result)
    assert (row["gain"] is None) == (run == "r008")


def test_a_failed_gate_rejects_a_faster_change(built):
    built.gate("r004", "fail", reasons=["loss diverges at step 12 beyond the repeat spread"])
    assert lesson(built, "r004") == EXIT_OK
    found = levers.parse_lessons((built.campaign.dir / "levers.md").read_text())[-1]
    assert found["Verdict"] == "rejected"
    assert found["Result"].endswith("gate fail: loss diverges at step 12 beyond the repeat spread")


@pytest.mark.parametrize("run, extra, message", [
    ("r009", (), "was never measured (failed, unschedulable): the change was not tried"),
    ("r002", (), "is a repeat run: a lesson is about a candidate"),
    ("r404", (), "the ledger has no run r404"),
    ("r007", ("--lever", "faster-gpus"), "lever 'faster-gpus' is not in "),
])
def test_what_cannot_be_a_lesson_is_refused_and_nothing_is_written(built, capsys, run, extra, message):
    before = (built.campaign.dir / "levers.md").read_text()
    rows = len(built.campaign.ledger.rows())
    assert lesson(built, run, *extra) in (2, EXIT_CHECK_FAILED)
    assert message in capsys.readouterr().err
    assert (built.campaign.dir / "levers.md").read_text() == before and len(built.campaign.ledger.rows()) == rows


def test_outside_the_catalog_and_dry_run(built, capsys):
    before = (built.campaign.dir / "levers.md").read_text()
    assert lesson(built, "r007", "--lever", "other: --use-custom-fsdp", "--dry-run") == EXIT_OK
    out = json.loads(capsys.readouterr().out)
    assert out["written"] is False and out["lesson"].startswith("### ")
    assert (built.campaign.dir / "levers.md").read_text() == before
    assert lesson(built, "r007", "--lever", "other: --use-custom-fsdp") == EXIT_OK
    assert levers.parse_lessons((built.campaign.dir / "levers.md").read_text())[-1]["lever"] == \
        "other: --use-custom-fsdp"


def test_a_lesson_from_simulated_runs_says_so(tmp_path):
    b = Builder(tmp_path / "c", campaign_id="sim-demo")
    b.baseline(3, 1000.0)
    b.launch("r004", "candidate", "r004", parent="r001", lever="manual-gc", hypothesis="h", simulated=True)
    b.result("r004", 1002.0)
    assert lesson(b, "r004") == EXIT_OK
    found = levers.parse_lessons((b.campaign.dir / "levers.md").read_text())[-1]
    assert found["Result"].endswith("; gate not run; SIMULATED") and found["Verdict"] == "rejected"
