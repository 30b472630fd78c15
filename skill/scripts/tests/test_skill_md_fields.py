"""Every JSON field SKILL.md tells the agent to read exists where it says: each dotted or ``[]`` path written in
backticks (``result.failure.class``, ``last_results[].verdict``) is a key path of a verb's ``--json`` answer in a
real campaign on the local backend (the SIMULATED Llama-3.1-70B recipe: a baseline, a kept lever, a crash and an
out-of-memory run, a trace, a stop) or of ``past_tuning_project.json``, or a worker pod's field (Kubernetes' models); each snake_case word it writes
in backticks is such a key or a value the code defines (a failure class, a run state, a bottleneck)."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import re
import sys

import pytest
from conftest import SCRIPTS
from factory import local_campaign, wait
from test_bad_input import trace_text

from attune import cli
from attune.campaign import backends, ranking
from attune.core import schema, triage
from attune.pod_hooks import hooks
from attune.profile_analyzer import diagnose

SKILL_DIR = SCRIPTS.parent
SKILL_TEXT = (SKILL_DIR / "SKILL.md").read_text(encoding="utf-8")
LLAMA = SCRIPTS / "simulate" / "recipes" / "llama3_70b_h100x64.yaml"
SIM = SCRIPTS / "simulate" / "sim_megatron.py"
NO_RECOMPUTE = ["--unset", "recompute-granularity", "--unset", "recompute-method", "--unset", "recompute-num-layers"]
FILE_SUFFIXES = (".md", ".json", ".jsonl", ".txt", ".png", ".yaml", ".head", ".py")
# a backticked name in SKILL.md: lower-case words joined by dots, each maybe ending in [] (a list's items)
_NAME = re.compile(r"`([a-z_][a-z0-9_]*(?:\[\])?(?:\.[a-z_][a-z0-9_]*(?:\[\])?)*)`")


def _named():
    """(paths, words): the dotted or [] names SKILL.md writes in backticks, and its snake_case single words."""
    found = set(_NAME.findall(SKILL_TEXT))
    paths = sorted(name for name in found if ("." in name or "[]" in name) and not name.endswith(FILE_SUFFIXES))
    words = sorted(name for name in found if "_" in name and "." not in name and "[]" not in name)
    return paths, words


def key_paths(value, prefix=()):
    """Every key path of a JSON value, as tuples of components; a list's items are ``name[]``."""
    out = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = prefix + (str(key),)
            out.add(path)
            out |= key_paths(item, path)
    elif isinstance(value, list):
        marked = prefix[:-1] + (prefix[-1] + "[]",) if prefix else ("[]",)
        out.add(marked)
        for item in value:
            out |= key_paths(item, marked)
    return out


