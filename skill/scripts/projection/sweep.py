"""A layout sweep (``attune project RECIPE --sweep``): every layout of the recipe's model on ``gpus`` GPUs that
Megatron-LM would accept, filtered by projected memory, ranked by projected tokens/s/GPU.

A layout is TP, PP, VP, CP, EP, ETP, the micro-batch size and the recompute variant; everything else (model,
sequence, global batch, precision, the overlap flags) stays as the recipe has it. TP runs over the divisors of
the GPUs per node (tensor parallelism stays inside the NVLink domain), PP and CP over powers of two, EP over the
divisors of the number of experts, ETP over 1 and TP, the micro-batch over 1, 2 and 4, VP from 1 to ``MAX_VP``,
recompute over none, selective (the core attention) and full (uniform, one layer), in that order, a variant
left out once a lighter one of the same layout fits (recompute only adds work to the step), and a micro-batch left
out once a smaller one of the same layout did not fit with full recompute (memory never falls as the micro-batch
grows). Where the layers (with
the embedding and loss the recipe counts in the split) do not divide by PP x VP, the stages get a hand-written
``--pipeline-model-parallel-layout`` balanced by cost the way published recipes write theirs
(``dataset.balanced_layout``: the output layer and MTP cost their share of the FLOPs, the last stage takes
fewer decoder layers), as DeepSeek-V3's 61 and Llama-3.1-405B's 126 layers need. Each candidate passes
``attune.core.legality`` and the projection's model-construction checks (the
rules ``candidate new`` applies) or is dropped; one the projection says does not fit is kept aside. The error
band shown beside every projection is the calibration's leave-one-out error on the recipe's GPU (params.json).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path
from typing import Mapping, Optional

from attune.core import legality

import numpy as np

from . import api, hardware as hw, timing

PARAMS = Path(__file__).resolve().parent / "params.json"
LAYOUT_FLAGS = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
                "--expert-model-parallel-size", "--expert-tensor-parallel-size", "--micro-batch-size",
                "--num-virtual-stages-per-pipeline-rank", "--num-layers-per-virtual-pipeline-stage",
                "--pipeline-model-parallel-layout", "--recompute-granularity", "--recompute-method",
                "--recompute-num-layers", "--recompute-modules", "--sequence-parallel")
RECOMPUTE = {"none": {}, "selective": {"--recompute-granularity": "selective", "--recompute-modules": "core_attn"},
             "full": {"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": "1"}}
MAX_VP = 8


@dataclasses.dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    vp: int
    cp: int
    ep: int
    etp: int
    mbs: int
    recompute: str
    moe: bool = False
    layout: str = ""  # a hand-written pipeline layout, where the layers do not divide by PP x VP


    def args(self, base: Mapping) -> dict:
        """``base`` with this layout's flags in place of its own."""
        out = {flag: value for flag, value in base.items() if flag not in LAYOUT_FLAGS
               and not (self.layout and flag in legality.ACCOUNT_FLAGS)}  # a layout places embedding and loss
        out.update({"--tensor-model-parallel-size": str(self.tp), "--pipeline-model-parallel-size": str(self.pp),
                    "--context-parallel-size": str(self.cp), "--micro-batch-size": str(self.mbs)})
        if self.moe:
            out["--expert-model-parallel-size"] = str(self.ep)
            out["--expert-tensor-parallel-size"] = str(self.etp)
        if self.tp > 1:
            out["--sequence-parallel"] = True
        if self.layout:
            out["--pipeline-model-parallel-layout"] = self.layout
        elif self.vp > 1:
            out["--num-virtual-stages-per-pipeline-rank"] = str(self.vp)
        out.update(RECOMPUTE[self.recompute])
        return out

    def text(self) -> str:
        experts = " EP %d ETP %d" % (self.ep, self.etp) if self.moe else ""
        return "TP %d PP %d VP %d CP %d%s MBS %d recompute %s%s" % (
            self.tp, self.pp, self.vp, self.cp, experts, self.mbs, self.recompute,
            " layout %s" % self.layout if self.layout else "")


