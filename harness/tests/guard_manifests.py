"""The manifests the guard's test cases apply (``guard_cases.py`` writes them under ``{man}``): RayJobs and
other objects, each named for what the guard must make of it."""

import json

MANIFESTS = {
    "good.yaml": """\
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: alice-llama-r010
  namespace: team-a   # the campaign's
  labels:
    app: attune
spec:
  entrypoint: |
    python train.py
    name: not-an-object-name
    namespace: team-z
  rayClusterSpec:
    headGroupSpec:
      template:
        metadata:
          name: a-template-name
""",
    "multi-good.yaml": """\
# two objects of run r011
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: "alice-llama-r011"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: 'alice-llama-r011-cfg'
  namespace: team-a
data:
  key: value
""",
    "multi.yaml": """\
apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: alice-llama-r013
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: bob-cm
""",
    "other-ns.yaml": """\
apiVersion: ray.io/v1
kind: RayJob
metadata:
  namespace: team-b
  name: alice-llama-r012
""",
    "bad-name.yaml": """\
apiVersion: batch/v1
kind: Job
metadata:
  name: bob-job
""",
    "cluster.yaml": """\
apiVersion: v1
kind: Namespace
metadata:
  name: alice-llama-ns
""",
    "noname.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata:
  labels:
    app: x
""",
    "generate.yaml": """\
apiVersion: batch/v1
kind: Job
metadata:
  generateName: alice-llama-job-
""",
    "flow.yaml": """\
apiVersion: v1
kind: ConfigMap
metadata: {name: bob-flow, namespace: team-a}
""",
    "list.json": json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "alice-llama-a", "namespace": "team-a"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "alice-llama-b"}}]}, indent=2),
    "list-bad.yaml": """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: alice-llama-c
- apiVersion: v1
  kind: Secret
  metadata:
    name: carol-secret
    namespace: team-a
""",
    "dir/a.yaml": "kind: ConfigMap\nmetadata:\n  name: alice-llama-d1\n",
    "dir/b.yml": "kind: ConfigMap\nmetadata:\n  name: alice-llama-d2\n",
    "dir/sub/c.yaml": "kind: ConfigMap\nmetadata:\n  name: dave-d3\n",
    "kust/kustomization.yaml": "resources:\n- ../good.yaml\n",
}
