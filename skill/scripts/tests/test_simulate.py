"""The simulated Megatron-LM workload (simulate/): real-format output that the project's own parser,
triage, gate and local backend read unchanged. Every number in these runs is SIMULATED."""

from __future__ import annotations

import io
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SCRIPTS
from factory import local_campaign, wait

from attune import cli
from attune.core import legality, logparse, triage, workload
from attune.campaign import ranking, runs
from attune.core.recipe import Recipe
from attune.correctness import gate
from attune.correctness.rules import Rules
from attune.projection import api
from attune.simulate import fit_golden, noise as model
from attune.simulate import sim_megatron as sim

SIM = SCRIPTS / "simulate" / "sim_megatron.py"
RECIPES = SCRIPTS / "simulate" / "recipes"
LLAMA = RECIPES / "llama3_70b_h100x64.yaml"
GOLDEN = fit_golden.DEFAULT_DIR  # $ATTUNE_CORPUS_DIR/megatron_golden, default ../shared/data beside the repository
RULES = Rules()
NO_RECOMPUTE = [{"op": "unset", "arg": flag} for flag in
                ("--recompute-granularity", "--recompute-method", "--recompute-num-layers")]


class Hung(Exception):
    pass


def recipe(changes=(), path=LLAMA) -> Recipe:
    text = path.read_text(encoding="utf-8").format(python=sys.executable, sim=SIM)
    return workload.enforce(Recipe(text, str(path))).apply(list(changes))


def argv_of(made: Recipe) -> list:
    command = made.command
    return [word.value for word in command.words[command.program_index + 1:command.args_end]]


def simulate(tmp_path, made: Recipe, seed=0, fault=None, env=None):
    """Run the simulator in-process on ``made``; (exit code, output, truth)."""
    full = dict(made.env(), ATTUNE_SIM_SEED=str(seed), ATTUNE_SIM_SPEED="0",
                ATTUNE_SIM_TRUTH=str(tmp_path / ("truth-%d-%s.json" % (seed, fault))), **(env or {}))
    if fault:
        full["ATTUNE_SIM_FAULT"] = fault

    def sleep(seconds):
        if seconds >= 3600:
            raise Hung()
    out = io.StringIO()
    try:
        code = sim.run(argv_of(made), full, out, api.project, api.ConfigError, rules=RULES, sleep=sleep)
    except Hung:
        code = None
    return code, out.getvalue(), json.loads(Path(full["ATTUNE_SIM_TRUTH"]).read_text())


def classify(text: str, code):
    parsed = logparse.parse_lines(text.splitlines(True))
    return parsed, triage.classify(parsed, exit_code=code, log_lines=text.split("\n"))


# ---------------------------------------------------------------- output and the parser

