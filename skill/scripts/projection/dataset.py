"""The published measurements (``data/published_throughput.csv``, see ``data/SOURCES.md``) as
projection inputs: which rows are usable, and each usable row as Megatron-LM arguments.

A row is **usable** when it passes every rule below, in order; the first rule it fails is its
exclusion reason (``python -m attune.projection.calibrate --excluded`` lists them):

1. ``stack``: the run used Megatron-Core (Megatron-LM, Megatron-Bridge, NeMo); torchtitan and NeMo
   AutoModel rows are PyTorch FSDP2/DTensor stacks with other kernels and schedules.
2. ``workload``: pre-training only; SFT and LoRA rows pack sequences or skip weight gradients.
3. ``hybrid``: hybrid Mamba/linear-attention models are not modelled (no Mamba layer).
4. ``shape``: the model shape is given (layers, hidden, heads).
5. ``nvfp4``: NVFP4 recipes keep an unpublished share of the GEMMs (first/last layers, attention,
   some gradients) in higher precision, so there is no peak to scale from.
6. ``precision``: the precision is stated (the 25.09 Bridge table has no precision column).
7. ``layout``: TP and PP are given separately (the 2021 A100 table gives only their product; the
   MFU/HFU table gives no layout).
8. ``fsdp``: Megatron-FSDP (ZeRO-3) runs; the model covers DDP with the distributed optimizer.
9. ``optimizer``: Adam; rows whose source says another optimizer (Kimi-K2's Muon) are left out.
10. ``batch``: the global batch is stated (it sets the number of micro-batches and DP syncs per token).
11. ``superseded``: the same configuration (model, GPU, GPU count, precision recipe, TP/PP/CP/EP/VP,
    MBS, GBS, sequence, recompute) re-published by a later release of the same table is kept once, the
    latest: the model describes one software state, and the earlier rows measure older software on
    identical inputs (they would otherwise count one configuration several times, and a row's
    near-twin would stay in the fit when that row is left out).

Documented assumptions for usable rows (the sources do not state them):

* Bridge and NeMo perf runs reduce gradients in bf16 (``--grad-reduce-in-bf16``: Megatron-Bridge's
  ``perf_recipes/_common.py::_benchmark_common`` sets ``grad_reduce_in_fp32 = False`` at 067f987d,
  NeMo's performance scripts do the same); DeepSeek-V3 rows use the precision-aware optimizer with
  bf16 moments (``perf_recipes/deepseek/common.py``). Megatron-LM rows keep fp32 gradients.
* Megatron-Bridge perf runs use Transformer Engine's fused cross-entropy (``--cross-entropy-loss-fusion
  --cross-entropy-fusion-impl te``): ``GPTModelProvider`` turns the fusion on by default and the performance
  scripts' ``helpers.py`` / ``overrides.py`` set ``cross_entropy_fusion_impl = "te"`` at every release commit
  named in ``published_settings.csv`` (7af9601c to 51885cf1).
* The loss's implementation (``timing.LOSS_BYTES``): NeMo 2.0 (containers from 24.09) fuses it, Megatron's native
  fused cross-entropy (``GPTConfig.cross_entropy_loss_fusion = True`` at NeMo v2.0 to v2.4; only its LoRA recipes
  turn it off); NeMo 1 (24.03, 24.07) never sets Megatron-Core's ``cross_entropy_loss_fusion`` (default False) and
  Megatron-LM's weak-scaling rows are taken with Megatron-LM's default: both run the unfused loss.
* Bridge/NeMo/Megatron-LM perf runs use the distributed optimizer with ``--overlap-grad-reduce`` and
  ``--overlap-param-gather`` (Megatron-Bridge's performance defaults; the Megatron-LM weak-scaling
  README states DP/TP/PP overlap), sequence parallelism and ``--tp-comm-overlap`` when TP > 1, and
  the pipeline's sends and receives overlapped with virtual pipelining (Megatron-LM's default). MoE
  rows use ETP 1 unless stated and the flex (DeepEP/HybridEP) dispatcher (the 26.08 recipes name
  HybridEP).
* No recompute unless the row (26.08 recipe flags) states it; no dropout except GPT-3-style models
  (Megatron's default 0.1).
* An uneven pipeline (layers not divisible by PP x VP, DeepSeek-V3's 61 layers) gets a layout
  balanced by cost (``_layout``): the last stage, which holds the output layer (and MTP), takes
  fewer decoder layers, as the published recipes' hand-written layouts do.
* ``mlm_h100_weak_scaling``: precision BF16 (the printed MFU is TFLOP/s over 989, the H100 BF16
  peak), FFN 4h with GeLU (Megatron's GPT default; the table gives neither), MBS 1.
* ``nemo_2504_longseq_b200``: GPUs = TP x PP x CP x DP (its "# of GPUs" cell is flagged wrong; the
  earlier revision in ``notes`` agrees), MBS 1.
* ``gbs_mbs_swapped_in_source`` (NeMo Mixtral 8x22B): GBS and MBS swapped back (GBS 64, MBS 1).
* Rows without tokens/s are converted from their TFLOP/s with their source's FLOP convention
  (``model.model_flops``): causal for Megatron-Bridge, full score matrix for NeMo and the 2024
  Megatron-LM table (checked on the rows that print both: ratio 1.000 within 0.2%).
* Shape fields the table lacks come from the models' public HF ``config.json`` (``SUPPLEMENT``).
"""

