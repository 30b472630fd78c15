"""Real Megatron-LM in the loop: its own pretrain_gpt.py, through the cpu pod hook, on the local backend.

Megatron-LM's source comes from ATTUNE_MEGATRON_DIR (a checkout) or, unpacked into the cache, from
ATTUNE_MEGATRON_ARCHIVE or the corpus's megatron-lm/ archive (ATTUNE_CORPUS_DIR, default ../shared/data); it is
never copied into this repository. Without any of them these tests skip and say so. One campaign (module
scope) runs four real jobs of a smaller tiny GPT at world size 2: the baseline, its repeat, a tensor-parallel
candidate and a learning-rate candidate; each test checks one thing about them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conftest import REPO
from factory import settings as make_settings, wait

sys.path.insert(0, str(REPO / "harness"))
import megatron_cpu  # noqa: E402

from attune.campaign import ledger as campaign_mod  # noqa: E402
from attune import cli
from attune.campaign import runs  # noqa: E402
from attune.core.recipe import Recipe  # noqa: E402
from attune.correctness import gate as gate_mod  # noqa: E402

pytestmark = pytest.mark.slow
CORPUS = os.environ.get("ATTUNE_CORPUS_DIR") or str(REPO.parent / "shared" / "data")
# smaller than the shipped recipe, so that a run is start-up and about 5 s of training (vocabulary 1023 + the null
# tokenizer's end of document: 1024, padded alike under TP 1 and TP 2)
SMALLER = [{"op": "set", "arg": flag, "value": value} for flag, value in (
    ("--num-layers", "2"), ("--hidden-size", "64"), ("--ffn-hidden-size", "256"), ("--seq-length", "64"),
    ("--max-position-embeddings", "64"), ("--vocab-size", "1023"), ("--global-batch-size", "8"))]


def _megatron() -> Path:
    saved = os.environ.get("ATTUNE_CORPUS_DIR")
    os.environ["ATTUNE_CORPUS_DIR"] = CORPUS
    try:
        return megatron_cpu.find()
    except megatron_cpu.Unavailable as exc:
        pytest.skip("no Megatron-LM source for the real-Megatron tests: %s" % exc)
    finally:
        if saved is None:
            os.environ.pop("ATTUNE_CORPUS_DIR", None)
        else:
            os.environ["ATTUNE_CORPUS_DIR"] = saved


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    megatron = _megatron()
    missing = megatron_cpu.missing_packages()
    assert not missing, "the real-Megatron tests need %s: pip install -e '.[megatron]'" % " ".join(missing)
    megatron_cpu.build_helpers(megatron)
    directory = tmp_path_factory.mktemp("real")
    recipe = Recipe(megatron_cpu.recipe_text(megatron), "baseline.yaml").apply(SMALLER)
    baseline = directory / "baseline.yaml"
    baseline.write_text(recipe.render())
    settings = make_settings(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX="real-", AUTOTUNE_GPUH_BUDGET="",
                             AUTOTUNE_BUDGET="20", ATTUNE_POD_HOOKS="cpu")
    campaign = campaign_mod.init(directory / "c", settings, "real-test")
    os.environ["ATTUNE_CAMPAIGN_DIR"] = str(campaign.dir)
    launched = {}
    try:
        for name, parent, change in (("baseline", None, None), ("repeat", None, None),
                                     ("tp2", "baseline", ["tensor-model-parallel-size=2"]),
                                     ("lr", "baseline", ["lr=6e-4"])):
            if parent is None:
                row = runs.launch_baseline(campaign, settings)
            else:
                assert cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", parent, "--set",
                                 change[0], "--lever", "tensor-parallel-size" if name == "tp2" else "other:lr",
                                 "--hypothesis", name, "--force"] + (["--gate-will-fail"] if name == "lr" else [])) == 0
                run = sorted(os.listdir(campaign.dir / "runs"))[-1]
                row = runs.launch_candidate(campaign, settings, run)
            status = wait(campaign, settings, row["run"], ("succeeded", "failed", "lost"), timeout=600)
            assert status.state == "succeeded", (campaign.run_dir(row["run"]) / "log.txt").read_text()[-3000:]
            launched[name] = (row, runs.finalize(campaign, settings, row["run"]))
        yield campaign, settings, launched
    finally:
        os.environ.pop("ATTUNE_CAMPAIGN_DIR", None)
        for run_dir in (campaign.dir / "runs").glob("*"):
            try:
                runs.backends.get("local").teardown(run_dir, grace_s=1.0)
            except Exception:
                pass


def test_real_iterations_through_the_local_backend_finalize_as_a_cpu_run(real):
    campaign, _settings, launched = real
    launch, result = launched["baseline"]
    assert launch["cpu"] is True and launch["pod_hooks"] == [{"name": "cpu"}]
    assert result["status"] == "finished" and result["cpu"] is True
    assert result["metrics"]["iter"] == list(range(1, 21)) and result["metrics"]["gpus"] == 2
    assert all(ms > 0 for ms in result["metrics"]["step_ms"])
    assert any("unavailable: a CPU run" in warning for warning in result.get("warnings", []))
    log = (campaign.run_dir(launch["run"]) / "log.txt").read_text()
    assert "attune-cpu: a CPU run" in log and "iteration       20/      20" in log
    assert "--exit-interval 20" in (campaign.run_dir(launch["run"]) / "recipe.yaml").read_text()


def test_the_cpu_marking_reaches_results_md(real):
    campaign, _settings, launched = real
    assert cli.main(["rank", "--campaign", str(campaign.dir), "--no-chart"]) == 0
    text = (campaign.dir / "RESULTS.md").read_text()
    assert "**cpu**: 4 of 4 runs are a real Megatron-LM program run on a CPU" in text
    row = next(line for line in text.splitlines() if line.startswith("| %s |" % launched["baseline"][0]["run"]))
    assert " cpu |" in row and "SIMULATED" not in text


def test_tensor_parallel_2_starts_from_the_same_weights_as_tensor_parallel_1(real):
    # --use-cpu-initialization draws the full weights on the CPU whatever the TP size, and the layer keeps
    # Megatron's start-up draws for the "GPU" (sized by TP and micro-batch) off that generator: the first
    # iteration's loss, before any update, is the same model on the same data
    _campaign, _settings, launched = real
    first = [launched[name][1]["metrics"]["loss"][0] for name in ("baseline", "tp2")]
    assert abs(first[1] - first[0]) <= 1e-5 * abs(first[0]), first


def test_the_gate_passes_a_real_placement_pair_and_fails_a_real_numeric_pair(real):
    campaign, settings, launched = real
    placement = gate_mod.gate_campaign_run(campaign, settings, launched["tp2"][0]["run"])
    numeric = gate_mod.gate_campaign_run(campaign, settings, launched["lr"][0]["run"])
    assert placement["verdict"] == "pass", placement["reasons"]
    assert numeric["verdict"] == "fail"
    assert any("lr" in reason for reason in numeric["reasons"])
