"""One consistent, verified read of a campaign: records, settings, ranking and budget."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from . import budget as budget_mod
from . import ranking as ranking_mod
from .background import Background
from .campaign import INTEGRITY_VIOLATION, Campaign
from .chainlog import VerifyReport
from .errors import IntegrityError


@dataclasses.dataclass
class Snapshot:
    campaign: Campaign
    settings: object
    ledger_rows: list
    gpu_seconds: int
    ranking: ranking_mod.Ranking
    budget: budget_mod.BudgetState
    ledger_report: VerifyReport
    gpu_report: VerifyReport

    @property
    def violation(self) -> bool:
        return (self.campaign.dir / INTEGRITY_VIOLATION).exists()


def _verify_gpu_log(campaign: Campaign) -> tuple:
    """Verify the GPU-hour log; return its report (rows dropped), total GPU-seconds and campaign id."""
    report = campaign.gpu_log.verify()
    total = budget_mod.total_gpu_seconds(report.parsed)
    first = report.parsed[0]["campaign"] if report.parsed else None
    return report.without_rows(), total, first


def _check(ledger_report: VerifyReport, gpu: tuple) -> None:
    gpu_report, _total, gpu_campaign = gpu
    broken = [report.summary() for report in (ledger_report, gpu_report) if not report.ok]
    ledger_id = ledger_report.parsed[0]["campaign"] if ledger_report.parsed else None
    if gpu_campaign and ledger_id and gpu_campaign != ledger_id:
        broken.append("gpu_hours.jsonl belongs to campaign %r but ledger.jsonl to %r" % (gpu_campaign, ledger_id))
    if broken:
        raise IntegrityError("; ".join(broken) + ". The records cannot be trusted: nothing is ranked or shipped "
                             "from them")


def verify(campaign: Campaign) -> tuple:
    """Verify both chains; raise ``IntegrityError`` naming the first bad row of either."""
    ledger_report = campaign.ledger.verify()
    gpu = _verify_gpu_log(campaign)
    _check(ledger_report, gpu)
    return ledger_report, gpu[0]


def take(campaign_dir, env=None, config_file=None) -> Snapshot:
    campaign = Campaign(Path(campaign_dir))
    campaign.require_ledger()
    gpu_job = Background(_verify_gpu_log, campaign)  # on the second core while the ledger is read
    ledger_report = campaign.ledger.verify()
    gpu = gpu_job.result()
    _check(ledger_report, gpu)
    settings = campaign.settings(env, config_file)
    rows = ledger_report.parsed
    ranking = ranking_mod.build(rows, settings.window, settings.noise_floor, settings.baseline_repeats)
    budget = budget_mod.state(settings, ranking, gpu[1])
    return Snapshot(campaign, settings, rows, gpu[1], ranking, budget, ledger_report, gpu[0])
