"""A recipe: a RayJob YAML whose ``spec.entrypoint`` runs Megatron-LM or slime, with environment
variables in ``spec.runtimeEnvYAML`` and GPUs in the worker groups.

Changes are applied as splices of the original text: only the characters of the changed value
move, so everything else (comments, key order, quoting, indentation, unknown fields) is kept
byte for byte. A change is data (STYLE: a candidate is its parent plus a small named diff)::

    {"op": "set", "arg": "--micro-batch-size", "value": "2"}   # value True: a flag without value
    {"op": "unset", "arg": "--recompute-granularity"}
    {"op": "set", "env": "NCCL_NVLS_ENABLE", "value": "1"}
    {"op": "unset", "env": "NCCL_NVLS_ENABLE"}
    {"op": "set", "group": "gpu-workers", "replicas": 4}

``diff(parent, child)`` returns the changes that turn one into the other, in this form.
"""

from __future__ import annotations

import json
import re
from typing import Optional

import yaml

from . import files
from .command import Command
from .errors import InputError

# the host's plumbing in a job's environment: where its interpreter finds its libraries and which GPUs of a shared
# host it may use (placement, not numerics). A local run keeps these from the shell that launched it; they are no
# part of what a run of a recipe is (the SIMULATED workload's identity of a run leaves them out)
HOST_ENV = ("PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")

_PLAIN_SAFE = re.compile(r"^[A-Za-z0-9_./:@%+=,-][A-Za-z0-9_./:@%+=, -]*$")


def _get(node, key):
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value_node
    return None


def _common(old: str, new: str):
    """The one splice ``(start, end, text)`` of ``old`` that gives ``new``."""
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    return prefix, len(old) - suffix, new[prefix:len(new) - suffix]


class _Scalar(object):
    """A scalar node of a YAML text and the way its value maps onto its raw characters."""

    def __init__(self, text: str, node):
        self.text, self.node = text, node
        self.start, self.end = node.start_mark.index, node.end_mark.index
        self.value = node.value

    def splice(self, new_value: str) -> str:
        """The whole YAML text with this scalar's value replaced by ``new_value``."""
        if new_value == self.value:
            return self.text
        start, end, insert = _common(self.value, new_value)
        raw = self.text[self.start:self.end]
        style = self.node.style
        if style == "|":
            mapped = self._literal(raw, start, end, insert)
        elif style in (None, "'", '"') and "\n" not in raw and "\\" not in raw and "''" not in raw:
            offset = 1 if style else 0  # raw == value (plus the quotes)
            mapped = raw[:offset + start] + insert + raw[offset + end:]
            if style is None and not _PLAIN_SAFE.match(new_value):
                mapped = json.dumps(new_value)
        else:  # folded or escaped forms: re-emit the scalar, still touching nothing else
            mapped = json.dumps(new_value)
        return self.text[:self.start] + mapped + self.text[self.end:]

    def _literal(self, raw: str, start: int, end: int, insert: str) -> str:
        """Re-emit a literal block with the same header and indentation. Unchanged lines come out
        as they were (a line is its indentation plus its text); if the block cannot be reproduced
        exactly that way, the value is written as a double-quoted scalar instead."""
        header_end = raw.index("\n") + 1
        lines = raw[header_end:].split("\n")
        indent = next((len(line) - len(line.lstrip(" ")) for line in lines if line.strip()), 2)

        def emit(value: str) -> str:
            body = value[:-1] if value.endswith("\n") else value
            return raw[:header_end] + "".join((" " * indent + line if line else "") + "\n"
                                             for line in body.split("\n"))
        old = emit(self.value)
        if not raw.startswith(old):
            return json.dumps(self.value[:start] + insert + self.value[end:])
        return emit(self.value[:start] + insert + self.value[end:]) + raw[len(old):]


