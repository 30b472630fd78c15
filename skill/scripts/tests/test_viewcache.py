"""The view cache: status and rank reuse a verified prefix, and nothing about the ledger hides behind it."""

from __future__ import annotations

import json
import shutil

from conftest import DATA
from factory import Builder

from attune_core import cli, snapshot, status, viewcache
from attune_core.campaign import Campaign


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


def test_a_forged_cache_cannot_change_what_ships(tmp_path):
    directory = fixture_copy(tmp_path)
    assert cli.main(["status", "--campaign", str(directory)]) == 0
    path = directory / viewcache.PATH
    cache = json.loads(path.read_bytes())
    for row in cache["rows"]:  # make the baseline look 10x faster in the cached view
        if row["kind"] == "result" and row["run"] in ("r001", "r002", "r003"):
            row["score"][2] *= 10
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
    del cache["rows"][1]["seq"]
    cache["rows"].append(dict(cache["rows"][0]))
    cache["count"] += 1
    path.write_text(json.dumps(cache))
    assert viewcache.load(directory, data, (5, 19)) is None  # rows out of order or missing their seq
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