def _divisors(n: int) -> list:
    return [d for d in range(1, n + 1) if n % d == 0]


def _int(args: Mapping, flag: str, default: int) -> int:
    value = args.get(flag)
    return int(value) if isinstance(value, str) and value.isdigit() else default


def layouts(args: Mapping, gpus: int, gpus_per_node: int):
    """Every layout to try, before any check."""
    layers = _int(args, "--num-layers", 0)
    split = layers + sum(1 for flag in legality.ACCOUNT_FLAGS if args.get(flag) is True)
    experts = _int(args, "--num-experts", 0)
    powers = [2 ** k for k in range(0, 8) if 2 ** k <= gpus]
    balanced = {}
    for tp, pp, cp in itertools.product(_divisors(gpus_per_node), powers, (1, 2, 4, 8)):
        if gpus % (tp * pp * cp):
            continue
        stages = [(1, "")] if pp == 1 else []
        for vp in range(1, MAX_VP + 1) if pp > 1 else ():
            if vp > 1 and pp <= 2 or pp * vp > layers:  # interleaving needs PP > 2 (legality); a layer per stage
                continue
            if split % (pp * vp) == 0:
                stages.append((vp, ""))
            else:
                if (pp, vp) not in balanced:
                    balanced[pp, vp] = _balanced(args, layers, pp, vp)
                if balanced[pp, vp]:
                    stages.append((vp, balanced[pp, vp]))
        eps = [e for e in _divisors(experts) if e <= gpus] if experts else [1]
        for (vp, layout), ep, mbs, recompute in itertools.product(stages, eps, (1, 2, 4), RECOMPUTE):
            for etp in sorted({1, tp}) if experts else [tp]:
                yield Layout(tp, pp, vp, cp, ep, etp, mbs, recompute, moe=bool(experts), layout=layout)


def _balanced(args: Mapping, layers: int, pp: int, vp: int) -> str:
    """The cost-balanced layout of ``layers`` over PP x VP stages ('' where the model cannot be probed)."""
    from . import dataset
    probe = {flag: value for flag, value in args.items() if flag not in legality.ACCOUNT_FLAGS}
    try:
        return dataset.balanced_layout(probe, layers, pp, vp)
    except api.ConfigError:
        return ""


def error_band(hardware: str, kind: str = "dense", path: Path = PARAMS) -> tuple:
    """``(fraction, what it is)``: the calibration's leave-one-out median error for this GPU and kind of model
    (``dense`` or ``moe``) where the GPU has rows of that kind, else for the kind on every GPU (MoE is projected
    about three times less closely than dense models, whatever the GPU), else for the GPU; ``(None, why)`` when the
    GPU has no rows."""
    loo = json.loads(path.read_text(encoding="utf-8")).get("loo", {})
    name = hw.get(hardware).name
    by_gpu = (loo.get("by_gpu") or {}).get(name)
    if by_gpu is None:
        return None, "unknown: no calibration rows on this GPU"
    cell = ((loo.get("by_gpu_kind") or {}).get(name) or {}).get(kind)
    if cell is not None:
        return cell / 100.0, "the calibration's leave-one-out median for %s models on this GPU" % kind
    every = (loo.get("by_kind") or {}).get(kind)
    if every is not None:
        return every / 100.0, "the calibration's leave-one-out median for %s models (too few on this GPU)" % kind
    return by_gpu / 100.0, "the calibration's leave-one-out median on this GPU"