from __future__ import annotations

import csv
import dataclasses
import re
from pathlib import Path
from typing import Optional

from . import config, hardware as hw, model

CSV = Path(__file__).resolve().parent / "data" / "published_throughput.csv"
SETTINGS = CSV.parent / "published_settings.csv"  # what each row's recipe set beyond the table, with its source

_MLA = {"--multi-latent-attention": True, "--q-lora-rank": "1536", "--kv-lora-rank": "512", "--qk-head-dim": "128",
        "--qk-pos-emb-head-dim": "64", "--v-head-dim": "128"}
# From each model's public HF config.json (head_dim, MLA ranks, dense-layer prefix, shared experts,
# MTP depth, sliding windows, GPT-OSS's attention sinks: Megatron-Bridge's GPT-OSS bridge sets softmax_type
# "learnable"), and NeMo's Nemotron-3 22B config (vocabulary 256,000; the table's
# own TFLOP/s-per-token ratio agrees with it to 1%).
SUPPLEMENT = {
    "qwen3_30b_a3b": {"--kv-channels": "128"},
    "qwen3_235b_a22b": {"--kv-channels": "128"},
    "gpt_oss_120b": {"--kv-channels": "64", "--window-size": "(128, 0)", "--window-attn-skip-freq": "2",
                     "--softmax-type": "learnable"},
    "deepseek_v3": dict(_MLA, **{"--moe-layer-freq": "[0]*3+[1]*58", "--moe-shared-expert-intermediate-size": "2048",
                                 "--mtp-num-layers": "1", "--position-embedding-type": "rope",
                                 "--use-precision-aware-optimizer": True,
                                 "--exp-avg-dtype": "bf16", "--exp-avg-sq-dtype": "bf16"}),
    "kimi_k2": dict(_MLA, **{"--moe-layer-freq": "[0]*1+[1]*60", "--moe-shared-expert-intermediate-size": "2048"}),
    # NeMo's Llama4Config: top-1 routing with a sigmoid score (moe_router_score_function "sigmoid")
    "llama4_scout": {"--moe-shared-expert-intermediate-size": "8192", "--moe-router-score-function": "sigmoid"},
    "nemotron3_22b": {"--vocab-size": "256000"},
}
NOT_GATED = ("gpt3_", "mlm_gpt_", "nemotron4_", "nemotron3_")  # GeLU / squared-ReLU MLPs
TIED = ("gpt3_", "mlm_gpt_")
NON_CAUSAL_SOURCES = ("nemo_", "mlm_h100_weak_scaling")
NEMO_2 = 2024 + 8 / 12.0  # NeMo containers from 24.09 run NeMo 2.0 (its GPTConfig, not NeMo 1's YAML model config)


@dataclasses.dataclass(frozen=True)
class Row:
    row_id: str
    source_id: str
    model: str
    gpu: str
    gpus: int
    precision: str
    args: dict
    tokens_per_s_per_gpu: float  # measured, or converted from TFLOP/s (see ``converted``)
    converted: bool
    assumed: tuple  # assumptions beyond the module-wide ones
    software: float  # when the software ran, in years (2025.83 = November 2025): see ``software_year``


def _num(text: str) -> Optional[float]:
    text = (text or "").strip().rstrip("%")
    try:
        return float(text)
    except ValueError:
        return None


def _seq(text: str) -> Optional[int]:
    text = (text or "").strip()
    if text.upper().endswith("K"):
        return int(text[:-1]) * 1024
    return int(text) if text.isdigit() else None


