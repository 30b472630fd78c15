"""The append-only, hash-chained logs: round trips, tamper detection, concurrency, crash recovery."""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import SCRIPTS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attune.core import chainlog
from attune.core.chainlog import GENESIS_PREV, ChainLog, sha256_hex
from attune.core.errors import InputError, IntegrityError
from attune.core.schema import validate_ledger_row

texts = st.text(min_size=0, max_size=40)
payloads = st.lists(st.fixed_dictionaries({"text": texts}), min_size=1, max_size=12)
quick = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write_log(directory, items):
    log = ChainLog(Path(directory) / "ledger.jsonl", validate_ledger_row)
    for payload in items:
        log.append("note", payload, campaign="c1")
    return log


@quick
@given(payloads)
def test_round_trip(items):
    with tempfile.TemporaryDirectory() as tmp:
        log = write_log(tmp, items)
        rows = log.rows()
        assert [row["text"] for row in rows] == [item["text"] for item in items]
        assert [row["seq"] for row in rows] == list(range(len(items)))
        assert rows[0]["prev"] == GENESIS_PREV
        lines = log.read_bytes().split(b"\n")[:-1]
        for before, row in zip(lines, rows[1:]):
            assert row["prev"] == sha256_hex(before)
        report = log.verify()
        assert report.ok and report.rows == len(items) and not report.warnings


@quick
@given(payloads, st.data())
def test_any_single_byte_change_is_detected(items, data):
    with tempfile.TemporaryDirectory() as tmp:
        log = write_log(tmp, items)
        raw = bytearray(log.read_bytes())
        position = data.draw(st.integers(0, len(raw) - 1))
        value = data.draw(st.integers(0, 255).filter(lambda b: b != raw[position]))
        raw[position] = value
        Path(log.path).write_bytes(bytes(raw))
        assert not log.verify().ok


def _lines(log):
    return log.read_bytes().split(b"\n")[:-1]


def _rewrite(log, lines):
    Path(log.path).write_bytes(b"".join(line + b"\n" for line in lines))


@quick
@given(payloads, st.data())
def test_any_deletion_is_detected(items, data):
    with tempfile.TemporaryDirectory() as tmp:
        log = write_log(tmp, items)
        lines = _lines(log)
        del lines[data.draw(st.integers(0, len(lines) - 1))]
        _rewrite(log, lines)
        assert not log.verify().ok


@quick
@given(payloads, st.data())
def test_any_insertion_is_detected(items, data):
    with tempfile.TemporaryDirectory() as tmp:
        log = write_log(tmp, items)
        lines = _lines(log)
        where = data.draw(st.integers(0, len(lines)))
        copied = data.draw(st.sampled_from(lines))
        forged = json.loads(copied)
        forged["text"] = data.draw(texts)
        extra = data.draw(st.sampled_from([copied, chainlog.encode_row(forged), b"{}", b"not json"]))
        lines.insert(where, extra)
        _rewrite(log, lines)
        assert not log.verify().ok


@quick
@given(payloads.filter(lambda items: len(items) >= 2), st.data())
def test_any_reordering_is_detected(items, data):
    with tempfile.TemporaryDirectory() as tmp:
        log = write_log(tmp, items)
        lines = _lines(log)
        order = data.draw(st.permutations(range(len(lines))).filter(lambda p: list(p) != sorted(p)))
        _rewrite(log, [lines[i] for i in order])
        assert not log.verify().ok


def test_verify_names_the_first_bad_row(tmp_path):
    log = write_log(tmp_path, [{"text": str(i)} for i in range(6)])
    lines = _lines(log)
    row = json.loads(lines[3])
    row["text"] = "edited"
    lines[3] = chainlog.encode_row(row)
    _rewrite(log, lines)
    report = log.verify()
    assert not report.ok
    assert report.first_bad["line"] == 5 and report.first_bad["seq"] == 4
    assert "prev does not match" in report.first_bad["reason"]
    assert "line 5" in report.summary()


