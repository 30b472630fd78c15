"""Pre-ship checks: the one hook point that decides whether a recipe may ship.

A check is a function ``check(context) -> (ok, detail)`` registered under a name in ``CHECKS``
(a plain dict; built-ins register the same way as extensions). ``attune report`` runs every check
and ships ``recipe.yaml`` only when all pass; otherwise REPORT.md names each failed check.

Other parts register their checks from a module listed in ``PLUGIN_MODULES`` (an allowlist: no
module name is ever read from a file). Such a module calls ``register`` at import time. A listed
module that cannot be imported is itself a failed check, so a broken install cannot ship.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
from pathlib import Path
from typing import Callable, Optional

from .ledger import INTEGRITY_VIOLATION, RUNS
from .ranking import RecipeView
from .runview import RunView

CHECKS = {}
PLUGIN_MODULES = ("attune.campaign.rows_check",)


@dataclasses.dataclass
class ShipContext:
    snapshot: object  # snapshot.Snapshot
    recipe: Optional[RecipeView]
    run: Optional[RunView]

    @property
    def recipe_file(self) -> Optional[Path]:
        if self.run is None:
            return None
        directory = self.snapshot.campaign.dir
        if self.run.recipe_path:
            return directory / self.run.recipe_path
        return directory / RUNS / self.run.run / "recipe.yaml"


def register(name: str, check: Callable) -> Callable:
    if name in CHECKS:
        raise ValueError("pre-ship check %r is already registered" % name)
    CHECKS[name] = check
    return check


def run_all(context: ShipContext) -> list:
    """Run every check; return ``[(name, ok, detail)]`` in registration order."""
    outcomes = []
    for module in PLUGIN_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            outcomes.append(("plugin " + module, False, "cannot import the check module: %s" % exc))
    for name, check in CHECKS.items():
        try:
            ok, detail = check(context)
        except Exception as exc:  # a crashing check must block shipping, and say why
            ok, detail = False, "the check raised %s: %s" % (type(exc).__name__, exc)
        outcomes.append((name, bool(ok), detail))
    return outcomes


def _replay(context: ShipContext):
    """Every result and gate row derived again from its evidence (``attune verify --replay``)."""
    from . import replay  # imported where used: it reads every run's log
    outcome = replay.replay(context.snapshot.campaign, context.snapshot.settings)
    return outcome.ok, outcome.summary()


def _leader(context: ShipContext):
    if context.recipe is None or context.run is None:
        return False, "there is no leader with a rankable run"
    return True, "leader %s" % context.run.run


def _gate(context: ShipContext):
    recipe = context.recipe
    if recipe is None:
        return False, "no leader"
    if recipe.is_baseline:
        return True, "the leader is the unchanged baseline"
    if recipe.gate == "pass":
        return True, "correctness gate passed"
    return False, "the leader's correctness gate has %s" % ("failed" if recipe.gate == "fail" else "not run")


def _violation(context: ShipContext):
    path = context.snapshot.campaign.dir / INTEGRITY_VIOLATION
    if path.exists():
        return False, "%s exists: the campaign failed its integrity check" % INTEGRITY_VIOLATION
    return True, "no integrity violation recorded"


def _integrity(context: ShipContext):
    """A campaign the launcher started has its integrity checked again now, with the harness copy it
    runs from (a campaign made with `attune init` alone has no record to check)."""
    directory = context.snapshot.campaign.dir
    module = directory / ".attune" / "harness" / "integrity.py"
    if not (directory / ".attune" / "integrity.json").exists():
        return True, "no integrity record (the campaign was not started by harness/launch_campaign.sh)"
    if not module.is_file():
        return False, "the campaign has an integrity record but no harness copy to check it with"
    spec = importlib.util.spec_from_file_location("attune_campaign_integrity", str(module))
    integrity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(integrity)
    problems = integrity.verify(str(directory))
    if problems:
        return False, "integrity check failed: %s" % (problems[0].get("message") or problems[0].get("what"))
    return True, "integrity record verified"


def _recipe_file(context: ShipContext):
    path = context.recipe_file
    if path is None:
        return False, "no recipe to ship"
    if not path.is_file():
        return False, "%s is missing" % path
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != context.recipe.sha:
        return False, "%s has SHA-256 %s but the ledger recorded %s" % (path, digest[:12], context.recipe.sha[:12])
    return True, "%s matches the ledger's recipe_sha256" % path.name


register("replay", _replay)
register("leader", _leader)
register("gate", _gate)
register("integrity_violation", _violation)
register("integrity", _integrity)
register("recipe_file", _recipe_file)
