"""Megatron-LM's own verdict on pipeline splits, for ``test_megatron_legality.py``: run with Megatron-LM's source on
PYTHONPATH, it reads a JSON list of cases on stdin (each ``{"argv": [...], "world": N}``), and for each runs
Megatron's ``parse_args``, ``validate_args`` and ``core_transformer_config_from_args`` (the path
``pretrain_gpt.py`` takes), then ``get_transformer_layer_offset`` and ``get_num_layers_to_build`` for every
pipeline rank and virtual stage. It prints one JSON list: ``{"ok": true, "ranks": [[layer, ...], ...],
"embedding": [rank, ...], "loss": [rank, ...]}`` or ``{"ok": false, "error": "..."}`` per case. Transformer
Engine and a GPU are not where the tests run: Megatron's version checks see ``ATTUNE_ASSUMED_TE_VERSION``
(2.10.0), its device checks a GPU of compute capability ``ATTUNE_ASSUMED_GPU_ARCH`` (9, Hopper).
Megatron-LM is another project's code: this file only calls it."""

import contextlib
import io
import json
import os
import sys
import warnings

warnings.filterwarnings("ignore")

from packaging.version import Version  # noqa: E402

import megatron.core.utils as megatron_utils  # noqa: E402
from megatron.core import parallel_state  # noqa: E402
from megatron.core.transformer.enums import LayerType  # noqa: E402
from megatron.core.transformer.transformer_block import get_num_layers_to_build  # noqa: E402
from megatron.core.transformer.transformer_layer import get_transformer_layer_offset  # noqa: E402
import megatron.training.arguments as megatron_arguments  # noqa: E402
from megatron.training.arguments import core_transformer_config_from_args, parse_args, validate_args  # noqa: E402


# Neither Transformer Engine nor a GPU is here: validate_args's version gates see a recent TE, and its questions about
# the device a Hopper GPU (compute capability 9), with CUDA_DEVICE_MAX_CONNECTIONS=1 as Hopper runs need
megatron_utils.get_te_version = lambda: Version(os.environ.get("ATTUNE_ASSUMED_TE_VERSION", "2.10.0"))
megatron_arguments.get_device_arch_version = lambda: int(os.environ.get("ATTUNE_ASSUMED_GPU_ARCH", "9"))
megatron_arguments.torch.cuda.get_device_capability = lambda *_: (megatron_arguments.get_device_arch_version(), 0)
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "1")


def verdict(argv: list, world: int) -> dict:
    os.environ.update(WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
    sys.argv = ["pretrain_gpt.py"] + argv
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        args = parse_args()
        validate_args(args, {})
        config = core_transformer_config_from_args(args)
    pp = config.pipeline_model_parallel_size
    stages = config.virtual_pipeline_model_parallel_size or 1
    # the functions ask parallel_state for the ranks they are not given (no process group here)
    parallel_state.get_virtual_pipeline_model_parallel_world_size = lambda: stages if stages > 1 else None
    layout = config.pipeline_model_parallel_layout
    ranks, embedding, loss = [], [], []
    for rank in range(pp):
        parallel_state.get_pipeline_model_parallel_rank = lambda rank=rank: rank
        layers = []
        for stage in range(stages):
            vp = stage if stages > 1 else None
            offset = get_transformer_layer_offset(config, vp, rank)
            layers.extend(range(offset, offset + get_num_layers_to_build(config, vp, rank)))
        ranks.append(layers)
        if layout is not None:
            kinds = [kind for chunk in layout.layout[rank] for kind in chunk]
            embedding += [rank] if LayerType.embedding in kinds else []
            loss += [rank] if LayerType.loss in kinds else []
    if layout is None:
        embedding, loss = [0], [pp - 1]
    return {"ok": True, "ranks": ranks, "embedding": embedding, "loss": loss}


def main() -> None:
    out = []
    for case in json.load(sys.stdin):
        try:
            out.append(verdict(case["argv"], case["world"]))
        except (Exception, SystemExit) as error:  # an assert, a ValueError, or Megatron failing on its own check
            out.append({"ok": False, "error": ("%s: %s" % (type(error).__name__, error))[:300]})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