def test_the_log_parses_into_exactly_the_intended_values(tmp_path, capsys):
    code, text, truth = simulate(tmp_path, recipe())
    assert code == 0 and truth["exit_code"] == 0 and truth["failure"] is None
    assert text.startswith("ATTUNE SIMULATED WORKLOAD: ") and "hardware H100 x 64" in text.splitlines()[0]
    assert all(line.startswith("SIMULATED ") for line in text.splitlines()[1:])
    parsed, found = classify(text, code)
    assert found is None and parsed["format"] == "megatron" and not parsed["warnings"]
    assert [s["step"] for s in parsed["steps"]] == list(range(1, 21)) == [s["step"] for s in truth["steps"]]
    for got, want in zip(parsed["steps"], truth["steps"]):
        assert got["train_iters"] == 20 and got["timestamp"] is not None
        for key in ("elapsed_ms", "lm_loss", "tflops_per_gpu", "lr", "global_batch_size", "consumed_samples"):
            assert got[key] == want[key], key
        assert got["skipped"] == 0 and got["nan"] == 0
    memory = [{k: v for k, v in m.items() if k != "line_no"} for m in parsed["memory"]]
    assert memory == truth["memory"]
    projection = truth["projection"]
    parts = projection["memory"]["breakdown_gib"]
    assert truth["memory"][0]["max_allocated_mb"] == pytest.approx(
        1024 * sum(parts[k] for k in ("weights", "grads", "optimizer", "activations")), abs=0.01)
    flops = projection["model_tflops_per_gpu"] * projection["time"]["step_s"]
    for step in truth["steps"]:  # throughput is consistent with the printed time
        assert step["tflops_per_gpu"] == pytest.approx(flops / (step["elapsed_ms"] / 1000), abs=0.06)
    log = tmp_path / "log.txt"
    log.write_text(text)
    assert cli.main(["metrics", str(log), "--json", "--exit-code", "0"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [s["lm_loss"] for s in shown["steps"]] == [s["lm_loss"] for s in truth["steps"]]
    assert [s["elapsed_ms"] for s in shown["steps"]] == [s["elapsed_ms"] for s in truth["steps"]]
    assert shown["triage"] is None and len(shown["memory"]) == 1


def test_step_times_follow_the_projection_with_the_documented_warm_up(tmp_path):
    _, _, truth = simulate(tmp_path, recipe())
    step_s = truth["projection"]["time"]["step_s"]
    times = [s["elapsed_ms"] / 1000 for s in truth["steps"]]
    steady = statistics.median(times[4:19])
    assert abs(math.log(steady / step_s)) < 4 * model.FIT["step_time"]["run_offset"]["log_sd"]
    assert times[0] - steady > 2.0  # the first iteration carries seconds of one-time work
    assert 0 < times[1] - steady < 0.5 + 0.05 * steady


def test_log_interval_averages_like_megatron(tmp_path):
    made = recipe([{"op": "set", "arg": "--log-interval", "value": "5"}])
    code, text, truth = simulate(tmp_path, made)
    parsed, _ = classify(text, code)
    assert [s["step"] for s in parsed["steps"]] == [1, 5, 10, 15, 20]
    assert [s["elapsed_ms"] for s in parsed["steps"]] == [s["elapsed_ms"] for s in truth["steps"]]
    assert [s["lm_loss"] for s in parsed["steps"]] == [s["lm_loss"] for s in truth["steps"]]


def test_runs_as_a_file_and_as_a_module_with_identical_output(tmp_path):
    made = recipe()
    env = dict(os.environ)
    env.update(made.env(), ATTUNE_SIM_SEED="7", ATTUNE_SIM_SPEED="0")
    as_file = subprocess.run([sys.executable, str(SIM)] + argv_of(made), env=env, capture_output=True, text=True,
                             timeout=60, cwd=str(tmp_path))
    as_module = subprocess.run([sys.executable, "-m", "attune.simulate.sim_megatron"] + argv_of(made), env=env,
                               capture_output=True, text=True, timeout=60, cwd=str(SCRIPTS))
    assert as_file.returncode == 0 and as_module.returncode == 0, as_file.stderr + as_module.stderr
    assert as_file.stdout == as_module.stdout and "iteration       20/      20" in as_file.stdout
    missing = subprocess.run([sys.executable, str(SIM)] + argv_of(made), env=dict(env, ATTUNE_SIM_HARDWARE=""),
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "ATTUNE_SIM_HARDWARE" in missing.stderr and not missing.stdout


def test_the_learning_rate_follows_megatrons_scheduler():
    warm = {"--lr": "1e-4", "--lr-warmup-iters": "3"}  # mlm1570_mcore_resume.log prints these three
    assert ["%.6E" % model.learning_rate(n, warm, 10) for n in (1, 2, 3)] == [
        "3.333333E-05", "6.666667E-05", "1.000000E-04"]
    cosine = {"--lr": "1e-3", "--min-lr": "1e-4", "--lr-decay-style": "cosine", "--lr-warmup-iters": "0",
              "--lr-decay-iters": "100"}
    assert model.learning_rate(50, cosine, 100) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert model.learning_rate(200, cosine, 300) == pytest.approx(1e-4)


MEGATRON_RECIPES = [path for path in sorted(RECIPES.glob("*.yaml")) if "{sim}" in path.read_text()
                    and "--num-rollout" not in path.read_text()]  # the slime templates: test_slime.py


@pytest.mark.parametrize("path", MEGATRON_RECIPES, ids=lambda p: p.stem)
def test_the_recipe_templates_are_legal_and_run_to_the_end(tmp_path, path):
    made = recipe(path=path)
    assert legality.check(made.args(), made.env(), made.gpus(), "H100", trusted=made.args()) == []
    assert made.env()["ATTUNE_SIM_GPUS"] == str(made.gpus()) and made.env()["ATTUNE_SIM_HARDWARE"] == "H100"
    code, text, truth = simulate(tmp_path, made)
    assert code == 0 and truth["projection"]["memory"]["fits"] and len(truth["steps"]) == 20
    assert "using world size: %d," % made.gpus() in text


@pytest.mark.parametrize("name, value", [("ATTUNE_SIM_FAULT", "melt"), ("ATTUNE_SIM_SEED", "x"),
                                         ("ATTUNE_SIM_GPUS", "0"), ("ATTUNE_SIM_SPEED", "fast")])
def test_bad_simulator_input_names_the_variable(name, value):
    with pytest.raises(sim.UsageError, match=name):
        sim.read_inputs({"ATTUNE_SIM_HARDWARE": "H100", name: value})


# ---------------------------------------------------------------- seeds and the noise model

def test_same_seed_is_byte_identical_and_seeds_differ_within_the_noise(tmp_path):
    made = recipe()
    first, again, other = (simulate(tmp_path, made, seed=seed) for seed in (3, 3, 4))
    assert first[1] == again[1]
    assert first[1] != other[1]
    a, b = ([s for s in run[2]["steps"]] for run in (first, other))
    med_a, med_b = (statistics.median(s["elapsed_ms"] for s in steps[4:19]) for steps in (a, b))
    assert abs(math.log(med_a / med_b)) < 5 * math.sqrt(2) * model.FIT["step_time"]["run_offset"]["log_sd"]
    level = max(abs(x["lm_loss"] - y["lm_loss"]) / y["lm_loss"] for x, y in zip(a, b))
    assert 0 < level < 1e-4  # a rerun's loss differs only by the golden reruns' noise (~5e-6)


def test_the_run_offset_has_the_documented_spread():
    offsets = []
    for seed in range(300):
        times = model.step_times(20, 10.0, "seed-%d" % seed)
        offsets.append(math.log(statistics.median(times[4:19]) / 10.0))
    spread = statistics.pstdev(offsets)
    assert 0.8 * model.FIT["step_time"]["run_offset"]["log_sd"] < spread < 1.4 * math.hypot(
        model.FIT["step_time"]["run_offset"]["log_sd"], model.FIT["step_time"]["jitter_log_sd"])
    assert abs(statistics.mean(offsets)) < 0.003


@pytest.mark.skipif(not (GOLDEN / "index.json").is_file(), reason="the real-artifact corpus is absent: no golden curves at %s (set ATTUNE_CORPUS_DIR)" % GOLDEN)
def test_the_fitted_numbers_are_the_ones_the_model_uses():
    fitted = fit_golden.fit(GOLDEN)
    step, want = fitted["step_time"], model.FIT["step_time"]
    assert step["first_step_excess_s"]["median"] == want["first_step_excess_s"]["median"]
    assert step["second_step_excess"] == want["second_step_excess"]
    assert step["jitter_log_sd"] == want["jitter_log_sd"]
    assert step["run_offset"]["log_sd"] == want["run_offset"]["log_sd"]
    for key in ("c", "k", "floor", "delay", "initial_over_ln_vocab", "wiggle_sd"):
        assert fitted["loss_shape"][key] == model.FIT["loss_shape"][key], key
    for level, numbers in model.FIT["loss_noise"].items():
        assert {k: fitted["loss_noise"][level][k] for k in numbers} == numbers, level


# ---------------------------------------------------------------- failures and triage

def test_a_layout_that_does_not_fit_ooms_at_the_first_step(tmp_path):
    code, text, truth = simulate(tmp_path, recipe(NO_RECOMPUTE))
    assert truth["projection"]["memory"]["fits"] is False
    parsed, found = classify(text, code)
    assert code == 1 and found.cls == "oom" and not parsed["steps"]
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in found.evidence
    assert "GPU 0 has a total capacity of 80.00 GiB" in found.evidence


def test_an_nccl_timeout_is_triaged_as_one(tmp_path):
    code, text, truth = simulate(tmp_path, recipe(), fault="nccl_timeout@5")
    parsed, found = classify(text, code)
    assert code == sim.NCCL_EXIT and found.cls == "nccl_timeout" and "Timeout(ms)=600000" in found.evidence
    assert [s["step"] for s in parsed["steps"]] == [1, 2, 3, 4] and truth["failure"] == "nccl_timeout"


def test_a_crash_is_a_python_traceback(tmp_path):
    code, text, _ = simulate(tmp_path, recipe(), fault="crash")
    _, found = classify(text, code)
    assert code == 1 and found.cls == "crash" and "illegal memory access" in found.evidence


def test_a_hang_stops_printing_and_is_triaged_by_the_silence(tmp_path):
    code, text, truth = simulate(tmp_path, recipe(), fault="hang@4")
    parsed, found = classify(text, code)
    assert code is None and found is None and [s["step"] for s in parsed["steps"]] == [1, 2, 3]
    assert truth["failure"] == "hang" and truth["exit_code"] is None
    hung = triage.classify(parsed, seconds_without_progress=1000, hang_after_s=900)
    assert hung.cls == "hang" and "after iteration 3" in hung.evidence


@pytest.mark.parametrize("change, words", [
    ([{"op": "set", "arg": "--tensor-model-parallel-size", "value": "3"}], "is not divisible by"),
    ([{"op": "set", "env": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "8"}], "CUDA_DEVICE_MAX_CONNECTIONS to 1"),
])
def test_an_illegal_layout_fails_as_megatrons_argument_validation(tmp_path, change, words):
    code, text, truth = simulate(tmp_path, recipe(change))
    parsed, found = classify(text, code)
    assert code == 1 and found.cls == "config_error" and not parsed["steps"]
    assert found.evidence.startswith("SIMULATED AssertionError: ") and words in found.evidence
    assert truth["failure"] == "config_error"


# ---------------------------------------------------------------- the correctness gate

def run_dir(tmp_path, name, made: Recipe, seed) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "recipe.yaml").write_text(made.render())
    code, text, _ = simulate(tmp_path, made, seed=seed)
    assert code == 0
    (directory / "log.txt").write_text(text)
    return directory


def test_the_gate_passes_placement_and_fails_numeric_changes(tmp_path):
    base = recipe()
    baseline, repeat = run_dir(tmp_path, "baseline", base, 1), run_dir(tmp_path, "repeat", base, 2)
    cases = {
        "bucket": ([{"op": "set", "arg": "--ddp-bucket-size", "value": "100000000"}], "pass"),  # same weights
        "tp8": ([{"op": "set", "arg": "--tensor-model-parallel-size", "value": "8"}], "pass"),  # weights re-drawn
        "softmax": ([{"op": "set", "arg": "--attention-softmax-in-fp32", "value": True}], "fail"),  # numeric
    }
    verdicts = {}
    for seed, (name, (changes, _)) in enumerate(sorted(cases.items()), 3):
        result = gate.run_gate(baseline, run_dir(tmp_path, name, base.apply(changes), seed), [repeat], rules=RULES)
        verdicts[name] = result
    for name, (_, want) in cases.items():
        assert verdicts[name]["verdict"] == want, (name, verdicts[name]["reasons"])
    assert verdicts["bucket"]["convergence"]["calibrated"]["same_init"] is True
    assert verdicts["tp8"]["convergence"]["calibrated"]["same_init"] is False
    numeric = verdicts["softmax"]
    assert not numeric["config"]["passed"] and not numeric["convergence"]["calibrated"]["passed"]
    assert numeric["convergence"]["calibrated"]["reruns"] == 1
    assert numeric["convergence"]["calibrated"]["deterministic"] is False


def test_a_deterministic_setup_reproduces_the_loss_bitwise(tmp_path):
    base = recipe([{"op": "set", "arg": "--deterministic-mode", "value": True},
                   {"op": "set", "env": "NCCL_ALGO", "value": "Ring"}])
    baseline, repeat = run_dir(tmp_path, "baseline", base, 1), run_dir(tmp_path, "repeat", base, 2)
    exact = run_dir(tmp_path, "exact", base.apply([{"op": "set", "arg": "--recompute-num-layers", "value": "2"}]), 3)
    result = gate.run_gate(baseline, exact, [repeat], rules=RULES)
    calibrated = result["convergence"]["calibrated"]
    assert calibrated["deterministic"] and calibrated["exact_required"] and calibrated["exact"]["passed"]
    assert result["verdict"] == "pass", result["reasons"]


# ---------------------------------------------------------------- a campaign on the local backend

@pytest.fixture
def sim_campaign(tmp_path):
    yield from local_campaign(tmp_path, LLAMA.read_text().format(python=sys.executable, sim=SIM), "sim-", "sim-test")


def test_a_campaign_scores_the_projected_throughput(sim_campaign, tmp_path):
    campaign, settings = sim_campaign
    rows = [runs.launch_baseline(campaign, settings) for _ in range(2)]
    assert [row["purpose"] for row in rows] == ["baseline", "repeat"] and rows[0]["gpus"] == 64
    results = []
    for row in rows:
        wait(campaign, settings, row["run"], ("succeeded",))
        results.append(runs.finalize(campaign, settings, row["run"]))
    assert all(r["status"] == "finished" and r["metrics"]["iter"] == list(range(1, 21)) for r in results)
    assert results[0]["metrics"]["loss"] != results[1]["metrics"]["loss"]  # ATTUNE_SIM_SEED=auto: two runs
    made = Recipe((campaign.run_dir(rows[0]["run"]) / "recipe.yaml").read_text())
    projected = api.project(made.args(), 64, "H100", 8)["tokens_per_s_per_gpu"]
    ranked = ranking.build(campaign.ledger.rows())
    for row in rows:
        tokens = ranked.run(row["run"]).tokens
        assert abs(math.log(tokens / projected)) < 5 * model.FIT["step_time"]["run_offset"]["log_sd"]
    assert gate.run_gate(campaign.run_dir(rows[0]["run"]), campaign.run_dir(rows[1]["run"]),
                         rules=RULES)["verdict"] == "pass"


def candidate(campaign, env):
    assert cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--env", env,
                     "--lever", "other: " + env.split("=")[0], "--hypothesis", env, "--gate-will-fail"]) == 0
    return sorted(os.listdir(campaign.dir / "runs"))[-1]


