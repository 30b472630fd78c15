"""The lever catalog (skill/references/levers.md) parses, covers the analyzer's levers, and names only
flags the correctness gate knows — or says in the entry that a flag is unlisted (and so numeric)."""

from __future__ import annotations

import re
import sys
import warnings
from types import SimpleNamespace

import pytest
import yaml

from conftest import REPO, SCRIPTS

from attune.campaign import candidates
from attune.core import legality, levers, workload
from attune.core.recipe import Recipe, diff
from attune.correctness import config_check
from attune.correctness.rules import Rules
from attune.planner import space
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


# ---------------------------------------------------------------- levers.yaml: the catalog's facts against the code
SPECS = levers.specs()
BY_ID = {entry["id"]: entry for entry in ENTRIES}
SHIPPED = {path.stem: path for path in sorted((SCRIPTS / "simulate" / "recipes").glob("*.yaml"))
           if "slime" not in path.read_text()}
# a Correctness claim: its class, then the flags it names in parentheses (up to a `;` that starts another clause)
CLAIM = re.compile(r"(placement, exact (true|false)(?:, init (?:true|false))?|swap|numeric|fixed)\s*\(([^();]*)[);]")
GATE = Rules()


def _recipe(path):
    return workload.enforce(Recipe(path.read_text().format(python=sys.executable, sim="sim_megatron.py")))


def _records(argv):
    options = {"--set": [], "--unset": [], "--env": [], "--unset-env": []}
    for option, value in zip(argv[::2], argv[1::2]):
        options[option].append(value)
    return candidates.parse_changes(options["--set"], options["--unset"], options["--env"], options["--unset-env"])


def _name(item) -> str:
    return item.get("arg") or item.get("env")


def _holds(args, env, name, want) -> bool:
    value = (env if not name.startswith("--") else args).get(name)
    if want == "set":
        return value is not None and value is not False
    if want == "unset":
        return value is None
    if isinstance(want, list):
        return str(value) in want
    number = int(value) if value is not None and str(value).lstrip("-").isdigit() else (1 if name.startswith("--")
                                                                                         else None)
    return number is not None and number > int(str(want).lstrip(">"))


def _tries():
    """(lever, recipe name, parent, child) for every lever with a `try` on every shipped recipe its requirements
    hold on (after the change), where the change changes something."""
    out = []
    for lever, spec in sorted(SPECS.items()):
        if not spec["try"]:
            continue
        for name, path in SHIPPED.items():
            parent = _recipe(path)
            if spec["after"]:  # tried on top of the lever it comes after, as kept
                parent = workload.enforce(parent.apply(_records(SPECS[spec["after"]]["try"])))
            child = workload.enforce(parent.apply(_records(spec["try"])))
            args, env = child.args(), child.env()
            needs = dict(SPECS[spec["after"]]["requires"] if spec["after"] else {}, **spec["requires"])
            if not diff(parent, child) or not all(_holds(args, env, flag, want) for flag, want in needs.items()):
                continue
            out.append((lever, name, parent, child))
    return out


TRIES = _tries()


def test_every_catalog_entry_has_a_spec_and_no_spec_is_orphaned():
    assert set(SPECS) == set(BY_ID), (sorted(set(BY_ID) - set(SPECS)), sorted(set(SPECS) - set(BY_ID)))


def test_a_spec_names_only_flags_its_entry_names_or_companions_it_explains():
    for lever, spec in SPECS.items():
        own = set(BY_ID[lever]["flags"]) | set(BY_ID[lever]["env"])
        touched = {_name(item) for item in _records(spec["try"])} if spec["try"] else set()
        assert touched <= own | set(spec["companions"]), (lever, sorted(touched - own))
        assert set(spec["defaults"]) <= own, (lever, sorted(set(spec["defaults"]) - own))
        for companion, why in spec["companions"].items():
            assert why.strip() and companion not in own, (lever, companion)


def test_ships_is_what_the_entrys_correctness_says():
    for lever, spec in SPECS.items():
        first = BY_ID[lever]["Correctness"].replace("*", "").replace("`", "").split()[0].strip(",;:").lower()
        says = first in ("placement", "swap")
        assert spec["ships"] == says, "%s: levers.yaml ships %s, its Correctness starts %r" % (lever, spec["ships"],
                                                                                                first)


