"""One consistent, verified read of a campaign: records, settings, ranking and budget."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Optional

from attune.core import measure
from attune.core.chainlog import VerifyReport
from attune.core.errors import IntegrityError

from . import budget as budget_mod, ranking as ranking_mod, runview, viewcache
from .background import Background, BackgroundError
from .ledger import INTEGRITY_VIOLATION, Campaign


@dataclasses.dataclass
class Snapshot:
    campaign: Campaign
    settings: object
    ledger_rows: Optional[list]  # every row; None when the view cache stood in for a prefix (use_cache)
    gpu_seconds: int
    ranking: ranking_mod.Ranking
    budget: budget_mod.BudgetState
    ledger_report: VerifyReport
    gpu_report: VerifyReport
    row_count: int
    last_ts: str
    genesis: dict  # the ledger's first row (kind campaign)
    leader_rows: list
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


def _verify_gpu_log(campaign: Campaign, use_cache: bool = False, save_cache: bool = False) -> tuple:
    """Verify the GPU-hour log; return its report (rows dropped), total GPU-seconds and campaign id.
    ``use_cache`` (views only) skips the prefix its view cache proves unchanged, as for the ledger."""
    data = campaign.gpu_log.read_bytes()
    cached = viewcache.load_gpu(campaign.dir, data) if use_cache else None
    resume = (cached["size"], cached["count"], cached["prev"], cached["campaign"]) if cached else None
    report = campaign.gpu_log.verify(data, resume)
    total = (cached["gpu_seconds"] if cached else 0) + budget_mod.total_gpu_seconds(report.parsed)
    first = cached["campaign"] if cached else (report.parsed[0]["campaign"] if report.parsed else None)
    if use_cache and save_cache and report.ok and report.parsed:
        complete = len(data) - report.torn_tail_bytes
        viewcache.save_gpu(campaign.dir, data, complete, report.rows, _last_row_sha(data, complete), first, total)
    return report.without_rows(), total, first


def _last_row_sha(data: bytes, complete: int) -> str:
    """SHA-256 of the last whole row of ``data[:complete]`` (the next row's ``prev``)."""
    return hashlib.sha256(data[data.rfind(b"\n", 0, complete - 1) + 1:complete - 1]).hexdigest()


def campaign_mismatch(ledger_id, gpu_campaign) -> Optional[str]:
    """The problem when the two files name different campaigns (their first rows'), else None."""
    if gpu_campaign and ledger_id and gpu_campaign != ledger_id:
        return "gpu_hours.jsonl belongs to campaign %r but ledger.jsonl to %r" % (gpu_campaign, ledger_id)
    return None


def _check(ledger_report: VerifyReport, gpu: tuple, ledger_id=None) -> None:
    gpu_report, _total, gpu_campaign = gpu
    broken = [report.summary() for report in (ledger_report, gpu_report) if not report.ok]
    if ledger_id is None and ledger_report.parsed:
        ledger_id = ledger_report.parsed[0]["campaign"]
    mismatch = campaign_mismatch(ledger_id, gpu_campaign)
    if mismatch:
        broken.append(mismatch)
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
    # On a second core, while this process verifies the ledger: the GPU-hour log is verified and,
    # when there is much to read, the runs are scored from the very bytes being verified. The child
    # is forked first, while this process holds little, so that it copies little.
    gpu_job = Background(_verify_gpu_log, campaign, use_cache, save_cache)
    gpu = []

    def gpu_result() -> tuple:
        if not gpu:
            gpu.append(gpu_job.result())
        return gpu[0]

    try:
        data = campaign.ledger.read_bytes()
        cached = viewcache.load(campaign.dir, data, settings.window) if use_cache else None
        try:
            return _take(campaign, settings, data, cached, use_cache and save_cache, gpu_result)
        except runview.MergeConflict:  # a row only the whole ledger can place: read every row
            return _take(campaign, settings, data, None, use_cache and save_cache, gpu_result)
    except BaseException:
        if not gpu:
            gpu_job.cancel()
        raise


def _take(campaign, settings, data, cached, save, gpu_result) -> Snapshot:
    offset = cached["size"] if cached else 0
    resume = (offset, cached["count"], cached["prev"], cached["campaign"]) if cached else None
    score_job = None
    if len(data) - offset > PARALLEL_SCORING_BYTES:
        score_job = Background(runview.score_ledger_bytes, data[offset:], settings.window,
                               cached["count"] if cached else 0)
    ledger_report = campaign.ledger.verify(data, resume)
    gpu = gpu_result()
    scores = score_job.result() if score_job is not None else {}
    _check(ledger_report, gpu, cached["campaign"] if cached else None)
    new_rows = ledger_report.parsed
    for row in new_rows:
        if row["kind"] == "result" and row["seq"] not in scores:
            scores[row["seq"]] = measure.score_run(row["status"], row.get("metrics"), settings.window,
                                                   row.get("failure"))
    runs, stops, warnings = runview.merge(new_rows, settings.window, scores,
                                              runs=cached["runs"] if cached else None)
    leaders = [row for row in new_rows if row["kind"] == "leader"]
    if cached:
        stops, leaders = cached["stops"] + stops, cached["leaders"] + leaders
    genesis = cached["genesis"] if cached else (new_rows[0] if new_rows else {})
    count = (cached["count"] if cached else 0) + len(new_rows)
    last_ts = new_rows[-1]["ts"] if new_rows else (cached["last_ts"] if cached else None)
    cache_job = None
    if save and new_rows and not warnings:  # written by a child while this process ranks; joined by finish()
        cache_job = Background(_save_view, campaign.dir, data, len(data) - ledger_report.torn_tail_bytes, count,
                               genesis["campaign"], last_ts, genesis, leaders, stops, list(runs.values()),
                               settings.window)
    ranking = ranking_mod.assemble(runs, stops, warnings, settings.noise_floor, settings.baseline_repeats,
                                   settings.false_win_rate)
    budget = budget_mod.state(settings, ranking, gpu[1])
    return Snapshot(campaign, settings, None if cached else new_rows, gpu[1], ranking, budget, ledger_report,
                    gpu[0], count, last_ts, genesis, leaders, cached["count"] if cached else 0, cache_job)


def _save_view(directory, data, complete, count, campaign_id, last_ts, genesis, leaders, stops, runs, window):
    return viewcache.save(directory, data, complete, count, _last_row_sha(data, complete), campaign_id,
                          last_ts, genesis, leaders, stops, runs, window)