def _size(text: str, default: int = 1) -> int:
    value = _num(text)
    return int(value) if value else default


def exclusion(row: dict) -> Optional[str]:
    """The first usability rule a CSV row fails (module docstring), or None when it is usable."""
    framework = row["framework"]
    if not any(name in framework for name in ("Megatron", "NeMo (Megatron-Core)", "NeMo 2.0")):
        return "stack"
    if row["workload"] != "pretrain":
        return "workload"
    if "mamba" in row["model_type"].lower() or "hybrid" in row["model_type"].lower():
        return "hybrid"
    if not all(row[key].strip() for key in ("num_layers", "hidden_size", "num_attention_heads")):
        return "shape"
    if row["precision"] == "NVFP4":
        return "nvfp4"
    if not row["precision"] and row["source_id"] != "mlm_h100_weak_scaling":
        return "precision"
    if "tp_pp_not_split" in row["quality_flags"] or "config_missing" in row["quality_flags"] or not row["tp"]:
        return "layout"
    if (row["fsdp"].strip() not in ("", "0", "no", "-", "n/a")):
        return "fsdp"
    if "muon" in row["notes"].lower():
        return "optimizer"
    if not row["gbs"].strip():
        return "batch"
    if _num(row["tokens_per_s_per_gpu"]) is None and _num(row["model_tflops_per_gpu"]) is None:
        return "measurement"
    return None


def _recompute(text: str) -> dict:
    """Recompute flags from a row's ``recompute`` cell (Bridge recipe assignments), else none."""
    if "granularity=\"selective\"" in text or "granularity='selective'" in text:
        modules = re.search(r"recompute_modules=\[([^\]]*)\]", text)
        names = re.findall(r"\w+", modules.group(1)) if modules else ["core_attn"]
        if not names:  # an explicitly empty module list recomputes nothing
            return {}
        return {"--recompute-granularity": "selective", "--recompute-modules": " ".join(names)}
    if "granularity=\"full\"" in text:
        return {"--recompute-granularity": "full", "--recompute-method": "uniform", "--recompute-num-layers": "1"}
    return {}


def balanced_layout(args: dict, layers: int, pp: int, vp: int) -> str:
    """A cost-balanced layout (``config.even_layout``) for a model whose layers do not divide by
    PP x VP: the output layer's cost in decoder layers is its share of the model FLOPs per token
    (doubled in low-precision runs, where it stays bf16)."""
    mtp = int(args.get("--mtp-num-layers", 0))
    probe = dict(args, **{"--pipeline-model-parallel-size": "1", "--tensor-model-parallel-size": "1",
                          "--context-parallel-size": "1", "--expert-model-parallel-size": "1",
                          "--sequence-parallel": None, "--tp-comm-overlap": None})
    probe = {k: v for k, v in probe.items() if v is not None}
    job = config.parse(probe, 1, "H100", 8)
    per_token = model.model_flops(job) / (job.gbs * job.seq)
    head = 6.0 * job.hidden * job.vocab
    layer = (per_token - head * (1 + mtp)) / (layers + mtp)
    loss = head / layer * (2 if "--fp8-format" in args else 1)
    return config.even_layout(layers, pp, vp, mtp, loss, 1 + loss)


