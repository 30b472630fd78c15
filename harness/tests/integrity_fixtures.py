"""Build a campaign directory for the integrity tests through the real library.

The campaign has read-only-style copies of ``skill/`` and ``harness/`` under ``.attune/`` (copied the
way the launcher copies them: no bytecode caches, no tests), frozen settings, a ledger and a
GPU-hour log written by ``attune.campaign.ledger`` (via the skill tests' ``factory.Builder``), a lever
catalog and the two prompts. Every number in it is SYNTHETIC test data.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
HARNESS = TESTS.parent
REPO = HARNESS.parent
SKILL = REPO / "skill"
SCRIPTS = SKILL / "scripts"
for _path in (str(SCRIPTS), str(SCRIPTS / "tests"), str(HARNESS)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import factory  # noqa: E402  (skill/scripts/tests/factory.py: builds campaigns through the library)

IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "tests", "out")
LEVERS = "# Levers\n\n## overlap-grad-reduce\nOverlap the gradient reduce-scatter with backward.\n"
GOAL = "Raise tokens/s/GPU of the baseline recipe within the budget.\n"
RESUME = "Resume the campaign from the ledger.\n"


def build_template(root: Path) -> Path:
    """A campaign with two baseline runs finished and one run in flight; returns its directory."""
    directory = root / "c"
    builder = factory.Builder(directory)
    state = directory / ".attune"
    shutil.copytree(str(SKILL), str(state / "skill"), ignore=IGNORED)
    shutil.copytree(str(HARNESS), str(state / "harness"), ignore=IGNORED)
    builder.baseline(runs=2)
    builder.launch("r003", "candidate", "overlap", parent="r001", change={"overlap_grad_reduce": True},
                   hypothesis="overlap hides the reduce-scatter", lever="overlap-grad-reduce")
    (directory / "levers.md").write_text(LEVERS, encoding="utf-8")
    (directory / "goal_prompt.txt").write_text(GOAL, encoding="utf-8")
    (directory / "resume_prompt.txt").write_text(RESUME, encoding="utf-8")
    return directory


def clone(template: Path, target: Path) -> Path:
    shutil.copytree(str(template), str(target), symlinks=True)
    return target
