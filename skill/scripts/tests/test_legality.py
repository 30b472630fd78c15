"""Megatron-LM legality rules, each named in its violation."""

from __future__ import annotations

import pytest

from attune_core.legality import NOT_MEGATRON_FLAGS, check

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
])
def test_each_rule(changes, world, rule):
    assert rule in rules(world=world, **changes)


def test_cuda_device_max_connections_rule():
    assert rules(env={}) == ["cuda-device-max-connections"]
    assert rules(env={}, gpu="gb200") == []
    assert rules(env={}, overlap_moe_expert_parallel_comm=True) == []
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
