"""``attune profile --diff A B`` (diff.py): planted traces where B hides an all-reduce under compute that
A leaves exposed, a trace against itself, two real corpus traces, and the CLI."""

from __future__ import annotations

import json

import pytest
from analyzer_paths import TRACES
from synth import Trace

from attune import cli
from attune.profile_analyzer import diff, profile

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def overlap_pair(hidden: bool) -> Trace:
    """Three steps of 1000 us (the last outside the window): a 400 us GEMM, then a 400 us all-reduce on
    another stream, after the GEMM (exposed) or beside it (``hidden``). SYNTHETIC."""
    t = Trace()
    for n in (1, 2, 3):
        s = 1000 * (n - 1)
        t.step(n, s, 1000)
        t.kernel("ampere_bf16_gemm", s + 100, s + 500, 7, s + 10)
        start = s + 100 if hidden else s + 500
        t.kernel(AR, start, start + 400, 20, s + 20)
    return t


@pytest.fixture()
def pair(tmp_path):
    a = overlap_pair(False).write(tmp_path / "a" / "rank0.json")
    b = overlap_pair(True).write(tmp_path / "b" / "rank0.json")
    return a, b


def test_hidden_all_reduce_is_the_top_difference(pair):
    d = diff.diff(profile.run([pair[0]]), profile.run([pair[1]]))
    assert (d["a"]["steps"], d["b"]["steps"], d["per"]) == (2, 2, "step")
    ar = d["communication"]["by_collective"]["all_reduce"]
    assert ar["exposed_us"] == {"a": 400.0, "b": 0.0, "delta": -400.0, "delta_pct": -100.0}
    assert ar["total_us"]["delta"] == 0.0 and (ar["overlap_pctg"]["a"], ar["overlap_pctg"]["b"]) == (0.0, 100.0)
    assert d["step_time_us"] == {"a": 1000.0, "b": 1000.0, "delta": 0.0, "delta_pct": 0.0}
    top = d["differences"][0]
    assert (top["category"], top["name"], top["magnitude"]) == ("exposed_communication", "all_reduce", 400.0)
    assert top["text"] == ("all_reduce exposed 400 us/step -> 0 us/step (-400 us/step): communication now hidden "
                           "under compute (overlap 0% -> 100%, total stayed 400 us -> 400 us/step)")
    # the GPU is idle longer in B (its step ends earlier), and the idle is the host's: both are named by number
    assert [i["category"] for i in d["differences"]] == ["exposed_communication", "idle", "host_bound_idle"]
    assert d["temporal_breakdown"]["idle_us"]["delta"] == 200.0
    kernel = next(k for k in d["top_kernels"] if k["name"] == AR)
    assert kernel["total_us"]["delta"] == 0.0 and kernel["count"] == {"a": 1.0, "b": 1.0, "delta": 0.0,
                                                                      "delta_pct": 0.0}


def _deltas(node):
    if isinstance(node, dict):
        if "delta" in node:
            yield node["delta"]
        for value in node.values():
            yield from _deltas(value)
    elif isinstance(node, list):
        for value in node:
            yield from _deltas(value)


def test_a_trace_against_itself_changes_nothing(pair):
    result = profile.run([pair[0]])
    d = diff.diff(result, profile.run([pair[0]]))
    deltas = list(_deltas({k: v for k, v in d.items() if k != "differences"}))
    assert deltas and set(deltas) <= {0.0, None}
    assert d["differences"] == [] and d["warnings"] == []
    assert "explain: none (no per-step time difference between A and B)" in diff.render(d)


