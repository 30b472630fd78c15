"""``project(args, gpus, hardware)``: the throughput and memory of a Megatron-LM training job, from its
command-line arguments, in well under a second on a CPU.

    >>> from projection.api import project
    >>> out = project({"--num-layers": "32", "--hidden-size": "4096", "--num-attention-heads": "32",
    ...                "--seq-length": "4096", "--micro-batch-size": "1", "--global-batch-size": "256",
    ...                "--vocab-size": "128256", "--bf16": True}, gpus=8, hardware="H100")
    >>> sorted(out)[:3]
    ['gpus', 'gpus_per_node', 'hardware']

The efficiencies come from ``params.json`` (written by ``python -m attune.projection.calibrate``); a GPU
family without published rows uses the cross-GPU values and says so in ``warnings``.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from attune.core.errors import InputError

from . import config, hardware as hw, memory, model, timing
from .config import ConfigError

PARAMS = Path(__file__).resolve().parent / "params.json"
# Physically plausible starting points, used when params.json is absent and as the fit's priors. attn_s0 (tokens):
# FlashAttention-3's forward without a causal mask loses about 200 keys' worth of work per query tile (model.py);
# the causal mask's diagonal tile and the backward add to it.
PRIOR = {"gemm_bf16": 1 / 0.7, "gemm_lp": 1 / 0.55, "expert": 1.0, "gemm_bytes": 1.0, "attn": 1 / 0.5, "elem": 1.0,
         "launch": 2e-4, "moe": 3e-4, "comm": 1 / 0.7, "a2a": 1 / 0.7,
         "a2a_nccl": 1 / 0.7, "moe_elem": 1.0, "attn_s0": 500.0, "step0": 0.03,
         "sink": 1.0, "trend": 1.0}

__all__ = ["ConfigError", "project", "theta_for"]


@functools.lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> Optional[dict]:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None


def load_params(path: Path = PARAMS) -> Optional[dict]:
    """The fitted parameters file, or None when it does not exist."""
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return None
    return _load(str(path), mtime)


def theta_for(gpu: hw.GPU, params: Optional[dict]) -> tuple:
    """(theta by name, description for the result, warnings) for a GPU's calibration family."""
    warnings = []
    if params is None:
        theta, calibrated = dict(PRIOR), False
        warnings.append("no params.json: projected with prior efficiencies (run python -m attune.projection.calibrate)")
    elif gpu.family in params.get("families", {}):
        theta, calibrated = dict(params["families"][gpu.family]), True
    else:
        theta, calibrated = dict(params["global"]), False
        warnings.append("no usable published measurement for %s: its efficiencies are the cross-GPU fit, "
                        "uncalibrated for this GPU" % gpu.name)
    info = {"family": gpu.family, "calibrated": calibrated,
            "gemm_bf16_efficiency": 1 / theta["gemm_bf16"], "gemm_lowp_efficiency": 1 / theta["gemm_lp"],
            "grouped_gemm_relative_efficiency": 1 / theta["expert"], "gemm_bytes_efficiency": 1 / theta["gemm_bytes"],
            "attention_efficiency": 1 / theta["attn"],
            "elementwise_efficiency": 1 / theta["elem"], "moe_elementwise_efficiency": 1 / theta["moe_elem"],
            "comm_efficiency": 1 / theta["comm"],
            "all_to_all_efficiency": 1 / theta["a2a"],
            "nccl_all_to_all_nvlink_efficiency": 1 / theta["a2a_nccl"],
            "attention_overhead_tokens": theta["attn_s0"],
            "host_s_per_layer": theta["launch"], "moe_s_per_layer": theta["moe"],
            "iteration_overhead_s": theta["step0"], "sink_attention_blackwell_factor": theta["sink"],
            "kernel_time_per_year_older": theta["trend"],
            # the software the projection is for: the newest release among the published rows
            "software_reference": (params or {}).get("software_reference")}
    if params is not None:
        info["fit_date"] = params.get("fit_date")
        info["loo_median_abs_error_pct"] = params.get("loo", {}).get("median_abs_pct")
    return theta, info, warnings


def screen(args: Mapping, gpus: int, hardware: str, gpus_per_node: Optional[int] = None) -> tuple:
    """``(job, memory, gpu, gpus_per_node)`` of a Megatron-LM job, before any timing: what ``project`` checks
    first (a ``ConfigError`` for an illegal job or a precision the GPU lacks), and what a sweep asks of every
    layout before it times the ones that fit all at once."""
    gpu = hw.get(hardware)
    if gpus_per_node is None:
        gpus_per_node = gpu.gpus_per_node
    if not isinstance(gpus_per_node, int) or isinstance(gpus_per_node, bool) or gpus_per_node <= 0:
        raise ConfigError("gpus-per-node: must be a positive integer, not %r" % (gpus_per_node,))
    job = config.parse(args, gpus, gpu.name, gpus_per_node)
    mem = memory.memory(job, gpu)
    try:
        gpu.peak(job.precision)
    except InputError as error:
        raise ConfigError("precision: %s" % error)
    return job, mem, gpu, gpus_per_node


