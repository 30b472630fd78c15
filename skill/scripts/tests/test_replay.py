"""`attune verify --replay` on a real campaign of the local backend (fake_megatron.py prints Megatron-LM lines,
SYNTHETIC numbers): every result row derived again from its run's log and every gate row from its run
directories and the rules; a forged row that the hash chain accepts is named, and nothing ships."""

from __future__ import annotations

import copy
import os
import sys
import time

import pytest
from conftest import DATA
from factory import local_campaign, wait

from attune import cli
from attune.campaign import replay, runs
from attune.core.errors import EXIT_CHECK_FAILED, EXIT_INTEGRITY, EXIT_OK
from attune.core.schema import ENVELOPE
from attune.correctness import gate

RECIPE = (DATA / "recipes" / "local_fake_megatron.yaml").read_text()


def _candidate(campaign, *change):
    assert cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", *change,
                     "--hypothesis", "a test", "--gate-will-fail"]) == EXIT_OK
    return sorted(os.listdir(campaign.dir / "runs"))[-1]


@pytest.fixture
def made(tmp_path, capsys):
    """A finished campaign: the baseline and its repeat, a candidate that passes the gate (a placement change), one
    that fails it (an environment variable the rules do not class), one that ran out of memory; both gated."""
    for campaign, settings in local_campaign(tmp_path, RECIPE.format(python=sys.executable,
                                                                     script=DATA / "fake_megatron.py"), "rp-", "rp-test"):
        named = {"baseline": runs.launch_baseline(campaign, settings)["run"],
                 "repeat": runs.launch_baseline(campaign, settings)["run"],
                 "placement": _candidate(campaign, "--set", "overlap-grad-reduce", "--lever", "overlap-grad-reduce"),
                 "numeric": _candidate(campaign, "--env", "FAKE_MODE=fine", "--lever", "other: FAKE_MODE"),
                 "oom": _candidate(campaign, "--env", "FAKE_MODE=oom", "--lever", "other: FAKE_MODE")}
        for role in ("placement", "numeric", "oom"):
            runs.launch_candidate(campaign, settings, named[role])
        for run in named.values():
            wait(campaign, settings, run, ("succeeded", "failed"))
            runs.finalize(campaign, settings, run)
        assert gate.gate_campaign_run(campaign, settings, named["placement"])["verdict"] == "pass"
        assert gate.gate_campaign_run(campaign, settings, named["numeric"])["verdict"] == "fail"
        capsys.readouterr()
        yield campaign, settings, named


