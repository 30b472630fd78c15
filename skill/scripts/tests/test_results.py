"""RESULTS.md against a golden file, the chart, and the page without matplotlib."""

from __future__ import annotations

import shutil
import sys

import pytest
from conftest import DATA
from factory import Builder

from attune_core import cli
from attune_core.results import describe_change


def copy_fixture(tmp_path, name="campaign_basic"):
    target = tmp_path / name
    shutil.copytree(DATA / name, target)
    return target


def test_results_md_matches_golden(tmp_path):
    campaign = copy_fixture(tmp_path)
    ledger_before = (campaign / "ledger.jsonl").read_bytes()
    assert cli.main(["rank", "--campaign", str(campaign), "--no-chart"]) == 0
    expected = (DATA / "campaign_basic" / "expected_RESULTS.md").read_text()
    assert (campaign / "RESULTS.md").read_text() == expected
    assert (campaign / "ledger.jsonl").read_bytes() == ledger_before, "the leader is already recorded"


def test_dry_run_prints_and_writes_nothing(tmp_path, capsys):
    campaign = copy_fixture(tmp_path)
    assert cli.main(["rank", "--campaign", str(campaign), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("# Results: campaign test-fixture-20261102")
    assert not (campaign / "RESULTS.md").exists()
    assert not (campaign / ".attune" / "cache").exists()


def test_chart_is_drawn_when_matplotlib_is_installed(tmp_path):
    pytest.importorskip("matplotlib")
    campaign = copy_fixture(tmp_path)
    assert cli.main(["rank", "--campaign", str(campaign)]) == 0
    png = campaign / "results_throughput.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert "![tokens/s/GPU of every rankable run in launch order](results_throughput.png)" in \
        (campaign / "RESULTS.md").read_text()


def test_page_renders_without_matplotlib(tmp_path, monkeypatch):
    for name in [name for name in sys.modules if name.split(".")[0] == "matplotlib"] + [
            "matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"]:
        monkeypatch.setitem(sys.modules, name, None)  # every import of it now raises ImportError
    campaign = copy_fixture(tmp_path)
    assert cli.main(["rank", "--campaign", str(campaign)]) == 0
    text = (campaign / "RESULTS.md").read_text()
    assert "Chart not drawn: matplotlib is not installed" in text
    assert not (campaign / "results_throughput.png").exists()


def test_rank_records_a_new_leader_once(tmp_path):
    b = Builder(tmp_path / "c")
    b.baseline()
    directory = str(b.campaign.dir)
    assert cli.main(["rank", "--campaign", directory, "--no-chart"]) == 0
    assert cli.main(["rank", "--campaign", directory, "--no-chart"]) == 0
    leaders = [row for row in b.campaign.ledger.rows() if row["kind"] == "leader"]
    assert [row["run"] for row in leaders] == ["r001"]
    b.launch("r004", "candidate", "fast", parent="r001", change=[{"op": "set", "arg": "--x"}])
    b.result("r004", 900.0)
    b.launch("r005", "confirm", "fast", parent="r004")
    b.result("r005", 900.0)
    b.gate("r004")
    assert cli.main(["rank", "--campaign", directory, "--no-chart"]) == 0
    leaders = [row for row in b.campaign.ledger.rows() if row["kind"] == "leader"]
    assert [(row["run"], row["previous"]) for row in leaders] == [("r001", None), ("r004", "r001")]


def test_simulated_runs_are_labelled(tmp_path):
    b = Builder(tmp_path / "c")
    b.launch("r001", "baseline", "base", simulated=True)
    b.result("r001", 1000.0)
    assert cli.main(["rank", "--campaign", str(b.campaign.dir), "--no-chart"]) == 0
    text = (b.campaign.dir / "RESULTS.md").read_text()
    assert "**SIMULATED**: 1 of 1 runs" in text
    assert "SIMULATED |" in text.split("## Runs")[1]


def test_describe_change_shapes():
    assert describe_change([{"op": "set", "arg": "--tp", "value": 2}, {"op": "remove", "arg": "--x"}]) == \
        "set --tp=2; remove --x"
    assert describe_change({"replicas": 4}) == "replicas=4"
    assert describe_change("free text") == "free text"
    assert describe_change(None) == ""


def test_report_leaves_a_past_tuning_project_summary(tmp_path):
    import json
    import shutil

    from conftest import DATA

    from attune_core import cli

    directory = tmp_path / "campaign"
    shutil.copytree(DATA / "campaign_basic", directory)
    cli.main(["report", "--campaign", str(directory)])
    summary = json.loads((directory / "past_tuning_project.json").read_text())
    assert summary["schema_version"] == 1 and summary["campaign"] == "test-fixture-20261102"
    assert summary["baseline"]["run"] == "r001" and summary["kept"][0]["run"] == "r004"
    assert {lever["run"] for lever in summary["rejected"]} >= {"r006", "r009"}
    assert summary["gpu_hours_spent"] > 0
