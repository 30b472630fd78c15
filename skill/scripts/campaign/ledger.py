"""A campaign directory: where its records live, and the one way to append to them."""

from __future__ import annotations

import datetime
import math
import os
from pathlib import Path

from attune.core import __version__, files, frozen as frozen_mod
from attune.core.chainlog import ChainLog
from attune.core.errors import InputError
from attune.core.levers import CATALOG as LEVER_CATALOG
from attune.core.schema import validate_gpu_hour_row, validate_ledger_row, validate_new_ledger_row

LEDGER = "ledger.jsonl"
GPU_HOURS = "gpu_hours.jsonl"
RESULTS = "RESULTS.md"
REPORT = "REPORT.md"
SHIPPED_RECIPE = "recipe.yaml"
CHART = "results_throughput.png"
RUNS = "runs"
STATE_DIR = ".attune"
INTEGRITY_VIOLATION = ".attune/integrity_violation.json"


def resolve_dir(arg=None) -> Path:
    """``--campaign`` when given, else ``$ATTUNE_CAMPAIGN_DIR``, else the current directory.

    ``$ATTUNE_CAMPAIGN_LOCK`` (set by a campaign's ``attune`` wrapper, which runs outside the agent's sandbox)
    binds the verbs to that one campaign: a ``--campaign`` naming another directory is refused."""
    chosen = arg or os.environ.get("ATTUNE_CAMPAIGN_DIR") or os.getcwd()
    path = Path(chosen).expanduser().resolve()
    lock = os.environ.get("ATTUNE_CAMPAIGN_LOCK")
    if lock and path != Path(lock).expanduser().resolve():
        raise InputError("--campaign %s: this attune is bound to the campaign %s (ATTUNE_CAMPAIGN_LOCK); its verbs "
                         "work on that campaign only. Fix: drop --campaign" % (chosen, lock))
    return path


class Campaign(object):
    def __init__(self, directory):
        self.dir = Path(directory)
        self.ledger = ChainLog(self.dir / LEDGER, validate_ledger_row, validate_new_ledger_row)
        self.gpu_log = ChainLog(self.dir / GPU_HOURS, validate_gpu_hour_row)
        self._id = None

    @property
    def id(self) -> str:
        if self._id is None:
            first = self.ledger.first_row()
            if first is None:
                raise InputError("%s has no ledger (%s). Fix: start the campaign with `attune init` or "
                                 "harness/launch_campaign.sh, or pass --campaign DIR" % (self.dir, LEDGER))
            self._id = first["campaign"]
        return self._id

    def require_ledger(self):
        if not Path(self.ledger.path).exists():
            raise InputError("%s has no ledger (%s). Fix: pass --campaign DIR for an existing campaign, or "
                             "start one with `attune init`" % (self.dir, LEDGER))

    def settings(self, env=None, config_file=None):
        return frozen_mod.for_campaign(self.dir, env, config_file)

    def append(self, kind: str, ts: str = None, **payload) -> dict:
        """Append a ledger row of ``kind``; the envelope is filled in (``ts`` defaults to now)."""
        self.require_ledger()
        return self.ledger.append(kind, payload, campaign=self.id, ts=ts)

    def charge(self, run: str, gpus: int, seconds: float, what: str = "run", note: str = None,
               ts: str = None) -> dict:
        """Record GPU time for a run: ``gpu_seconds = ceil(gpus * seconds)``, never negative."""
        if gpus < 0 or seconds < 0 or not math.isfinite(seconds):
            raise InputError("cannot charge run %s: gpus=%r seconds=%r must be finite and not negative"
                             % (run, gpus, seconds))
        payload = {"run": run, "gpus": int(gpus), "seconds": float(seconds),
                   "gpu_seconds": int(math.ceil(round(gpus * seconds, 6))), "what": what}
        if note:
            payload["note"] = note
        return self.gpu_log.append("charge", payload, campaign=self.id, ts=ts)

    def run_dir(self, run: str) -> Path:
        return self.dir / RUNS / run


def default_campaign_id(settings) -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return "%s-%s" % (settings.run_prefix.rstrip("-"), stamp)


def init(directory, settings, campaign_id: str = None, ts: str = None, note: str = None) -> Campaign:
    """Create a campaign: freeze its settings and write the first ledger row. Idempotent."""
    campaign = Campaign(directory)
    files.make_folders(campaign.dir)
    frozen = frozen_mod.freeze(settings, campaign.dir)
    if campaign.ledger.first_row() is None:  # the frozen file's own bytes: what every later read is checked against
        payload = {"settings_sha256": frozen_mod.file_sha256(frozen), "attune_version": __version__}
        payload.update(frozen_mod.freeze_inputs(settings, campaign.dir))  # the baseline recipe, the gate's rules
        if note:
            payload["note"] = note
        campaign.ledger.append("campaign", payload,
                               campaign=campaign_id or default_campaign_id(settings), ts=ts)
    levers = campaign.dir / "levers.md"
    if not levers.exists() and LEVER_CATALOG.is_file():  # the campaign's copy, which its lessons extend
        files.atomic_write(levers, LEVER_CATALOG.read_bytes())  # a dangling link there is refused, not followed
    return campaign
