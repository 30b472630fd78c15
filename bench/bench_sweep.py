#!/usr/bin/env python3
"""Benchmark the layout sweep (``attune project RECIPE --sweep``) on a DeepSeek-V3-like recipe on 1,024 H100s
(not a test: it measures). Prints the wall time, the layouts tried, legal and fitting, and the top 5.

    .venv/bin/python bench/bench_sweep.py [--gpus 1024] [--hardware H100] [--top 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "skill" / "scripts"))

import attune  # noqa: E402,F401  (attune.py loads the package from skill/scripts)
from attune.projection import sweep  # noqa: E402

# DeepSeek-V3's shape (its public config.json): 61 layers (3 dense, 58 MoE), MLA, 256 routed experts top-8 and one
# shared expert, MTP 1; sequence 4096 and global batch 8192 as the Megatron-Bridge performance summary runs it
DEEPSEEK_V3 = {
    "--num-layers": "61", "--hidden-size": "7168", "--ffn-hidden-size": "18432", "--num-attention-heads": "128",
    "--multi-latent-attention": True, "--q-lora-rank": "1536", "--kv-lora-rank": "512", "--qk-head-dim": "128",
    "--qk-pos-emb-head-dim": "64", "--v-head-dim": "128", "--num-experts": "256", "--moe-router-topk": "8",
    "--moe-ffn-hidden-size": "2048", "--moe-shared-expert-intermediate-size": "2048",
    "--moe-layer-freq": "([0]*3+[1]*58)", "--mtp-num-layers": "1", "--position-embedding-type": "rope",
    "--disable-bias-linear": True,
    "--vocab-size": "129280", "--seq-length": "4096",
    "--global-batch-size": "8192", "--micro-batch-size": "1", "--bf16": True, "--swiglu": True,
    "--use-distributed-optimizer": True, "--moe-grouped-gemm": True, "--moe-token-dispatcher-type": "alltoall",
    "--account-for-embedding-in-pipeline-split": True, "--account-for-loss-in-pipeline-split": True}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--hardware", default="H100")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--gbs", type=int, default=8192, help="global batch size (8192)")
    parser.add_argument("--dispatcher", default="alltoall", choices=["alltoall", "flex", "allgather"],
                        help="the MoE token dispatcher (alltoall; the published GB200 recipes use flex)")
    args = parser.parse_args(argv)
    recipe = dict(DEEPSEEK_V3, **{"--global-batch-size": str(args.gbs), "--moe-token-dispatcher-type": args.dispatcher})
    start = time.perf_counter()
    result = sweep.sweep(recipe, args.gpus, args.hardware, top=args.top)
    seconds = time.perf_counter() - start
    print("python: %s" % sys.version.split()[0])
    print("nproc: %d" % (os.cpu_count() or 0))
    print("sweep_s: %.2f" % seconds)
    print(sweep.text(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