def test_last_row_change_and_truncation_caught_by_head(tmp_path):
    log = write_log(tmp_path, [{"text": str(i)} for i in range(3)])
    original = log.read_bytes()
    Path(log.path).write_bytes(original.replace(b'"text":"2"', b'"text":"9"'))
    assert "changed since it was written" in log.verify().first_bad["reason"]
    Path(log.path).write_bytes(b"".join(line + b"\n" for line in original.split(b"\n")[:-2]))
    assert "rows were removed" in log.verify().first_bad["reason"]
    Path(log.head_path).unlink()
    Path(log.path).write_bytes(original)
    assert "head record" in log.verify().first_bad["reason"]


def test_schema_is_enforced_on_append_and_verify(tmp_path):
    log = ChainLog(tmp_path / "ledger.jsonl", validate_ledger_row)
    with pytest.raises(InputError, match="unknown kind 'bogus'"):
        log.append("bogus", {}, campaign="c")
    with pytest.raises(InputError, match="missing field 'text'"):
        log.append("note", {}, campaign="c")
    with pytest.raises(InputError, match="reserved"):
        log.append("note", {"text": "x", "seq": 4}, campaign="c")
    with pytest.raises(ValueError):
        log.append("note", {"text": float("nan")}, campaign="c")
    log.append("note", {"text": "ok"}, campaign="c")
    with pytest.raises(IntegrityError, match="belongs to campaign 'c'"):
        log.append("note", {"text": "x"}, campaign="other")


def test_append_refuses_a_damaged_last_row(tmp_path):
    log = write_log(tmp_path, [{"text": "a"}])
    with open(log.path, "ab") as handle:
        handle.write(b"garbage\n")
    with pytest.raises(IntegrityError, match="not valid JSON"):
        log.append("note", {"text": "b"})


def _appender(path, count, tag):
    log = ChainLog(path, validate_ledger_row)
    for index in range(count):
        log.append("note", {"text": "%s-%d" % (tag, index)}, campaign="c1")


def test_two_processes_appending_1000_rows_each(tmp_path):
    path = str(tmp_path / "ledger.jsonl")
    ctx = multiprocessing.get_context("fork")
    workers = [ctx.Process(target=_appender, args=(path, 1000, tag)) for tag in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(300)
        assert worker.exitcode == 0
    log = ChainLog(path, validate_ledger_row)
    report = log.verify()
    assert report.ok and report.rows == 2000 and not report.warnings
    texts_seen = [row["text"] for row in log.rows()]
    for tag in ("a", "b"):
        mine = [text for text in texts_seen if text.startswith(tag + "-")]
        assert mine == ["%s-%d" % (tag, i) for i in range(1000)]


KILLER = r"""
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from attune.core.chainlog import ChainLog
from attune.core.schema import validate_ledger_row
log = ChainLog(sys.argv[2], validate_ledger_row)
for index in range(5):
    log.append("note", {"text": "complete %d" % index}, campaign="c1")
real_write = os.write
def write_half_then_die(fd, data):
    real_write(fd, bytes(data[: len(data) // 2]))
    os.kill(os.getpid(), signal.SIGKILL)
os.write = write_half_then_die
log.append("note", {"text": "this row is torn by a kill in the middle of its write"}, campaign="c1")
"""


def test_writer_killed_mid_append_leaves_a_recoverable_tail(tmp_path):
    path = tmp_path / "ledger.jsonl"
    proc = subprocess.run([sys.executable, "-c", KILLER, str(SCRIPTS), str(path)])
    assert proc.returncode == -signal.SIGKILL
    log = ChainLog(path, validate_ledger_row)
    before = log.read_bytes()
    complete = before[: before.rindex(b"\n") + 1]
    torn = before[len(complete):]
    assert torn and b"\n" not in torn
    report = log.verify()
    assert report.ok and report.rows == 5 and report.torn_tail_bytes == len(torn)
    assert any("torn" in warning for warning in report.warnings)

    row = log.append("note", {"text": "after the crash"})
    after = log.read_bytes()
    assert after.startswith(complete), "no complete row is altered or dropped"
    rows = log.rows()
    recovery = rows[5]
    assert recovery["kind"] == "recovery" and recovery["torn_bytes"] == len(torn)
    assert recovery["torn_sha256"] == sha256_hex(torn)
    assert (tmp_path / recovery["side_file"]).read_bytes() == torn
    assert row["seq"] == 6 and rows[6]["text"] == "after the crash"
    final = log.verify()
    assert final.ok and final.rows == 7 and not final.warnings


def test_append_many_chains_like_append(tmp_path):
    one = ChainLog(tmp_path / "one.jsonl", validate_ledger_row)
    many = ChainLog(tmp_path / "many.jsonl", validate_ledger_row)
    stamp = "2026-11-02T09:00:00.000000Z"
    for index in range(5):
        one.append("note", {"text": str(index)}, campaign="c", ts=stamp)
    assert many.append_many([("note", {"text": str(i)}, stamp) for i in range(5)], campaign="c") == 5
    assert one.read_bytes() == many.read_bytes()
    assert many.verify().ok


@pytest.mark.parametrize("module", ["core/chainlog.py", "core/schema.py", "core/errors.py", "core/state.py",
                                    "core/__init__.py", "__init__.py", "attune.py"])
def test_hook_importable_modules_stay_python37(module):
    source = (SCRIPTS / module).read_text()
    ast.parse(source, feature_version=(3, 7))
    tree = ast.parse(source)
    optional = set()  # imports guarded by `except ImportError` may be third-party accelerators
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id == "ImportError" for h in node.handlers):
            optional.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    imports = [node for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in optional]
    for node in imports:
        name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
        if (isinstance(node, ast.ImportFrom) and node.level) or name.split(".")[0] == "attune":
            continue  # the package itself
        assert name.split(".")[0] in sys.stdlib_module_names, "%s imports %s, which is not the standard library" % (
            module, name)


