"""Documents tested against the code: README commands, the rulebook's numbers, the layout."""

from __future__ import annotations

import re

from conftest import REPO

from attune import cli
from attune.core import settings

README = (REPO / "README.md").read_text()
MEASUREMENT = (REPO / "skill" / "references" / "measurement.md").read_text()


def _commands():
    return re.findall(r"```\n(.*?)\n```", README, re.S)


def test_quick_start_starts_with_the_demo_and_ci_runs_the_test_command():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```\n(.*?)\n```", quick, re.S)
    assert len(blocks) == 3 and all("\n" not in block for block in blocks)
    assert blocks[0].startswith("harness/launch_campaign.sh --demo")  # the first command a new user runs
    test_command = re.search(r"\.venv/bin/python -m pytest [^\n`]*", blocks[2]).group(0)
    assert test_command in (REPO / ".ci" / "run").read_text()


def test_readme_lists_every_verb_and_exit_code():
    for name in cli.VERBS:
        assert "| `%s` |" % name in README, name
    assert "0 ok, 1 check failed" in README and "3 integrity" in README


def test_rulebook_defaults_match_the_settings():
    spec = settings.SPEC_BY_ENV
    assert "default\n  %s to %s" % (spec["ATTUNE_SCORE_FIRST_STEP"].default,
                                    spec["ATTUNE_SCORE_LAST_STEP"].default) in MEASUREMENT
    assert "`ATTUNE_NOISE_FLOOR` (default %s, 1%%)" % spec["ATTUNE_NOISE_FLOOR"].default in MEASUREMENT
    assert "(default %s, at least 2)" % spec["ATTUNE_BASELINE_REPEATS"].default in MEASUREMENT
    assert "`ATTUNE_FALSE_WIN_RATE` (default %s)" % spec["ATTUNE_FALSE_WIN_RATE"].default in MEASUREMENT
    for name in ("ATTUNE_SCORE_FIRST_STEP", "ATTUNE_SCORE_LAST_STEP", "ATTUNE_NOISE_FLOOR",
                 "ATTUNE_FALSE_WIN_RATE", "ATTUNE_BASELINE_REPEATS", "AUTOTUNE_GPUH_BUDGET", "AUTOTUNE_BUDGET", "ATTUNE_GPU_HOUR_USD"):
        assert name in MEASUREMENT, name


def test_required_files_exist_and_license_is_apache():
    for name in ("LICENSE", "NOTICE", "THIRD_PARTY_NOTICES", "CONTRIBUTING.md", "CODE_OF_CONDUCT.md",
                 "config.example.env", "pyproject.toml"):
        assert (REPO / name).is_file(), name
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX: How to apply the Apache License" in text


def test_no_empty_files_committed():
    for path in (REPO / "skill").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            assert path.stat().st_size > 0, path


def test_past_tuning_projects_follow_their_format_and_say_when_they_are_simulated():
    import json
    folder = REPO / "skill" / "past_tuning_projects"
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        assert data["schema_version"] == 1 and {"campaign", "model", "cluster", "baseline", "shipped", "kept",
                                                "rejected", "gpu_hours_spent", "simulated"} <= set(data), path.name
        assert data["simulated"] == path.stem.endswith("-simulated"), path.name
        assert all(item["simulated"] == data["simulated"] for item in data["kept"] + data["rejected"]), path.name


def test_the_readme_layout_names_every_package_and_harness_entry_with_what_it_is():
    import subprocess
    section = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    described = {}
    for line in section.splitlines():
        match = re.match(r"^(\s*)(\S+)\s{2,}(\S.*)$", line)
        if match:
            described.setdefault(len(match.group(1)), {})[match.group(2).rstrip("/")] = match.group(3)
    tracked = subprocess.run(["git", "ls-files", "skill/scripts", "harness"], cwd=str(REPO), stdout=subprocess.PIPE,
                             check=True).stdout.decode().split()
    scripts = {path.split("/")[2] for path in tracked if path.startswith("skill/scripts/") and path.count("/") >= 2}
    harness = {path.split("/")[1] for path in tracked if path.startswith("harness/")}
    assert scripts and harness
    missing = sorted(name for name in scripts if name not in described.get(4, {}))
    missing += sorted(name for name in harness if name not in described.get(2, {}))
    assert not missing, "README's layout does not say what these are: %s" % missing