def test_without_profiler_steps_numbers_are_per_trace(tmp_path):
    t = Trace()
    t.kernel("ampere_bf16_gemm", 100, 500, 7, 10)
    t.kernel(AR, 500, 900, 20, 20)
    d = diff.diff(profile.run([t.write(tmp_path / "r.json")]), profile.run([overlap_pair(True).write(
        tmp_path / "s.json")]))
    assert (d["a"]["per"], d["b"]["per"], d["per"]) == ("trace", "step", "mixed")
    assert d["a"]["steps"] == 0 and d["a"]["step_time_us"] is None
    assert "A: rank(s) 0: no ProfilerStep cuts the analysis window, so their numbers are per trace" in d["warnings"]
    assert any("unlike units" in w for w in d["warnings"])
    assert d["communication"]["by_collective"]["all_reduce"]["exposed_us"]["a"] == 400.0


def test_a_kernel_outside_a_full_top_list_is_only_bounded(tmp_path):
    """A's top list is full (ten kernels of 10 us and more); B runs an eleventh A did not list."""
    a, b = Trace(), Trace()
    for t, extra in ((a, None), (b, "fused_kernel")):
        for n in (1, 2):
            t.step(n, 1000 * (n - 1), 1000)
        for i in range(10):
            t.kernel("k%02d" % i, 10 + 50 * i, 30 + 50 * i + i, 7, 5 + i)
        if extra:
            t.kernel(extra, 600, 900, 7, 4)
    d = diff.diff(profile.run([a.write(tmp_path / "a.json")]), profile.run([b.write(tmp_path / "b.json")]))
    fused = next(k for k in d["top_kernels"] if k["name"] == "fused_kernel")
    assert fused["total_us"]["at_most"] == ["a"] and fused["total_us"]["delta"] is None
    assert fused["total_us"]["a"] == 20.0 and fused["total_us"]["b"] == 300.0  # A's 10th kernel: k00, 20 us
    item = next(i for i in d["differences"] if i["name"] == "fused_kernel")
    assert item["magnitude"] == 280.0 and "at most 20 us/step (outside A's top 10)" in item["text"]


def _corpus(name):
    folder = TRACES / name
    if not folder.is_dir():
        pytest.skip("the real-artifact corpus is absent: no traces at %s (set ATTUNE_CORPUS_DIR)" % TRACES)
    return folder


def test_two_real_corpus_traces_end_to_end(capsys):
    a, b = _corpus("hta_nccl_allreduce_2r_a100_modern_format"), _corpus("hta_alltoall_8r_a100_legacy_format")
    d = diff.diff(profile.run([a]), profile.run([b]))
    assert (d["a"]["steps"], d["b"]["steps"], d["per"]) == (2, 5, "step")
    assert set(d["communication"]["by_collective"]) == {"all_reduce", "all_to_all", "broadcast"}
    assert len(d["differences"]) == 3
    magnitudes = [i["magnitude"] for i in d["differences"]]
    assert magnitudes == sorted(magnitudes, reverse=True) and magnitudes[-1] > 0
    for item in d["differences"]:
        if item["row"]["delta"] is not None:
            assert item["magnitude"] == round(abs(item["row"]["delta"]), 2)
    assert cli.main(["profile", "--diff", str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["differences"][0]["text"] == d["differences"][0]["text"]


def test_the_cli_diff(pair, tmp_path, capsys):
    a, b = (str(p) for p in pair)
    assert cli.main(["profile", "--diff", a, b]) == 0
    out = capsys.readouterr().out
    assert "explain: 1. all_reduce exposed 400 us/step -> 0 us/step (-400 us/step)" in out
    assert "A: 1 file(s), 1 rank(s), 2 step(s) analyzed, per step" in out
    assert cli.main(["profile", "--diff", a, b, "--json", "--steps", "1:2"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["a"]["window_steps"] == [1, 2] and d["differences"][0]["name"] == "all_reduce"
    assert cli.main(["profile", "--diff", a, str(tmp_path / "missing.json")]) == 2
    assert "--diff B: %s: no such trace file or directory" % (tmp_path / "missing.json") in capsys.readouterr().err
    assert cli.main(["profile", a, "--diff", a, b]) == 2
    assert "--diff A B compares two traces" in capsys.readouterr().err
