"""The benchmark's workloads: one published recipe per model, written as a simulated RayJob recipe.

Selection rule (``select``), the same for every model: among the rows of
``projection/data/published_throughput.csv`` that the projection uses (``projection.dataset.load()``: the
usable, latest-release rows, as Megatron arguments with the dataset's documented assumptions), the
model's rows on its GPU, and of those the highest published tokens/s/GPU. The GPU is H100 when the model
has a usable H100 row (the GPU of the simulated templates in ``simulate/recipes/``), else B200 (the other
8-GPU-per-node family, the best calibrated: leave-one-out 4.5%). Precision is kept as published (FP8
tensorwise or MXFP8, which the projection models); no BF16 row of these models is usable (the 25.09
Bridge table states no precision).

The recipe's arguments are the row's (``projection.dataset.to_row``: shape from the public HF config,
distributed optimizer with grad/param overlap and bf16 gradient reduction, SP + TP overlap when TP > 1,
the pipeline's sends and receives overlapped with VP (Megatron-LM's default), the flex dispatcher, the
cost-balanced layout for uneven pipelines), plus the architecture flags the row does not carry (RoPE, RMSNorm,
no biases), mock data with the null tokenizer, an optimizer schedule and the fixed 20-iteration workload, as in
``simulate/recipes/llama3_70b_h100x64.yaml``. When the projection says the published recipe does not fit,
full recompute (uniform, 1 layer) is added, as the 70B template did, and ``Workload.notes`` says so.

``write()`` writes the recipes to ``bench/search/recipes/<name>.yaml`` (``{python}``/``{sim}`` left as
placeholders, like the templates); ``load(name)`` returns the recipe text with them filled.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "skill" / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from attune.core.command import quote  # noqa: E402
from attune.projection import api as proj_api, dataset  # noqa: E402

RECIPES = Path(__file__).resolve().parent / "recipes"
SIM = SCRIPTS / "simulate" / "sim_megatron.py"

# name -> (model_key in the CSV, architecture flags the row does not carry, is MoE)
MODELS = {
    "llama3_8b": ("llama3_8b", "Llama-3.1-8B", {"--position-embedding-type": "rope", "--rotary-base": "500000",
                                                "--normalization": "RMSNorm", "--disable-bias-linear": True}),
    "llama3_70b": ("llama3_70b", "Llama-3.1-70B", {"--position-embedding-type": "rope", "--rotary-base": "500000",
                                                   "--normalization": "RMSNorm", "--disable-bias-linear": True}),
    "llama31_405b": ("llama31_405b", "Llama-3.1-405B", {"--position-embedding-type": "rope", "--rotary-base": "500000",
                                                        "--normalization": "RMSNorm", "--disable-bias-linear": True}),
    "mixtral_8x22b": ("mixtral_8x22b", "Mixtral-8x22B", {"--position-embedding-type": "rope",
                                                         "--rotary-base": "1000000", "--normalization": "RMSNorm",
                                                         "--disable-bias-linear": True,
                                                         "--moe-router-load-balancing-type": "aux_loss",
                                                         "--moe-aux-loss-coeff": "1e-2"}),
    "deepseek_v3": ("deepseek_v3", "DeepSeek-V3", {"--position-embedding-type": "rope", "--normalization": "RMSNorm",
                                                   "--disable-bias-linear": True}),
}
ORDER = tuple(MODELS)
COMMON = {"--tokenizer-type": "NullTokenizer", "--mock-data": True, "--attention-backend": "flash",
          "--lr": "1.5e-4", "--min-lr": "1.5e-5", "--lr-decay-style": "cosine", "--lr-warmup-iters": "2000",
          "--lr-decay-iters": "100000", "--weight-decay": "0.1", "--adam-beta1": "0.9", "--adam-beta2": "0.95",
          "--clip-grad": "1.0", "--init-method-std": "0.008", "--seed": "1234", "--train-iters": "20",
          "--exit-interval": "20", "--log-interval": "1", "--log-throughput": True}
FULL_RECOMPUTE = {"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": "1"}
PREFERRED_GPUS = ("H100", "B200")


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    title: str
    row_id: str
    source: str
    gpu: str
    gpus: int
    precision: str
    seq: int
    gbs: int
    layout: str  # "TP4 PP8 VP5 CP1 EP1 MBS1"
    published_tokens: float
    moe: bool
    args: dict
    notes: tuple  # what was added or mapped, one line each

    @property
    def path(self) -> Path:
        return RECIPES / ("%s.yaml" % self.name)

    def describe(self) -> str:
        return ("%s: row %s (%s), %s x %d, %s, seq %d, GBS %d, %s; published %.0f tokens/s/GPU%s"
                % (self.title, self.row_id, self.source, self.gpu, self.gpus, self.precision, self.seq, self.gbs,
                   self.layout, self.published_tokens, "; " + "; ".join(self.notes) if self.notes else ""))


def _layout(args: dict) -> str:
    def get(flag, default="1"):
        return str(args.get(flag, default))
    parts = ["TP%s" % get("--tensor-model-parallel-size"), "PP%s" % get("--pipeline-model-parallel-size")]
    if "--num-layers-per-virtual-pipeline-stage" in args:
        per_stage = int(args["--num-layers"]) // int(get("--pipeline-model-parallel-size"))
        parts.append("VP%d" % (per_stage // int(args["--num-layers-per-virtual-pipeline-stage"])))
    elif "--pipeline-model-parallel-layout" in args:
        parts.append("VP by layout")
    parts.append("CP%s" % get("--context-parallel-size"))
    if "--num-experts" in args:
        parts.append("EP%s" % get("--expert-model-parallel-size"))
    parts.append("MBS%s" % get("--micro-batch-size"))
    return " ".join(parts)


def select(name: str, rows=None) -> "dataset.Row":
    """The published row of ``name`` (module docstring)."""
    key = MODELS[name][0]
    rows = rows if rows is not None else dataset.load()[0]
    mine = [row for row in rows if row.model == key]
    if not mine:
        raise LookupError("no usable published row for %s" % key)
    for gpu in PREFERRED_GPUS:
        on_gpu = [row for row in mine if row.gpu == gpu]
        if on_gpu:
            return max(on_gpu, key=lambda row: (row.tokens_per_s_per_gpu, row.row_id))
    return max(mine, key=lambda row: (row.tokens_per_s_per_gpu, row.row_id))


def build(name: str, rows=None) -> Workload:
    row = select(name, rows)
    key, title, extra = MODELS[name]
    args = dict(row.args)
    notes = list(row.assumed)
    for flag, value in extra.items():
        args.setdefault(flag, value)
    for flag, value in COMMON.items():
        args.setdefault(flag, value)
    out = proj_api.project(args, row.gpus, row.gpu)
    if not out["memory"]["fits"]:
        before = out["memory"]["total_gib"]
        args.update(FULL_RECOMPUTE)
        out = proj_api.project(args, row.gpus, row.gpu)
        notes.append("full recompute (uniform, 1 layer) added: the projection puts the published recipe at %.1f GiB "
                     "per GPU, over the %.1f GiB usable (with it: %.1f GiB)"
                     % (before, out["memory"]["usable_gib"], out["memory"]["total_gib"]))
        if not out["memory"]["fits"]:
            raise ValueError("%s does not fit even with full recompute" % name)
    return Workload(name=name, title=title, row_id=row.row_id, source=row.source_id, gpu=row.gpu, gpus=row.gpus,
                    precision=row.precision, seq=int(args["--seq-length"]), gbs=int(args["--global-batch-size"]),
                    layout=_layout(args), published_tokens=row.tokens_per_s_per_gpu,
                    moe="--num-experts" in args, args=args, notes=tuple(notes))


def _arg_lines(args: dict) -> list:
    words = []
    for flag, value in args.items():
        words.append(flag if value is True else "%s %s" % (flag, quote(str(value))))
    lines, line = [], ""
    for word in words:
        if line and len(line) + len(word) + 1 > 100:
            lines.append(line)
            line = word
        else:
            line = word if not line else line + " " + word
    if line:
        lines.append(line)
    return lines


def render(wl: Workload) -> str:
    blackwell = wl.gpu.lower() in ("b200", "b300", "gb200", "gb300")
    per_node = 8
    nodes = wl.gpus // per_node
    header = ["# SIMULATED workload for the search-efficiency benchmark (bench/search_bench.py): %s pretraining "
              "on %d %s" % (wl.title, wl.gpus, wl.gpu),
              "# (%d nodes x %d), run by simulate/sim_megatron.py in place of pretrain_gpt.py (no GPU is used)."
              % (nodes, per_node),
              "# Written by bench/search/workloads.py; fill {python} and {sim} before use, as for simulate/recipes/.",
              "#",
              "# Layout: published_throughput.csv row %s (%s), %s x %d, %s, seq %d, GBS %d, %s; published %.0f"
              % (wl.row_id, wl.source, wl.gpu, wl.gpus, wl.precision, wl.seq, wl.gbs, wl.layout, wl.published_tokens),
              "# tokens/s/GPU. Arguments as projection/dataset.py reads the row (its documented assumptions)."]
    header += ["# %s" % note for note in wl.notes]
    body = ["apiVersion: ray.io/v1", "kind: RayJob", "metadata:", "  name: bench-%s" % wl.name.replace("_", "-"),
            "spec:", "  entrypoint: |", "    {python} {sim} \\"]
    lines = _arg_lines(wl.args)
    for index, line in enumerate(lines):
        tail = "" if index == len(lines) - 1 else " \\"
        body.append("      %s%s" % (line.replace("{", "{{").replace("}", "}}"), tail))
    body += ["  runtimeEnvYAML: |", "    env_vars:"]
    if not blackwell:
        body.append('      CUDA_DEVICE_MAX_CONNECTIONS: "1"')
    body += ["      ATTUNE_SIM_HARDWARE: %s" % wl.gpu, '      ATTUNE_SIM_GPUS: "%d"' % wl.gpus,
             '      ATTUNE_SIM_GPUS_PER_NODE: "%d"' % per_node, "      ATTUNE_SIM_SEED: auto",
             "  rayClusterSpec:", "    workerGroupSpecs:", "      - groupName: gpu-workers",
             "        replicas: %d" % nodes, "        template:", "          spec:", "            containers:",
             "              - name: worker", "                resources:", "                  limits:",
             "                    nvidia.com/gpu: %d" % per_node]
    return "\n".join(header + body) + "\n"


def fill(template: str) -> str:
    return template.format(python="python3", sim=str(SIM))


def write(names=ORDER) -> list:
    RECIPES.mkdir(parents=True, exist_ok=True)
    rows = dataset.load()[0]
    out = []
    for name in names:
        wl = build(name, rows)
        wl.path.write_text(render(wl), encoding="utf-8")
        out.append(wl)
    return out


def load(name: str, rows=None) -> tuple:
    """(Workload, recipe text with the placeholders filled). The recipe file is written when missing, and
    must match what ``build`` gives now (else rerun with --write-recipes)."""
    wl = build(name, rows)
    expected = render(wl)
    if not wl.path.exists():
        RECIPES.mkdir(parents=True, exist_ok=True)
        wl.path.write_text(expected, encoding="utf-8")
    text = wl.path.read_text(encoding="utf-8")
    if text != expected:
        raise RuntimeError("%s is stale (the projection or the dataset changed): rerun with --write-recipes"
                           % wl.path)
    return wl, fill(text)


def main(argv: Optional[list] = None) -> int:
    for wl in write():
        print(wl.path, "\n   ", wl.describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