def to_row(row: dict) -> Row:
    """A usable CSV row as Megatron arguments, GPU count and measured tokens/s/GPU."""
    key, source = row["model_key"], row["source_id"]
    software = software_year(row)
    assumed = []
    layers, hidden, heads = int(row["num_layers"]), int(row["hidden_size"]), int(row["num_attention_heads"])
    seq = _seq(row["seq_len"])
    gbs, mbs = _size(row["gbs"], 0), _size(row["mbs"], 0)
    if "gbs_mbs_swapped_in_source" in row["quality_flags"]:
        gbs, mbs = mbs, gbs
        assumed.append("GBS/MBS swapped back")
    if not mbs:
        mbs = 1
        assumed.append("MBS 1")
    tp, pp, cp = _size(row["tp"]), _size(row["pp"]), _size(row["cp"])
    ep, vp = _size(row["ep"]), _size(row["vp"])
    gpus = int(row["num_gpus"]) if row["num_gpus"].strip() else 0
    if "num_gpus_inconsistent" in row["quality_flags"]:
        gpus = tp * pp * cp * _size(row["dp"])
        assumed.append("GPUs = TPxPPxCPxDP")
    args = {"--num-layers": str(layers), "--hidden-size": str(hidden), "--num-attention-heads": str(heads),
            "--seq-length": str(seq), "--max-position-embeddings": str(seq), "--micro-batch-size": str(mbs),
            "--global-batch-size": str(gbs), "--tensor-model-parallel-size": str(tp),
            "--pipeline-model-parallel-size": str(pp), "--context-parallel-size": str(cp),
            "--use-distributed-optimizer": True, "--overlap-grad-reduce": True, "--overlap-param-gather": True}
    if not source.startswith("mlm_"):
        args["--grad-reduce-in-bf16"] = True
    if source.startswith("mbridge_"):
        args.update({"--cross-entropy-loss-fusion": True, "--cross-entropy-fusion-impl": "te"})
    elif row["framework"].startswith("NeMo") and software >= NEMO_2:
        args["--cross-entropy-loss-fusion"] = True  # NeMo 2.0's GPTConfig: Megatron's native fused loss
    if row["ffn_hidden_size"].strip():
        args["--ffn-hidden-size"] = row["ffn_hidden_size"].strip()
    elif not row["num_experts"].strip():
        args["--ffn-hidden-size"] = str(4 * hidden)
        assumed.append("FFN 4h")
    kv = row["num_kv_heads"].strip()
    if kv and int(kv) != heads:
        args.update({"--group-query-attention": True, "--num-query-groups": kv})
    if row["vocab_size"].strip():
        args["--vocab-size"] = row["vocab_size"].strip()
    elif key.startswith(TIED):
        args["--vocab-size"] = str(config.DEFAULT_VOCAB)
        assumed.append("vocab GPT-2 BPE")
    if not key.startswith(NOT_GATED):
        args["--swiglu"] = True
    if not key.startswith(TIED):
        args["--untie-embeddings-and-output-weights"] = True
        args.update({"--hidden-dropout": "0", "--attention-dropout": "0"})
    if row["num_experts"].strip():
        args.update({"--num-experts": row["num_experts"].strip(), "--moe-router-topk": row["moe_topk"].strip(),
                     "--moe-ffn-hidden-size": row["moe_ffn_hidden_size"].strip(),
                     "--expert-model-parallel-size": str(ep), "--expert-tensor-parallel-size": str(_size(row["etp"])),
                     "--moe-token-dispatcher-type": "flex", "--moe-grouped-gemm": True})
        if "--ffn-hidden-size" not in args:
            args["--ffn-hidden-size"] = row["moe_ffn_hidden_size"].strip()
    args.update(SUPPLEMENT.get(key, {}))
    if tp > 1:
        args.update({"--sequence-parallel": True, "--tp-comm-overlap": True})
    precision = row["precision"] or "BF16"
    if not row["precision"]:
        assumed.append("BF16 (from the printed MFU)")
    args["--bf16"] = True
    if precision in ("FP8", "FP8-CS"):
        args.update({"--fp8-format": "hybrid", "--fp8-recipe": "tensorwise"})
    elif precision in ("MXFP8", "FP8-MX"):
        args.update({"--fp8-format": "e4m3", "--fp8-recipe": "mxfp8"})
    args.update(_recompute(row["recompute"]))
    if layers % (pp * vp):
        args["--pipeline-model-parallel-layout"] = balanced_layout(args, layers, pp, vp)
    elif vp > 1:
        args["--num-layers-per-virtual-pipeline-stage"] = str(layers // (pp * vp))
    tokens = _num(row["tokens_per_s_per_gpu"])
    converted = tokens is None
    if converted:
        job = config.parse(args, gpus, hw.get(row["gpu_type"]).name, hw.get(row["gpu_type"]).gpus_per_node)
        causal = not source.startswith(NON_CAUSAL_SOURCES)
        tokens = _num(row["model_tflops_per_gpu"]) * 1e12 * gbs * seq / model.model_flops(job, causal)
    return Row(row["row_id"], source, key, hw.get(row["gpu_type"]).name, gpus, precision, args, tokens, converted,
               tuple(assumed), software)


def software_year(row: dict) -> float:
    """When a row's software was built, in years: the container's YY.MM (``NeMo container 25.11`` is November
    2025), else the table's date (``2024-07-15``: Megatron-Core r0.8.0's README)."""
    match = re.search(r"\b(\d\d)\.(\d\d)\b", row.get("source_version") or "")
    if match:
        return 2000 + int(match.group(1)) + (int(match.group(2)) - 1) / 12.0
    match = re.match(r"(\d{4})-(\d\d)", (row.get("source_date") or "").strip())
    if match:
        return int(match.group(1)) + (int(match.group(2)) - 1) / 12.0
    raise ValueError("row %s: no container version or date to date its software" % row.get("row_id"))


def config_key(row: Row) -> tuple:
    """What makes two rows the same configuration (rule ``superseded``)."""
    names = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
             "--expert-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
             "--pipeline-model-parallel-layout", "--micro-batch-size", "--global-batch-size", "--seq-length",
             "--fp8-recipe", "--recompute-granularity", "--recompute-modules")
    return (row.model, row.gpu, row.gpus) + tuple(row.args.get(name) for name in names)


