"""slime's fixed-shape RL workload: its shape and modes, its runs scored per rollout from the train side's ``perf``
records (measurement.md §3.2), on real slime log text from public issue threads and on the SIMULATED workload
(simulate/sim_slime.py), whose own printed records the expected scores are computed from here."""

from __future__ import annotations

import ast
import io
import re
import statistics
import sys

import pytest
from conftest import DATA, SCRIPTS
from factory import local_campaign, wait

from attune import cli
from attune.campaign import candidates, ranking, runs
from attune.core import legality, logparse, measure, slime, workload
from attune.core.recipe import Recipe
from attune.projection import api
from attune.simulate import sim_slime
from attune.simulate.sim_megatron import megatron_args

SIM = SCRIPTS / "simulate" / "sim_slime.py"
RECIPE = SCRIPTS / "simulate" / "recipes" / "qwen3_4b_grpo_h100x8.yaml"
SLIME_LOGS = DATA / "logs" / "D_slime"
FROZEN = ["--load-debug-rollout-data", "/shared/rollouts/qwen3_4b_{rollout_id}.pt"]


def recipe(extra=()) -> Recipe:
    made = Recipe(RECIPE.read_text().format(python=sys.executable, sim=SIM), str(RECIPE))
    return made.apply([{"op": "set", "arg": flag, "value": value} for flag, value in zip(extra[::2], extra[1::2])])


def argv(made: Recipe) -> list:
    command = made.command
    return [word.value for word in command.words[command.program_index + 1:command.args_end]]


def simulate(made: Recipe, seed="7", fault=None):
    out = io.StringIO()
    env = dict(made.env(), ATTUNE_SIM_SPEED="0", ATTUNE_RUN_ID=seed, **({"ATTUNE_SIM_FAULT": fault} if fault else {}))
    code = sim_slime.run(argv(made), env, out, api.project, api.ConfigError)
    return code, out.getvalue()


def printed_perf(text: str, side: str) -> dict:
    """``{rollout id: dict}`` of the ``perf N:`` records of one side, read straight from the printed lines."""
    found = {}
    for line in text.splitlines():
        match = re.search(r" - perf (\d+): (\{.*\})$", line)
        if match:
            data = ast.literal_eval(match.group(2))
            if ("perf/actor_train_time" in data) == (side == "train"):
                found[int(match.group(1))] = data
    return found


# ---------------------------------------------------------------- the shape

@pytest.mark.parametrize("args, expected", [
    ({"--actor-num-gpus-per-node": "8", "--colocate": True}, ("whole_loop", 8, 8)),
    ({"--actor-num-nodes": "2", "--actor-num-gpus-per-node": "8", "--rollout-num-gpus": "8"}, ("whole_loop", 16, 24)),
    ({"--actor-num-gpus-per-node": "4", "--colocate": True, "--rollout-num-gpus": "8"}, ("whole_loop", 4, 8)),
    ({"--actor-num-gpus-per-node": "8", "--rollout-num-gpus": "8", "--load-debug-rollout-data": "/d/{rollout_id}.pt"},
     ("train_only", 8, 8)),
    ({"--actor-num-gpus-per-node": "8", "--debug-train-only": True}, ("train_only", 8, 8)),
])
def test_the_mode_and_the_placement_group_follow_slimes_rules(args, expected):
    shape = slime.shape_of(args)
    assert (shape.mode, shape.actor_gpus, shape.placement_gpus) == expected


def test_a_recipe_is_slimes_by_its_program_or_its_own_arguments():
    assert slime.is_slime("train.py", {}) and slime.is_slime("/root/slime/train_async.py", {})
    assert slime.is_slime("sim_slime.py", {"--rollout-batch-size": "32"})
    assert not slime.is_slime("pretrain_gpt.py", {"--micro-batch-size": "1"})


def test_a_shape_change_is_refused_and_a_layout_change_is_not():
    base = recipe()
    for flag, value in (("--rollout-batch-size", "64"), ("--n-samples-per-prompt", "4"),
                        ("--num-steps-per-rollout", "1"), ("--rollout-max-response-len", "4096"),
                        ("--num-rollout", "9")):
        problems = workload.compare(base, recipe((flag, value)))
        assert len(problems) == 1 and problems[0].startswith(flag), problems
    assert workload.compare(base, recipe(("--tensor-model-parallel-size", "4"))) == []
    mode = workload.compare(base, recipe(FROZEN))
    assert any("keeps its baseline's mode" in problem for problem in mode) and any("--load-debug" in p for p in mode)
    assert workload.enforce(base).render() == base.render()  # slime's own loop: no Megatron benchmark flags


