"""Recipes: parse the RayJob entrypoint, apply one-change candidates, render losslessly."""

from __future__ import annotations

import difflib

import pytest
import yaml
from conftest import DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from attune.core.command import Command, split_words
from attune.core.errors import InputError
from attune.core.recipe import Recipe, diff

TEXT = (DATA / "recipes" / "megatron_rayjob.yaml").read_text()


def changed_lines(before: str, after: str) -> list:
    return [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:1] in "+-"]


def test_parse():
    recipe = Recipe(TEXT)
    assert recipe.command.program == "pretrain_gpt.py"
    args = recipe.args()
    assert args["--tensor-model-parallel-size"] == "2" and args["--lr"] == "3.0e-4"
    assert args["--use-distributed-optimizer"] is True and args["--bf16"] is True
    assert args["--data-path"] == "/mnt/data/my corpus_text_document"
    assert recipe.env() == {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "NCCL_DEBUG": "WARN"}
    assert recipe.workers() == [{"group": "gpu-workers", "replicas": 2, "gpus_per_worker": 8}]
    assert recipe.gpus() == 16


def test_apply_nothing_is_the_identity():
    assert Recipe(TEXT).apply([]).render() == TEXT


def test_set_an_existing_value_changes_only_that_value():
    after = Recipe(TEXT).apply([{"op": "set", "arg": "--micro-batch-size", "value": "2"}]).render()
    assert changed_lines(TEXT, after) == [
        "-       --micro-batch-size 1 --global-batch-size 128 \\",
        "+       --micro-batch-size 2 --global-batch-size 128 \\"]


def test_equals_form_and_repeated_flags():
    after = Recipe(TEXT).apply([{"op": "set", "arg": "--lr", "value": "2e-4"},
                                {"op": "set", "arg": "--seed", "value": "7"}]).render()
    assert "--lr=2e-4 --min-lr" in after
    assert "--seed 1234 --bf16 --seed 7" in after  # the last occurrence is the effective one
    assert Recipe(after).args()["--seed"] == "7"


def test_new_flags_follow_the_continuation_style():
    after = Recipe(TEXT).apply([{"op": "set", "arg": "--overlap-grad-reduce", "value": True},
                                {"op": "set", "arg": "--ddp-bucket-size", "value": "40000000"}]).render()
    assert "--seed 1234 --bf16 --seed 1234 \\\n      --overlap-grad-reduce \\\n      --ddp-bucket-size 40000000\n" in after
    yaml.safe_load(after)


def test_unset_and_env_and_replicas():
    after = Recipe(TEXT).apply([
        {"op": "unset", "arg": "--sequence-parallel"},
        {"op": "set", "env": "NCCL_NVLS_ENABLE", "value": "1"},
        {"op": "set", "env": "NCCL_DEBUG", "value": "INFO"},
        {"op": "unset", "env": "CUDA_DEVICE_MAX_CONNECTIONS"},
        {"op": "set", "group": "gpu-workers", "replicas": 4},
    ]).render()
    recipe = Recipe(after)
    assert "--sequence-parallel" not in recipe.args()
    assert recipe.env() == {"NCCL_DEBUG": "INFO", "NCCL_NVLS_ENABLE": "1"}
    assert recipe.gpus() == 32
    assert "# A Megatron-LM pretraining recipe" in after and "minReplicas: 2" in after
    assert changed_lines(TEXT, after) == [
        "-       --sequence-parallel \\",
        '-       CUDA_DEVICE_MAX_CONNECTIONS: "1"',
        "-       NCCL_DEBUG: WARN",
        "+       NCCL_DEBUG: INFO",
        '+       NCCL_NVLS_ENABLE: "1"',
        "-         replicas: 2",
        "+         replicas: 4"]


def test_errors_name_the_problem():
    with pytest.raises(InputError, match="kind is not RayJob"):
        Recipe("kind: Pod\n")
    with pytest.raises(InputError, match="no Python training program"):
        Command("echo hello")
    with pytest.raises(InputError, match="unclosed"):
        split_words("python3 train.py --x 'open")
    with pytest.raises(InputError, match="no worker group"):
        Recipe(TEXT).apply([{"op": "set", "group": "nope", "replicas": 1}])