def sweep(args: Mapping, gpus: int, hardware: str, gpus_per_node: Optional[int] = None, top: int = 10) -> dict:
    """The sweep's result: ``{"tried", "legal", "fit", "best": [...], "error_band", "error_band_source", "hardware",
    "gpus"}``, ``best``
    the ``top`` layouts that fit, fastest first, each ``{"layout", "tokens_per_s_per_gpu", "memory_gib",
    "usable_gib", "step_s", "mfu"}``."""
    gpu = hw.get(hardware)
    per_node = gpus_per_node or gpu.gpus_per_node
    tried = legal = 0
    fit = []
    fitted = set()  # layouts (all but the recompute) that fit with less recompute: more only slows the step
    # the smallest micro-batch at which a layout (all but the micro-batch and the recompute) did not fit even with
    # full recompute: memory never falls as the micro-batch grows (activations grow with it, and the micro-batches
    # in flight times its size never shrink), so no larger one fits either
    too_big = {}
    for layout in layouts(args, gpus, per_node):
        tried += 1
        if dataclasses.replace(layout, recompute="") in fitted:
            continue
        shape = dataclasses.replace(layout, mbs=0, recompute="")
        if layout.mbs >= too_big.get(shape, layout.mbs + 1):
            continue
        candidate = layout.args(args)
        if [v for v in legality.check(candidate, {}, gpus, gpu.name, trusted=candidate) if v.rule not in
                ("misspelled-flag", "no-such-flag", "cuda-device-max-connections")]:
            continue
        try:
            job, mem, _gpu, _per_node = api.screen(candidate, gpus, gpu.name, per_node)
        except api.ConfigError:
            continue
        legal += 1
        if mem["fits"]:  # timed below, all at once
            fit.append((layout, candidate, job, timing.features(job, gpu, per_node)))
            fitted.add(dataclasses.replace(layout, recompute=""))
        elif layout.recompute == "full":
            too_big[shape] = min(layout.mbs, too_big.get(shape, layout.mbs))
    ranked = []
    if fit:  # the step time of every layout that fits in one vectorised call, as project times one
        theta, _info, _warnings = api.theta_for(gpu, api.load_params())
        steps = timing.step_time(timing.stack([item[3] for item in fit]),
                                 {name: np.full(len(fit), value) for name, value in theta.items()})["step"]
        ranked = sorted(((job.gbs * job.seq / float(step) / gpus, layout, candidate)
                         for (layout, candidate, job, _f), step in zip(fit, steps)),
                        key=lambda item: (-item[0], item[1].text()))
    best = []
    for _rate, layout, candidate in ranked[:top]:  # the shown ones projected whole, as `attune project` does
        out = api.project(candidate, gpus, gpu.name, per_node)
        best.append({"layout": dataclasses.asdict(layout), "text": layout.text(),
                     "tokens_per_s_per_gpu": out["tokens_per_s_per_gpu"], "memory_gib": out["memory"]["total_gib"],
                     "usable_gib": out["memory"]["usable_gib"], "step_s": out["time"]["step_s"], "mfu": out["mfu"]})
    kind = "moe" if _int(args, "--num-experts", 0) > 0 else "dense"
    band, band_source = error_band(gpu.name, kind)
    return {"tried": tried, "legal": legal, "fit": len(fit), "best": best, "error_band": band,
            "error_band_source": band_source, "hardware": gpu.name, "gpus": gpus}


def text(result: dict) -> str:
    """A sweep as ``attune project --sweep`` prints it."""
    band = result["error_band"]
    lines = ["hardware: %s x %d" % (result["hardware"], result["gpus"]),
             "layouts: %d tried, %d legal, %d fit" % (result["tried"], result["legal"], result["fit"]),
             "error_band: %s" % ("+-%.1f%% (%s)" % (band * 100, result["error_band_source"])
                                 if band is not None else result["error_band_source"])]
    for rank, item in enumerate(result["best"], 1):
        lines.append("%d: %s: %.1f tokens/s/GPU, memory %.1f of %.1f GiB, step %.3f s, MFU %.3f" % (
            rank, item["text"], item["tokens_per_s_per_gpu"], item["memory_gib"], item["usable_gib"],
            item["step_s"], item["mfu"]))
    return "\n".join(lines)