def test_a_misspelled_flag_in_a_slime_candidate_is_refused_naming_the_real_one(tmp_path, capsys):
    made = recipe()
    baseline = tmp_path / "baseline.yaml"
    baseline.write_text(made.render())
    from factory import settings
    from attune.campaign import ledger
    campaign = ledger.init(tmp_path / "c", settings(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX="rl-"), "rl")
    for flag, real in (("tensor-model-paralel-size=4", "--tensor-model-parallel-size"),
                       ("rollout-num-gpu-per-engine=4", "--rollout-num-gpus-per-engine")):
        code = cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--set", flag,
                         "--lever", "other: %s" % real, "--hypothesis", "h"])
        err = capsys.readouterr().err
        assert code == 1 and "looks like a misspelling of %s" % real in err, err
    code = cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--set",
                     "frobnicate-everything", "--lever", "other: x", "--hypothesis", "h"])
    assert code == 1 and "slime would ignore it, silently" in capsys.readouterr().err
    assert not (campaign.dir / "runs").exists() or not list((campaign.dir / "runs").iterdir())
    assert legality.check(made.args(), made.env(), 8, "h100", known=frozenset()) != []  # the list is what is known


def test_slimes_own_start_up_asserts_are_refused_before_launch():
    made = recipe(("--use-dynamic-batch-size", True))
    found = [v.rule for v in legality.check(made.args(), made.env(), 8, "h100", trusted=recipe().args())]
    assert found == ["dynamic-batch-size"]
    made = recipe(("--balance-by-flops", True))
    found = [v.rule for v in legality.check(made.args(), made.env(), 8, "h100", trusted=recipe().args())]
    assert found == ["balance-by-flops"]
    short = recipe(("--num-rollout", "2"))  # the benchmark's length: the first rollout is warm-up
    assert [v.rule for v in legality.check(short.args(), short.env(), 8, "h100", trusted=recipe().args())] == [
        "benchmark-rollouts"]
    packed = recipe(("--use-dynamic-batch-size", True, "--max-tokens-per-gpu", "9216", "--balance-by-flops", True))
    assert legality.check(packed.args(), packed.env(), 8, "h100", trusted=recipe().args()) == []


def test_the_planners_space_offers_slimes_levers_first_and_only_where_they_act():
    from attune.planner import space
    whole = space.space(recipe().render())
    assert [lever.id for lever in whole[:4]] == ["dynamic-batch-size", "rollout-engine-tp", "sglang-mem-fraction",
                                                "slime-offload"]
    offload = next(lever for lever in whole if lever.id == "slime-offload")
    assert [alt.name for alt in offload.alternatives] == ["offload-train=off",
                                                          "offload-train=off,sglang-mem-fraction-static=0.6"]
    frozen = {lever.id for lever in space.space(recipe(FROZEN).render())}
    assert "dynamic-batch-size" in frozen and not frozen & {"rollout-engine-tp", "sglang-mem-fraction",
                                                             "slime-offload"}  # no rollout is generated
    frozen_packed = space.space(recipe(FROZEN + ["--use-dynamic-batch-size", True, "--max-tokens-per-gpu",
                                                 "4608"]).render())
    assert "log-probs-max-tokens" not in {lever.id for lever in frozen_packed}  # its time is not in the score
    assert space.project_recipe(recipe().render()) is None  # the projection times no RL step
    assert "log-probs-max-tokens" not in {lever.id for lever in whole}  # no packing to give a budget of its own
    packed = space.space(recipe(["--use-dynamic-batch-size", True, "--max-tokens-per-gpu", "4608",
                                 "--sglang-disable-cuda-graph", True]).render())
    by_id = {lever.id: [alt.name for alt in lever.alternatives] for lever in packed}
    assert by_id["log-probs-max-tokens"] == ["log-probs-max-tokens-per-gpu=9216", "log-probs-max-tokens-per-gpu=18432"]
    assert by_id["rollout-engine-tp"][0] == "sglang-cuda-graph=on"


