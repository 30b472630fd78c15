"""The demo campaign (``launch_campaign.sh --demo [DIR]``): a whole campaign on this machine, SIMULATED.

It lays out ``DIR`` (without one, the launcher makes a new temporary directory and prints it) with
a baseline recipe that runs the simulated Megatron-LM workload (``skill/scripts/simulate/``) in
place of ``pretrain_gpt.py`` and a ``config.env`` for the local backend, the planner agent and a
budget in simulated GPU-hours; the launcher then runs the campaign as it runs any other. Nothing
here needs a cluster, a GPU or an API key, and every number the campaign produces is SIMULATED.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIMULATE = REPO / "skill" / "scripts" / "simulate"
MODELS = {
    # name: (recipe template, GPU-hour budget, what it is)
    "llama3-70b": ("llama3_70b_h100x64.yaml", 200.0, "Llama-3.1-70B pretraining on 64 simulated H100s"),
    "qwen3-30b-a3b": ("qwen3_30b_a3b_h100x16.yaml", 60.0, "Qwen3-30B-A3B (MoE) pretraining on 16 simulated H100s"),
    "qwen3-4b-grpo": ("qwen3_4b_grpo_h100x8.yaml", 4.0,
                      "slime GRPO of Qwen3-4B on 8 simulated H100s, train-only on frozen rollouts"),
    "qwen3-4b-grpo-loop": ("qwen3_4b_grpo_h100x8.yaml", 24.0,
                           "slime GRPO of Qwen3-4B on 8 simulated H100s, the whole loop (rollout and training), "
                           "gated on train-only replays"),
}
# the programs that stand in for the stack's: slime's train.py for a slime recipe, else Megatron-LM's pretrain_gpt.py
SLIME_DEMOS = ("qwen3-4b-grpo", "qwen3-4b-grpo-loop")
WHOLE_LOOP_DEMOS = ("qwen3-4b-grpo-loop",)
FROZEN_ROLLOUTS = "/shared/rollouts/qwen3_4b_{rollout_id}.pt"  # a key for the simulator: no dump is read


def _existing_config(directory: Path, flag: str):
    """The config.env of a demo campaign already in ``directory`` (the launcher resumes it), None for a new or
    empty directory; any other non-empty directory is refused, so a demo never writes into someone's files."""
    config = directory / "config.env"
    if (directory / "ledger.jsonl").exists() and config.is_file():
        return config
    if directory.exists() and any(directory.iterdir()):
        raise ValueError("%s exists and is not an ATTUNE demo campaign. Fix: give a new directory, or none "
                         "(launch_campaign.sh %s makes a new temporary one)" % (directory, flag))
    return None


def prepare(directory: Path, model: str = "llama3-70b", budget_gpuh: float = None, in_flight: int = None) -> Path:
    """Write the demo's baseline recipe and config.env into ``directory``; return the config file.

    A directory that holds a campaign already is left as it is (the launcher resumes it); any other
    non-empty directory is refused, so the demo never writes into someone's files."""
    if model not in MODELS:
        raise ValueError("--demo-model %s: unknown; known: %s" % (model, ", ".join(MODELS)))
    template, budget, what = MODELS[model]
    directory = Path(directory).resolve()
    config = _existing_config(directory, "--demo")
    if config is not None:
        return config
    config = directory / "config.env"
    directory.mkdir(parents=True, exist_ok=True)
    baseline = directory / "baseline.yaml"
    text = (SIMULATE / "recipes" / template).read_text(encoding="utf-8")
    program = SIMULATE / ("sim_slime.py" if model in SLIME_DEMOS else "sim_megatron.py")
    text = text.format(python=sys.executable, sim=program)
    if model in WHOLE_LOOP_DEMOS:  # the whole loop saves its rollouts, which the gate's replays train on: each run
        # into its own working folder (a relative path), the one place a confined local run writes
        text = text.replace("--num-rollout 5 ", "--num-rollout 5 --save-debug-rollout-data %s "
                            % "saved-rollouts/{rollout_id}.pt", 1)
    elif model in SLIME_DEMOS:  # train-only: every candidate trains on the same (frozen) rollouts
        text = text.replace("--num-rollout 5 ", "--num-rollout 5 --load-debug-rollout-data %s " % FROZEN_ROLLOUTS, 1)
    baseline.write_text(text, encoding="utf-8")
    lines = ["# The ATTUNE demo: %s. SIMULATED: no GPU is used." % what,
             "ATTUNE_RUN_PREFIX=demo-",
             "ATTUNE_BASELINE_YAML=%s" % baseline,
             "ATTUNE_BACKEND=local",
             "ATTUNE_AGENT=planner",
             "AUTOTUNE_ALLOW_WEB=0",
             "AUTOTUNE_GPUH_BUDGET=%g" % (budget_gpuh or budget)]
    if in_flight:
        lines.append("ATTUNE_MAX_IN_FLIGHT=%d" % in_flight)
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config


REAL_BUDGET_GPUH = 0.35  # rank-hours: a run of the tiny GPT holds 2 ranks for 25-40 s, so about 17 runs


def prepare_real(directory: Path, budget_gpuh: float = None) -> Path:
    """Write the real demo's baseline recipe (Megatron-LM's own pretrain_gpt.py on this CPU, ``megatron_cpu.py``)
    and config.env into ``directory``; return the config file. Raises ValueError saying what is missing."""
    import megatron_cpu

    directory = Path(directory).resolve()
    config = _existing_config(directory, "--demo-real")
    if config is not None:
        return config
    config = directory / "config.env"
    try:
        megatron = megatron_cpu.find()
        missing = megatron_cpu.missing_packages()
        if missing:
            raise megatron_cpu.Unavailable(
                "%s cannot import %s, which Megatron-LM's training loop needs. Fix: pip install -e '%s[megatron]' "
                "(torch's CPU build is enough)" % (sys.executable, " ".join(missing), REPO))
        megatron_cpu.build_helpers(megatron)
    except megatron_cpu.Unavailable as exc:
        raise ValueError(str(exc))
    directory.mkdir(parents=True, exist_ok=True)
    baseline = directory / "baseline.yaml"
    baseline.write_text(megatron_cpu.recipe_text(megatron), encoding="utf-8")
    lines = ["# The ATTUNE real demo: Megatron-LM's own pretrain_gpt.py (%s) training a tiny GPT on this host's CPU, "
             "through the cpu pod hook. Real runs, measured on a CPU, not a GPU: every run is marked cpu." % megatron,
             "ATTUNE_RUN_PREFIX=real-",
             "ATTUNE_BASELINE_YAML=%s" % baseline,
             "ATTUNE_BACKEND=local",
             "ATTUNE_AGENT=planner",
             "ATTUNE_POD_HOOKS=cpu",
             # a shared 2-core host: one slow run widens a 3-run band to 26% (seen), while the levers here move
             # tokens/s by 20% to 110% (bench/README.md): only a change beyond the band counts, however wide
             "ATTUNE_PLANNER_MAX_BAND=0.5",
             # a healthy run's processes hold 1.8 GB together (measured); --recompute-modules mlp grows without
             # end (200 MB/s a rank) and, unchecked, fills the host until the polls that would see it crawl
             "ATTUNE_LOCAL_MEMORY_MB=8000",
             "ATTUNE_HANG_AFTER_S=60",  # a run is never silent for more than a few seconds: it logs an iteration a second
             "AUTOTUNE_ALLOW_WEB=0",
             "AUTOTUNE_GPUH_BUDGET=%g" % (budget_gpuh or REAL_BUDGET_GPUH)]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return config
