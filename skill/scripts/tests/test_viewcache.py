"""The view cache: status and rank reuse a verified prefix, and nothing about the ledger hides behind it."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from pathlib import Path

from conftest import DATA
from factory import Builder, jittered
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ranking import _fingerprint, baseline, campaigns

from attune import cli
from attune.campaign import ranking, runview, snapshot, status, viewcache
from attune.campaign.ledger import Campaign


def fixture_copy(tmp_path):
    target = tmp_path / "campaign"
    shutil.copytree(DATA / "campaign_basic", target)
    return target


def view(directory, use_cache):
    snap = snapshot.take(directory, use_cache=use_cache)
    snap.finish()
    info = status.collect(snap)
    info["integrity"]["ledger"] = info["integrity"]["ledger"].split(" (")[0]
    return json.dumps(info, sort_keys=True, default=str), snap


def test_cached_and_uncached_views_agree_as_rows_are_appended(tmp_path):
    directory = fixture_copy(tmp_path)
    assert not (directory / viewcache.PATH).exists()
    first, _ = view(directory, True)
    assert (directory / viewcache.PATH).exists()
    assert first == view(directory, False)[0]
    campaign = Campaign(directory)
    campaign.append("result", run="r010", status="failed", failure={"class": "oom"})
    campaign.append("note", text="more")
    cached, snap = view(directory, True)
    assert snap.reused_rows == len(Campaign(directory).ledger.rows()) - 2, "only the new rows were verified"
    assert cached == view(directory, False)[0]
    assert cached == view(directory, True)[0]


def test_a_changed_prefix_is_never_served_from_the_cache(tmp_path):
    directory = fixture_copy(tmp_path)
    assert cli.main(["status", "--campaign", str(directory)]) == 0
    ledger = directory / "ledger.jsonl"
    ledger.write_bytes(ledger.read_bytes().replace(b'"status":"failed"', b'"status":"finished"', 1))
    assert cli.main(["status", "--campaign", str(directory)]) == 3
    assert cli.main(["rank", "--campaign", str(directory), "--no-chart"]) == 3


def test_a_forged_cache_cannot_change_what_ships(tmp_path, without_replay):
    directory = fixture_copy(tmp_path)
    assert cli.main(["status", "--campaign", str(directory)]) == 0
    path = directory / viewcache.PATH
    cache = json.loads(path.read_bytes())
    score = viewcache.RUN_FIELDS.index("score")
    for run in cache["runs"]:  # make the baseline look 10x faster in the cached view
        if run[0] in ("r001", "r002", "r003"):
            run[score][2] *= 10
    path.write_text(json.dumps(cache))
    forged, _ = view(directory, True)
    assert json.loads(forged)["leader"]["run"] == "r001", "the view trusts a cache that matches the ledger bytes"
    assert cli.main(["report", "--campaign", str(directory)]) == 0
    assert (directory / "recipe.yaml").read_bytes() == (directory / "runs" / "r004" / "recipe.yaml").read_bytes()


def test_mismatched_or_damaged_caches_are_ignored(tmp_path):
    b = Builder(tmp_path / "c")
    b.launch("r001", "baseline", "base")
    b.result("r001", 1000.0)
    directory = b.campaign.dir
    view(directory, True)
    path = directory / viewcache.PATH
    data = Campaign(directory).ledger.read_bytes()
    assert viewcache.load(directory, data, (5, 19)) is not None
    assert viewcache.load(directory, data, (6, 19)) is None  # another scoring window
    cache = json.loads(path.read_bytes())
    good = json.dumps(cache)
    cache["runs"].append(list(cache["runs"][0]))
    path.write_text(json.dumps(cache))
    assert viewcache.load(directory, data, (5, 19)) is None  # a run twice
    cache = json.loads(good)
    del cache["runs"][0][-1]
    path.write_text(json.dumps(cache))
    assert viewcache.load(directory, data, (5, 19)) is None  # a run entry of the wrong shape
    cache = json.loads(good)
    cache["runs"][0][0] = 7
    path.write_text(json.dumps(cache))
    assert viewcache.load(directory, data, (5, 19)) is None  # a run id that is not a string
    cache = json.loads(good)
    cache["run_fields"] = cache["run_fields"][::-1]
    path.write_text(json.dumps(cache))
    assert viewcache.load(directory, data, (5, 19)) is None  # written by a version with other fields
    path.write_text("{not json")
    assert viewcache.load(directory, data, (5, 19)) is None
    assert view(directory, True)[0] == view(directory, False)[0]


def test_torn_tail_after_a_cached_prefix(tmp_path):
    directory = fixture_copy(tmp_path)
    view(directory, True)
    with open(directory / "ledger.jsonl", "ab") as handle:
        handle.write(b'{"schema_version":1,"campa')
    cached, snap = view(directory, True)
    assert snap.ledger_report.torn_tail_bytes == len(b'{"schema_version":1,"campa')
    assert cached == view(directory, False)[0]


def test_rows_that_only_the_whole_ledger_can_place_make_the_view_read_every_row(tmp_path):
    directory = fixture_copy(tmp_path)
    view(directory, True)
    campaign = Campaign(directory)
    launch = next(row for row in campaign.ledger.rows() if row["kind"] == "launch" and row["run"] == "r009")
    campaign.append("launch", **{key: value for key, value in launch.items()
                                 if key not in ("schema_version", "campaign", "seq", "ts", "kind", "prev")})
    cached, snap = view(directory, True)
    assert snap.reused_rows == 0 and snap.ledger_rows is not None, "the whole ledger was read"
    assert snap.ranking.warnings == ["run r009 is launched more than once; the earliest launch is used"]
    assert cached == view(directory, False)[0]
    campaign.append("result", run="r404", status="failed", failure={"class": "oom"})  # no launch anywhere
    assert view(directory, True)[0] == view(directory, False)[0]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(campaigns, st.integers(0, 2**16), st.data())
def test_a_cached_prefix_plus_the_rows_after_it_ranks_like_every_row(plan, seed, data):
    """Whatever the split, merging the rows after the view cache's prefix into its runs gives the same
    ranking, run by run, as ranking every row at once."""
    with tempfile.TemporaryDirectory() as tmp:
        b = Builder(Path(tmp) / "c")
        rng = random.Random(seed)
        baseline(b, runs=3, step=1000.0)
        for number, (recipe, step, verdict, confirm, finish) in enumerate(plan, 4):
            run = "r%03d" % number
            b.launch(run, "candidate", recipe, parent="r001")
            if verdict:
                b.gate(run, verdict)
            if finish:
                b.result(run, jittered(step, 0.02, rng.random()))
            if confirm:
                b.launch(run + "c", "confirm", recipe, parent=run)
                b.result(run + "c", jittered(step, 0.02, rng.random()))
                b.gate(run, "pass")
        rows = b.campaign.ledger.rows()
        whole = ranking.build(rows)
        split = data.draw(st.integers(1, len(rows)))
        runs, stops, warnings = runview.merge(rows[:split])
        assert warnings == []
        data_bytes = b.campaign.ledger.read_bytes()
        size = sum(len(line) + 1 for line in data_bytes.split(b"\n")[:split])
        assert viewcache.save(b.campaign.dir, data_bytes, size, split, "prev", "c", rows[split - 1]["ts"],
                              rows[0], [], stops, list(runs.values()), (5, 19))
        cached = viewcache.load(b.campaign.dir, data_bytes, (5, 19))
        assert cached is not None and cached["count"] == split
        runs, more_stops, warnings = runview.merge(rows[split:], runs=cached["runs"])
        joined = ranking.assemble(runs, cached["stops"] + more_stops, warnings)
        assert _fingerprint(joined) == _fingerprint(whole)
        assert joined.runs == whole.runs