def test_a_colocated_actor_pays_its_offload_unless_it_stays_resident_beside_a_smaller_sglang_share():
    """Colocated, each rollout puts the actor's state to sleep and wakes it (slime's ``perf/sleep_time`` and
    ``perf/wake_up_time``, inside the wait); ``--no-offload-train`` keeps it on the GPU, which shortens the step
    when SGLang's share fits beside it and fails SGLang at start-up when it does not. SIMULATED."""
    offloaded = printed_perf(simulate(recipe())[1], "train")
    code, text = simulate(recipe(["--no-offload-train", True]))
    resident = printed_perf(text, "train")
    assert code == 0 and all(offloaded[rid]["perf/sleep_time"] > 2.0 for rid in offloaded)
    for rid in offloaded:
        assert "perf/sleep_time" not in resident[rid]
        assert resident[rid]["perf/step_time"] < offloaded[rid]["perf/step_time"]
    code, text = simulate(recipe(["--no-offload-train", True, "--sglang-mem-fraction-static", "0.85"]))
    assert code == 1 and "Not enough memory" in text


def test_the_log_prob_passes_pack_to_their_own_budget():
    """The forward-only log-prob passes, timed on the train side (``perf/log_probs_time``, inside the whole loop's
    step time), pack to ``--log-probs-max-tokens-per-gpu`` where it is set: a larger budget, fewer and fuller
    micro-batches; the training itself is untouched. SIMULATED."""
    packed = ["--use-dynamic-batch-size", True, "--max-tokens-per-gpu", "4608"]
    own = printed_perf(simulate(recipe(packed))[1], "train")
    larger = printed_perf(simulate(recipe(packed + ["--log-probs-max-tokens-per-gpu", "18432"]))[1], "train")
    for rid in own:
        assert larger[rid]["perf/log_probs_time"] < own[rid]["perf/log_probs_time"]
        assert larger[rid]["perf/actor_train_time"] == own[rid]["perf/actor_train_time"]
        assert larger[rid]["perf/step_time"] < own[rid]["perf/step_time"]


# ---------------------------------------------------------------- real slime text

def test_the_rollout_sides_perf_record_is_told_apart_by_its_keys_on_real_text():
    """A real RolloutManager ``perf 0:`` line (a public issue thread; tests/data/logs/SOURCES.md) and a real
    ``rollout 0:`` line: the first is the rollout side's, neither is the train side's."""
    parsed = logparse.parse_file(SLIME_LOGS / "tau2_monitor_slime_rollout_perf.log", complete=True)
    records = {(r["line_type"], r["ray_actor"]): r for r in parsed["perf"]}
    perf = records[("perf", "RolloutManager")]
    assert slime.perf_side(perf["data"]) == "rollout"
    assert perf["data"]["perf/tokens_per_gpu_per_sec"] == pytest.approx(177.57723916502007)
    assert slime.perf_side(records[("rollout", "MegatronTrainRayActor")]["data"]) is None
    metrics, warnings = slime.metrics_columns(parsed, slime.shape_of({"--colocate": True}))
    assert metrics["iter"] == [] and "0 rollout(s) logged" in warnings[-1]
    assert not measure.score_run("finished", metrics).rankable


def test_real_step_lines_under_a_ray_prefix_give_the_loss_of_their_rollout():
    """Real ``step N:`` lines under ``(MegatronTrainRayActor pid=...)`` (THUDM/slime#1136), with a train side
    ``perf`` record of the SIMULATED format added after them for rollout 0: the rollout's loss is its last step's."""
    text = (SLIME_LOGS / "slime1136_step_rayprefix.log").read_text()
    steps = [r for r in logparse.parse_lines(text.splitlines(keepends=True))["perf"] if r["line_type"] == "step"]
    assert steps and all(r["ray_actor"] == "MegatronTrainRayActor" for r in steps)
    extra = "(MegatronTrainRayActor pid=1) [2026-01-01 00:00:00] train_metric_utils.py:44 - perf 0: %r\n" % {
        "perf/actor_train_time": 2.0, "perf/actor_train_tok_per_s": 1000.0, "perf/step_time": 4.0}
    parsed = logparse.parse_lines((text + extra).splitlines(keepends=True))
    metrics, _ = slime.metrics_columns(parsed, slime.shape_of({"--load-debug-rollout-data": "/d"}))
    assert metrics["iter"] == [0] and metrics["tokens"] == [2000] and metrics["step_ms"] == [2000.0]
    last = max(steps, key=lambda r: r["index"])["data"]
    assert metrics["loss"] == [last.get("train/loss", last.get("train/pg_loss"))]