def test_every_class_the_catalog_claims_for_a_flag_is_the_gates():
    """Each ``class (`--flag`, ...)`` clause of a Correctness field against numerics_list.yaml's rule (a flag not
    listed there is numeric)."""
    claims = 0
    for entry in ENTRIES:
        for match in CLAIM.finditer(entry["Correctness"]):
            cls, exact = match.group(1).split(",")[0], match.group(2)
            for name in re.findall(r"`([^`]+)`", match.group(3)):
                name = name.split()[0].split("=")[0]
                rule = GATE.get("arg" if name.startswith("--") else "env", name)
                claims += 1
                if rule is None:
                    assert cls == "numeric", (entry["id"], name, "unlisted, so numeric; the catalog says", cls)
                    continue
                assert rule.cls == cls, (entry["id"], name, "gate", rule.cls, "catalog", cls)
                if cls == "placement":
                    assert str(rule.exact).lower() == exact, (entry["id"], name, "exact", rule.exact)
    assert claims >= 100, claims


def test_every_default_the_catalog_gives_is_the_gates():
    """Setting a flag to Megatron-LM's default is no change only when the gate's rule knows the default: a default
    the catalog gives and the rule lacks classes `--moe-flex-dispatcher-backend deepep` as a numeric change."""
    for lever, spec in SPECS.items():
        for name, value in spec["defaults"].items():
            rule = GATE.get("arg" if name.startswith("--") else "env", name)
            assert rule is not None and rule.default == value, (lever, name, value, rule and rule.default)


def test_the_planner_takes_its_companions_from_the_catalog():
    assert space.COMPANIONS == {lever: spec["companions"] for lever, spec in SPECS.items() if spec["companions"]}


def test_a_lever_tried_after_another_is_tried_on_top_of_it():
    assert all(SPECS[spec["after"]]["try"] for spec in SPECS.values() if spec["after"])
    assert ("delay-wgrad-compute", "qwen3_30b_a3b_h100x16") in {(t[0], t[1]) for t in TRIES}


def test_tries_cover_the_shipped_recipes():
    assert {name for _lever, name, _p, _c in TRIES} == set(SHIPPED)
    assert len(TRIES) >= 30, len(TRIES)


@pytest.mark.parametrize("lever, name, parent, child", TRIES, ids=["%s@%s" % (t[0], t[1]) for t in TRIES])
def test_a_levers_try_is_legal_classed_and_modelled_as_its_spec_says(lever, name, parent, child):
    spec = SPECS[lever]
    violations = legality.check(child.args(), child.env(), child.gpus(), None, trusted=parent.args())
    assert not violations, "%s on %s: %s" % (lever, name, "; ".join(map(str, violations)))
    found = config_check.check(SimpleNamespace(args=parent.args(), env=parent.env()),
                               SimpleNamespace(args=child.args(), env=child.env()), GATE)
    change = diff(parent, child)
    # a placement rule may be numeric when another flag is set (numeric_when): the entry's Correctness names it
    conditions = {other for item in change for rule in [GATE.get("arg" if _name(item).startswith("--") else "env",
                                                                 _name(item))]
                  if rule is not None for other in (rule.numeric_when or ()) if other in child.args()}
    for other in conditions:
        assert other in BY_ID[lever]["Correctness"], (lever, "numeric when %s: not said in Correctness" % other)
    assert found["passed"] == (spec["ships"] and not conditions), (lever, name, found["reasons"])
    own = set(BY_ID[lever]["flags"]) | set(BY_ID[lever]["env"])
    unread = [item for item in candidates.not_modelled(change) if item in own]
    assert (not unread) == spec["modelled"], (lever, name, "projection does not read", unread)
    for flag in spec["excludes"]:
        assert flag not in child.args(), (lever, name, flag)


@pytest.mark.parametrize("lever, name, parent, child", TRIES, ids=["%s@%s" % (t[0], t[1]) for t in TRIES])
def test_legality_refuses_the_lever_without_what_it_requires(lever, name, parent, child):
    """Break each requirement of the spec on the tried recipe (unset a flag it needs, set a size to 1, another
    value): legality refuses it, unless the spec says legality does not check that one (`unchecked`)."""
    spec = SPECS[lever]
    for flag, want in spec["requires"].items():
        if flag in spec["unchecked"] or flag in {_name(item) for item in _records(spec["try"])}:
            continue
        broken = None
        if want == "set":
            broken = {"op": "unset", "arg": flag}
        elif want == "unset":
            broken = {"op": "set", "arg": flag, "value": "uniform" if flag == "--recompute-method" else "1"}
        elif isinstance(want, str) and want.startswith(">"):
            broken = {"op": "set", "arg": flag, "value": "1"}
        elif isinstance(want, list):
            broken = {"op": "set", "arg": flag, "value": "allgather" if "allgather" not in want else "other"}
        if broken is None:
            continue
        bad = child.apply([broken])
        violations = legality.check(bad.args(), bad.env(), bad.gpus(), None, trusted=parent.args())
        assert violations, "%s on %s without %s %s: legality accepts it" % (lever, name, flag, want)
