"""The correctness gate: each fail-with-reason case, the classes, the calibrated statistics, the CLI."""

from __future__ import annotations

import json

import importlib.util

import pytest
from conftest import DATA
from factory import Builder
from gate_factory import arg, curve, env, unset, write_run

from attune import cli
from attune.core.errors import InputError
from attune.correctness import convergence
from attune.correctness.gate import run_gate
from attune.correctness.rules import Rules

BASE = curve()


def runs(tmp_path, candidate, changes=(), repeats=1, **kwargs):
    baseline = write_run(tmp_path / "base", BASE)
    reps = [write_run(tmp_path / ("rep%d" % i), BASE) for i in range(repeats)]
    cand = write_run(tmp_path / "cand", candidate, changes, **kwargs)
    return baseline, cand, reps


def gate(tmp_path, candidate, changes=(), repeats=1, **kwargs):
    baseline, cand, reps = runs(tmp_path, candidate, changes, repeats, **kwargs)
    return run_gate(baseline, cand, reps)


def test_an_unchanged_rerun_passes_and_must_match_exactly_on_a_deterministic_setup(tmp_path):
    result = gate(tmp_path, BASE)
    assert result["verdict"] == "pass", result["reasons"]
    assert result["convergence"]["calibrated"]["deterministic"] is True
    assert result["convergence"]["calibrated"]["exact_required"] is True


def test_a_scheduling_only_change_must_reproduce_the_loss_exactly_when_reruns_are_identical(tmp_path):
    nudged = list(BASE)
    nudged[11] += 1e-5
    result = gate(tmp_path, nudged, [arg("--manual-gc")])
    assert result["config"]["passed"] and result["config"]["changes"][0]["exact"] is True
    assert result["verdict"] == "fail"
    assert any("bitwise identical" in reason and "step 12" in reason for reason in result["reasons"])


def test_a_same_math_kernel_change_may_differ_within_the_floor(tmp_path):
    wobbled = [v * (1 + 0.0006 * ((i % 3) - 1)) for i, v in enumerate(BASE)]
    result = gate(tmp_path, wobbled, [arg("--tensor-model-parallel-size", "4")])
    assert result["config"]["changes"][0]["class"] == "placement"
    assert result["verdict"] == "pass", result["reasons"]
    assert result["convergence"]["calibrated"]["exact_required"] is False


def test_a_placement_change_whose_curve_drifts_fails_although_its_config_is_legal(tmp_path):
    drift = [b + 0.06 * (BASE[0] - b) for b in BASE]  # 6% of the learning progress lost
    result = gate(tmp_path, drift, [arg("--tp-comm-overlap")])
    assert result["config"]["passed"]
    assert result["convergence"]["bridge"]["passed"], "Bridge's 10% tolerance lets this drift through"
    assert result["verdict"] == "fail"
    assert any(reason.startswith("convergence:") for reason in result["reasons"])


@pytest.mark.parametrize("changes, name, cls", [
    ([arg("--lr", "6.0e-4")], "--lr", "fixed"),
    ([arg("--seq-length", "8192")], "--seq-length", "fixed"),
    ([arg("--global-batch-size", "256")], "--global-batch-size", "fixed"),
    ([arg("--seed", "42")], "--seed", "fixed"),
    ([arg("--calculate-per-token-loss")], "--calculate-per-token-loss", "fixed"),
    ([arg("--fp8-format", "hybrid")], "--fp8-format", "fixed"),
    ([arg("--tensor-model-paralel-size", "4")], "--tensor-model-paralel-size", "numeric"),  # misspelled: unlisted
])
def test_changes_of_the_math_fail_the_configuration_check(tmp_path, changes, name, cls):
    result = gate(tmp_path, BASE, changes)
    change = next(c for c in result["config"]["changes"] if c["name"] == name)
    assert change["class"] == cls
    assert result["verdict"] == "fail"
    assert any(reason.startswith("config: argument %s" % name) for reason in result["reasons"])


def test_nan_loss_fails(tmp_path):
    losses = list(BASE)
    losses[8] = "nan"
    result = gate(tmp_path, losses, nan={9: 1})
    assert result["verdict"] == "fail"
    assert not result["checks"]["finite_loss"]["passed"] and "9" in result["checks"]["finite_loss"]["detail"]
    assert result["convergence"]["bridge"]["passed"], "Bridge alone passes a NaN (its known hole)"


def test_missing_steps_fail(tmp_path):
    baseline = write_run(tmp_path / "base", BASE)
    cand = write_run(tmp_path / "cand", BASE)
    text = (cand / "log.txt").read_text().splitlines(True)
    (cand / "log.txt").write_text("".join(line for line in text if "iteration        7/" not in line))
    result = run_gate(baseline, cand, [])
    assert result["verdict"] == "fail"
    assert result["checks"]["steps"]["detail"] == "missing step(s) 7"


