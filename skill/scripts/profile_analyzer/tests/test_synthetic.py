"""Planted traces (synth.planted): the analyzer recovers every planted number exactly."""

from __future__ import annotations

import json

import pytest
from analyzer_paths import REPO
from synth import Trace, planted

from attune_core import cli
from profile_analyzer import profile

SPAN = 1502.0  # first kept activity starts at 100, the last kept one ends at 1602


@pytest.fixture()
def one(tmp_path):
    return profile.run([planted().write(tmp_path / "rank0.json")])


def test_temporal_breakdown_and_overlap(one):
    r = one["ranks"][0]
    assert r["window"] == "GPU activity launched before the last ProfilerStep starts (as HTA)"
    tb = r["temporal_breakdown"]
    assert (tb["kernel_time_us"], tb["idle_time_us"], tb["compute_time_us"], tb["non_compute_time_us"]) == (
        SPAN, 450.0, 852.0, 200.0)
    assert tb["idle_pctg"] == round(100 * 450 / SPAN, 2) and tb["compute_pctg"] == round(100 * 852 / SPAN, 2)
    comm = r["communication"]
    assert comm["overlap_pctg"] == 50.0 and comm["total_us"] == 400.0 and comm["exposed_us"] == 200.0
    assert comm["by_collective"] == {"all_reduce": {"kernels": 1, "total_us": 300.0, "exposed_us": 200.0},
                                     "all_gather": {"kernels": 1, "total_us": 100.0, "exposed_us": 0.0}}


def test_steps_idle_gaps_and_launches(one):
    r = one["ranks"][0]
    steps = {s["step"]: s for s in r["steps"]}
    assert (steps[1]["gpu_span_us"], steps[1]["gpu_busy_us"], steps[1]["gpu_idle_us"], steps[1]["exposed_comm_us"]) == (
        800.0, 650.0, 150.0, 200.0)
    assert (steps[2]["gpu_span_us"], steps[2]["gpu_busy_us"], steps[2]["gpu_idle_us"], steps[2]["exposed_comm_us"]) == (
        502.0, 402.0, 100.0, 0.0)
    assert steps[1]["step_time_us"] == 1000
    assert r["gpu_idle"] == {"gaps": 3, "idle_us": 450.0, "host_bound_gaps": 2, "host_bound_us": 350.0}
    launches = r["launches"]
    assert launches["matched"] == 7 and launches["short_kernels"] == 1 and launches["launch_delay_outliers"] == 4
    assert launches["launch_delay_us"]["p50"] == 175.0 and launches["launch_delay_us"]["max"] == 565.0
    assert r["top_kernels"][0]["name"] == "flash_fwd_kernel" and r["top_kernels"][0]["total_us"] == 400.0
    assert r["memory"]["peak_allocated_bytes"] == 36 << 30 and r["memory"]["peak_fraction"] == 0.45


def test_diagnosis_ranks_what_costs_most(tmp_path, one):
    assert [(d["bottleneck"], d["share"]) for d in one["diagnosis"]] == [
        ("host_bound_launching", round(350 / SPAN, 4)), ("memory_headroom", 0.15),
        ("exposed_communication", round(200 / SPAN, 4))]
    assert one["diagnosis"][0]["levers"][0] == "cuda-graphs"
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"command": "python3 pretrain_gpt.py --pipeline-model-parallel-size 2 "
                                             "--micro-batch-size 1 --global-batch-size 8 --num-layers 8"}))
    with_recipe = profile.run([tmp_path / "rank0.json"], recipe=recipe)
    parallel = with_recipe["aggregate"]["parallel"]
    assert (parallel["dp"], parallel["micro_batches"], parallel["ideal_bubble"]) == (1, 8, 1 / 9)
    bubble = next(d for d in with_recipe["diagnosis"] if d["bottleneck"] == "pipeline_bubble")
    assert bubble["share"] == round(round(100 * 450 / SPAN, 2) / 100 - 350 / SPAN, 4)
    assert bubble["evidence"]["ideal_bubble_fraction"] == 1 / 9


def test_stragglers_by_step_number_despite_skewed_clocks(tmp_path):
    paths = [planted(0).write(tmp_path / "a.json"),
             planted(1, offset=7.5e6, stretch=1.1).write(tmp_path / "b.json.gz")]
    result = profile.run(paths)
    stragglers = result["aggregate"]["stragglers"]
    assert stragglers["slowest_rank_counts"] == {1: 3}
    assert stragglers["step_time_spread"][1] == round(100 / 1050, 4)
    assert any(d["bottleneck"] == "stragglers" for d in result["diagnosis"])
    shifted = profile.run([planted(0).write(tmp_path / "c.json"), planted(1, offset=7.5e6).write(tmp_path / "d.json")])
    a, b = shifted["ranks"]
    assert a["temporal_breakdown"] == b["temporal_breakdown"], "a clock offset changes nothing"
    assert shifted["aggregate"]["stragglers"]["step_time_spread_max"] == 0.0


def test_steps_option_limits_the_window(tmp_path):
    path = planted().write(tmp_path / "r.json")
    r = profile.run([path], steps=(2, 2))["ranks"][0]
    assert r["window"] == "GPU activity launched in ProfilerStep#2-2"
    assert r["temporal_breakdown"]["kernel_time_us"] == 502.0
    assert [s["step"] for s in r["steps"]] == [2]


def test_the_cli_prints_lines_or_json(tmp_path, capsys):
    path = planted().write(tmp_path / "r.json")
    assert cli.main(["profile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bottleneck: host_bound_launching 23.3% levers cuda-graphs,manual-gc,micro-batch-size" in out
    assert cli.main(["profile", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ranks"][0]["rank"] == 0
    assert cli.main(["profile", str(tmp_path / "missing.json")]) == 2
    assert REPO.name  # the repository root resolves (used by the corpus tests)


def test_hip_and_older_nccl_names(tmp_path):
    t = Trace(distributed=False)
    t.step(1, 0, 500)
    t.step(2, 500, 500)
    t.kernel("Cijk_Alik_Bljk_HHS_BH_MT128x128x32", 10, 110, 0, 1, launch="hipExtModuleLaunchKernel")
    t.kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 100, 200, 3, 2)
    r = profile.run([t.write(tmp_path / "trace_rank-5.json")])
    rank = r["ranks"][0]
    assert rank["rank"] == 5 and any("no distributedInfo; rank 5 taken from the file name" in w for w in r["warnings"])
    assert rank["communication"]["by_collective"]["all_reduce"]["exposed_us"] == 90.0
    assert rank["launches"]["matched"] == 2  # HIP launch calls are matched too (HTA matches CUDA names only)


def test_fractional_timestamps_are_rounded_as_hta_rounds_them(tmp_path):
    """Any fractional-microsecond timestamp makes HTA round every event: start up, end down."""
    t = planted(offset=0.25)
    r = profile.run([t.write(tmp_path / "r.json")])["ranks"][0]
    assert r["timestamps_rounded"] is True
    tb = r["temporal_breakdown"]
    assert tb["kernel_time_us"] == 1602.0 - 101.0  # ceil(100.25) to floor(1602.25)
    assert tb["compute_time_us"] == 852.0 - 4.0  # each of the four computation kernels loses its first microsecond