# ---------------------------------------------------------------- the SIMULATED workload, scored

@pytest.mark.parametrize("frozen", [False, True], ids=["whole_loop", "train_only"])
def test_a_simulated_run_scores_by_the_formula_on_its_printed_records(frozen):
    made = recipe(FROZEN if frozen else ())
    assert legality.check(made.args(), made.env(), made.gpus(), "h100", known=candidates.known_flags(made)) == []
    code, text = simulate(made)
    assert code == 0 and all(line.startswith("SIMULATED") for line in text.splitlines())
    shape = slime.shape_of(megatron_args(argv(made)))
    metrics, warnings = slime.metrics_columns(logparse.parse_lines(text.splitlines(keepends=True)), shape)
    assert warnings == [] and metrics["slime_mode"] == ("train_only" if frozen else "whole_loop")
    train = printed_perf(text, "train")
    assert sorted(train) == list(range(5)) == metrics["iter"] and metrics["window"] == [1, 4]
    rates = []
    for rid in range(1, 5):  # the window: every rollout but the first
        data = train[rid]
        tokens = round(data["perf/actor_train_tok_per_s"] * data["perf/actor_train_time"])
        seconds = data["perf/actor_train_time"] if frozen else data["perf/step_time"]
        rates.append(tokens / (seconds * 8))  # the actor's 8 GPUs; colocated, the placement group's are the same
    score = measure.score_run("finished", metrics)
    assert score.rankable and score.tokens_per_s_per_gpu == pytest.approx(statistics.median(rates), rel=1e-9)
    if frozen:
        assert "rollout_tokens_per_gpu_per_s" not in metrics and printed_perf(text, "rollout") == {}
    else:  # the rollout side's throughput, beside the score
        rollout = printed_perf(text, "rollout")
        assert metrics["rollout_tokens_per_gpu_per_s"] == [rollout[rid]["perf/tokens_per_gpu_per_sec"]
                                                           for rid in range(5)]


def test_a_frozen_dump_trains_the_same_tokens_for_every_candidate():
    layouts = [recipe(FROZEN), recipe(FROZEN + ["--tensor-model-parallel-size", "4"]),
               recipe(FROZEN + ["--use-dynamic-batch-size", True])]
    tokens = []
    for made in layouts:
        code, text = simulate(made, seed="other-run")
        assert code == 0
        metrics, _ = slime.metrics_columns(logparse.parse_lines(text.splitlines(keepends=True)),
                                           slime.shape_of(made.args()))
        tokens.append(metrics["tokens"])
    assert tokens[0] == tokens[1] == tokens[2]


def test_attune_metrics_tells_the_two_perf_records_apart(tmp_path, capsys):
    _code, text = simulate(recipe())
    log = tmp_path / "log.txt"
    log.write_text(text)
    assert cli.main(["metrics", str(log)]) == 0
    out = capsys.readouterr().out
    assert "slime: perf_rollout 5, perf_train 5, step 10\n" in out
    train = printed_perf(text, "train")
    assert "slime_rollout 3: actor_train_time %s s, actor_train_tok_per_s %s, step_time %s s" % (
        train[3]["perf/actor_train_time"], train[3]["perf/actor_train_tok_per_s"], train[3]["perf/step_time"]) in out


def test_too_few_rollouts_are_not_rankable():
    made = recipe(("--num-rollout", "2"))
    _code, text = simulate(made)
    metrics, warnings = slime.metrics_columns(logparse.parse_lines(text.splitlines(keepends=True)),
                                              slime.shape_of(made.args()))
    score = measure.score_run("finished", metrics)
    assert not score.rankable and "at least 2 rollouts after the first" in score.why
    assert "a score needs at least 3" in warnings[-1]


@pytest.mark.parametrize("fault, needle", [("sglang_oom", "Not enough memory. Please try to increase"),
                                           ("actor_died@2", "ActorDiedError: The actor died unexpectedly")])
def test_the_simulated_faults_print_what_slime_prints(fault, needle):
    code, text = simulate(recipe(), fault=fault)
    assert code == 1 and needle in text


# ---------------------------------------------------------------- the gate on frozen rollouts

def run_dir(tmp_path, name, made, seed, fault=None):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "recipe.yaml").write_text(made.render())
    code, text = simulate(made, seed=seed, fault=fault)
    assert code == 0
    (folder / "log.txt").write_text(text)
    return folder