def test_skipped_iterations_fail(tmp_path):
    result = gate(tmp_path, BASE, skipped={4: 1})
    assert result["verdict"] == "fail" and not result["checks"]["skipped"]["passed"]


def test_a_candidate_shorter_than_the_window_fails(tmp_path):
    result = gate(tmp_path, BASE[:14])
    assert result["verdict"] == "fail"
    assert "up to 14" in result["checks"]["length"]["detail"]


def test_changed_data_rows_fail(tmp_path):
    baseline = write_run(tmp_path / "base", BASE, header="attune-rows: rows_sha256=%s\n" % ("a" * 64))
    cand = write_run(tmp_path / "cand", BASE, header="attune-rows: rows_sha256=%s\n" % ("b" * 64))
    result = run_gate(baseline, cand, [])
    assert result["verdict"] == "fail" and not result["checks"]["data"]["passed"]


def test_a_different_topology_fails(tmp_path):
    result = gate(tmp_path, BASE, gpus_per_worker=4)
    assert result["verdict"] == "fail"
    assert result["checks"]["topology"]["detail"] == "8 GPUs in the recipe against the baseline's 16"


def test_swap_outside_its_pairs_and_numeric_when(tmp_path):
    rules = Rules()
    swap = next(rule for rule in rules.rules.values() if rule.cls == "swap")
    left, right = sorted(next(iter(swap.pairs)))
    assert rules.classify(swap.kind, swap.name, left, right, {}, {})[0] == "swap"
    assert rules.classify(swap.kind, swap.name, left, "not-a-value", {}, {})[0] == "numeric"
    conditional = next((rule for rule in rules.rules.values() if rule.numeric_when), None)
    if conditional is not None:
        flag = conditional.numeric_when[0]
        assert rules.classify(conditional.kind, conditional.name, "1", "2", {flag: "1"}, {})[0] == "numeric"


def test_overrides_reclass_with_justification_but_never_a_fixed_argument(tmp_path):
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text("version: 1\nentries:\n  - name: --my-kernel-switch\n    kind: arg\n    class: placement\n"
                         "    exact: false\n    stacks: [megatron]\n    reason: our fork's kernel choice\n"
                         "    source: our fork's docs\n    justification: verified equal loss over 2000 steps\n")
    baseline, cand, reps = runs(tmp_path, BASE, [arg("--my-kernel-switch")])
    assert run_gate(baseline, cand, reps)["verdict"] == "fail"
    result = run_gate(baseline, cand, reps, rules=Rules(overrides=overrides))
    assert result["verdict"] == "pass", result["reasons"]
    assert result["config"]["overrides_used"] == [{"name": "--my-kernel-switch", "kind": "arg", "class": "placement",
                                                   "justification": "verified equal loss over 2000 steps"}]
    overrides.write_text(overrides.read_text().replace("--my-kernel-switch", "--seq-length"))
    with pytest.raises(InputError, match="--seq-length is fixed"):
        Rules(overrides=overrides)
    overrides.write_text(overrides.read_text().replace("    justification: verified equal loss over 2000 steps\n", ""))
    with pytest.raises(InputError, match="missing justification"):
        Rules(overrides=overrides)


def test_nondeterministic_reruns_widen_the_tolerance(tmp_path):
    noisy = [v * (1 + 0.012 * (1 if i % 2 else -1)) for i, v in enumerate(BASE)]
    candidate = [v * (1 + 0.025 * (1 if i % 2 else -1)) for i, v in enumerate(BASE)]
    baseline = write_run(tmp_path / "base", BASE)
    rep = write_run(tmp_path / "rep", noisy)
    cand = write_run(tmp_path / "cand", candidate, [arg("--tensor-model-parallel-size", "4")])
    without = run_gate(baseline, cand, [])
    assert without["verdict"] == "fail"
    with_rerun = run_gate(baseline, cand, [rep])
    level = with_rerun["convergence"]["calibrated"]["level"]
    assert level["threshold"] == pytest.approx(3 * level["rerun"]) and level["passed"]


def test_bridge_check_follows_validate_convergence():
    golden = [10.0 - 0.1 * i for i in range(20)]
    assert convergence.bridge_validate(golden, golden)["passed"]
    off = [g * 1.2 for g in golden]
    result = convergence.bridge_validate(off, golden)
    assert "point_wise_tolerance" in result["failed_metrics"] and "final_loss" in result["failed_metrics"]
    assert result["skipped_first_steps"] == 4
    assert convergence.bridge_validate([float("nan")] * 20, golden)["passed"], "NaN passes Bridge's checks"


