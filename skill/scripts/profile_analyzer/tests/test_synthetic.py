"""Planted traces (synth.planted): the analyzer recovers every planted number exactly."""

from __future__ import annotations

import json

import pytest
from analyzer_paths import REPO
from synth import Trace, planted

from attune import cli
from attune.profile_analyzer import profile

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
    idle = r["gpu_idle"]
    assert (idle["span_us"], idle["idle_us"], idle["gaps"], idle["host_bound_gaps"], idle["host_bound_us"]) == (
        SPAN, 450.0, 3, 2, 350.0)
    # 600-750 and 900-1100: the next kernel was launched after the GPU went idle; 1500-1600: it was queued at 1030
    assert idle["attribution_us"] == {"host_launch": 350.0, "synchronization": 0.0, "dataloader": 0.0,
                                      "peer_wait": 0.0, "kernel_wait": 0.0, "queued": 100.0, "unexplained": 0.0}
    assert [(g["start_us"], g["idle_us"], g["cause"]) for g in idle["largest_gaps"]] == [
        (900.0, 200.0, "host_launch"), (600.0, 150.0, "host_launch"), (1500.0, 100.0, "queued")]
    launches = r["launches"]
    assert launches["matched"] == 7 and launches["short_kernels"] == 1 and launches["launch_delay_outliers"] == 4
    assert launches["launch_delay_us"]["p50"] == 175.0 and launches["launch_delay_us"]["max"] == 565.0
    assert r["top_kernels"][0]["name"] == "flash_fwd_kernel" and r["top_kernels"][0]["total_us"] == 400.0
    assert r["memory"]["peak_allocated_bytes"] == 36 << 30 and r["memory"]["peak_fraction"] == 0.45


def test_diagnosis_ranks_what_costs_most(tmp_path, one):
    assert [(d["bottleneck"], d["share"]) for d in one["diagnosis"]] == [
        ("host_bound_launching", round(350 / SPAN, 4)), ("exposed_communication", round(200 / SPAN, 4)),
        ("unexplained_idle", round(100 / SPAN, 4))]
    assert one["diagnosis"][0]["levers"][0] == "cuda-graphs"
    assert "launch delay p90" in one["diagnosis"][0]["evidence_text"]
    # memory is a fact, not GPU time: it is never ranked with the bottlenecks
    memory = next(f for f in one["facts"] if f["fact"] == "memory_headroom")
    assert memory["value"] == 0.45 and memory["levers"][0] == "micro-batch-size"
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"command": "python3 pretrain_gpt.py --pipeline-model-parallel-size 2 "
                                             "--micro-batch-size 1 --global-batch-size 8 --num-layers 8"}))
    with_recipe = profile.run([tmp_path / "rank0.json"], recipe=recipe)
    parallel = with_recipe["aggregate"]["parallel"]
    assert (parallel["dp"], parallel["micro_batches"], parallel["ideal_bubble"]) == (1, 8, 1 / 9)
    bubble = next(d for d in with_recipe["diagnosis"] if d["bottleneck"] == "pipeline_bubble")
    assert bubble["share"] == round(100 / SPAN, 4)  # the queued idle; the host-caused idle is not the bubble
    assert not any(d["bottleneck"] == "unexplained_idle" for d in with_recipe["diagnosis"])
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
    lines = out.splitlines()
    at = lines.index("bottleneck: host_bound_launching 23.3% of GPU time (host)")
    assert lines[at + 1].startswith("  evidence: 23.3% of a 1.5 ms span, GPU idle 30.0% in all: ")
    assert lines[at + 2] == "  levers: cuda-graphs, manual-gc, micro-batch-size"
    assert any(line.startswith("fact: peak memory allocated 45.0%") for line in lines)
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


def _three_steps(t):
    for n, start in ((1, 0), (2, 1000), (3, 2000)):
        t.step(n, start, 1000)


def test_work_launched_in_the_dropped_last_step_still_fills_the_span(tmp_path):
    """The GPU trails the CPU: a kernel launched in the last ProfilerStep (outside HTA's window) runs inside the
    span of the kept work. HTA's breakdown leaves it out (its numbers are the comparison); the idle analysis
    counts it, so it leaves no phantom gap and the host is not blamed."""
    t = Trace()
    _three_steps(t)
    t.kernel("gemm_a", 100, 1500, 7, 50)
    t.kernel("gemm_b", 1500, 2800, 7, 1900)  # launched in step 2, runs late
    t.kernel("gemm_dropped", 2800, 3100, 7, 2005)  # launched in step 3: outside the window
    t.kernel("gemm_tail", 3200, 3300, 9, 1950)  # launched in step 2 on another stream, waits on an event
    r = profile.run([t.write(tmp_path / "r.json")])["ranks"][0]
    assert r["temporal_breakdown"]["idle_time_us"] == 400.0  # HTA: 2800-3200 idle (gemm_dropped left out)
    idle = r["gpu_idle"]
    assert idle["activities_outside_window"] == 1
    assert idle["idle_us"] == 100.0 and idle["attribution_us"]["queued"] == 100.0 and idle["host_bound_us"] == 0.0


