"""Every argument of every Megatron-LM and slime release the rules were checked against has a class.

``correctness/rules/arguments.json`` records the arguments of each release as that release's own code
defines them (Megatron-LM's parser, slime's ``add_argument`` calls; ``python -m attune.correctness.inventory``
writes it). These tests check that the rules class every one, and, for each release whose source this
machine can reach, that the record is what the source defines today: core_v0.16.1 from the corpus
(``ATTUNE_CORPUS_DIR``'s ``megatron-lm/``, or ``ATTUNE_MEGATRON_DIR``), and any checkout named in
``ATTUNE_ARGUMENT_SOURCES`` (``RELEASE=DIR`` pairs separated by ``:``; RELEASE as in arguments.json).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attune.correctness import inventory
from attune.correctness.rules import Rules

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "harness"))
import megatron_cpu  # noqa: E402

INVENTORY = inventory.load_inventory()
RELEASES = {release["release"]: release for release in INVENTORY["releases"]}


def test_the_inventory_holds_megatron_releases_and_slime():
    stacks = {}
    for release in INVENTORY["releases"]:
        stacks.setdefault(release["stack"], []).append(release["release"])
        assert release["arguments"] == sorted(set(release["arguments"])), release["release"]
        assert all(name.startswith("--") for name in release["arguments"]), release["release"]
    assert {"core_v0.15.0", "core_v0.16.1"} <= set(stacks["megatron"])
    assert stacks["slime"]


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_every_argument_of_the_release_is_classed(release):
    missing = inventory.unclassed(Rules(), RELEASES[release]["arguments"])
    assert not missing, "%d argument(s) of %s have no class in numerics_list.yaml: %s" % (
        len(missing), release, " ".join(missing))


def test_slime_arguments_are_classed_for_slime_and_megatron_ones_for_both():
    rules = Rules()
    for release in INVENTORY["releases"]:
        for name in release["arguments"]:
            assert release["stack"] in rules.get("arg", name).stacks, (name, release["release"])


def _reachable() -> list:
    found = []
    saved = os.environ.get("ATTUNE_CORPUS_DIR")
    os.environ.setdefault("ATTUNE_CORPUS_DIR", str(REPO.parent / "shared" / "data"))
    try:
        found.append(("core_v0.16.1", megatron_cpu.find()))
    except megatron_cpu.Unavailable:
        pass
    finally:
        if saved is None:
            os.environ.pop("ATTUNE_CORPUS_DIR", None)
    for item in filter(None, os.environ.get("ATTUNE_ARGUMENT_SOURCES", "").split(":")):
        release, _, directory = item.partition("=")
        found.append((release, Path(directory)))
    return found


def test_the_record_of_each_reachable_release_is_what_its_source_defines():
    reachable = _reachable()
    if not reachable:
        pytest.skip("no Megatron-LM or slime source reachable (ATTUNE_CORPUS_DIR, ATTUNE_MEGATRON_DIR, "
                    "ATTUNE_ARGUMENT_SOURCES): the recorded lists are checked above, not re-read")
    rules = Rules()
    for release, directory in reachable:
        assert release in RELEASES, "%s (%s) is not recorded in arguments.json: run python -m attune.correctness.inventory" % (
            release, directory)
        names = inventory.read_arguments(RELEASES[release]["stack"], directory)
        assert names == RELEASES[release]["arguments"], "%s at %s defines %s and no longer %s" % (
            release, directory, sorted(set(names) - set(RELEASES[release]["arguments"])),
            sorted(set(RELEASES[release]["arguments"]) - set(names)))
        assert not inventory.unclassed(rules, names)


def test_slime_arguments_are_read_from_literal_add_argument_calls(tmp_path):
    package = tmp_path / "slime" / "utils"
    package.mkdir(parents=True)
    (package / "arguments.py").write_text(
        "def add(parser):\n"
        "    parser.add_argument('--rollout-batch-size', type=int)\n"
        "    parser.add_argument('--a', '--alias-a', action='store_true')\n"
        "    reset_arg(parser, '--seq-length', default=8)\n"
        "    parser.add_argument(*names)\n", encoding="utf-8")
    assert inventory.slime_arguments(tmp_path) == ["--a", "--alias-a", "--rollout-batch-size", "--seq-length"]


def test_a_tree_that_is_not_a_checkout_is_refused_by_name(tmp_path):
    with pytest.raises(inventory.InventoryError, match="not a Megatron-LM checkout"):
        inventory.megatron_arguments(tmp_path)
    with pytest.raises(inventory.InventoryError, match="not a slime checkout"):
        inventory.slime_arguments(tmp_path)


def test_an_unlisted_argument_is_numeric_and_the_reason_says_how_to_class_it():
    cls, _exact, rule, _why = Rules().classify("arg", "--surely-not-a-megatron-flag", None, "true", {}, {})
    assert cls == "numeric"
    assert "--surely-not-a-megatron-flag" in rule.reason and "ATTUNE_GATE_RULES" in rule.reason


def test_gate_coverage_names_each_argument_a_checkout_defines_without_a_class(tmp_path):
    training = tmp_path / "megatron" / "training"
    training.mkdir(parents=True)
    (tmp_path / "megatron" / "__init__.py").write_text("", encoding="utf-8")
    (training / "__init__.py").write_text("", encoding="utf-8")
    (training / "arguments.py").write_text(
        "def add_megatron_arguments(parser):\n"
        "    group = parser.add_argument_group(title='distributed')\n"
        "    group.add_argument('--tensor-model-parallel-size', type=int, default=1)\n"
        "    group.add_argument('--brand-new-kernel-switch', action='store_true')\n"
        "    return parser\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(REPO / "skill" / "scripts" / "attune.py"), "gate", "--coverage",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "2 arguments, 1 without a class" in done.stdout
    assert "unclassed: --brand-new-kernel-switch" in done.stdout
    assert "--tensor-model-parallel-size" not in done.stdout


def test_gate_coverage_refuses_a_folder_that_is_no_checkout(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "skill" / "scripts" / "attune.py"), "gate", "--coverage",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "neither a Megatron-LM checkout" in done.stderr and "Traceback" not in done.stderr


def test_every_recorded_environment_variable_is_classed():
    rules = Rules()
    names = [item["name"] for item in INVENTORY["environment"]["variables"]]
    assert len(names) > 100
    missing = sorted(name for name in names if rules.get("env", name) is None)
    assert not missing, "environment variables with no class in numerics_list.yaml: %s" % " ".join(missing)
