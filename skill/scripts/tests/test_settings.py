"""Settings: validation, error lines, config files and config.example.env kept equal to the code."""

from __future__ import annotations

import ast
import re
import subprocess

import pytest
from conftest import REPO

from attune.core import frozen as f, settings as s
from attune.core.errors import SettingsError

GOOD = {
    "ATTUNE_RUN_PREFIX": "alice-llama-",
    "ATTUNE_BASELINE_YAML": "/tmp/base.yaml",
    "ATTUNE_BACKEND": "kuberay",
    "ATTUNE_KUBE_CONTEXT": "ctx",
    "ATTUNE_NAMESPACE": "ml-tuning",
    "ATTUNE_IMAGE": "img:1",
    "ATTUNE_SHARED_DIR": "/mnt/shared",
    "AUTOTUNE_LOG_POD": "log-reader",
    "AUTOTUNE_GPUH_BUDGET": "100",
}


def problems(**changes):
    env = dict(GOOD)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    with pytest.raises(SettingsError) as info:
        s.load(env)
    return info.value.problems


def test_good_settings_load_typed_and_frozen():
    loaded = s.load(GOOD)
    assert loaded.gpuh_budget == 100.0 and loaded.run_budget is None
    assert loaded.budget_kind == "gpu_hours" and loaded.window == (5, 19)
    assert loaded.noise_floor == 0.01 and loaded.baseline_repeats == 3 and loaded.allow_web is True
    with pytest.raises(Exception):
        loaded.namespace = "other"


@pytest.mark.parametrize("changes, needle", [
    ({"ATTUNE_NAMESPACE": None}, "ATTUNE_NAMESPACE: missing; ATTUNE_BACKEND=kuberay needs it"),
    ({"AUTOTUNE_GPUH_BUDGET": "-5"}, "AUTOTUNE_GPUH_BUDGET=-5.0: must be greater than 0"),
    ({"AUTOTUNE_BUDGET": "10"}, "both are set"),
    ({"AUTOTUNE_GPUH_BUDGET": None}, "neither is set"),
    ({"ATTUNE_RUN_PREFIX": "Alice_llama"}, "ATTUNE_RUN_PREFIX='Alice_llama': must be lowercase"),
    ({"ATTUNE_RUN_PREFIX": "alice-llama"}, "end with '-'"),
    ({"AUTOTUNE_BUDGET": "0", "AUTOTUNE_GPUH_BUDGET": None}, "AUTOTUNE_BUDGET=0: must be greater than 0"),
    ({"AUTOTUNE_GPUH_BUDGET": "lots"}, "AUTOTUNE_GPUH_BUDGET='lots': not a number"),
    ({"ATTUNE_BACKEND": "slurm"}, "ATTUNE_BACKEND='slurm': must be one of kuberay, ray, local"),
    ({"ATTUNE_NAMESPACE": "ML_Tuning"}, "not a valid Kubernetes namespace"),
    ({"ATTUNE_ROWS_PATH": "/rows.parquet"}, "set both or neither"),
    ({"ATTUNE_SCORE_FIRST_STEP": "1"}, "the window must lie in iterations 2..20"),
    ({"ATTUNE_NOISE_FLOOR": "5"}, "must be a fraction between 0 and 0.5"),
    ({"ATTUNE_BASELINE_REPEATS": "1"}, "at least 2 baseline runs"),
    ({"ATTUNE_NAMESPCE": "x"}, "ATTUNE_NAMESPCE: unknown setting in the environment. Fix: remove it or rename it (did you mean ATTUNE_NAMESPACE?)"),
    ({"ATTUNE_RUN_PREFIX": None}, "ATTUNE_RUN_PREFIX: missing"),
])
def test_each_bad_setting_is_one_line_naming_variable_and_fix(changes, needle):
    found = problems(**changes)
    assert len(found) == 1, found
    assert needle in found[0]
    assert "Fix:" in found[0] and "\n" not in found[0]


def test_all_problems_reported_at_once():
    found = problems(ATTUNE_NAMESPACE=None, ATTUNE_IMAGE=None, AUTOTUNE_GPUH_BUDGET="-1")
    assert len(found) == 3


