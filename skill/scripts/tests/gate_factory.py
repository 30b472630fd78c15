"""Run directories for gate tests: a recipe from the test RayJob with changes, and a log of real-format
Megatron-LM iteration lines (megatron.md §1.1) with the given losses. SYNTHETIC curves."""

from __future__ import annotations

import math
from pathlib import Path

from conftest import DATA

from attune.core.recipe import Recipe

RECIPE = DATA / "recipes" / "megatron_rayjob.yaml"
LINE = (" [2026-11-02 10:00:%02d.000000] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration "
        "(ms): 1200.0 | learning rate: 3.000000E-04 | global batch size:   128 | lm loss: %s | loss scale: 1.0 | "
        "grad norm: 1.234 | number of skipped iterations: %3d | number of nan iterations: %3d |\n")


def curve(steps=20, start=10.9, end=7.2, wobble=0.02, seed=0) -> list:
    """A smooth falling loss with a deterministic per-step wobble shared by every run of one data order."""
    out = []
    for step in range(1, steps + 1):
        frac = (step - 1) / max(1, steps - 1)
        out.append(end + (start - end) * math.exp(-3.0 * frac) + wobble * math.sin(1.7 * step + seed))
    return out


def write_run(directory, losses, changes=(), skipped=None, nan=None, header="", gpus_per_worker=None) -> Path:
    """``losses``: one value per step from 1 (a float, or a string such as ``nan`` written as is)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    recipe = Recipe(RECIPE.read_text(encoding="utf-8")).apply(list(changes))
    if gpus_per_worker is not None:
        recipe = recipe.apply([{"op": "set", "group": "gpu-workers", "gpus_per_worker": gpus_per_worker}])
    (directory / "recipe.yaml").write_text(recipe.render(), encoding="utf-8")
    total = len(losses)
    lines = [header]
    for step, loss in enumerate(losses, 1):
        text = loss if isinstance(loss, str) else "%.6E" % loss
        lines.append(LINE % (step % 60, step, max(20, total), step * 128, text,
                             (skipped or {}).get(step, 0), (nan or {}).get(step, 0)))
    (directory / "log.txt").write_text("".join(lines), encoding="utf-8")
    return directory


def arg(name, value=True) -> dict:
    return {"op": "set", "arg": name, "value": value}


def unset(name) -> dict:
    return {"op": "unset", "arg": name}


def env(name, value) -> dict:
    return {"op": "set", "env": name, "value": value}