def test_bad_input_is_exit_2_and_a_failed_gate_exit_1(tmp_path, capsys):
    baseline, cand, reps = runs(tmp_path, BASE, [arg("--lr", "1e-3")])
    assert cli.main(["gate", "--baseline", str(baseline), "--candidate", str(tmp_path / "nope")]) == 2
    assert "nope: not a directory" in capsys.readouterr().err
    assert cli.main(["gate", "--baseline", str(baseline), "--candidate", str(cand), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "fail" and out["config"]["changes"][0]["name"] == "--lr"
    short = write_run(tmp_path / "short", BASE[:10])
    assert cli.main(["gate", "--baseline", str(short), "--candidate", str(cand)]) == 2
    assert "the gate compares steps 1-20" in capsys.readouterr().err


def test_inside_a_campaign_the_gate_writes_gate_json_and_a_ledger_row(tmp_path, capsys):
    b = Builder(tmp_path / "c")
    campaign = b.campaign
    for run in ("r001", "r002"):
        b.launch(run, "baseline", "base")
        b.result(run, 1000.0)
        write_run(campaign.run_dir(run), BASE)
    b.launch("r003", "candidate", "x", parent="r001")
    b.result("r003", 950.0)
    write_run(campaign.run_dir("r003"), BASE, [arg("--manual-gc")])
    assert cli.main(["gate", "--run", "r003", "--campaign", str(campaign.dir)]) == 0
    assert "verdict: pass" in capsys.readouterr().out
    saved = json.loads((campaign.run_dir("r003") / "gate.json").read_text())
    assert saved["against"] == "r001" and saved["repeats"] == [str(campaign.run_dir("r002"))]
    row = [r for r in campaign.ledger.rows() if r["kind"] == "gate"][-1]
    assert row["run"] == "r003" and row["verdict"] == "pass" and row["against"] == "r001"
    assert row["checks"]["changes"] == [{"name": "--manual-gc", "class": "placement"}]
    assert cli.main(["gate", "--run", "r404", "--campaign", str(campaign.dir)]) == 2


GOLDEN = DATA / "gate_cases"
_spec = importlib.util.spec_from_file_location("make_gate_cases", DATA / "make_gate_cases.py")
make_gate_cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_gate_cases)


@pytest.mark.parametrize("case", sorted(path.name for path in GOLDEN.iterdir() if path.is_dir()))
def test_golden_cases(case):
    """Each checked-in case's verdict, whole (regenerate with data/make_gate_cases.py)."""
    expected = json.loads((GOLDEN / case / "expected_verdict.json").read_text())
    assert make_gate_cases.evaluate(GOLDEN / case) == expected
    assert expected["verdict"] == case.split("_")[0]


def test_an_argument_set_to_its_default_is_no_change_and_unset_means_the_default(tmp_path):
    rules = Rules()
    assert rules.get("arg", "--attention-backend").default == "auto"
    result = gate(tmp_path, BASE, [arg("--attention-backend", "auto")])
    assert result["config"]["changes"] == []
    baseline = write_run(tmp_path / "b2", BASE, [arg("--attention-backend", "unfused")])
    unset_side = write_run(tmp_path / "c2", BASE)
    change = run_gate(baseline, unset_side, [])["config"]["changes"][0]
    assert (change["name"], change["old"], change["new"], change["class"]) == (
        "--attention-backend", "unfused", None, "swap")


def test_when_both_runs_start_from_the_same_weights_a_small_drift_is_caught(tmp_path):
    """Early in a long warm-up the loss barely moves (1.4% in 20 steps): a kernel bug that costs 8% of the
    learning progress is far inside the layout-change floors, but not when no change re-draws the weights."""
    flat = curve(start=10.9, end=10.75, wobble=0.003)
    drift = [b + 0.08 * (flat[0] - b) for b in flat]
    baseline = write_run(tmp_path / "base", flat)
    rep = write_run(tmp_path / "rep", flat)
    bug = run_gate(baseline, write_run(tmp_path / "bug", drift, [arg("--tp-comm-overlap")]), [rep])
    assert bug["config"]["same_init"] is True
    assert bug["verdict"] == "fail" and not bug["convergence"]["calibrated"]["progress"]["passed"]
    assert bug["convergence"]["bridge"]["passed"]
    offset = [v * 1.004 for v in drift]  # re-drawn weights start 0.4% off
    layout = run_gate(baseline, write_run(tmp_path / "tp", offset, [arg("--tensor-model-parallel-size", "4")]), [rep])
    assert layout["config"]["same_init"] is False
    assert layout["convergence"]["calibrated"]["same_init"] is False
    assert layout["verdict"] == "pass", "a layout change re-draws the weights; its floors are wider"


def test_a_layout_change_that_kept_the_weights_is_judged_by_the_same_weights_floors(tmp_path):
    """A tensor-parallel change re-draws the weights by its class, but a first iteration whose loss is the
    baseline's shows they are the same (the initial weights' loss on the same first batch): the fault
    behind it (8% of the learning progress lost) is then caught."""
    flat = curve(start=10.9, end=10.75, wobble=0.003)
    drift = [b + 0.08 * (flat[0] - b) for b in flat]
    baseline = write_run(tmp_path / "base", flat)
    rep = write_run(tmp_path / "rep", flat)
    result = run_gate(baseline, write_run(tmp_path / "tp", drift, [arg("--tensor-model-parallel-size", "4")]), [rep])
    calibrated = result["convergence"]["calibrated"]
    assert result["config"]["same_init"] is False and calibrated["same_init"] is True
    assert "first iteration" in calibrated["same_init_basis"]
    assert result["verdict"] == "fail" and not calibrated["progress"]["passed"]
    exact = run_gate(baseline, write_run(tmp_path / "same", [v * (1 + 1e-7) for v in flat],
                                         [arg("--tensor-model-parallel-size", "4")]), [rep])
    assert exact["verdict"] == "pass", exact["reasons"]


def test_a_fault_behind_a_layout_change_that_slows_learning_is_caught_by_the_drift(tmp_path):
    """Re-drawn weights move the curve by an offset that stays; a fault that changes how fast the loss falls
    (here a quarter of the progress lost) grows step by step, which the drift sees though the level stays
    within its floor."""
    slow = [(b + 0.25 * (BASE[0] - b)) * 1.003 for b in BASE]
    result = gate(tmp_path, [v for v in slow], [arg("--tensor-model-parallel-size", "4")])
    calibrated = result["convergence"]["calibrated"]
    assert calibrated["same_init"] is False
    assert result["verdict"] == "fail"
    assert not calibrated["drift"]["passed"]


def test_re_drawn_weights_may_close_the_gap_but_a_gap_that_widens_is_caught(tmp_path):
    """Runs whose weights were drawn apart come closer as they learn; a fault (here a dropout change behind a
    layout change) pushes them apart. A gap that grows from 0.1% to 0.36% after a first step off by 0.3% is
    within the level, progress and drift floors for re-drawn weights (the progress and the drift count from the
    first step) but not within the widening's (from the median of the first three); one that closes from 0.3%
    to 0.15% passes."""
    flat = curve(start=10.9, end=10.75, wobble=0.003)
    n = len(flat)
    baseline = write_run(tmp_path / "base", flat)
    rep = write_run(tmp_path / "rep", flat)
    widening = [b * (1.003 if i == 0 else 1.001 + 0.0026 * i / (n - 1)) for i, b in enumerate(flat)]
    result = run_gate(baseline, write_run(tmp_path / "wide", widening, [arg("--tensor-model-parallel-size", "4")]),
                      [rep])
    calibrated = result["convergence"]["calibrated"]
    assert calibrated["same_init"] is False
    assert [name for name in ("level", "progress", "drift", "widening") if not calibrated[name]["passed"]] == [
        "widening"]
    assert result["verdict"] == "fail"
    assert any("gap to the baseline widened" in reason for reason in result["reasons"]), result["reasons"]
    closing = [b * (1.003 - 0.0015 * i / (n - 1)) for i, b in enumerate(flat)]
    result = run_gate(baseline, write_run(tmp_path / "close", closing, [arg("--tensor-model-parallel-size", "4")]),
                      [rep])
    assert result["verdict"] == "pass", result["reasons"]
    assert result["convergence"]["calibrated"]["widening"]["value"] < 0


def test_a_campaigns_gate_takes_neither_other_rules_nor_repeats_from_outside_its_runs(tmp_path, capsys, monkeypatch):
    from factory import settings as make_settings
    from attune.campaign import ledger as campaign_mod
    from attune import cli
    campaign = campaign_mod.init(tmp_path / "c", make_settings(ATTUNE_BACKEND="local"), "gate-scope")
    monkeypatch.setenv("ATTUNE_CAMPAIGN_DIR", str(campaign.dir))
    lenient = tmp_path / "c" / "scratch" / "lenient.yaml"
    lenient.parent.mkdir()
    lenient.write_text("overrides: []\n")
    assert cli.main(["gate", "--run", "r001", "--rules", str(lenient)]) == 2
    assert "a campaign's gate runs on its frozen rules" in capsys.readouterr().err
    assert cli.main(["gate", "--run", "r001", "--repeat", str(tmp_path / "c" / "scratch")]) == 2
    assert "not a run of this campaign" in capsys.readouterr().err
