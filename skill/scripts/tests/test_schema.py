"""The ledger schema: pinned by a snapshot, and documented field by field in ledger_schema.md."""

from __future__ import annotations

import json
import re

from conftest import DATA, REPO

from attune.core import schema

DOC = REPO / "skill" / "references" / "ledger_schema.md"


def _diff(old: dict, new: dict, path=""):
    out = []
    for key in sorted(set(old) | set(new)):
        where = "%s.%s" % (path, key) if path else key
        if key not in new:
            out.append("removed " + where)
        elif key not in old:
            out.append("added " + where)
        elif isinstance(old[key], dict) and isinstance(new[key], dict):
            out += _diff(old[key], new[key], where)
        elif old[key] != new[key]:
            out.append("changed %s: %r -> %r" % (where, old[key], new[key]))
    return out


def test_schema_snapshot_is_pinned():
    pinned = json.loads((DATA / "schema_snapshot.json").read_text())
    changes = _diff(pinned, schema.snapshot())
    assert not changes, "the ledger schema changed (update schema_snapshot.json, ledger_schema.md and, " \
                        "unless only optional fields were added, schema_version): " + "; ".join(changes)


def _cells(line: str) -> list:
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [part.strip().replace("\\|", "|") for part in parts]


def documented_kinds(section_title: str) -> dict:
    text = DOC.read_text()
    section = text.split("## `%s` kinds" % section_title, 1)[1].split("\n## ", 1)[0]
    kinds = {}
    for block in section.split("### `")[1:]:
        kind = block.split("`", 1)[0]
        required, optional = {}, {}
        for line in block.splitlines():
            if not line.startswith("| `"):
                continue
            field, ftype, needed, meaning = _cells(line)
            assert meaning, "field %s.%s has no meaning in ledger_schema.md" % (kind, field)
            (required if needed == "yes" else optional)[field.strip("`")] = ftype.strip("`")
        kinds[kind] = (required, optional)
    return kinds


def test_every_kind_and_field_is_documented_as_coded():
    assert documented_kinds("ledger.jsonl") == schema.LEDGER_KINDS
    assert documented_kinds("gpu_hours.jsonl") == schema.GPU_HOUR_KINDS


def test_metrics_fields_are_documented():
    text = DOC.read_text()
    for field, ftype in list(schema.METRICS_FIELDS.items()) + list(schema.ITERATION_COLUMNS.items()):
        assert "| `%s` | `%s` |" % (field, ftype) in text


def test_metrics_columns_are_checked_on_append(tmp_path):
    import pytest
    from factory import Builder, metrics
    from attune.core.errors import InputError
    b = Builder(tmp_path)
    b.launch("r001", "baseline", "base")
    bad = metrics(1000.0)
    bad["step_ms"].pop()
    with pytest.raises(InputError, match="column 'step_ms' has 19 values"):
        b.campaign.append("result", run="r001", status="finished", metrics=bad)
    bad = metrics(1000.0)
    bad["skipped"][2] = "x"
    with pytest.raises(InputError, match=r"skipped\[2\] must be int"):
        b.campaign.append("result", run="r001", status="finished", metrics=bad)
