"""The topology check: asked for (recipe), got (cluster API, NCCL log lines), comparable with the baseline."""

from __future__ import annotations

import pytest
from conftest import DATA
from fake_kube import FakeKube
from factory import settings as make_settings

from attune.core import topology
from attune.campaign.kuberay import KubeRayBackend
from attune.core.recipe import Recipe

TEXT = (DATA / "recipes" / "megatron_rayjob.yaml").read_text()
# NCCL_DEBUG=INFO lines written here in NCCL's format (constructed for the test, not a captured log)
NCCL = """node-a:1201:1266 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
node-a:1201:1266 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0
node-a:1201:1266 [0] NCCL INFO comm 0x55d4c6a5b2f0 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 7000 commId 0x1 - Init COMPLETE
"""


def test_asked_for_from_the_recipe():
    assert topology.requested(Recipe(TEXT)) == {"nodes": 2, "gpus": 16, "gpus_per_node": [8], "gpu_model": None}
    selected = TEXT.replace("          containers:\n              - name: ray-worker",
                            "          nodeSelector:\n              nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3\n"
                            "            containers:\n              - name: ray-worker")
    assert topology.requested(Recipe(selected))["gpu_model"] == "NVIDIA-H100-80GB-HBM3"


def test_log_facts(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("startup\n" + NCCL)
    assert topology.from_log(log) == {"nccl_ranks": 16, "nvlink": True, "infiniband": True, "tcp_sockets": False}
    plain = tmp_path / "plain.txt"
    plain.write_text(" iteration        1/      20 | elapsed time per iteration (ms): 1.0 |\n")
    assert topology.from_log(plain) == {"nccl_ranks": None, "nvlink": None, "infiniband": None, "tcp_sockets": None}


def test_problems_and_comparability(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text(NCCL.replace("nranks 16", "nranks 8"))
    summary = topology.summarize(Recipe(TEXT), log, {"nodes": ["n1"], "gpu_models": ["NVIDIA-A100", "NVIDIA-H100"]})
    assert "NCCL saw 8 ranks; the recipe asks for 16 GPUs" in summary["problems"]
    assert "the run spans GPU models NVIDIA-A100, NVIDIA-H100" in summary["problems"]
    base = {"gpu_models": ["NVIDIA-H100"], "nvlink": True, "infiniband": True, "tcp_sockets": False}
    other = dict(base, infiniband=False, tcp_sockets=True)
    assert topology.comparable(base, other) == ["InfiniBand use: True in the baseline, False here",
                                                "TCP sockets: False in the baseline, True here"]
    assert topology.comparable(base, dict(base, nvlink=None)) == []  # unknown is not a difference


def test_cluster_facts_through_the_api():
    kube = FakeKube()
    try:
        settings = make_settings(ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT="t", ATTUNE_NAMESPACE="ml",
                                 ATTUNE_IMAGE="i", ATTUNE_SHARED_DIR="/s", AUTOTUNE_LOG_POD="p")
        backend = KubeRayBackend(settings, api_client=kube.api_client())
        kube.rayjobs[("ml", "r1")] = {"metadata": {"name": "r1"}, "status": {"rayClusterName": "r1-rc"}}
        kube.pods = {"r1-rc-head": {"ray.io/cluster": "r1-rc"}, "r1-rc-worker-0": {"ray.io/cluster": "r1-rc"}}
        kube.pod_nodes = {"r1-rc-head": "node-a", "r1-rc-worker-0": "node-b"}
        kube.node_labels = {"node-a": {topology.GPU_LABEL: "NVIDIA-H200"}, "node-b": {topology.GPU_LABEL: "NVIDIA-H200"}}
        kube.pod_gpus = {"r1-rc-worker-0": 8}
        facts = backend.cluster_facts("r1")
        assert facts == {"nodes": ["node-a", "node-b"], "gpu_models": ["NVIDIA-H200"], "gpus_on_nodes": {"node-b": 8}}
        assert topology.summarize(Recipe(TEXT), None, facts)["problems"] == [
            "the run's pods hold 8 GPUs; the recipe asks for 16",
            "the run's GPUs are on 1 node(s); the recipe asks for 2"]
    finally:
        kube.close()


def test_every_section_is_documented():
    from conftest import REPO
    text = (REPO / "skill" / "references" / "topology_check.md").read_text()
    for needle in ("nvidia.com/gpu.product", "Init COMPLETE", "NET/IB", "Not comparable with the baseline"):
        assert needle in text


def test_a_local_run_with_no_log_has_no_log_facts(tmp_path, capsys):
    from factory import Builder

    from attune import cli
    from attune.campaign import runs
    b = Builder(tmp_path / "c")
    b.launch("r001", "baseline", "base", gpus=16)
    (b.campaign.run_dir("r001") / "recipe.yaml").write_text(TEXT)  # launched, never wrote a log
    summary = runs.topology(b.campaign, b.settings, "r001")
    assert summary["log"] is None and summary["problems"] == []
    assert "nccl_ranks" not in summary["got"] and summary["got"]["gpus"] == 16
    assert cli.main(["topology", "r001", "--campaign", str(b.campaign.dir)]) == 0
    assert "log: none (no log facts)" in capsys.readouterr().out


def test_empty_cluster_facts_are_unknown_not_a_difference():
    # a run checked after its pods were gone (teardown, the RayCluster's TTL) has empty cluster facts
    torn_down = {"nodes": [], "gpu_models": [], "gpus_on_nodes": {}, "nvlink": True}
    live = {"nodes": ["node-a"], "gpu_models": ["NVIDIA-H200"], "gpus_on_nodes": {"node-a": 8}, "nvlink": True}
    assert topology.comparable(torn_down, live) == [] and topology.comparable(live, torn_down) == []
    assert topology.comparable(dict(live, gpu_models=["NVIDIA-H100"]), live) == [
        "GPU models: ['NVIDIA-H100'] in the baseline, ['NVIDIA-H200'] here"]