FLAGS = ["--micro-batch-size", "--overlap-grad-reduce", "--recompute-granularity", "--lr", "--seed",
         "--sequence-parallel", "--tp-comm-overlap", "--ddp-bucket-size"]
values = st.one_of(st.just(True), st.sampled_from(["1", "2", "full", "1e-4", "a b", "x'y", "-3"]))
arg_changes = st.one_of(
    st.builds(lambda flag, value: {"op": "set", "arg": flag, "value": value}, st.sampled_from(FLAGS), values),
    st.builds(lambda flag: {"op": "unset", "arg": flag}, st.sampled_from(FLAGS)))
env_changes = st.one_of(
    st.builds(lambda name, value: {"op": "set", "env": name, "value": value},
              st.sampled_from(["NCCL_DEBUG", "NCCL_NVLS_ENABLE", "TORCH_NCCL_AVOID_RECORD_STREAMS"]),
              st.sampled_from(["0", "1", "INFO", "a b"])),
    st.builds(lambda name: {"op": "unset", "env": name}, st.sampled_from(["NCCL_DEBUG", "NCCL_NVLS_ENABLE"])))


def normalised(recipe: Recipe, change: dict) -> list:
    """What ``change`` does to ``recipe``, as ``diff`` reports it (a no-op reports nothing)."""
    if "arg" in change:
        before = recipe.args().get(change["arg"])
        after = change.get("value", True) if change["op"] == "set" else None
        if before == after or (after is None and before is None):
            return []
        return [{"op": "set", "arg": change["arg"], "value": after} if after is not None
                else {"op": "unset", "arg": change["arg"]}]
    before = recipe.env().get(change["env"])
    after = change.get("value") if change["op"] == "set" else None
    if before == after:
        return []
    return [{"op": "set", "env": change["env"], "value": after} if after is not None
            else {"op": "unset", "env": change["env"]}]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(arg_changes, env_changes), max_size=4), st.one_of(arg_changes, env_changes))
def test_diff_of_apply_is_the_change(history, change):
    parent = Recipe(TEXT).apply(history)
    assert Recipe(parent.render()).args() == parent.args()  # render -> parse is the identity
    child = parent.apply([change])
    assert diff(parent, child) == normalised(parent, change)
    assert yaml.safe_load(child.render())["kind"] == "RayJob"
    untouched = [line for line in TEXT.splitlines() if "--" not in line and ":" in line and "NCCL" not in line
                 and "CUDA" not in line]
    for line in untouched:
        assert line in child.render().splitlines()


@pytest.mark.parametrize("entry, expected", [
    ("python3 pretrain_gpt.py --lr 1", "W -- python3 pretrain_gpt.py --lr 1"),
    ("cd /opt/m && A=1 B='x y' torchrun --nproc 8 pretrain_gpt.py \\\n  --lr 1 | tee /l/log.txt",
     "cd /opt/m && A=1 B='x y' W -- torchrun --nproc 8 pretrain_gpt.py \\\n  --lr 1 | tee /l/log.txt"),
    ("set -e; python3 -u /root/slime/train.py --x", "set -e; W -- python3 -u /root/slime/train.py --x"),
])
def test_wrap_puts_words_before_the_training_command_and_keeps_the_rest(entry, expected):
    wrapped = Command(entry).wrap(["W", "--"])
    assert wrapped == expected
    assert Command(wrapped).args() == Command(entry).args() and Command(wrapped).prefix_env() == Command(entry).prefix_env()


def test_pod_hook_arguments_parse_with_commas_in_values_and_are_checked():
    from attune.campaign import podhooks
    assert podhooks.parse(["profiler:start=10,end=12,ranks=0,8", "gpu_facts"]) == [
        {"name": "profiler", "args": {"start": "10", "end": "12", "ranks": "0,8"}}, {"name": "gpu_facts"}]
    for bad, message in (("profiler:8", "is not KEY=VALUE"), ("profiler:depth=2", "profiler takes dir, end"),
                         ("nope", "unknown hook nope"), ("profiler:end=1,start=5", "profiler.end=1: expected an integer >= 6")):
        with pytest.raises(InputError, match=message):
            podhooks.parse([bad])