def _verify(campaign, capsys, *extra):
    code = cli.main(["verify", "--campaign", str(campaign.dir), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _row(campaign, kind, run):
    return next(row for row in campaign.ledger.rows() if row["kind"] == kind and row["run"] == run)


def _forge(campaign, row, drop=(), **changes):
    """Append ``row``'s payload again with ``changes`` and without the fields ``drop``, through the library: the
    row is schema-valid and the chain stays valid."""
    payload = {key: copy.deepcopy(value) for key, value in row.items() if key not in ENVELOPE + tuple(drop)}
    payload.update(changes)
    return campaign.append(row["kind"], **payload)


def _report(campaign, capsys):
    code = cli.main(["report", "--campaign", str(campaign.dir)])
    out, err = capsys.readouterr()
    return code, out, err


def test_every_row_of_an_untouched_campaign_is_re_derived_and_it_ships(made, capsys):
    campaign, _settings, _named = made
    code, out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_OK, err
    assert "replay: 5 result rows and 2 gate rows re-derived from their evidence" in out.splitlines()
    code, out, _err = _report(campaign, capsys)
    assert code == EXIT_OK and "check: pass replay: 5 result rows and 2 gate rows re-derived" in out
    assert (campaign.dir / "recipe.yaml").is_file()


def test_plain_verify_does_not_replay(made, capsys):
    campaign, _settings, named = made
    (campaign.run_dir(named["repeat"]) / "log.txt").unlink()
    code, out, _err = _verify(campaign, capsys)
    assert code == EXIT_OK and "replay" not in out


def test_a_forged_faster_result_row_is_named_and_nothing_ships(made, capsys):
    campaign, settings, named = made
    real = _row(campaign, "result", named["placement"])
    metrics = dict(real["metrics"], step_ms=[ms / 2 for ms in real["metrics"]["step_ms"]])
    forged = _forge(campaign, real, metrics=metrics)
    code, out, err = _verify(campaign, capsys)
    assert code == EXIT_OK  # the chain holds: the row was appended through the library
    code, out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY
    first = real["metrics"]["step_ms"][0]
    line = ("ledger seq %d (result row of run %s): metrics.step_ms[0]: recorded %s, re-derived %s from runs/%s/log.txt "
            "(tokens/s/GPU: recorded " % (forged["seq"], named["placement"], first / 2, first, named["placement"]))
    assert line in err and "the evidence gives" in err
    assert "replay: FAILED after 5 result rows and 2 gate rows re-derived: " + line in out
    assert replay.replay(campaign, settings).mismatch.seq == forged["seq"]
    code, out, err = _report(campaign, capsys)
    assert code == EXIT_CHECK_FAILED and "shipping refused: replay: FAILED" in err
    assert not (campaign.dir / "recipe.yaml").exists()
    assert "FAIL replay" in (campaign.dir / "REPORT.md").read_text()


def test_a_failed_run_recorded_as_finished_is_named(made, capsys):
    campaign, _settings, named = made
    real = _row(campaign, "result", named["oom"])
    forged = _forge(campaign, real, status="finished", metrics=_row(campaign, "result", named["baseline"])["metrics"],
                    drop=("failure",))
    code, _out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY
    assert ('ledger seq %d (result row of run %s): status: recorded "finished", re-derived "failed" from runs/%s/log.txt'
            % (forged["seq"], named["oom"], named["oom"])) in err


def test_a_deleted_log_is_named_as_the_missing_evidence(made, capsys):
    campaign, _settings, named = made
    (campaign.run_dir(named["repeat"]) / "log.txt").unlink()
    code, out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY
    seq = _row(campaign, "result", named["repeat"])["seq"]
    assert ("ledger seq %d (result row of run %s): its evidence is missing: runs/%s/log.txt"
            % (seq, named["repeat"], named["repeat"])) in err
    code, _out, err = _report(campaign, capsys)
    assert code == EXIT_CHECK_FAILED and "its evidence is missing" in err


def test_a_log_rewritten_after_finalize_is_named_by_its_hash(made, capsys):
    campaign, _settings, named = made
    log = campaign.run_dir(named["baseline"]) / "log.txt"
    log.write_bytes(log.read_bytes() + b"one more line\n")
    code, _out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY and "(result row of run %s): log_sha256: recorded" % named["baseline"] in err


def test_a_forged_gate_verdict_is_caught(made, capsys):
    campaign, _settings, named = made
    real = _row(campaign, "gate", named["numeric"])
    assert real["verdict"] == "fail"
    forged = _forge(campaign, real, verdict="pass", reasons=[])
    code, _out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY
    assert ('ledger seq %d (gate row of run %s): verdict: recorded "pass", re-derived "fail" from runs/%s, runs/%s, '
            'runs/%s and rules ' % (forged["seq"], named["numeric"], named["baseline"], named["numeric"],
                                    named["repeat"])) in err


def test_a_gate_number_changed_is_caught(made, capsys):
    campaign, _settings, named = made
    real = _row(campaign, "gate", named["placement"])
    checks = dict(real["checks"], drift=0.0 if real["checks"]["drift"] else 0.5)
    forged = _forge(campaign, real, checks=checks)
    code, _out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY
    assert "ledger seq %d (gate row of run %s): checks.drift: recorded " % (forged["seq"], named["placement"]) in err


def test_a_gate_of_a_run_that_had_not_finished_is_caught(made, capsys):
    campaign, _settings, named = made
    forged = _forge(campaign, _row(campaign, "gate", named["placement"]), run=named["oom"])
    code, _out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY
    assert ('ledger seq %d (gate row of run %s): verdict: recorded "pass", re-derived no gate row'
            % (forged["seq"], named["oom"])) in err and "has no finished result" in err


def test_the_replay_does_not_depend_on_where_the_campaign_lies(made, capsys, tmp_path):
    import shutil
    campaign, settings, _named = made
    moved = tmp_path / "moved"
    shutil.copytree(campaign.dir, moved)
    code, out, err = _verify(type(campaign)(moved), capsys, "--replay")
    assert code == EXIT_OK, err


def test_a_recipe_changed_after_its_launch_is_named(made, capsys):
    campaign, _settings, named = made
    recipe = campaign.run_dir(named["placement"]) / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("--seq-length 128", "--seq-length 256"))
    code, _out, err = _verify(campaign, capsys, "--replay")
    assert code == EXIT_INTEGRITY
    assert "(result row of run %s): its evidence was changed: runs/%s/recipe.yaml (SHA-256 " % (
        named["placement"], named["placement"]) in err


def test_a_synthetic_campaign_without_logs_does_not_ship(tmp_path, capsys):
    import shutil
    directory = tmp_path / "campaign"
    shutil.copytree(DATA / "campaign_basic", directory)
    code, _out, err = cli.main(["report", "--campaign", str(directory)]), *capsys.readouterr()
    assert code == EXIT_CHECK_FAILED and not (directory / "recipe.yaml").exists()
    assert "shipping refused: replay: FAILED after 0 result rows and 0 gate rows re-derived: ledger seq 2 (result " \
           "row of run r001): its evidence is unusable: runs/r001/recipe.yaml" in err


def test_a_hung_run_torn_down_is_replayed_on_what_its_log_gives(tmp_path, capsys):
    """Torn down, a local run has no exit code left: its timeout row is compared on its log alone."""
    for campaign, settings in local_campaign(tmp_path, RECIPE.format(python=sys.executable,
                                                                     script=DATA / "fake_megatron.py"), "hg-", "hg-test"):
        runs.launch_baseline(campaign, settings)
        hung = _candidate(campaign, "--env", "FAKE_MODE=hang", "--lever", "other: FAKE_MODE")
        runs.launch_candidate(campaign, settings, hung)
        wait(campaign, settings, hung, ("running",))
        deadline = time.time() + 30
        while runs.finalize(campaign, settings, hung, hang_after_s=0.3) is None and time.time() < deadline:
            time.sleep(0.1)
        assert _row(campaign, "result", hung)["status"] == "timeout"
        assert replay.replay(campaign, settings).summary() == "1 result row and 0 gate rows re-derived from their " \
                                                              "evidence"
        real = _row(campaign, "result", hung)
        _forge(campaign, real, metrics=dict(real["metrics"], step_ms=[ms / 2 for ms in real["metrics"]["step_ms"]]))
        assert replay.replay(campaign, settings).mismatch.field == "metrics.step_ms[0]"