def settings(path: Path = SETTINGS) -> dict:
    """``{row_id: (flags to set, flags to unset, source)}``: what the recipe behind a published row set beyond its
    table's columns (recompute, optimizer state dtypes, the pipeline split), read from that recipe at its release
    (``data/published_settings.csv``, each line with the repository, commit and file it came from)."""
    out = {}
    if not path.is_file():
        return out
    with open(path, "r", encoding="utf-8", newline="") as handle:
        for line in csv.DictReader(handle):
            words = line["flags"].split()
            flags, name = {}, None
            for word in words:
                if word.startswith("--"):
                    name = word
                    flags[name] = True
                elif name is not None:
                    flags[name] = word if flags[name] is True else flags[name] + " " + word
            out[line["row_id"]] = (flags, tuple(line["unset"].split()), line["source"])
    return out


def _restaged(args: dict, before: dict) -> dict:
    """``args`` whose pipeline split the recipe's settings removed, over the virtual stages the table's layout had
    (``before``): balanced again when the layers do not divide by PP x VP and the recipe neither writes a layout nor
    counts the embedding and loss in the split; when it counts them, the table's virtual stages as Megatron's
    ``--virtual-pipeline-model-parallel-size`` (the removed layout was what carried them)."""
    if "--pipeline-model-parallel-layout" in args:
        return args
    layers, pp = int(args["--num-layers"]), int(args["--pipeline-model-parallel-size"])
    per_stage = args.get("--num-layers-per-virtual-pipeline-stage")
    old = before.get("--pipeline-model-parallel-layout")
    vp = layers // (pp * int(per_stage)) if per_stage else (str(old).count("|") + 1) // pp if old else 1
    if any(args.get(flag) is True for flag in ("--account-for-embedding-in-pipeline-split",
                                               "--account-for-loss-in-pipeline-split")):
        if old and vp > 1 and not per_stage:
            args = dict(args, **{"--virtual-pipeline-model-parallel-size": str(vp)})
        return args
    if layers % (pp * vp):
        args = dict(args, **{"--pipeline-model-parallel-layout": balanced_layout(args, layers, pp, vp)})
    return args


def load(path: Path = CSV, superseded: bool = False) -> tuple:
    """(usable rows as ``Row`` in file order, {row_id: (rule, model, gpu, source)} for the others).
    ``superseded=True`` keeps the rows rule 11 would drop (for the all-releases comparison)."""
    usable, excluded, dates = [], {}, {}
    known = settings(path.parent / SETTINGS.name)
    with open(path, "r", encoding="utf-8", newline="") as handle:
        for raw in csv.DictReader(handle):
            reason = exclusion(raw)
            if reason:
                excluded[raw["row_id"]] = (reason, raw["model_key"], raw["gpu_type"], raw["source_id"])
            else:
                usable.append(to_row(raw))
                dates[raw["row_id"]] = (raw["source_date"] or "", raw["source_id"])
    latest = {}
    for row in usable:
        key = config_key(row)
        if key not in latest or dates[row.row_id] > dates[latest[key].row_id]:
            latest[key] = row
    kept = []
    for row in usable:  # which release of a configuration is kept is decided on the table's own columns
        if not (superseded or latest[config_key(row)] is row):
            excluded[row.row_id] = ("superseded", row.model, row.gpu, row.source_id)
        elif row.row_id in known:  # then what its recipe set beyond them is applied
            flags, unset, _source = known[row.row_id]
            args = {k: v for k, v in row.args.items() if k not in unset}
            args.update(flags)
            kept.append(dataclasses.replace(row, args=_restaged(args, row.args)))
        else:
            kept.append(row)
    return kept, excluded
