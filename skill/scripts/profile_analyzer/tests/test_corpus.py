"""Golden tests on every trace of the real-artifact corpus (read in place through ATTUNE_CORPUS_DIR),
and agreement with HolisticTraceAnalysis 0.5.0: its checked-in numbers always, and HTA itself when
it is installed (the optional `hta` extra)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from analyzer_paths import DATA, TRACES

_spec = importlib.util.spec_from_file_location("make_expected", DATA / "make_expected.py")
make_expected = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_expected)

FOLDERS = sorted(p.stem for p in (DATA / "expected").glob("*.json"))
ABSENT = "the real-artifact corpus is absent: no traces at %s (set ATTUNE_CORPUS_DIR)" % TRACES
TOLERANCE_PP = 1.0


def _folder(name):
    folder = TRACES / name
    if not folder.is_dir():
        pytest.skip(ABSENT)
    return folder


def test_every_corpus_trace_has_an_expected_output():
    if not TRACES.is_dir():
        pytest.skip(ABSENT)
    assert sorted(p.name for p in TRACES.iterdir() if p.is_dir()) == FOLDERS


@pytest.mark.parametrize("name", FOLDERS)
def test_golden_output(name):
    expected = json.loads((DATA / "expected" / (name + ".json")).read_text())
    assert make_expected.expected_for(_folder(name)) == expected


@pytest.mark.parametrize("name", FOLDERS)
def test_agrees_with_hta_within_one_point(name):
    ours = make_expected.expected_for(_folder(name))
    hta = json.loads((DATA / "hta_golden" / (name + ".json")).read_text())
    for rank in ours["ranks"]:
        theirs = hta["ranks"][str(rank["rank"])]
        tb = rank["temporal_breakdown"]
        for key in ("idle", "compute", "non_compute"):
            assert abs(tb[key + "_pctg"] - theirs["temporal_breakdown"][key + "_time_pctg"]) <= TOLERANCE_PP
        if theirs["comm_comp_overlap_pctg"] is None:
            assert rank["communication"]["overlap_pctg"] is None
        else:
            assert abs(rank["communication"]["overlap_pctg"] - theirs["comm_comp_overlap_pctg"]) <= TOLERANCE_PP


@pytest.mark.parametrize("name", FOLDERS)
def test_agrees_with_hta_run_live(name):
    """HTA's own parse and temporal breakdown, as ``TraceAnalysis(trace_dir=...)`` runs them, with one difference:
    the ranks are parsed in this process. ``TraceAnalysis`` parses them in a pool of processes forked from this one,
    and a fork of a test process whose other threads (a Ray client's, an HTTP fake's) hold a lock can deadlock."""
    pytest.importorskip("hta", reason="HolisticTraceAnalysis is not installed (pip install -e '.[hta]')")
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.common.trace import Trace

    folder = _folder(name)
    trace = Trace(trace_dir=str(folder))
    trace.load_traces(include_last_profiler_step=False, use_multiprocessing=False)
    breakdown = BreakdownAnalysis.get_temporal_breakdown(trace, visualize=False).set_index("rank")
    ours = make_expected.expected_for(folder)
    for rank in ours["ranks"]:
        row = breakdown.loc[rank["rank"]]
        assert abs(rank["temporal_breakdown"]["idle_pctg"] - float(row["idle_time_pctg"])) <= TOLERANCE_PP
        assert abs(rank["temporal_breakdown"]["compute_pctg"] - float(row["compute_time_pctg"])) <= TOLERANCE_PP


EXPECTED_DIAGNOSES = json.loads((DATA / "expected_diagnoses.json").read_text())


def test_every_corpus_trace_has_a_hand_written_expectation():
    assert sorted(k for k in EXPECTED_DIAGNOSES if not k.startswith("_")) == FOLDERS


@pytest.mark.parametrize("name", FOLDERS)
def test_every_idle_microsecond_is_attributed(name):
    """The causes add up to the idle time of the span (within 0.1 point of it), and that idle time, which counts
    every GPU activity inside the span, is never more than HTA's, which counts the kept window's only."""
    from attune.profile_analyzer import profile

    result = profile.run([_folder(name)])
    for rank in result["ranks"]:
        idle = rank["gpu_idle"]
        assert idle["span_us"] == rank["temporal_breakdown"]["kernel_time_us"]
        assert abs(sum(idle["attribution_us"].values()) - idle["idle_us"]) / idle["span_us"] * 100 <= 0.1
        assert idle["idle_us"] <= rank["temporal_breakdown"]["idle_time_us"] + 1e-6


@pytest.mark.parametrize("name", FOLDERS)
def test_the_expected_bottleneck_comes_first_and_nothing_ruled_out_is_claimed(name):
    from attune.profile_analyzer import profile

    expected = EXPECTED_DIAGNOSES[name]
    diagnosis = profile.run([_folder(name)])["diagnosis"]
    assert (diagnosis[0]["bottleneck"], diagnosis[0]["family"]) == (expected["top"], expected["family"])
    claimed = {item["bottleneck"] for item in diagnosis}
    assert not claimed & set(expected["must_not_claim"]), claimed & set(expected["must_not_claim"])
    for item in diagnosis:  # the evidence is text the agent reads, with the numbers in it
        assert item["evidence_text"] and any(ch.isdigit() for ch in item["evidence_text"])