@pytest.mark.parametrize("fast", [True, False])
def test_both_parsers_verify_alike_and_refuse_nan(tmp_path, monkeypatch, fast):
    if not fast:
        monkeypatch.setattr(chainlog, "_fast_loads", None)
    elif chainlog._fast_loads is None:
        pytest.skip("orjson is not installed; the standard-library path is tested by the other case")
    log = write_log(tmp_path, [{"text": str(i)} for i in range(4)])
    report = log.verify()
    assert report.ok and report.rows == 4
    lines = _lines(log)
    lines[1] = lines[1].replace(b'"text":"1"', b'"text":NaN')
    _rewrite(log, lines)
    assert log.verify().first_bad == {"line": 2, "seq": None, "reason": "not valid JSON"}


def test_text_that_is_not_unicode_is_refused_and_foreign_rows_stay_readable(tmp_path):
    log = write_log(tmp_path, [{"text": "ok"}])
    with pytest.raises(InputError, match="not valid Unicode"):
        log.append("note", {"text": "x \udce2 y"})
    assert log.verify().ok and log.verify().rows == 1
    # a row with a lone surrogate escape written by another tool: both parsers read it alike
    lines = _lines(log)
    row = json.loads(lines[0])
    row["text"] = "x \udce2 y"
    _rewrite(log, [json.dumps(row, separators=(",", ":")).encode()])
    Path(log.head_path).unlink()
    chainlog.ChainLog(log.path)._write_head(0, sha256_hex(_lines(log)[0]))
    assert log.verify().ok


@pytest.mark.parametrize("stamp", ["2026-13-02T09:00:00.000000Z", "2026-11-32T09:00:00.000000Z",
                                   "2026-11-02T24:00:00.000000Z", "2026-11-02T09:00:00.000000Z\n",
                                   "2026-11-02 09:00:00.000000Z", "2026-11-02T09:00:00Z"])
def test_bad_timestamps_are_refused(tmp_path, stamp):
    log = ChainLog(tmp_path / "ledger.jsonl", validate_ledger_row)
    with pytest.raises(InputError, match="timestamp"):
        log.append("note", {"text": "x"}, campaign="c", ts=stamp)