def string_values(value):
    if isinstance(value, dict):
        return set().union(*(string_values(item) for item in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(string_values(item) for item in value)) if value else set()
    return {value} if isinstance(value, str) else set()


def _cli(*argv) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([str(arg) for arg in argv])
    return code, out.getvalue(), err.getvalue()


def _json(*argv, codes=(0,)) -> dict:
    code, out, err = _cli(*argv, "--json")
    assert code in codes, (argv, code, err)
    return json.loads(out)


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """The --json answers of the verbs SKILL.md reads, from one campaign, and the documents it names."""
    tmp = tmp_path_factory.mktemp("fields")
    for campaign, settings in local_campaign(tmp, LLAMA.read_text().format(python=sys.executable, sim=SIM), "f-",
                                             "fields-test"):
        where = ("--campaign", campaign.dir)
        got = {"settings": _json("settings", *where), "launch": [], "finalize": []}
        got["launch"].append(_json("launch", "--baseline", *where))
        base = got["launch"][0]["launch"]["run"]
        wait(campaign, settings, base, ("succeeded",))
        got["finalize"].append(_json("finalize", base, *where))
        new = ("candidate", "new", *where, "--parent", "baseline", "--hypothesis", "h")
        got["draft"] = _json(*new, "--set", "tp-comm-overlap", "--lever", "tp-comm-overlap", "--draft")
        kept = _json(*new, "--set", "tp-comm-overlap", "--lever", "tp-comm-overlap")
        crash = _json(*new, "--env", "ATTUNE_SIM_FAULT=crash", "--lever", "other: ATTUNE_SIM_FAULT",
                      "--gate-will-fail")
        oom = _json(*new, *NO_RECOMPUTE, "--lever", "full-recompute", "--force")
        got["candidate"] = [kept, crash, oom]
        for record, state in ((kept, "succeeded"), (crash, "failed"), (oom, "failed")):
            got["launch"].append(_json("launch", record["run"], *where))
            wait(campaign, settings, record["run"], (state,))
            got["finalize"].append(_json("finalize", record["run"], *where))
        got["launch"].append(_json("launch", "--repeat-of", kept["run"], "--confirm", *where))
        confirm = got["launch"][-1]["launch"]["run"]
        wait(campaign, settings, confirm, ("succeeded",))
        got["finalize"].append(_json("finalize", confirm, *where))
        got["poll"] = _json("poll", kept["run"], *where)
        got["metrics"] = _json("metrics", campaign.run_dir(base) / "log.txt")
        got["rank"] = _json("rank", *where, "--no-chart")
        got["status"] = _json("status", *where)
        got["budget"] = _json("budget", *where)
        got["verify"] = _json("verify", *where)
        got["diagnose"] = _json("diagnose", kept["run"], *where)
        got["project"] = _json("project", campaign.run_dir(kept["run"]) / "recipe.yaml", *where)
        got["gate"] = _json("gate", "--run", kept["run"], *where, codes=(0, 1))
        trace = tmp / "trace.json"
        trace.write_bytes(trace_text())
        got["profile"] = _json("profile", trace)
        got["doctor"] = _json("doctor", *where, codes=(0, 1))
        got["stop"] = _json("stop", *where, "--reason", "fields test", "--evidence", base, kept["run"], codes=(0, 1))
        got["status_stopped"] = _json("status", *where)
    got["past_tuning_project.json"] = [json.loads(path.read_text())
                                       for path in sorted((SKILL_DIR / "past_tuning_projects").glob("*.json"))]
    return got


def test_skill_md_names_json_fields_at_all():
    paths, words = _named()
    assert "result.failure.class" in paths and "last_results[].verdict" in paths and "band.value" in paths
    assert "levers_in_recipe" in words


def _pod_field(name: str) -> bool:
    """Whether ``name`` (``resources.limits.memory``) is a field of a Kubernetes container, as the official client's
    models define it (the last part a key of a resource map): the worker pods' settings a human changes."""
    import kubernetes.client as k8s
    parts = name.split(".")
    if len(parts) != 3 or parts[0] not in k8s.V1Container.attribute_map:
        return False
    return k8s.V1ResourceRequirements.openapi_types.get(parts[1]) == "Dict[str, str]" and parts[2] in ("memory", "cpu")


def test_every_field_path_skill_md_names_is_in_a_verbs_json(answers):
    paths, _words = _named()
    known = key_paths(answers)
    tails = {path[i:] for path in known for i in range(len(path))}
    missing = [name for name in paths if tuple(name.split(".")) not in tails and not _pod_field(name)]
    assert not missing, "SKILL.md names fields no verb's --json answer has: %s" % ", ".join(missing)


def test_every_snake_case_word_skill_md_names_is_a_key_or_a_value_the_code_defines(answers):
    _paths, words = _named()
    keys = {component.rstrip("[]") for path in key_paths(answers) for component in path}
    # the fields of status's actions that only some campaign states produce (repeat's repeat_of), from the code
    action_keys = set(re.findall(r", (\w+)=", inspect.getsource(ranking._pending)))
    assert "count" in action_keys
    vocabulary = (action_keys | set(schema.RESULT_STATUSES) | set(triage.CLASSES) | set(hooks.HOOKS) | set(diagnose.LEVERS) | set(backends.STATES)
                  | string_values(answers))
    unknown = [word for word in words if word not in keys and word not in vocabulary]
    assert not unknown, "SKILL.md names words that are neither a JSON key nor a defined value: %s" % ", ".join(unknown)


def test_the_failure_fields_come_from_real_failed_runs(answers):
    classes = [item["result"]["failure"]["class"] for item in answers["finalize"][2:4]]
    assert classes == ["crash", "oom"], classes
    assert answers["finalize"][3]["result"]["failure"]["memory"] == "gpu"