def test_local_backend_needs_no_cluster_settings():
    env = {"ATTUNE_RUN_PREFIX": "bob-x-", "ATTUNE_BASELINE_YAML": "b.yaml", "ATTUNE_BACKEND": "local",
           "AUTOTUNE_BUDGET": "12"}
    loaded = s.load(env)
    assert loaded.budget_kind == "runs" and loaded.budget_limit == 12.0


def test_config_file_then_environment(tmp_path):
    config = tmp_path / "config.env"
    config.write_text("export ATTUNE_RUN_PREFIX=carol-t-  # comment\nATTUNE_BASELINE_YAML='/a b/base.yaml'\n"
                      "ATTUNE_BACKEND=local\nAUTOTUNE_BUDGET=5\n")
    loaded = s.load({"AUTOTUNE_BUDGET": "7"}, config)
    assert loaded.run_prefix == "carol-t-" and loaded.baseline_yaml == "/a b/base.yaml"
    assert loaded.run_budget == 7


def test_config_file_errors_name_file_and_line(tmp_path):
    config = tmp_path / "config.env"
    config.write_text("ATTUNE_RUN_PREFIX=a-\nthis is not a setting\nATTUNE_BACKND=local\n")
    with pytest.raises(SettingsError) as info:
        s.load({}, config)
    assert "config.env:2:" in info.value.problems[0]
    with pytest.raises(SettingsError) as info:
        s.load({}, tmp_path / "missing.env")
    assert "missing.env: no such file" in info.value.problems[0]


def test_render_env_round_trips():
    loaded = s.load(GOOD)
    assert s.load(dict(loaded.as_env())) == loaded


def test_freeze_refuses_different_settings(tmp_path):
    first = s.load(dict(GOOD, ATTUNE_BASELINE_YAML="/tmp/with space/base.yaml"))
    f.freeze(first, tmp_path)
    assert s.load(s.parse_env_file(f.frozen_path(tmp_path))) == first
    assert f.for_campaign(tmp_path, env={}) == first
    second = s.load(dict(GOOD, AUTOTUNE_GPUH_BUDGET="5"))
    with pytest.raises(SettingsError):
        f.freeze(second, tmp_path)
    # the frozen copy wins over the environment
    assert f.for_campaign(tmp_path, env=dict(GOOD, AUTOTUNE_GPUH_BUDGET="5")) == first


def test_a_copy_frozen_before_a_setting_was_added_is_still_the_campaigns(tmp_path):
    first = s.load(GOOD)
    f.freeze(first, tmp_path)
    path = f.frozen_path(tmp_path)
    older = "".join(line for line in path.read_text().splitlines(True) if not line.startswith("ATTUNE_CLAUDE_VERSION="))
    path.write_text(older)  # as written by a version that had no ATTUNE_CLAUDE_VERSION
    assert f.freeze(first, tmp_path) == path and path.read_text() == older  # accepted, and left as it was
    with pytest.raises(SettingsError):
        f.freeze(s.load(dict(GOOD, ATTUNE_CLAUDE_VERSION="2.1")), tmp_path)


