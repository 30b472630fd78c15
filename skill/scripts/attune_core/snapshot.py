"""One consistent, verified read of a campaign: records, settings, ranking and budget."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from . import budget as budget_mod
from . import measure
from . import ranking as ranking_mod
from . import viewcache
from .background import Background, BackgroundError
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
    reused_rows: int = 0  # rows of a prefix proved unchanged by the view cache, not re-read
    cache_job: object = None

    def finish(self) -> None:
        """Wait for the view cache to be written (it is written in the background)."""
        if self.cache_job is not None:
            job, self.cache_job = self.cache_job, None
            try:
                job.result()
            except BackgroundError:
                pass  # best effort: the next view verifies everything and writes it again

    @property
    def violation(self) -> bool:
        return (self.campaign.dir / INTEGRITY_VIOLATION).exists()


def _verify_gpu_log(campaign: Campaign) -> tuple:
    """Verify the GPU-hour log; return its report (rows dropped), total GPU-seconds and campaign id."""
    report = campaign.gpu_log.verify()
    total = budget_mod.total_gpu_seconds(report.parsed)
    first = report.parsed[0]["campaign"] if report.parsed else None
    return report.without_rows(), total, first


def _check(ledger_report: VerifyReport, gpu: tuple, ledger_id=None) -> None:
    gpu_report, _total, gpu_campaign = gpu
    broken = [report.summary() for report in (ledger_report, gpu_report) if not report.ok]
    if ledger_id is None and ledger_report.parsed:
        ledger_id = ledger_report.parsed[0]["campaign"]
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


PARALLEL_SCORING_BYTES = 4 << 20  # score new rows in a child only when there is this much to read


def take(campaign_dir, env=None, config_file=None, use_cache: bool = False, save_cache: bool = True) -> Snapshot:
    """Verify and rank the campaign. ``use_cache`` (views only: status, rank) skips the prefix of
    the ledger that the view cache proves unchanged; shipping never passes it (viewcache.py)."""
    campaign = Campaign(Path(campaign_dir))
    campaign.require_ledger()
    settings = campaign.settings(env, config_file)
    data = campaign.ledger.read_bytes()
    cached = viewcache.load(campaign.dir, data, settings.window) if use_cache else None
    offset = cached["size"] if cached else 0
    resume = (offset, cached["count"], cached["prev"], cached["campaign"]) if cached else None
    # On a second core, while this process verifies the ledger: the GPU-hour log is verified and,
    # when there is much to read, the runs are scored from the very bytes being verified.
    gpu_job = Background(_verify_gpu_log, campaign)
    score_job = None
    if len(data) - offset > PARALLEL_SCORING_BYTES:
        score_job = Background(ranking_mod.score_ledger_bytes, data[offset:], settings.window,
                               cached["count"] if cached else 0)
    ledger_report = campaign.ledger.verify(data, resume)
    gpu = gpu_job.result()
    new_scores = score_job.result() if score_job is not None else {}
    _check(ledger_report, gpu, cached["campaign"] if cached else None)
    new_rows = ledger_report.parsed
    for row in new_rows:
        if row["kind"] == "result" and row["seq"] not in new_scores:
            new_scores[row["seq"]] = measure.score_run(row["status"], row.get("metrics"), settings.window,
                                                       row.get("failure"))
    rows = (cached["rows"] + new_rows) if cached else new_rows
    scores = cached["scores"] if cached else {}
    scores.update(new_scores)
    cache_job = None
    if use_cache and save_cache and new_rows:  # written by a child while this process ranks; joined by finish()
        cache_job = Background(_save_view, campaign.dir, data, len(data) - ledger_report.torn_tail_bytes,
                               cached["rows"] if cached else [], new_rows, new_scores, rows[0]["campaign"],
                               settings.window)
    ranking = ranking_mod.build(rows, settings.window, settings.noise_floor, settings.baseline_repeats, scores)
    budget = budget_mod.state(settings, ranking, gpu[1])
    return Snapshot(campaign, settings, rows, gpu[1], ranking, budget, ledger_report, gpu[0],
                    cached["count"] if cached else 0, cache_job)


def _save_view(directory, data, complete, cached_rows, new_rows, scores, campaign_id, window) -> bool:
    slim_rows = cached_rows + [viewcache.slim(row, scores.get(row["seq"])) for row in new_rows]
    last_line = data[data.rfind(b"\n", 0, complete - 1) + 1:complete - 1]
    return viewcache.save(directory, data, complete, slim_rows, hashlib.sha256(last_line).hexdigest(),
                          campaign_id, window)
