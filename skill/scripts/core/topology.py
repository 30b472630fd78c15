"""Topology check (topology_check.md): did a run get what its recipe asked for, and is it
comparable with the baseline?

Asked for: from the recipe (worker groups: replicas, GPUs per worker, a GPU model when the
worker template selects one with ``nvidia.com/gpu.product``). Got: from the cluster (the nodes the
run's worker pods were placed on, and those nodes' ``nvidia.com/gpu.product`` labels) and from the
log (NCCL's ``Init COMPLETE`` lines for the number of ranks; its transport lines for NVLink and
InfiniBand, when the run logged with ``NCCL_DEBUG=INFO``). Anything not found is reported as
unknown, never guessed.
"""

from __future__ import annotations

import re
from typing import Optional

from .recipe import Recipe, _get

_NRANKS = re.compile(r"NCCL INFO .*\brank (\d+) nranks (\d+)\b.* - Init COMPLETE", re.I)
_NVLINK = re.compile(r"NCCL INFO .*(?:via P2P/(?:NVL|CUMEM|IPC)|NVLS|via P2P/direct)")
_IB = re.compile(r"NCCL INFO .*(?:NET/IB|via NET/IB)")
_SOCKET = re.compile(r"NCCL INFO .*NET/Socket")
GPU_LABEL = "nvidia.com/gpu.product"
GPU_LIMIT = "nvidia.com/gpu"


def requested(recipe: Recipe) -> dict:
    model = None
    for group in recipe._groups():
        selector = _get(_get(_get(group, "template"), "spec"), "nodeSelector")
        product = _get(selector, GPU_LABEL)
        if product is not None:
            model = product.value
    workers = recipe.workers()
    return {"nodes": sum(w["replicas"] for w in workers), "gpus": recipe.gpus(),
            "gpus_per_node": sorted({w["gpus_per_worker"] for w in workers}), "gpu_model": model}


def from_log(path) -> dict:
    """NCCL's view of the run, from a log written with NCCL_DEBUG=INFO (unknown otherwise)."""
    nranks, nvlink, ib, socket = None, False, False, False
    with open(path, "r", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if "NCCL INFO" not in line:
                continue
            match = _NRANKS.search(line)
            if match:
                nranks = max(nranks or 0, int(match.group(2)))
            nvlink = nvlink or bool(_NVLINK.search(line))
            ib = ib or bool(_IB.search(line))
            socket = socket or bool(_SOCKET.search(line))
    logged = nranks is not None or nvlink or ib or socket
    return {"nccl_ranks": nranks, "nvlink": nvlink if logged else None,
            "infiniband": ib if logged else None, "tcp_sockets": socket if logged else None}


def from_cluster(core, namespace: str, pods: list) -> dict:
    """The nodes the run's pods ran on, the GPUs its pods hold on each, and the nodes' GPU model
    labels (Kubernetes API)."""
    nodes, models, gpus = set(), set(), {}
    for name in pods:
        pod = core.read_namespaced_pod(name, namespace)
        node = pod.spec.node_name if pod.spec else None
        if not node:
            continue
        nodes.add(node)
        for container in pod.spec.containers or []:
            limits = (container.resources.limits if container.resources else None) or {}
            if GPU_LIMIT in limits:
                gpus[node] = gpus.get(node, 0) + int(limits[GPU_LIMIT])
        labels = core.read_node(node).metadata.labels or {}
        if GPU_LABEL in labels:
            models.add(labels[GPU_LABEL])
    return {"nodes": sorted(nodes), "gpu_models": sorted(models), "gpus_on_nodes": gpus}


def check(asked: dict, got: dict) -> list:
    """Where the run did not get what it asked for (one line each)."""
    problems = []
    if got.get("nccl_ranks") is not None and got["nccl_ranks"] != asked["gpus"]:
        problems.append("NCCL saw %d ranks; the recipe asks for %d GPUs" % (got["nccl_ranks"], asked["gpus"]))
    if got.get("gpu_models") and asked.get("gpu_model") and got["gpu_models"] != [asked["gpu_model"]]:
        problems.append("the run's nodes have %s; the recipe selects %s" % (", ".join(got["gpu_models"]),
                                                                            asked["gpu_model"]))
    on_nodes = got.get("gpus_on_nodes")
    if on_nodes:
        if sum(on_nodes.values()) != asked["gpus"]:
            problems.append("the run's pods hold %d GPUs; the recipe asks for %d" % (sum(on_nodes.values()),
                                                                                   asked["gpus"]))
        if len(on_nodes) != asked["nodes"]:
            problems.append("the run's GPUs are on %d node(s); the recipe asks for %d" % (len(on_nodes),
                                                                                       asked["nodes"]))
    if len(got.get("gpu_models") or []) > 1:
        problems.append("the run spans GPU models %s" % ", ".join(got["gpu_models"]))
    return problems


def comparable(baseline: dict, run: dict) -> list:
    """Differences that make a run's throughput not comparable with the baseline's."""
    out = []
    # The GPU count may differ (replicas are a lever and the score is per GPU); the hardware may not.
    for key, label in (("gpu_models", "GPU models"), ("nvlink", "NVLink use"), ("infiniband", "InfiniBand use"),
                       ("tcp_sockets", "TCP sockets")):
        before, after = baseline.get(key), run.get(key)
        if before not in (None, []) and after not in (None, []) and before != after:  # [] is unknown too
            out.append("%s: %s in the baseline, %s here" % (label, before, after))
    return out


def summarize(recipe: Recipe, log_path, cluster: Optional[dict] = None) -> dict:
    asked = requested(recipe)
    got = from_log(log_path) if log_path is not None else {}
    if cluster:
        got.update(cluster)
    got["gpus"] = asked["gpus"]
    return {"asked": asked, "got": got, "problems": check(asked, got),
            "log": str(log_path) if log_path is not None else None}
