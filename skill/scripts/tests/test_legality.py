"""Megatron-LM legality rules, each named in its violation."""

from __future__ import annotations

import pytest

from attune.core.legality import NOT_MEGATRON_FLAGS, check

BASE = {"--tensor-model-parallel-size": "2", "--pipeline-model-parallel-size": "2", "--micro-batch-size": "1",
        "--global-batch-size": "128", "--num-layers": "32", "--use-distributed-optimizer": True,
        "--sequence-parallel": True}
ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def rules(args=None, env=None, world=16, gpu="h100", **changes):
    merged = dict(BASE if args is None else args)
    for key, value in changes.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            merged.pop(flag, None)
        else:
            merged[flag] = value
    return [violation.rule for violation in check(merged, ENV if env is None else env, world, gpu)]


def test_a_legal_recipe_has_no_violation():
    assert rules() == []


@pytest.mark.parametrize("changes, world, rule", [
    ({"tensor_model_parallel_size": "3"}, 16, "world-size"),
    ({"global_batch_size": "102"}, 16, "global-batch"),  # DP 4 x MBS 1 does not divide 102
    ({"micro_batch_size": "3"}, 16, "global-batch"),
    ({"num_layers": "31"}, 16, "layers-per-stage"),
    ({"num_layers_per_virtual_pipeline_stage": "3"}, 16, "virtual-pipeline"),  # 16 layers per stage
    ({"tensor_model_parallel_size": "1", "tp_comm_overlap": None}, 16, "sequence-parallel"),
    ({"overlap_param_gather": True}, 16, "overlap-param-gather"),
    ({"sequence_parallel": None, "tp_comm_overlap": True}, 16, "tp-comm-overlap"),
    ({"num_experts": "6", "expert_model_parallel_size": "4"}, 16, "experts-per-rank"),
    ({"virtual_pipeline_model_parallel_size": "2"}, 16, "no-such-flag"),
    ({"micro_batch_size": "two"}, 16, "integer"),
    ({"delay_wgrad_compute": True}, 16, "delay-wgrad-compute"),
    ({"overlap_moe_expert_parallel_comm": True}, 16, "moe-a2a-overlap"),  # a dense model: no EP
    ({"num_layers_per_virtual_pipeline_stage": "4", "pipeline_model_parallel_size": "1"}, 8, "interleaved-pp"),
    ({"num_virtual_stages_per_pipeline_rank": "2", "no_overlap_p2p_communication": True}, 16, "interleaved-pp"),
    ({"pipeline_model_parallel_layout": "t*16|Et*16L"}, 16, "pipeline-layout"),  # E must come first
    ({"pipeline_model_parallel_layout": "Et*16|t* 16L"}, 16, "pipeline-layout"),  # no spaces in the grammar
    ({"decoder_first_pipeline_num_layers": "0"}, 16, "uneven-pipeline"),
    ({"num_attention_heads": "6", "tensor_model_parallel_size": "4"}, 16, "heads-per-rank"),
    ({"num_attention_heads": "8", "num_query_groups": "3", "group_query_attention": True}, 16,
     "query-groups-per-rank"),
    ({"context_parallel_size": "4", "seq_length": "4100"}, 64, "seq-length-cp"),
    ({"seq_length": "8192", "max_position_embeddings": "4096"}, 16, "max-position-embeddings"),
    ({"recompute_granularity": "full", "recompute_method": "uniform"}, 16, "recompute-num-layers"),
    ({"recompute_granularity": "full", "recompute_num_layers": "1"}, 16, "recompute-method"),
    ({"recompute_granularity": "selective", "recompute_modules": "moe_act"}, 16, "recompute-modules"),
    ({"num_experts": "8", "moe_router_topk": "1", "disable_bias_linear": True}, 16, "router-topk"),
    ({"num_experts": "8", "expert_tensor_parallel_size": "2"}, 16, "moe-bias"),  # biases by default
    ({"mtp_num_layers": "1"}, 16, "mtp"),  # learned absolute position embeddings by default
    ({"fp8_recipe": "current"}, 16, "choice"),
    ({"main_grads_dtype": "fp16"}, 16, "choice"),
    ({"fp8_param_gather": True, "fp8_format": "hybrid", "use_distributed_optimizer": None}, 16, "fp8-param-gather"),
    ({"fp8_param_gather": True}, 16, "fp8-param-gather"),  # no FP8
    ({"num_experts": "8", "disable_bias_linear": True, "moe_shared_expert_intermediate_size": "512",
      "moe_shared_expert_overlap": True, "moe_token_dispatcher_type": "flex"}, 16, "moe-shared-expert-overlap"),
    ({"attention_backend": "local"}, 16, "attention-backend"),
])
def test_each_rule(changes, world, rule):
    assert rule in rules(world=world, **changes)


def test_cuda_device_max_connections_rule():
    assert rules(env={}) == ["cuda-device-max-connections"]
    assert rules(env={}, gpu="gb200") == []
    assert "cuda-device-max-connections" not in rules(env={}, overlap_moe_expert_parallel_comm=True)
    assert rules(env={}, tensor_model_parallel_size="1", sequence_parallel=None) == []


