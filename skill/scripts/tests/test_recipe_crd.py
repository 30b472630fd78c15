"""Every rendered RayJob validates against the real KubeRay RayJob CRD (v1 OpenAPI schema).

The CRD comes from ray-project/kuberay and is read in place from the real-artifact corpus
(``ATTUNE_CORPUS_DIR``, default ``../shared/data``); it is never copied into this repository.
"""

from __future__ import annotations

import os

import pytest
import yaml
from conftest import DATA, REPO

from attune.core.recipe import Recipe

jsonschema = pytest.importorskip("jsonschema")  # in the test extra

CORPUS = os.environ.get("ATTUNE_CORPUS_DIR") or str(REPO.parent / "shared" / "data")
CRD = os.path.join(CORPUS, "kuberay", "ray.io_rayjobs.yaml")
TEXT = (DATA / "recipes" / "megatron_rayjob.yaml").read_text()


@pytest.fixture(scope="module")
def validator():
    if not os.path.exists(CRD):
        pytest.skip("the real-artifact corpus is absent: no KubeRay CRD at %s (set ATTUNE_CORPUS_DIR)" % CRD)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(CRD) as handle:
        crd = yaml.load(handle, Loader=loader)
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(schema)


def errors(validator, text):
    return [error.message for error in validator.iter_errors(yaml.safe_load(text))]


def test_the_fixture_and_its_candidates_validate(validator):
    assert errors(validator, TEXT) == []
    changed = Recipe(TEXT).apply([
        {"op": "set", "arg": "--micro-batch-size", "value": "2"},
        {"op": "set", "arg": "--overlap-grad-reduce", "value": True},
        {"op": "set", "env": "NCCL_NVLS_ENABLE", "value": "1"},
        {"op": "set", "group": "gpu-workers", "replicas": 4},
        {"op": "set", "group": "gpu-workers", "gpus_per_worker": 4},
    ]).render()
    assert errors(validator, changed) == []


def test_the_schema_catches_a_broken_recipe(validator):
    broken = TEXT.replace("replicas: 2", "replicas: two").replace("shutdownAfterJobFinishes: true",
                                                                  "shutdownAfterJobFinishes: maybe")
    found = errors(validator, broken)
    assert any("'two' is not of type 'integer'" in message for message in found)
    assert any("'maybe' is not of type 'boolean'" in message for message in found)


def test_the_submitted_rayjob_validates(validator):
    from kubernetes import client
    from factory import settings as make_settings
    from attune.campaign.kuberay import KubeRayBackend
    settings = make_settings(ATTUNE_BACKEND="kuberay", ATTUNE_KUBE_CONTEXT="c", ATTUNE_NAMESPACE="ml",
                             ATTUNE_IMAGE="registry.example.com/megatron:25.04", ATTUNE_SHARED_DIR="/s", AUTOTUNE_LOG_POD="p")
    body = KubeRayBackend(settings, api_client=client.ApiClient()).body("test-fixture-r001", Recipe(TEXT))
    assert [error.message for error in validator.iter_errors(body)] == []
    assert body["metadata"]["name"] == "test-fixture-r001"