class Recipe(object):
    def __init__(self, text: str, source: str = "recipe"):
        self.text, self.source = text, source
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            raise InputError("%s: not valid YAML (%s), so not a RayJob recipe. Fix: give a RayJob YAML"
                             % (source, files.yaml_problem(exc)))
        if _get(root, "kind") is None or _get(root, "kind").value != "RayJob":
            raise InputError("%s: kind is not RayJob. Fix: give a RayJob manifest (apiVersion ray.io/v1)" % source)
        self.spec = _get(root, "spec")
        entry = _get(self.spec, "entrypoint")
        if not isinstance(entry, yaml.ScalarNode):
            raise InputError("%s: spec.entrypoint is missing. Fix: put the training command there" % source)
        self._entry = _Scalar(text, entry)
        self.command = Command(entry.value)
        env_node = _get(self.spec, "runtimeEnvYAML")
        self._env = _Scalar(text, env_node) if isinstance(env_node, yaml.ScalarNode) else None

    @classmethod
    def load(cls, path, what: str = "RayJob YAML recipe") -> "Recipe":
        """The recipe in the file ``path``; one ``InputError`` line naming it when it cannot be one."""
        return cls(files.read_text(path, what, "give a RayJob YAML (apiVersion ray.io/v1, kind RayJob)"), str(path))

    # ------------------------------------------------------------------ reading
    def args(self) -> dict:
        return self.command.args()

    def env(self) -> dict:
        """The job's environment: ``runtimeEnvYAML`` env_vars, then ``NAME=value`` before the program."""
        out = {str(k): str(v) for k, v in (self.runtime_env().get("env_vars") or {}).items()}
        out.update(self.command.prefix_env())
        return out

    def runtime_env(self) -> dict:
        """``spec.runtimeEnvYAML`` as a mapping (empty when the recipe has none): the job's Ray runtime
        environment, ``env_vars`` as written there."""
        if self._env is None:
            return {}
        try:
            data = yaml.safe_load(self._env.value) or {}
        except yaml.YAMLError as exc:
            raise InputError("%s: spec.runtimeEnvYAML is not valid YAML: %s" % (self.source, exc))
        if not isinstance(data, dict):
            raise InputError("%s: spec.runtimeEnvYAML is not a mapping. Fix: give env_vars, working_dir, ... as keys"
                             % self.source)
        return data

    def workers(self) -> list:
        """``[{"group", "replicas", "gpus_per_worker"}]`` of the worker groups."""
        out = []
        for group in self._groups():
            replicas = _get(group, "replicas")
            gpus = self._gpu_node(group)
            out.append({"group": _get(group, "groupName").value if _get(group, "groupName") else None,
                        "replicas": self._count(replicas, "replicas", 1),
                        "gpus_per_worker": self._count(gpus, "nvidia.com/gpu", 0)})
        return out

    def _count(self, node, name: str, default: int) -> int:
        if node is None:
            return default
        value = node.value if isinstance(node, yaml.ScalarNode) else None
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InputError("%s: a worker group's %s is %r, not a whole number. Fix: write a number there"
                             % (self.source, name, value if value is not None else node.tag))

    def gpus(self) -> int:
        return sum(worker["replicas"] * worker["gpus_per_worker"] for worker in self.workers())

    def require_gpus(self) -> "Recipe":
        """This recipe, when its worker groups ask for GPUs; else one ``InputError`` line naming it."""
        if self.gpus() <= 0:
            raise InputError("%s: no worker group asks for nvidia.com/gpu (a recipe cut short?). Fix: give the "
                             "RayJob's workerGroupSpecs their nvidia.com/gpu limits" % self.source)
        return self

    def _groups(self) -> list:
        cluster = _get(self.spec, "rayClusterSpec")
        groups = _get(cluster, "workerGroupSpecs")
        return list(groups.value) if isinstance(groups, yaml.SequenceNode) else []

    @staticmethod
    def _gpu_node(group):
        spec = _get(_get(group, "template"), "spec")
        containers = _get(spec, "containers")
        if not isinstance(containers, yaml.SequenceNode) or not containers.value:
            return None
        return _get(_get(_get(containers.value[0], "resources"), "limits"), "nvidia.com/gpu")

    # ------------------------------------------------------------------ changing
    def apply(self, changes) -> "Recipe":
        recipe = self
        for change in changes:
            recipe = recipe._apply_one(change)
        return recipe

    def _apply_one(self, change: dict) -> "Recipe":
        op = change.get("op")
        if op not in ("set", "unset"):
            raise InputError("change %r: op must be set or unset" % (change,))
        if "arg" in change:
            command = self.command.set(change["arg"], change.get("value", True)) if op == "set" \
                else self.command.unset(change["arg"])
            return Recipe(self._entry.splice(command.text), self.source)
        if "env" in change:
            return Recipe(self._set_env(change["env"], change.get("value") if op == "set" else None), self.source)
        if "group" in change and op == "set":
            for group in self._groups():
                name = _get(group, "groupName")
                if name is not None and name.value == change["group"]:
                    for key, node in (("replicas", _get(group, "replicas")), ("gpus_per_worker", self._gpu_node(group))):
                        if key in change:
                            if node is None:
                                raise InputError("worker group %s has no %s to change" % (change["group"], key))
                            return Recipe(_Scalar(self.text, node).splice(str(int(change[key]))), self.source)
            raise InputError("no worker group named %r" % change["group"])
        raise InputError("change %r names no arg, env or group" % (change,))

    def _set_env(self, name: str, value: Optional[str]) -> str:
        if self._env is None:
            raise InputError("%s has no spec.runtimeEnvYAML to hold environment variables" % self.source)
        inner_text = self._env.value
        inner = yaml.compose(inner_text, Loader=yaml.SafeLoader)
        env_vars = _get(inner, "env_vars")
        if not isinstance(env_vars, yaml.MappingNode):
            raise InputError("%s: runtimeEnvYAML has no env_vars mapping" % self.source)
        for key_node, value_node in env_vars.value:
            if key_node.value == name:
                if value is None:  # remove the whole line of the entry
                    line_start = inner_text.rfind("\n", 0, key_node.start_mark.index) + 1
                    line_end = inner_text.find("\n", value_node.end_mark.index)
                    line_end = len(inner_text) if line_end < 0 else line_end + 1
                    return self._env.splice(inner_text[:line_start] + inner_text[line_end:])
                return self._env.splice(_Scalar(inner_text, value_node).splice(str(value)))
        if value is None:
            return self.text
        last = env_vars.value[-1][1] if env_vars.value else None
        indent = " " * (env_vars.value[0][0].start_mark.column if env_vars.value else 2)
        at = inner_text.find("\n", last.end_mark.index) + 1 if last is not None else len(inner_text)
        line = "%s%s: %s\n" % (indent, name, json.dumps(str(value)))
        return self._env.splice(inner_text[:at] + line + inner_text[at:])

    def with_command(self, text: str) -> "Recipe":
        """The recipe with ``spec.entrypoint`` replaced by ``text``."""
        return Recipe(self._entry.splice(text), self.source)

    def with_name(self, name: str) -> "Recipe":
        """The recipe with ``metadata.name`` (the RayJob's name) set to ``name``."""
        root = yaml.compose(self.text, Loader=yaml.SafeLoader)
        node = _get(_get(root, "metadata"), "name")
        if not isinstance(node, yaml.ScalarNode):
            raise InputError("%s: metadata.name is missing. Fix: give the RayJob a metadata.name" % self.source)
        return Recipe(_Scalar(self.text, node).splice(name), self.source)

    def render(self) -> str:
        return self.text


def diff(parent: Recipe, child: Recipe) -> list:
    """The changes that turn ``parent`` into ``child`` (args, then env, then worker groups)."""
    out = []
    before, after = parent.args(), child.args()
    for flag in sorted(set(before) | set(after)):
        if flag not in after:
            out.append({"op": "unset", "arg": flag})
        elif before.get(flag) != after[flag]:
            out.append({"op": "set", "arg": flag, "value": after[flag]})
    env_before, env_after = parent.env(), child.env()
    for name in sorted(set(env_before) | set(env_after)):
        if name not in env_after:
            out.append({"op": "unset", "env": name})
        elif env_before.get(name) != env_after[name]:
            out.append({"op": "set", "env": name, "value": env_after[name]})
    for old, new in zip(parent.workers(), child.workers()):
        for key in ("replicas", "gpus_per_worker"):
            if old[key] != new[key]:
                out.append({"op": "set", "group": new["group"], key: new[key]})
    return out
