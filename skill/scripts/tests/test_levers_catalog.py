"""The lever catalog (skill/references/levers.md) parses, covers the analyzer's levers, and names only
flags the correctness gate knows — or says in the entry that a flag is unlisted (and so numeric)."""

from __future__ import annotations

import warnings

import pytest
import yaml

from conftest import REPO, SCRIPTS

from attune.core import levers
from attune.profile_analyzer import diagnose

TEXT = levers.CATALOG.read_text()
ENTRIES = levers.parse(TEXT)
RULES = yaml.safe_load((SCRIPTS / "correctness" / "rules" / "numerics_list.yaml").read_text())["entries"]
LISTED = {(rule["name"], rule["kind"]) for rule in RULES}
UNLISTED_NOTE = "not in numerics_list.yaml"


def test_catalog_has_at_least_40_levers_with_unique_ids_and_all_fields():
    assert len(ENTRIES) >= 40
    ids = [entry["id"] for entry in ENTRIES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for entry in ENTRIES:
        for field in levers.FIELDS:
            assert entry[field].strip(), (entry["id"], field)


def test_every_analyzer_lever_is_in_the_catalog():
    ids = {entry["id"] for entry in ENTRIES}
    used = {lever for group in diagnose.LEVERS.values() for lever in group}
    assert not used - ids, sorted(used - ids)


def _unlisted(kind, key):
    found = []
    for entry in ENTRIES:
        for name in entry[key]:
            if (name, kind) not in LISTED:
                found.append((entry["id"], name))
    return found


@pytest.mark.parametrize("kind,key", [("arg", "flags"), ("env", "env")])
def test_flags_missing_from_the_gate_list_are_reported_in_their_entry(kind, key):
    missing = _unlisted(kind, key)
    if missing:  # reported, never silently skipped
        warnings.warn("levers.md names %s not in numerics_list.yaml (numeric by default): %s"
                      % (key, ", ".join("%s:%s" % pair for pair in missing)))
    by_id = {entry["id"]: entry for entry in ENTRIES}
    undocumented = [(lever, name) for lever, name in missing
                    if name not in by_id[lever]["Correctness"] or UNLISTED_NOTE not in by_id[lever]["Correctness"]]
    assert not undocumented, "flags unknown to the gate and not flagged as such in Correctness: %s" % undocumented


def test_correctness_names_a_gate_class():
    for entry in ENTRIES:
        text = entry["Correctness"].lower()
        assert any(cls in text for cls in ("placement", "swap", "numeric", "fixed")), entry["id"]


def test_fixed_class_flags_are_said_to_be_unshippable():
    fixed = {rule["name"] for rule in RULES if rule["class"] == "fixed"}
    for entry in ENTRIES:
        named = set(entry["flags"]) & fixed
        if named and not entry["Correctness"].startswith(("placement", "swap")):
            assert "fixed" in entry["Correctness"].lower(), (entry["id"], named)


def test_lessons_parse_and_name_catalog_levers():
    ids = {entry["id"] for entry in ENTRIES}
    for lesson in levers.parse_lessons(TEXT):
        assert lesson["lever"] in ids or lesson["lever"].startswith("other:"), lesson


def test_lesson_format_example_parses():
    example = TEXT.split("## Appending lessons", 1)[1].split("Example (illustrative only, not a measurement):", 1)[1]
    block = example.split("```\n", 2)[1]
    lessons = levers.parse_lessons("\n# Campaign lessons\n" + block)
    assert len(lessons) == 1
    assert lessons[0]["lever"] == "overlap-grad-reduce" and lessons[0]["Verdict"] == "kept"
    assert lessons[0]["campaign"] == "alice-llama8b"


def test_parse_rejects_a_missing_field():
    bad = "# Lever catalog\n\n## some-lever\n- **Flags**: `--x`\n"
    with pytest.raises(ValueError):
        levers.parse(bad)


def test_catalog_lives_under_the_skill_references():
    assert levers.CATALOG == REPO / "skill" / "references" / "levers.md"