def project(args: Mapping, gpus: int, hardware: str, gpus_per_node: Optional[int] = None) -> dict:
    """Project one step of a Megatron-LM job (see the package README for the model)."""
    job, mem, gpu, gpus_per_node = screen(args, gpus, hardware, gpus_per_node)
    peak = gpu.peak(job.precision)
    warnings = list(job.warnings)
    theta, info, more = theta_for(gpu, load_params())
    warnings += more
    if job.precision == "fp4":
        warnings.append("FP4 GEMMs use the FP8 efficiency: no usable published FP4 row calibrates them")
    if not mem["fits"]:
        warnings.append("does not fit: %.1f GiB needed on pipeline rank %d, %.1f GiB usable of %.0f GiB HBM"
                        % (mem["total_gib"], mem["rank"], mem["usable_gib"], gpu.hbm_gib))
    F = timing.stack([timing.features(job, gpu, gpus_per_node)])
    out = timing.step_time(F, {name: np.array([value]) for name, value in theta.items()})
    step = float(out["step"][0])
    tokens_per_s = job.gbs * job.seq / step / gpus
    tflops = model.model_flops(job) / step / gpus / 1e12
    scalar = lambda a: float(a[0])  # noqa: E731
    comm = {kind: scalar(value) for kind, value in out["comm"].items()}
    return {
        "hardware": gpu.name, "gpus": gpus, "gpus_per_node": gpus_per_node,
        "layout": {"tp": job.tp, "pp": job.pp, "vp": job.vp, "cp": job.cp, "ep": job.ep, "etp": job.etp,
                   "dp": job.dp, "sp": job.sp, "microbatches": job.microbatches},
        "memory": {key: mem[key] for key in ("total_gib", "hbm_gib", "usable_gib", "fits", "margin_gib",
                                             "breakdown_gib")},
        "time": {"step_s": step, "compute_s": scalar(out["compute"]), "comm_s": comm,
                 "exposed_comm_s": scalar(out["exposed_mb"]) + scalar(out["exposed_dp"]),
                 "exposed_s": {kind: scalar(value) for kind, value in out["exposed"].items()},
                 "bubble_s": scalar(out["bubble"]), "iteration_s": scalar(out["iteration"]),
                 "parts_s": {key: scalar(value) for key, value in out["parts"].items()}},
        "tokens_per_s_per_gpu": tokens_per_s,
        "model_tflops_per_gpu": tflops,
        "mfu": tflops * 1e12 / peak if math.isfinite(tflops) else float("nan"),
        "params": info,
        "warnings": warnings,
    }


def text(out: dict, path) -> str:
    """A projection (``project``) of the recipe at ``path`` as ``attune project`` prints it: layout, memory per GPU
    against HBM with its breakdown, step time and its parts, tokens/s/GPU, TFLOP/s, MFU and the warnings."""
    mem, time_ = out["memory"], out["time"]
    layout = " ".join("%s=%s" % item for item in out["layout"].items())
    lines = ["recipe: %s" % path, "hardware: %s x %d (%d per node)" % (out["hardware"], out["gpus"], out["gpus_per_node"]),
             "layout: %s" % layout,
             "memory: %.1f GiB of %.1f GiB usable (%.0f GiB HBM): %s" % (
                 mem["total_gib"], mem["usable_gib"], mem["hbm_gib"], "fits" if mem["fits"] else "DOES NOT FIT"),
             "memory_breakdown_gib: %s" % ", ".join("%s %.2f" % item for item in mem["breakdown_gib"].items()),
             "step_s: %.4f (compute %.4f, exposed communication %.4f, bubble %.4f, per-iteration %.4f)" % (
                 time_["step_s"], time_["compute_s"], time_["exposed_comm_s"], time_["bubble_s"],
                 time_["iteration_s"]),
             "tokens_per_s_per_gpu: %.1f" % out["tokens_per_s_per_gpu"],
             "model_tflops_per_gpu: %.1f" % out["model_tflops_per_gpu"], "mfu: %.3f" % out["mfu"],
             "calibrated: %s" % out["params"].get("calibrated"),
             "software: the newest calibrated release's (%s)" % out["params"].get("software_reference")]
    lines += ["warning: %s" % warning for warning in out["warnings"]]
    return "\n".join(lines)