def test_example_file_matches_settings_in_both_directions():
    text = (REPO / "config.example.env").read_text()
    assert text == s.render_example(), "regenerate: python3 skill/scripts/attune.py settings --example > config.example.env"
    keys = [line.split("=", 1)[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert keys == [spec.env for spec in s.SPECS]
    assert set(keys) == {spec.env for spec in s.SPECS}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert "  # " in line, "every setting has a short comment: %s" % line


def test_example_file_loads_and_sources_in_bash_to_the_same_values():
    loaded = s.load({}, REPO / "config.example.env")
    assert loaded.backend == "kuberay"
    script = "set -a; . ./config.example.env; set +a; env"
    out = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"}).stdout
    sourced = dict(line.split("=", 1) for line in out.splitlines() if line.startswith(("ATTUNE_", "AUTOTUNE_")))
    assert s.load(sourced) == loaded


def test_required_settings_appear_in_example():
    required = {"ATTUNE_RUN_PREFIX", "ATTUNE_BASELINE_YAML", "ATTUNE_BACKEND", "ATTUNE_KUBE_CONTEXT",
                "ATTUNE_NAMESPACE", "ATTUNE_IMAGE", "ATTUNE_SHARED_DIR", "AUTOTUNE_LOG_POD", "AUTOTUNE_GPUH_BUDGET",
                "AUTOTUNE_BUDGET", "AUTOTUNE_ALLOW_WEB", "ATTUNE_ROWS_PATH", "ATTUNE_ROWS_SHA256", "ATTUNE_AGENT",
                "ATTUNE_CLAUDE_MODEL", "ATTUNE_GPU_HOUR_USD", "ATTUNE_SCORE_FIRST_STEP", "ATTUNE_SCORE_LAST_STEP",
                "ATTUNE_NOISE_FLOOR"}
    assert required <= set(s.SPEC_BY_ENV)


def test_check_files_names_the_missing_baseline(tmp_path):
    loaded = s.load(dict(GOOD, ATTUNE_BASELINE_YAML=str(tmp_path / "nope.yaml")))
    with pytest.raises(SettingsError) as info:
        loaded.check_files()
    assert "ATTUNE_BASELINE_YAML=" in info.value.problems[0] and "no such file" in info.value.problems[0]


ERROR_NAME = re.compile(r"\b(?:ATTUNE|AUTOTUNE)_[A-Z0-9_]*[A-Z0-9]\b")


def names_in_error_messages() -> dict:
    """Every ATTUNE_/AUTOTUNE_ name in a message the code gives when something is wrong: the strings of every
    ``raise``, of every ``print(..., file=sys.stderr)`` and every string with a ``Fix:`` (skill/ and harness/,
    tests aside): ``{name: {file, ...}}``."""
    found = {}
    for root in ("skill", "harness"):
        for path in sorted((REPO / root).rglob("*.py")):
            if "tests" in path.relative_to(REPO).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Raise) and node.exc is not None:
                    scope = node.exc
                elif isinstance(node, ast.Call) and any(k.arg == "file" and "stderr" in ast.dump(k.value)
                                                        for k in node.keywords):
                    scope = node
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "Fix:" in node.value:
                    scope = node
                else:
                    continue
                for sub in ast.walk(scope):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        for name in ERROR_NAME.findall(sub.value):
                            found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    return found


def test_every_name_an_error_message_gives_is_in_config_example_env():
    found = names_in_error_messages()
    assert {"ATTUNE_CLAUDE_BIN", "ATTUNE_SIM_HARDWARE", "AUTOTUNE_GPUH_BUDGET"} <= set(found)  # the scan sees them
    text = (REPO / "config.example.env").read_text()
    settings_lines = {line.split("=", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
    documented = {line[2:].split(":", 1)[0] for line in text.splitlines()
                  if line.startswith("# ") and ": not a setting, read from the " in line}
    missing = {name: sorted(files) for name, files in found.items() if name not in settings_lines | documented}
    assert not missing, "named by an error but not in config.example.env: %s" % missing
    assert documented == set(s.NOT_SETTINGS) | set(s.JOB_ENV) and not documented & settings_lines


def test_a_job_variable_in_a_settings_file_says_where_it_belongs(tmp_path):
    config = tmp_path / "config.env"
    config.write_text("ATTUNE_SIM_SEED=3\n")
    with pytest.raises(SettingsError) as caught:
        s.load(dict(GOOD), config)
    assert "ATTUNE_SIM_SEED in %s: not a setting: the training job reads it from its own environment" % config in \
        str(caught.value) and "runtimeEnvYAML env_vars" in str(caught.value)
    config.write_text("ATTUNE_CLAUDE_BIN=/opt/claude\n")  # read from the environment: ignored in a settings file
    assert s.load(dict(GOOD), config) == s.load(dict(GOOD))


def test_a_frozen_settings_file_cut_anywhere_is_refused_naming_it(tmp_path):
    """Wherever a cut falls (mid-value, mid-name, at a line's end), freezing over it is refused with the file named
    (or, when the lines it dropped held only defaults, taken as the same settings):
    the verdict must not depend on where the cut lands, which moves with the length of the paths the file holds."""
    made = s.load(dict(GOOD))
    path = f.freeze(made, tmp_path)
    text = path.read_text()
    for cut in range(1, len(text) - 1, 3):
        path.write_text(text[:cut])
        try:
            f.freeze(made, tmp_path)
        except SettingsError as found:
            assert str(path) in " ".join(found.problems), (cut, found.problems)
        else:  # only a cut that leaves the same settings (the lines it dropped held defaults) is taken
            assert s.load(s.parse_env_file(path)) == made, cut
