"""Early stopping of a candidate that cannot beat the leader (``ATTUNE_EARLY_STOP=1``).

While a candidate runs, its scored iterations so far (the scoring window's, measurement.md §3) give an estimate
``x`` of its log throughput and a standard error ``se`` (the sd of the steps' log throughput over the square root
of their number). Its recipe leads only if, after its paired confirmation, the mean of its two runs is ahead of
the leader by the leader test's need ``b`` (``leader_test.need_log``: 2 runs against the leader's). If the
recipe would really get there, this run's ``x`` lies below the recipe's mean by more than ``z * s`` with
probability at most ``alpha``, where ``s = sqrt(sd^2 + se^2)`` adds the campaign's run-to-run sd to the steps'
sampling error and ``alpha`` is the leader test's own one-sided level for a 2-run candidate
(``leader_test.look_level``). So the run is stopped when

    x - ln(leader) + z(1 - alpha) * s < b

at the rule's own error rate: a run whose recipe would have won is stopped with probability at most ``alpha``.
Nothing is stopped before ``MIN_SCORED`` scored iterations, before the band is established, or for a baseline,
repeat, confirmation, profile, replay or leave-one-out run. A stopped run is recorded as ``stopped_early`` with
this evidence, charged for what it used, and never ranked.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from statistics import NormalDist
from typing import Optional

from attune.core import logparse

from .leader_test import look_level, need_log

MIN_SCORED = 5  # scored iterations before any decision


def decide(ranking, launch: dict, log: Path, window: tuple, seq_length: Optional[int]) -> Optional[dict]:
    """The evidence to stop the candidate of ``launch`` now (its log so far at ``log``), or None to let it run.
    ``ranking``: the campaign's, as its settings rank it (``snapshot.take``)."""
    if launch.get("purpose") != "candidate" or launch.get("leave_out") or \
            (launch.get("hypothesis") or "").lower().startswith("leave-one-out"):
        return None
    if not log.is_file() or not seq_length:
        return None
    leader = ranking.leader
    if leader is None or not ranking.band_established or ranking.noise_sd is None or not leader.n:
        return None
    parsed = logparse.parse_file(log)
    first, last = window
    steps = [s for s in parsed.get("steps", ()) if first <= s["step"] <= last and s.get("elapsed_ms")
             and s.get("global_batch_size")]
    if len(steps) < MIN_SCORED:
        return None
    gpus = launch["gpus"]
    logs = [math.log(s["global_batch_size"] * seq_length / (s["elapsed_ms"] / 1000.0) / gpus) for s in steps]
    found = rule(logs, leader.score, leader.n, ranking.noise_sd, ranking.noise_df, ranking.share,
                 ranking.noise_floor)
    if found is None:
        return None
    found.update(through_step=steps[-1]["step"], leader=leader.first.run)
    found["evidence"] = "after %d scored iterations (through %d) %s" % (
        len(steps), steps[-1]["step"], found["evidence"].replace("{leader}", leader.first.run))
    return found


def rule(logs: list, leader_score: float, leader_runs: int, sd: float, df: int, share: float,
         floor: float) -> Optional[dict]:
    """The rule itself, on the log throughputs of a run's scored steps so far (``logs``) against a leader of score
    ``leader_score`` over ``leader_runs`` runs, with the campaign's run-to-run ``sd`` (``df``), its per-candidate
    share of the false-win rate and its noise floor: the evidence to stop, or None."""
    if len(logs) < MIN_SCORED or sd is None or not leader_runs:
        return None
    x = statistics.fmean(logs)
    se = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
    alpha = look_level(share, 2)
    need = need_log(share, 2, leader_runs, sd, max(df, 1), floor)
    z = NormalDist().inv_cdf(1.0 - alpha)
    bound = x - math.log(leader_score) + z * math.sqrt(sd ** 2 + se ** 2)
    if bound >= need:
        return None
    return {"scored_steps": len(logs), "tokens_per_s_per_gpu": round(math.exp(x), 3),
            "leader_tokens_per_s_per_gpu": round(leader_score, 3), "need": round(math.expm1(need), 6),
            "best_case": round(math.expm1(bound), 6), "level": alpha, "noise_sd": sd, "step_se": round(se, 6),
            "evidence": "%.1f tokens/s/GPU is %+.2f%% against leader {leader}; even at the rule's level %.3g%% it could reach "
                        "%+.2f%%, and it needs %+.2f%%" % (
                            math.exp(x), 100 * math.expm1(x - math.log(leader_score)), 100 * alpha,
                            100 * math.expm1(bound), 100 * math.expm1(need))}
