"""The streaming reader: Kineto's layout and compact JSON, gzip, keys after the events, truncation."""

from __future__ import annotations

import gzip

from synth import planted

from attune.profile_analyzer import profile
from attune.profile_analyzer.reader import TraceReader


def events(path, chunk=1 << 20):
    reader = TraceReader(path, chunk_chars=chunk)
    out = [e for batch in reader for e in batch]
    return out, reader


def test_both_layouts_and_tiny_chunks_read_the_same_events(tmp_path):
    t = planted()
    expected = t.events
    for layout in ("kineto", "compact"):
        for chunk in (64, 1 << 20):
            got, reader = events(t.write(tmp_path / ("%s.json" % layout), layout), chunk)
            assert got == expected, (layout, chunk)
            assert reader.metadata["distributedInfo"]["rank"] == 0 and not reader.warnings
    got, reader = events(t.write(tmp_path / "k.json.gz"))
    assert got == expected and reader.metadata["traceName"] == "synthetic"


def test_a_truncated_file_gives_a_partial_result_naming_the_file(tmp_path):
    t = planted()
    text = t.text()
    cut = text.index("flash_fwd_kernel") + 10
    path = tmp_path / "cut.json"
    path.write_text(text[:cut])
    got, reader = events(path)
    assert got == t.events[:len(got)] and 0 < len(got) < len(t.events)
    assert reader.truncated and str(path) in reader.warnings[0] and "partial" in reader.warnings[0]
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(gzip.compress(text.encode())[:-40])
    result = profile.run([gz])
    assert result["partial"] is True and any(str(gz) in w for w in result["warnings"])


def test_unknown_categories_and_phases_are_ignored(tmp_path):
    t = planted()
    t.events.append({"ph": "X", "cat": "mtia_ccp_events_new_kind", "name": "x", "pid": 1, "tid": 1, "ts": 5, "dur": 1})
    t.events.append({"ph": "C", "name": "counter", "pid": 1, "ts": 5, "args": {"v": 1}})
    r = profile.run([t.write(tmp_path / "r.json")])["ranks"][0]
    assert r["temporal_breakdown"]["kernel_time_us"] == 1502.0
