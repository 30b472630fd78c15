"""GPU-hour accounting and the budget: exact totals, never negative, launches refused when over."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from factory import Builder, settings as make_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attune.campaign import budget as budget_mod
from attune.campaign import ranking as ranking_mod
from attune.core.errors import CheckFailed, InputError


def state(b):
    ranked = ranking_mod.build(b.campaign.ledger.rows())
    return budget_mod.state(b.settings, ranked, budget_mod.total_gpu_seconds(b.campaign.gpu_log.rows()))


charges = st.lists(st.tuples(st.sampled_from(["r1", "r2", "r3"]), st.integers(0, 512),
                             st.floats(0, 7200, allow_nan=False)), min_size=1, max_size=15)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(charges)
def test_gpu_hour_totals_add_up_exactly_and_are_never_negative(items):
    with tempfile.TemporaryDirectory() as tmp:
        b = Builder(Path(tmp))
        for run, gpus, seconds in items:
            row = b.campaign.charge(run, gpus, seconds)
            assert row["gpu_seconds"] >= 0 and row["gpu_seconds"] >= gpus * seconds - 1e-6
        rows = b.campaign.gpu_log.rows()
        per_run = budget_mod.gpu_seconds_by_run(rows)
        total = budget_mod.total_gpu_seconds(rows)
        assert all(value >= 0 for value in per_run.values()) and total >= 0
        assert sum(per_run.values()) == total
        assert isinstance(total, int)
        assert state(b).gpu_hours_spent == total / 3600.0


def test_negative_charges_are_refused(tmp_path):
    b = Builder(tmp_path)
    with pytest.raises(InputError):
        b.campaign.charge("r1", 8, -1.0)
    with pytest.raises(InputError):
        b.campaign.charge("r1", -8, 1.0)
    with pytest.raises(InputError):
        b.campaign.gpu_log.append("charge", {"run": "r1", "gpus": 1, "seconds": 1.0, "gpu_seconds": -1})


def test_gpu_hour_budget_reserves_in_flight_runs_and_refuses_launches(tmp_path):
    b = Builder(tmp_path)  # 40 GPU-hours
    b.launch("r001", "baseline", "base", expected_gpu_hours=2.0)
    b.result("r001", 1000.0, gpus=8, seconds=3600.0)  # 8 GPU-hours
    b.launch("r002", "repeat", "base", parent="r001", expected_gpu_hours=10.0)
    now = state(b)
    assert now.spent == 8.0 and now.reserved == 10.0 and now.left == 22.0
    assert now.cost_spent_usd == 20.0 and now.cost_left_usd == 55.0
    budget_mod.check_launch(now, 22.0)
    with pytest.raises(CheckFailed, match="needs 22.5 GPU-hours and 22 are left"):
        budget_mod.check_launch(now, 22.5)
    with pytest.raises(CheckFailed, match="expected GPU-hours"):
        budget_mod.check_launch(now, None)


def test_run_budget_counts_every_finalized_run(tmp_path):
    b = Builder(tmp_path, settings_obj=make_settings(AUTOTUNE_GPUH_BUDGET="", AUTOTUNE_BUDGET="3"))
    b.launch("r001", "baseline", "base")
    b.result("r001", 1000.0)
    b.launch("r002", "candidate", "x", parent="r001")
    b.result("r002", status="failed", failure={"class": "oom"})
    b.launch("r003", "candidate", "y", parent="r001")
    now = state(b)
    assert (now.kind, now.spent, now.reserved, now.left) == ("runs", 2.0, 1.0, 0.0)
    assert now.exhausted
    with pytest.raises(CheckFailed, match="needs 1 runs and 0 are left"):
        budget_mod.check_launch(now, None)