@pytest.mark.parametrize("change, verdict", [((), "pass"), (("--lr", "3e-6"), "fail"),
                                             (("--eps-clip", "0.28"), "fail")])
def test_the_gate_compares_the_loss_of_every_step_on_frozen_rollouts(tmp_path, change, verdict):
    """slime's per-step train/loss is the gate's curve (every logged step by default) and reruns of the baseline
    calibrate it: another run of the baseline's recipe passes, a change of the math (the learning rate, slime's
    own clipping) fails, on the SIMULATED workload's loss-noise model."""
    from attune.correctness import gate
    base = recipe(FROZEN)
    baseline = run_dir(tmp_path, "base", base, "b1")
    repeats = [run_dir(tmp_path, "rep%d" % n, base, "b%d" % (n + 2)) for n in range(2)]
    candidate = run_dir(tmp_path, "cand", recipe(FROZEN + list(change)), "c1")
    result = gate.run_gate(baseline, candidate, repeats)
    assert result["convergence"]["steps"] == [1, 10]  # 5 rollouts x 2 steps
    assert result["verdict"] == verdict, result["reasons"]
    if change:
        classes = [item["class"] for item in result["config"]["changes"] if item["name"] == change[0]]
        assert len(classes) == 1 and classes[0] in ("numeric", "fixed"), result["config"]["changes"]


def test_a_gradient_scaled_where_the_loss_cannot_show_it_fails_on_the_gradient_norm(tmp_path):
    """The gradient norm is the second curve: gradients reduced with a sum where an average belongs leave an Adam
    loss where it was (the loss check passes) and double the norm, which the baseline's reruns never show."""
    from attune.correctness import gate
    base = recipe(FROZEN)
    baseline = run_dir(tmp_path, "base", base, "b1")
    repeats = [run_dir(tmp_path, "rep%d" % n, base, "b%d" % (n + 2)) for n in range(2)]
    healthy = gate.run_gate(baseline, run_dir(tmp_path, "ok", base, "c1"), repeats)
    assert healthy["verdict"] == "pass", healthy["reasons"]
    grad = healthy["convergence"]["grad_norm"]
    assert grad["passed"] is True and grad["reruns"] == 2 and 0 < grad["value"] <= grad["threshold"]
    scaled = gate.run_gate(baseline, run_dir(tmp_path, "bad", base, "c1", fault="grad_scale"), repeats)
    assert scaled["convergence"]["calibrated"]["passed"] is True  # the loss cannot tell
    assert scaled["verdict"] == "fail" and scaled["convergence"]["grad_norm"]["passed"] is False
    assert any("gradient norm differs from the baseline's by 100" in reason for reason in scaled["reasons"])
    assert "grad_norm: 100" in gate.text(scaled)


def test_without_a_rerun_the_gradient_norm_is_reported_not_judged(tmp_path):
    from attune.correctness import gate
    base = recipe(FROZEN)
    result = gate.run_gate(run_dir(tmp_path, "base", base, "b1"), run_dir(tmp_path, "bad", base, "c1",
                                                                           fault="grad_scale"))
    grad = result["convergence"]["grad_norm"]
    assert grad["passed"] is None and grad["threshold"] is None and grad["value"] == pytest.approx(1.0, rel=0.05)
    assert any("gradient norm not judged: no rerun" in warning for warning in result["warnings"])
    assert gate._summary(result)["grad_norm"] == {"value": grad["value"], "passed": None}


def test_a_whole_loop_run_is_gated_only_on_its_train_only_replay(tmp_path):
    from attune.core.errors import InputError
    from attune.correctness import gate
    base = recipe()
    baseline, candidate = run_dir(tmp_path, "base", base, "b1"), run_dir(tmp_path, "cand", base, "c1")
    with pytest.raises(InputError, match="gate its train-only replay"):
        gate.run_gate(baseline, candidate)


def test_a_placement_group_never_satisfied_waits_as_slime_does():
    class Hung(Exception):
        pass
    waits = []

    def sleep(seconds):
        waits.append(seconds)
        if len(waits) == 3:
            raise Hung
    made, out = recipe(), io.StringIO()
    with pytest.raises(Hung):
        sim_slime.run(argv(made), dict(made.env(), ATTUNE_SIM_FAULT="placement"), out, api.project, api.ConfigError,
                      sleep=sleep)
    lines = [line for line in out.getvalue().splitlines() if "Waiting for placement group of 8 GPUs" in line]
    assert len(lines) == 3 and "(elapsed 60s)" in lines[2] and "GPUs registered with Ray" in lines[0]