def test_overlap_param_gather_with_its_partners_is_legal():
    assert rules(overlap_param_gather=True, overlap_grad_reduce=True) == []


def test_messages_name_values_and_fix():
    found = check(dict(BASE, **{"--global-batch-size": "102"}), ENV, 16)
    assert str(found[0]) == ("global-batch: global batch size (102) is not divisible by micro batch size (1) times "
                             "data parallel size (4). Fix: keep the global batch (it is part of the workload) and "
                             "change the micro batch size or the parallel layout")


def test_every_plausible_but_missing_flag_is_refused():
    for flag in NOT_MEGATRON_FLAGS:
        assert "no-such-flag" in [v.rule for v in check(dict(BASE, **{flag: True}), ENV, 16)]


def test_misspelled_flags_are_refused_unless_trusted():
    found = check(dict(BASE, **{"--overlap-grad-reduc": True}), ENV, 16)
    assert [v.rule for v in found] == ["misspelled-flag"]
    assert "looks like a misspelling of --overlap-grad-reduce" in str(found[0])
    assert check(dict(BASE, **{"--overlap-grad-reduc": True}), ENV, 16, trusted=["--overlap-grad-reduc"]) == []
    assert check(dict(BASE, **{"--data-path": "/x", "--my-own-flag": "1"}), ENV, 16) == []  # far from any known


def test_layer_split_follows_an_explicit_layout_or_uneven_stages():
    """Megatron-LM's validate_args: a custom --pipeline-model-parallel-layout (or uneven first/last stages)
    sets the layer split, so --num-layers need not divide by PP; the layout itself must fit PP and the layers."""
    base = dict(BASE, **{"--num-layers": "61", "--pipeline-model-parallel-size": "2",
                         "--tensor-model-parallel-size": "1"})
    base.pop("--sequence-parallel", None)

    def found(**extra):
        return [v.rule for v in check(dict(base, **extra), {}, 16)]

    assert found() == ["layers-per-stage"]  # 61 layers over PP 2, no layout
    layout = {"--pipeline-model-parallel-layout": "Et*15|t*16|t*15|t*15L"}  # 61 layers, 4 stages: VP 2 at PP 2
    assert found(**layout) == []
    assert found(**{"--pipeline-model-parallel-layout": "Et*15|t*16|t*15|t*14L"}) == ["pipeline-layout"]  # 60 layers
    assert found(**{"--pipeline-model-parallel-layout": "Et*20|t*20|t*21L"}) == ["pipeline-layout"]  # 3 stages, PP 2
    assert "virtual-pipeline" in found(**dict(layout, **{"--num-layers-per-virtual-pipeline-stage": "4"}))
    assert found(**{"--decoder-first-pipeline-num-layers": "30"}) == []  # 31 left for the last stage
    assert found(**{"--decoder-first-pipeline-num-layers": "30", "--pipeline-model-parallel-size": "4"}) == [
        "layers-per-stage"]  # 31 left over 3 stages
    assert found(**{"--decoder-first-pipeline-num-layers": "61", "--pipeline-model-parallel-size": "1"}) == [
        "uneven-pipeline"]
    assert "virtual-pipeline" in found(**{"--decoder-first-pipeline-num-layers": "30",
                                          "--num-layers-per-virtual-pipeline-stage": "1"})


def test_the_embedding_and_the_loss_may_count_as_layers_in_the_split():
    """Megatron-LM core_v0.16.1 (``arguments.validate_args``, ``transformer_block.get_num_layers_to_build``,
    ``TransformerConfig.__post_init__``): with --account-for-embedding/loss-in-pipeline-split the layers plus one
    for each must divide by PP (and by PP x the layers per virtual stage); neither goes with a layout or uneven
    first/last stages. Llama-3.1-405B's 126 layers over PP 8, Qwen3-235B's 94 over PP 8, DeepSeek-V3's 61 over 16
    with the embedding counted and 63 with both."""
    def found(layers, pp, *flags, **extra):
        args = dict(BASE, **{"--num-layers": str(layers), "--pipeline-model-parallel-size": str(pp),
                             "--tensor-model-parallel-size": "1"}, **extra)
        args.pop("--sequence-parallel", None)
        args.update({flag: True for flag in flags})
        return [v.rule for v in check(args, {}, 16 * pp)]
    both = ("--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")
    assert found(126, 8) == ["layers-per-stage"] and found(126, 8, *both) == []
    assert found(94, 8, *both) == [] and found(94, 8, both[0]) == ["layers-per-stage"]
    assert found(63, 16, both[0]) == [] and found(62, 16, *both) == []
    assert found(126, 8, *both, **{"--num-layers-per-virtual-pipeline-stage": "4"}) == []  # 128 / 8 / 4
    assert "virtual-pipeline" in found(126, 8, *both, **{"--num-layers-per-virtual-pipeline-stage": "3"})
    assert found(126, 8, *both, **{"--decoder-first-pipeline-num-layers": "14"}) == ["uneven-pipeline"]
    assert found(126, 8, *both, **{"--pipeline-model-parallel-layout": "Et*15|" + "t*16|" * 6 + "t*15L"}) == [
        "pipeline-layout"]