def test_collectives_behind_generic_nccl_kernel_names_come_from_the_cpu_span(tmp_path):
    """NCCL 2.12-2.18 names kernels of several collectives ncclKernel_SendRecv_*: the nccl:<collective> annotation
    (or c10d:: op) the launch ran in decides, and with it the lever family; a real send stays point-to-point."""
    t = Trace()
    _three_steps(t)
    t.kernel("gemm", 100, 200, 7, 50)
    t.cpu("nccl:reduce_scatter", 60, 30, cat="user_annotation")
    t.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 200, 500, 20, 70)
    t.cpu("c10d::_allgather_base_", 100, 30)
    t.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 500, 600, 20, 110)
    t.cpu("nccl:send", 150, 30, cat="user_annotation")
    t.kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", 600, 640, 20, 160)
    t.kernel("gemm", 640, 900, 7, 170)
    path = t.write(tmp_path / "r.json")
    by = profile.run([path])["ranks"][0]["communication"]["by_collective"]
    assert {k: v["exposed_us"] for k, v in by.items()} == {"reduce_scatter": 300.0, "all_gather": 100.0,
                                                           "send_recv": 40.0}
    recipe = tmp_path / "local.json"
    recipe.write_text(json.dumps({"command": "python3 pretrain_gpt.py --micro-batch-size 1 --global-batch-size 8"}))
    result = profile.run([path], recipe=recipe)  # world size 2 (distributedInfo), TP 1: data parallel 2
    names = {d["bottleneck"]: d for d in result["diagnosis"]}
    assert names["exposed_dp_communication"]["evidence"]["exposed_us_by_collective"] == {
        "reduce_scatter": 300.0, "all_gather": 100.0}
    assert names["exposed_pipeline_communication"]["evidence"]["exposed_us_by_collective"] == {"send_recv": 40.0}
    assert names["exposed_pipeline_communication"]["share"] == round(40 / 800, 4)  # of the 100-900 span
    assert not any(d["bottleneck"] == "exposed_communication" for d in result["diagnosis"])


def test_a_process_group_name_decides_the_family(tmp_path):
    """Megatron-LM names its process groups (TENSOR_MODEL_PARALLEL_GROUP ...); record_param_comms carries it."""
    t = Trace()
    _three_steps(t)
    t.kernel("gemm", 100, 200, 7, 50)
    t.cpu("record_param_comms", 60, 30, args={"Collective name": "allreduce",
                                             "Process Group Description": "TENSOR_MODEL_PARALLEL_GROUP"})
    t.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 200, 700, 20, 70)
    t.kernel("gemm", 700, 900, 7, 100)
    result = profile.run([t.write(tmp_path / "r.json")])
    top = result["diagnosis"][0]
    assert (top["bottleneck"], top["family"]) == ("exposed_tp_communication", "tensor-parallel")
    assert "by its process group" in top["evidence_text"]


def test_idle_after_a_synchronizing_call_or_in_the_dataloader_is_named(tmp_path):
    t = Trace()
    _three_steps(t)
    t.kernel("gemm", 100, 300, 7, 50)
    t.cpu("cudaStreamSynchronize", 60, 245, cat="cuda_runtime")  # returns at 305, after the GPU went idle at 300
    t.kernel("gemm", 500, 600, 7, 480)  # the gap 300-500: the host refilling a queue the sync drained
    t.cpu("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 610, 250, cat="user_annotation")
    t.kernel("gemm", 900, 1000, 7, 880)  # the gap 600-900: 250 us fetching the batch, 50 us launching
    idle = profile.run([t.write(tmp_path / "r.json")])["ranks"][0]["gpu_idle"]
    parts = idle["attribution_us"]
    assert (parts["synchronization"], parts["dataloader"], parts["host_launch"]) == (200.0, 250.0, 50.0)
    assert sum(parts.values()) == idle["idle_us"] == 500.0


def test_short_gaps_between_queued_kernels_are_the_devices_kernel_wait(tmp_path):
    t = Trace()
    _three_steps(t)
    for i in range(10):  # ten kernels queued at once, each starting 5 us after the previous one ends
        t.kernel("elementwise_%d" % i, 100 + 105 * i, 200 + 105 * i, 7, 20 + i)
    result = profile.run([t.write(tmp_path / "r.json")])
    parts = result["ranks"][0]["gpu_idle"]["attribution_us"]
    assert parts["kernel_wait"] == 45.0 and parts["queued"] == 0.0 and parts["host_launch"] == 0.0
    assert result["diagnosis"][0]["bottleneck"] == "kernel_wait"  # 45 of a 1045 us span


def test_queued_work_waiting_behind_a_copy_the_host_is_still_staging(tmp_path):
    """A copy from pageable memory blocks the stream while the host stages it: the queued kernel waits, and the
    GPU idles for as long as the copy call runs on the host."""
    t = Trace()
    _three_steps(t)
    t.kernel("gemm", 100, 200, 7, 20)
    t.cpu("cudaMemcpyAsync", 150, 300, cat="cuda_runtime")  # 150-450 on the host
    t.kernel("gemm_queued", 500, 600, 7, 30, launch="cudaGraphLaunch")  # launched long before
    parts = profile.run([t.write(tmp_path / "r.json")])["ranks"][0]["gpu_idle"]["attribution_us"]
    assert (parts["synchronization"], parts["queued"], parts["host_launch"]) == (250.0, 50.0, 0.0)