# ---------------------------------------------------------------- a campaign on the local backend

@pytest.fixture
def slime_campaign(tmp_path):
    yield from local_campaign(tmp_path, recipe(FROZEN).render(), "rl-", "rl-test")


def test_finalize_scores_a_simulated_slime_run_on_the_local_backend(slime_campaign):
    campaign, settings = slime_campaign
    row = runs.launch_baseline(campaign, settings)
    assert row["simulated"] is True and row["gpus"] == 8
    wait(campaign, settings, row["run"], ("succeeded",))
    result = runs.finalize(campaign, settings, row["run"])
    assert result["status"] == "finished" and result["metrics"]["slime_mode"] == "train_only"
    view = ranking.build(campaign.ledger.rows()).run(row["run"])
    assert view.score.rankable and view.tokens > 0
    assert cli.main(["verify", "--replay", "--campaign", str(campaign.dir)]) == 0  # the row derives again


def test_finalize_json_answers_the_score_the_charge_and_its_warnings(slime_campaign, capsys):
    """``finalize --json`` carries the run's score as ranking reads it, what it was charged and ``warnings`` (a
    list, empty when there are none), beside the ledger row."""
    import json
    campaign, settings = slime_campaign
    row = runs.launch_baseline(campaign, settings)
    wait(campaign, settings, row["run"], ("succeeded",))
    capsys.readouterr()
    assert cli.main(["finalize", row["run"], "--campaign", str(campaign.dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    view = ranking.build(campaign.ledger.rows()).run(row["run"])
    assert data["result"]["status"] == "finished" and data["result"]["warnings"] == []
    assert data["score"]["rankable"] and data["score"]["tokens_per_s_per_gpu"] == view.tokens
    assert data["score"]["simulated"] is True and data["score"]["step_time_s"] > 0
    charged = sum(r["gpu_seconds"] for r in campaign.gpu_log.rows() if r.get("run") == row["run"])
    assert data["charge"]["gpu_seconds"] == charged > 0 and data["charge"]["gpu_hours"] == charged / 3600.0
    assert cli.main(["finalize", row["run"], "--campaign", str(campaign.dir)]) == 0
    assert "tokens_per_s_per_gpu: %.1f" % view.tokens in capsys.readouterr().out


def test_a_profile_of_the_simulated_workload_is_refused_before_it_spends_anything(slime_campaign, capsys):
    """The SIMULATED workload runs no torch.profiler: ``launch --profile-of`` (or a ``profiler`` pod hook) on it is
    refused before a launch row is written or a run id used, naming where the bottleneck can be read instead."""
    campaign, settings = slime_campaign
    base = runs.launch_baseline(campaign, settings)["run"]
    before = campaign.ledger.rows()
    capsys.readouterr()
    assert cli.main(["launch", "--campaign", str(campaign.dir), "--profile-of", base]) == 1
    err = capsys.readouterr().err
    assert "runs the SIMULATED workload (sim_slime.py), which runs no torch.profiler" in err and "attune project" in err
    assert campaign.ledger.rows() == before
    assert sorted(path.name for path in (campaign.dir / "runs").iterdir()) == [base]


def test_a_placement_group_never_satisfied_is_torn_down_as_unschedulable(slime_campaign):
    """slime's driver waits for ever, printing its wait every 30 s: those lines are not progress, so past the hang
    limit the run is torn down and triaged unschedulable, the wait its evidence."""
    import time
    campaign, settings = slime_campaign
    runs.launch_baseline(campaign, settings)
    assert cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--env",
                     "ATTUNE_SIM_FAULT=placement", "--lever", "other: ATTUNE_SIM_FAULT", "--hypothesis", "h",
                     "--gate-will-fail"]) == 0
    run = sorted(path.name for path in (campaign.dir / "runs").iterdir())[-1]
    runs.launch_candidate(campaign, settings, run)
    wait(campaign, settings, run, ("running",))
    deadline, row = time.time() + 60, None
    while row is None and time.time() < deadline:
        row = runs.finalize(campaign, settings, run, hang_after_s=1.5)
        time.sleep(0.3)
    assert row is not None and row["status"] == "failed", row
    assert row["failure"]["class"] == "unschedulable"
    assert "Waiting for placement group of 8 GPUs" in row["failure"]["evidence"]
