"""One consistent, verified read of a campaign: records, settings, ranking and budget."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import budget as budget_mod
from . import ranking as ranking_mod
from .campaign import INTEGRITY_VIOLATION, Campaign
from .chainlog import VerifyReport
from .errors import IntegrityError


@dataclasses.dataclass
class Snapshot:
    campaign: Campaign
    settings: object
    ledger_rows: list
    gpu_rows: list
    ranking: ranking_mod.Ranking
    budget: budget_mod.BudgetState
    ledger_report: VerifyReport
    gpu_report: VerifyReport

    @property
    def violation(self) -> bool:
        return (self.campaign.dir / INTEGRITY_VIOLATION).exists()


def verify(campaign: Campaign) -> tuple:
    """Verify both chains; raise ``IntegrityError`` naming the first bad row of either."""
    ledger_report = campaign.ledger.verify()
    gpu_report = campaign.gpu_log.verify()
    broken = [report.summary() for report in (ledger_report, gpu_report) if not report.ok]
    ledger_id = ledger_report.parsed[0]["campaign"] if ledger_report.parsed else None
    if gpu_report.parsed and ledger_id and gpu_report.parsed[0]["campaign"] != ledger_id:
        broken.append("gpu_hours.jsonl belongs to campaign %r but ledger.jsonl to %r"
                      % (gpu_report.parsed[0]["campaign"], ledger_id))
    if broken:
        raise IntegrityError("; ".join(broken) + ". The records cannot be trusted: nothing is ranked or shipped "
                             "from them")
    return ledger_report, gpu_report


def take(campaign_dir, env=None, config_file=None) -> Snapshot:
    campaign = Campaign(Path(campaign_dir))
    campaign.require_ledger()
    ledger_report, gpu_report = verify(campaign)
    settings = campaign.settings(env, config_file)
    rows = ledger_report.parsed
    ranking = ranking_mod.build(rows, settings.window, settings.noise_floor, settings.baseline_repeats)
    budget = budget_mod.state(settings, ranking, gpu_report.parsed)
    return Snapshot(campaign, settings, rows, gpu_report.parsed, ranking, budget, ledger_report, gpu_report)
