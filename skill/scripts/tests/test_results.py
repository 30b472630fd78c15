"""RESULTS.md against a golden file, the chart, and the page without matplotlib."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
from conftest import DATA
from factory import Builder

from attune import cli
from attune.campaign import ranking as ranking_mod
from attune.campaign.results import describe_change, one_line


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
    assert "](results_throughput.png)" in (campaign / "RESULTS.md").read_text()


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


def test_cpu_runs_are_marked_cpu_in_results_report_status_and_lessons(tmp_path):
    b = Builder(tmp_path / "c")
    b.launch("r001", "baseline", "base", cpu=True, pod_hooks=[{"name": "cpu"}])
    b.result("r001", 1000.0)
    b.launch("r002", "repeat", "base", parent="r001")  # a GPU run beside it is not marked
    b.result("r002", 1000.0)
    assert cli.main(["rank", "--campaign", str(b.campaign.dir), "--no-chart"]) == 0
    text = (b.campaign.dir / "RESULTS.md").read_text()
    assert "**cpu**: 1 of 2 runs are a real Megatron-LM program run on a CPU" in text
    rows = {line.split(" | ")[0]: line for line in text.split("## Runs")[1].splitlines() if line.startswith("| r0")}
    assert " cpu |" in rows["| r001"] and " cpu |" not in rows["| r002"]
    assert "SIMULATED" not in text
    cli.main(["report", "--campaign", str(b.campaign.dir)])
    report = (b.campaign.dir / "REPORT.md").read_text()
    assert "**cpu**: 1 of 2 runs" in report and "cpu runs measure a real program on a CPU" in report


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

    from attune import cli

    directory = tmp_path / "campaign"
    shutil.copytree(DATA / "campaign_basic", directory)
    cli.main(["report", "--campaign", str(directory)])
    summary = json.loads((directory / "past_tuning_project.json").read_text())
    assert summary["schema_version"] == 1 and summary["campaign"] == "test-fixture-20261102"
    assert summary["baseline"]["run"] == "r001" and summary["kept"][0]["run"] == "r004"
    assert {lever["run"] for lever in summary["rejected"]} >= {"r006", "r009"}
    assert summary["gpu_hours_spent"] > 0


def _kept_campaign(directory, simulated=None, hypothesis="short"):
    """SYNTHETIC: a baseline, a kept change r004 (confirmed by r005) and the leader r006 built on it."""
    b = Builder(directory)
    b.launch("r001", "baseline", "base", simulated=simulated)
    b.result("r001", 1000.0)
    for run in ("r002", "r003"):
        b.launch(run, "repeat", "base", parent="r001", simulated=simulated)
        b.result(run, 1000.0)
    b.launch("r004", "candidate", "a", parent="r001", change=[{"op": "set", "arg": "--a"}], lever="a",
             hypothesis=hypothesis, simulated=simulated)
    b.result("r004", 900.0)
    b.launch("r005", "confirm", "a", parent="r004", simulated=simulated)
    b.result("r005", 900.0)
    b.gate("r004")
    b.launch("r006", "candidate", "ab", parent="r004", change=[{"op": "set", "arg": "--b"}], lever="b",
             simulated=simulated)
    b.result("r006", 800.0)
    b.launch("r007", "confirm", "ab", parent="r006", simulated=simulated)
    b.result("r007", 800.0)
    b.gate("r006")
    return b


def _status_column(text, run):
    row = next(line for line in text.splitlines() if line.startswith("| %s |" % run))
    return row.strip("|").split("|")[-1].strip()


def test_kept_ancestors_of_the_leader_are_marked_kept(tmp_path):
    b = _kept_campaign(tmp_path / "c")
    assert cli.main(["rank", "--campaign", str(b.campaign.dir), "--no-chart"]) == 0
    text = (b.campaign.dir / "RESULTS.md").read_text()
    assert [_status_column(text, run) for run in ("r001", "r004", "r005", "r006", "r007")] == [
        "baseline", "kept (the leader builds on it)", "kept (the leader builds on it)", "leader", "leader"]


def test_the_band_and_the_gains_read_the_same_in_rank_status_results_and_report(tmp_path, without_replay, capsys):
    b = _kept_campaign(tmp_path / "c")
    b.launch("r008", "repeat", "base", parent="r001")
    b.result("r008", 1000.0 / 1.03)  # 3% faster: the baseline's runs now differ
    directory = str(b.campaign.dir)
    ranking = ranking_mod.build(b.campaign.ledger.rows())
    needs = ranking_mod.band_text(ranking.band)
    assert needs == "%+.2f%% over the leader with 2 runs" % (ranking.band * 100)
    gain = ranking_mod.gain_text(ranking.compare(ranking.leader))
    assert gain.startswith("+") and "95% CI" in gain and "2 vs 4 runs" in gain
    capsys.readouterr()
    assert cli.main(["rank", "--campaign", directory, "--no-chart"]) == 0
    assert "band: %s\n" % needs in capsys.readouterr().out
    assert cli.main(["rank", "--campaign", directory, "--no-chart", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["band"] == pytest.approx(ranking.band) and data["gain_vs_baseline"]["text"] == gain
    assert cli.main(["status", "--campaign", directory]) == 0
    out = capsys.readouterr().out
    assert "band: a candidate needs %s; %s" % (needs, ranking.band_basis) in out and "(%s vs baseline)" % gain in out
    assert cli.main(["status", "--campaign", directory, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["band"]["text"] == needs and info["leader"]["gain_vs_baseline"]["text"] == gain
    assert (info["leader"]["gain_vs_baseline"]["low"], info["leader"]["gain_vs_baseline"]["high"]) == (
        pytest.approx(ranking.compare(ranking.leader).low), pytest.approx(ranking.compare(ranking.leader).high))
    results = (b.campaign.dir / "RESULTS.md").read_text()
    assert "| Leader test | a candidate needs %s" % needs in results and gain in results
    cli.main(["report", "--campaign", directory])
    assert "| Gain | %s, passes the leader test" % gain in (b.campaign.dir / "REPORT.md").read_text()
    summary = json.loads((b.campaign.dir / "past_tuning_project.json").read_text())
    assert summary["shipped"]["gain"]["text"] == gain
    for text in (results, (b.campaign.dir / "REPORT.md").read_text()):
        assert "±" not in text and "full range" not in text  # one notation: a gain and its interval


def test_report_counts_simulated_runs_exactly(tmp_path):
    b = _kept_campaign(tmp_path / "c", simulated=True)
    b.launch("r008", "repeat", "base", parent="r001")  # one real run among them
    b.result("r008", 1000.0)
    cli.main(["report", "--campaign", str(b.campaign.dir)])
    text = (b.campaign.dir / "REPORT.md").read_text()
    assert "**SIMULATED**: 7 of 8 runs ran on the simulated workload" in text and "some runs" not in text


def test_hypotheses_are_one_line_in_the_table_and_whole_elsewhere(tmp_path):
    long = ("the data-parallel all-reduce is exposed for 12% of the step;\noverlapping it with the backward pass "
            "should cut the step by about 8% at no cost in memory, as the profile of r001 shows")
    b = _kept_campaign(tmp_path / "c", hypothesis=long)
    assert cli.main(["rank", "--campaign", str(b.campaign.dir), "--no-chart"]) == 0
    text = (b.campaign.dir / "RESULTS.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| r004 |"))
    cut = row.split(" | ")[4]
    assert cut.endswith("…") and len(cut) <= 80 and long.split()[0:5] == cut.split()[0:5] and "\n" not in cut
    assert "its full text is in `runs/<run>/candidate.json`" in text
    assert one_line("short text") == "short text" and one_line("a " * 60).endswith("…")


def _section(text, title):
    return text.split("## %s\n" % title, 1)[1].split("\n## ", 1)[0]


def test_the_report_shows_each_kept_change_removed_and_measured(tmp_path):
    b = _kept_campaign(tmp_path / "c")  # leader r006 (--b) on r004 (--a); no noise yet: add some
    b.launch("r008", "repeat", "base", parent="r001")
    b.result("r008", 1010.0)
    directory = str(b.campaign.dir)
    cli.main(["report", "--campaign", directory])
    section = _section((b.campaign.dir / "REPORT.md").read_text(), "Leave-one-out")
    assert "| set --a (r004) | not measured | n/a | not measured: `candidate new --parent r006 --leave-out r004` |" \
        in section
    assert "| set --b (r006) | its parent r004 (2 run(s)) |" in section and "pulls its weight (the leader test)" in section
    # the removal of --a, measured: clearly slower, so --a pulls its weight
    b.launch("r009", "candidate", "ab-a", parent="r006", change=[{"op": "unset", "arg": "--a"}], lever="a",
             leave_out="r004")
    b.result("r009", 880.0)
    b.launch("r010", "confirm", "ab-a", parent="r009")
    b.result("r010", 885.0)
    b.gate("r009")
    cli.main(["report", "--campaign", directory])
    text = (b.campaign.dir / "REPORT.md").read_text()
    ranking = ranking_mod.build(b.campaign.ledger.rows())
    gain = ranking_mod.gain_text(ranking.compare(ranking.recipe_of("r006"), ranking.recipe_of("r009")))
    assert "| set --a (r004) | r009 (2 run(s)) | %s | pulls its weight |" % gain in _section(text, "Leave-one-out")
    assert ranking.leader.first.run == "r006"


def test_a_change_the_stack_does_not_need_is_left_out_of_the_shipped_recipe(tmp_path, without_replay):
    b = _kept_campaign(tmp_path / "c")
    b.launch("r008", "repeat", "base", parent="r001")
    b.result("r008", 1010.0)
    b.launch("r009", "candidate", "ab-a", parent="r006", change=[{"op": "unset", "arg": "--a"}], lever="a",
             leave_out="r004")
    b.result("r009", 799.0)  # as fast without --a
    b.launch("r010", "confirm", "ab-a", parent="r009")
    b.result("r010", 801.0)
    b.gate("r009")
    directory = str(b.campaign.dir)
    assert cli.main(["report", "--campaign", directory]) == 0
    text = (b.campaign.dir / "REPORT.md").read_text()
    assert "**Shipped**: `recipe.yaml` is the recipe of run r009." in text
    assert "left out of the shipped recipe: as fast without it" in _section(text, "Leave-one-out")
    assert "- left out of the shipped recipe by its leave-one-out r009" in _section(text, "Kept changes")
    assert cli.main(["rank", "--campaign", directory, "--no-chart"]) == 0
    results = (b.campaign.dir / "RESULTS.md").read_text()
    assert _status_column(results, "r004") == "left out: the stack is as fast without it (leave-one-out r009)"
