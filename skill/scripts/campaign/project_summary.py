"""The summary a finished campaign leaves for later ones (``skill/past_tuning_projects/README.md``).

``attune report`` writes it beside ``REPORT.md`` as ``past_tuning_project.json``: the model and
cluster the campaign tuned, the baseline, the shipped recipe with its gain and noise band, every
lever kept and rejected with its runs as evidence, and the GPU-hours spent. Every number comes from
the ledger through the same ranking as ``REPORT.md``; runs on the simulated workload are marked.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from attune.core import slime

from .ranking import gain_dict

SUMMARY = "past_tuning_project.json"
SCHEMA_VERSION = 1
MODEL_ARGS = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--num-experts",
              "--global-batch-size", "--micro-batch-size", "--tensor-model-parallel-size",
              "--pipeline-model-parallel-size", "--context-parallel-size", "--expert-model-parallel-size",
              # a slime recipe's RL shape (core/slime.py)
              "--rollout-batch-size", "--n-samples-per-prompt", "--num-steps-per-rollout", "--rollout-max-response-len",
              "--num-rollout", "--actor-num-gpus-per-node", "--actor-num-nodes", "--colocate")


def _model(recipe_file):
    """The baseline recipe's model and layout arguments, as written; {} when it cannot be read."""
    from attune.core.errors import InputError
    from attune.core.recipe import Recipe

    try:
        recipe = Recipe(Path(recipe_file).read_text(encoding="utf-8"), str(recipe_file))
        args = recipe.args()
    except (OSError, InputError):
        return {}
    model = {flag: args[flag] for flag in MODEL_ARGS if flag in args}
    if slime.is_slime(recipe.command.program, args):
        model["slime_mode"] = slime.shape_of(args).mode
    return model


def _lever(ranking, recipe) -> dict:
    first = recipe.first
    parent = ranking.recipe_of(first.parent)
    return {"run": first.run, "lever": first.lever, "change": first.change, "hypothesis": first.hypothesis,
            "evidence_runs": [run.run for run in recipe.runs], "tokens_per_s_per_gpu": recipe.score,
            "vs_parent": ranking.relative(recipe.score, parent),
            "gain_vs_parent": gain_dict(ranking.compare(recipe, parent)) if parent else None, "gate": recipe.gate,
            "status": ranking.run_status(first), "simulated": recipe.simulated,
            "cpu": recipe.cpu}


def build(snapshot, shipped: bool) -> dict:
    ranking = snapshot.ranking
    base, lead = ranking.baseline, ranking.leader
    kept = ranking.lineage(lead)[1:] if lead is not None else []
    kept_shas = {recipe.sha for recipe in ranking.lineage(lead)} if lead is not None else set()
    rejected = sorted((r for r in ranking.recipes.values() if r.sha not in kept_shas),
                      key=lambda r: (r.first.launch_ts, r.first.run))
    base_file = snapshot.campaign.run_dir(base.first.run) / "recipe.yaml" if base else None
    return {
        "schema_version": SCHEMA_VERSION,
        "campaign": snapshot.campaign.id,
        "written_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": _model(base_file) if base_file else {},
        "cluster": {"backend": snapshot.settings.backend, "gpus": base.first.gpus if base else None},
        "baseline": {"run": base.first.run, "tokens_per_s_per_gpu": base.score} if base else None,
        "shipped": ({"run": lead.first.run, "tokens_per_s_per_gpu": lead.score,
                     "gain_vs_baseline": ranking.relative(lead.score, base),
                     "gain": gain_dict(ranking.compare(lead, base)), "band": ranking.band}
                    if shipped and lead is not None else None),
        "kept": [_lever(ranking, recipe) for recipe in kept],
        "rejected": [_lever(ranking, recipe) for recipe in rejected if not recipe.is_baseline and not recipe.replay],
        "gpu_hours_spent": snapshot.budget.gpu_hours_spent,
        "simulated": any(run.simulated for run in ranking.runs),
        "cpu": any(run.cpu for run in ranking.runs),
    }


def render(snapshot, shipped: bool) -> bytes:
    return (json.dumps(build(snapshot, shipped), indent=2, sort_keys=True, default=str) + "\n").encode("utf-8")
