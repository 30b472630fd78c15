"""GPU-hour accounting and the budget (measurement.md §7).

GPU time is recorded in whole GPU-seconds (``gpu_seconds``, an integer), so totals add up exactly
and can never go negative; GPU-hours are ``gpu_seconds / 3600``. The budget is either GPU-hours
(``AUTOTUNE_GPUH_BUDGET``, spent from ``gpu_hours.jsonl``) or ranked runs (``AUTOTUNE_BUDGET``:
every run finalized into the ledger counts, failed or not, but a launch whose submission failed). Runs launched but not finalized are
reserved: their ``expected_gpu_hours`` (or one run) is held back from what is left.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from attune.core import state as state_mod
from attune.core.errors import CheckFailed

total_gpu_seconds = state_mod.total_gpu_seconds


def gpu_seconds_by_run(gpu_rows) -> dict:
    totals = {}
    for row in gpu_rows:
        if row.get("kind") == "charge":
            totals[row["run"]] = totals.get(row["run"], 0) + row["gpu_seconds"]
    return totals


@dataclasses.dataclass(frozen=True)
class BudgetState:
    kind: str  # "gpu_hours" or "runs"
    unit: str
    limit: float
    spent: float
    reserved: float
    left: float
    gpu_hours_spent: float
    in_flight: tuple
    unknown_reservations: tuple  # in-flight runs with no expected_gpu_hours
    price_usd: Optional[float]

    @property
    def cost_spent_usd(self) -> Optional[float]:
        return None if self.price_usd is None else self.gpu_hours_spent * self.price_usd

    @property
    def cost_left_usd(self) -> Optional[float]:
        if self.price_usd is None or self.kind != "gpu_hours":
            return None
        return max(0.0, self.left) * self.price_usd

    @property
    def exhausted(self) -> bool:
        return self.left <= 0

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["in_flight"] = list(self.in_flight)
        out["unknown_reservations"] = list(self.unknown_reservations)
        out["cost_spent_usd"] = self.cost_spent_usd
        out["cost_left_usd"] = self.cost_left_usd
        out["exhausted"] = self.exhausted
        return out

    def describe(self) -> str:
        text = "%s %s spent of %s, %s reserved by %d run(s) in flight, %s left" % (
            _fmt(self.spent), self.unit, _fmt(self.limit), _fmt(self.reserved), len(self.in_flight),
            _fmt(self.left))
        if self.unknown_reservations:
            text += " (no estimate for %s)" % ", ".join(self.unknown_reservations)
        return text


def _fmt(value: float) -> str:
    return ("%.3f" % value).rstrip("0").rstrip(".") if value != int(value) else "%d" % value


def state(settings, ranking, gpu_seconds: int) -> BudgetState:
    """The budget as the ledger (through ``ranking``) and the GPU-hour log (its total) record it, by the rules
    of ``attune.core.state.budget`` (the Stop hook's)."""
    runs = [state_mod.Run(run.run, run.finalized, run.never_ran, run.expected_gpu_hours, run.launch_ts)
            for run in ranking.runs]
    got = state_mod.budget(settings.budget_kind, settings.budget_limit, gpu_seconds, runs)
    return BudgetState(kind=got["kind"], unit=got["unit"], limit=got["limit"], spent=got["spent"],
                       reserved=got["reserved"], left=got["left"], gpu_hours_spent=got["gpu_hours_spent"],
                       in_flight=got["in_flight"], unknown_reservations=got["unknown_reservations"],
                       price_usd=settings.gpu_hour_usd)


def check_launch(budget: BudgetState, expected_gpu_hours: Optional[float]) -> None:
    """Refuse a launch that would need more than is left (``CheckFailed``, exit 1)."""
    if budget.kind == "gpu_hours":
        if expected_gpu_hours is None or expected_gpu_hours <= 0:
            raise CheckFailed("launch refused: give the run's expected GPU-hours (GPUs x expected hours) so the "
                              "budget can be checked")
        need, unit = expected_gpu_hours, "GPU-hours"
    else:
        need, unit = 1.0, "runs"
    if need > budget.left:
        raise CheckFailed("launch refused: it needs %s %s and %s are left (%s). Fix: record a stop with "
                          "`attune stop`, or raise the budget in a new campaign"
                          % (_fmt(need), unit, _fmt(max(0.0, budget.left)), budget.describe()))