def test_faults_on_the_local_backend_are_triaged(sim_campaign):
    campaign, settings = sim_campaign
    runs.launch_baseline(campaign, settings)
    timeout, hang = candidate(campaign, "ATTUNE_SIM_FAULT=nccl_timeout"), candidate(campaign, "ATTUNE_SIM_FAULT=hang")
    for run in (timeout, hang):
        runs.launch_candidate(campaign, settings, run)
    wait(campaign, settings, timeout, ("failed",))
    failed = runs.finalize(campaign, settings, timeout)
    assert failed["status"] == "failed" and failed["failure"]["class"] == "nccl_timeout"
    assert failed["metrics"]["iter"] == [1, 2]
    wait(campaign, settings, hang, ("running",))
    time.sleep(1.0)
    hung = runs.finalize(campaign, settings, hang, hang_after_s=0.5)
    assert hung["status"] == "timeout" and hung["failure"]["class"] == "hang"
    assert runs.poll(campaign, settings, hang).state == "torn_down"


def test_a_run_is_its_recipe_and_seed_not_the_hosts_plumbing(tmp_path):
    # library paths and the visible GPUs come from whatever shell launched the run: the same recipe and seed print
    # the same run with or without them; a training variable the recipe sets is another run
    made = recipe()
    _, plain, _ = simulate(tmp_path, made, seed=3)
    _, plumbed, _ = simulate(tmp_path, made, seed=3, env={"LD_LIBRARY_PATH": "/opt/x", "PYTHONPATH": "/opt/y",
                                                          "CUDA_VISIBLE_DEVICES": "0,1"})
    _, other, _ = simulate(tmp_path, made, seed=3, env={"NCCL_ALGO": "Ring"})
    assert plain == plumbed
    assert plain != other
