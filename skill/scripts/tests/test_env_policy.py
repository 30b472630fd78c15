"""The environment allowlist and the launch-time runtime_env checks (core/envpolicy.py), tested as an attacker
would: an agent that can write the campaign's top level and ``scratch/`` tries to make a job, which runs outside
its sandbox, load code from there through a variable, a runtime_env key or the entrypoint. Each is refused with
exit 2 before anything is written or started: no run id, no launch row, no process, no canary."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from conftest import DATA, SCRIPTS
from factory import local_campaign, settings as make_settings, wait

from attune import cli
from attune.campaign import ledger as campaign_mod, runs
from attune.campaign.candidates import parse_changes
from attune.core import envpolicy, levers as levers_mod
from attune.core.errors import InputError
from attune.core.recipe import Recipe

FAKE = (DATA / "recipes" / "local_fake_megatron.yaml").read_text().format(python=sys.executable,
                                                                           script=DATA / "fake_megatron.py")
RECIPES = sorted((SCRIPTS / "simulate" / "recipes").glob("*.yaml")) + \
    sorted((SCRIPTS.parents[1] / "harness" / "recipes").glob("*.yaml"))

# ------------------------------------------------------------------------------------------------ the allowlist


def test_every_variable_the_catalog_planner_and_demo_recipes_change_is_allowed():
    """What the lever catalog names (Flags, ``try``, companions), what the planner may touch (a lever's own names
    and its companions: it asserts no other), and what the shipped recipes set all pass, through parse_changes."""
    names = set()
    for entry in levers_mod.parse(levers_mod.CATALOG.read_text()):
        names |= set(entry["env"])
    for spec in levers_mod.specs().values():
        words = list(spec["try"] or [])
        names |= {value.split("=", 1)[0] for option, value in zip(words, words[1:])
                  if option in ("--env", "--unset-env")}
        names |= {name for name in spec["companions"] if not name.startswith("--")}
    for path in RECIPES:
        runtime_env = yaml.safe_load(yaml.safe_load(path.read_text())["spec"]["runtimeEnvYAML"])
        names |= set(runtime_env["env_vars"])
    from attune.planner.space import CUDA_ONLY
    names |= set(CUDA_ONLY)
    assert {"NCCL_NVLS_ENABLE", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_DEVICE_MAX_CONNECTIONS", "UB_SKIPMC",
            "ATTUNE_SIM_HARDWARE", "OMP_NUM_THREADS", "TORCHDYNAMO_DISABLE"} <= names
    refused = sorted(name for name in names if not envpolicy.allowed(name))
    assert refused == [], refused
    assert parse_changes(envs=["%s=1" % name for name in sorted(names)], unset_envs=sorted(names))
    # the simulated workload's knobs the README lists, but the file it writes
    from attune.core.settings import JOB_ENV
    sim = {name for name in JOB_ENV if name.startswith("ATTUNE_SIM_")}
    assert {name for name in sim if not envpolicy.allowed(name)} == {"ATTUNE_SIM_TRUTH"}


def test_no_exact_name_on_the_allowlist_is_one_the_policy_refuses():
    assert [name for name in envpolicy.ALLOWED_NAMES if envpolicy.refusal(name) or not envpolicy.NAME.match(name)] \
        == []


CODE_LOADERS = [
    "LD_AUDIT", "LD_PRELOAD", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "PYTHONWARNINGS", "PYTHONPATH",
    "PYTHONSTARTUP", "PYTHONBREAKPOINT", "PERL5OPT", "NODE_OPTIONS", "RUBYOPT", "BASH_ENV", "ENV", "PATH", "HOME",
    "TMPDIR", "JAVA_TOOL_OPTIONS", "GCONV_PATH", "OPENSSL_CONF",
    # inside an allowed family, a name that loads a library or reads a file by name
    "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN", "NCCL_CONF_FILE", "NCCL_TOPO_FILE",
    "NCCL_DEBUG_FILE", "CUDA_INJECTION64_PATH", "CUDA_CACHE_PATH", "CUDA_HOME", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE", "NVTE_CUDA_INCLUDE_PATH",
    # families that are not on the list, for what they load
    "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCH_EXTENSIONS_DIR", "TORCH_HOME",
    "TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER", "TRITON_PTXAS_PATH", "HF_HOME", "HF_MODULES_CACHE",
    "TRANSFORMERS_CACHE", "RAY_RUNTIME_ENV_HOOK", "PIP_INDEX_URL", "UCX_MODULE_DIR", "OMP_TOOL_LIBRARIES",
    # the scheduler's or attune's
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ATTUNE_SIM_TRUTH", "ATTUNE_ROWS_PATH", "ATTUNE_RUN_ID", "RANK",
    # another spelling of a name a program reads
    "ld_audit", "Nccl_Net_Plugin", "nccl_net_plugin",
]


@pytest.mark.parametrize("name", CODE_LOADERS)
def test_a_name_that_loads_code_is_refused_even_where_the_baseline_sets_it(name):
    for env in (["%s=scratch/x.so" % name], ["%s=ignore::evil.Boom" % name]):
        with pytest.raises(InputError) as raised:
            parse_changes(envs=env)
        assert name in str(raised.value) and "Fix:" in str(raised.value) and "\n" not in str(raised.value)
        with pytest.raises(InputError):
            parse_changes(envs=env, baseline_env={name: "/opt/lib"})  # the user's own, still not a candidate's
    with pytest.raises(InputError):
        parse_changes(unset_envs=[name], baseline_env={name: "/opt/lib"})
    assert not envpolicy.allowed(name)


def test_known_code_loaders_say_so():
    for name in ("LD_PRELOAD", "PYTHONWARNINGS", "NCCL_NET_PLUGIN", "TORCHINDUCTOR_CACHE_DIR", "BASH_ENV"):
        with pytest.raises(InputError, match="makes the run load or run code it names"):
            parse_changes(envs=["%s=x" % name])


def test_an_unknown_name_is_refused_naming_the_list_and_the_fix_unless_the_baseline_sets_it():
    with pytest.raises(InputError) as raised:
        parse_changes(envs=["VENDOR_KNOB=1"])
    message = str(raised.value)
    assert message.startswith("--env VENDOR_KNOB=1: VENDOR_KNOB is not on the allowlist")
    assert str(Path(envpolicy.__file__).resolve()) in message and "Fix:" in message and "\n" not in message
    with pytest.raises(InputError, match="--unset-env VENDOR_KNOB: VENDOR_KNOB is not on the allowlist"):
        parse_changes(unset_envs=["VENDOR_KNOB"])
    # a variable the baseline sets is the user's own knob
    assert parse_changes(envs=["VENDOR_KNOB=2"], baseline_env={"VENDOR_KNOB": "1"}) == [
        {"op": "set", "env": "VENDOR_KNOB", "value": "2"}]
    assert parse_changes(envs=["NCCL_ALGO=Ring", "NVTE_FUSED_ATTN=0", "TORCH_NCCL_HIGH_PRIORITY=1"])


# ------------------------------------------------------------------------------------------ candidate new, CLI
@pytest.fixture
def campaign(tmp_path):
    baseline = tmp_path / "baseline.yaml"
    shutil.copy(DATA / "recipes" / "megatron_rayjob.yaml", baseline)
    settings = make_settings(ATTUNE_BASELINE_YAML=str(baseline), ATTUNE_RUN_PREFIX="ev-")
    made = campaign_mod.init(tmp_path / "c", settings, "ev-test")
    (made.dir / "scratch").mkdir(exist_ok=True)
    return made


def new(campaign, *args):
    return cli.main(["candidate", "new", "--campaign", str(campaign.dir), "--parent", "baseline", "--lever",
                     "other: x", "--hypothesis", "h", "--gate-will-fail", *args])


def runs_written(campaign):
    return sorted(os.listdir(campaign.dir / "runs")) if (campaign.dir / "runs").exists() else []


@pytest.mark.parametrize("env", [
    "PYTHONWARNINGS=ignore::evil.Boom", "LD_AUDIT=scratch/audit.so", "NCCL_NET_PLUGIN=scratch/net.so",
    "TORCHINDUCTOR_CACHE_DIR=scratch/inductor", "PERL5OPT=-Mevil", "NODE_OPTIONS=--require=./scratch/evil.js",
    # an allowed name whose value is a path the agent wrote: absolute, relative, from a run's folder, a file: URI
    "NCCL_DEBUG=scratch/x.so", "NCCL_DEBUG=./scratch/x.so", "NCCL_IB_HCA=../../scratch/x.so",
    "NCCL_DEBUG={camp}/scratch/x.so", "NCCL_DEBUG=file://{camp}/scratch/x.so", "NCCL_DEBUG=WARN,{camp}/notes.md",
    "PYTORCH_CUDA_ALLOC_CONF=backend:{camp}/scratch/alloc.so",
])
def test_candidate_new_refuses_what_would_load_the_agents_code_and_writes_nothing(campaign, capsys, env):
    env = env.format(camp=campaign.dir)
    assert new(campaign, "--env", env) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Fix:" in err
    assert runs_written(campaign) == []


def test_candidate_new_keeps_allowed_settings_and_the_baselines_own_knobs(campaign, capsys):
    assert new(campaign, "--env", "NCCL_ALGO=Ring") == 0
    assert new(campaign, "--env", "NCCL_DEBUG=INFO") == 0  # set by the baseline, on the list too
    assert new(campaign, "--unset-env", "NCCL_DEBUG") == 0
    assert len(runs_written(campaign)) == 3


# ---------------------------------------------------------------------------------- runtime_env at launch
RAYJOB = """apiVersion: ray.io/v1
kind: RayJob
metadata:
  name: ev
spec:
  entrypoint: |
    {entry} --micro-batch-size 1 --seed 1
  runtimeEnvYAML: |
{env}
  rayClusterSpec:
    workerGroupSpecs:
      - groupName: workers
        replicas: 1
        template:
          spec:
            containers:
              - name: worker
                resources:
                  limits:
                    nvidia.com/gpu: 1
"""
BASE_ENV = {"working_dir": "/opt/app", "py_modules": ["/opt/lib/mine"], "pip": ["numpy==2.0.0"],
            "env_vars": {"NCCL_DEBUG": "WARN", "LD_LIBRARY_PATH": "/opt/cuda/lib64", "FAKE_MODE": "ok"}}


def rayjob(runtime_env: dict, entry: str = "python3 /opt/app/train.py") -> Recipe:
    inner = textwrap.indent(yaml.safe_dump(runtime_env, sort_keys=False), "    ")
    return Recipe(RAYJOB.format(entry=entry, env=inner.rstrip("\n")), "recipe.yaml")


def forged(**changes) -> dict:
    out = json.loads(json.dumps(BASE_ENV))
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@pytest.fixture
def camp(tmp_path):
    root = tmp_path / "camp"
    for sub in ("scratch/evil", ".attune/skill"):
        (root / sub).mkdir(parents=True)
    return root


def refused(camp, recipe, baseline=None):
    with pytest.raises(InputError) as raised:
        envpolicy.check_launch(camp, recipe, baseline or rayjob(BASE_ENV), "run ev-r001",
                               camp / "runs" / "ev-r001")
    message = str(raised.value)
    assert message.startswith("run ev-r001 refused before launch") and "\n" not in message and "Fix:" in message
    return message


def test_the_baseline_itself_and_a_candidate_that_changes_allowed_settings_launch(camp):
    envpolicy.check_launch(camp, rayjob(BASE_ENV), rayjob(BASE_ENV), "the baseline launch")
    ok = forged(env_vars=dict(BASE_ENV["env_vars"], NCCL_ALGO="Ring", FAKE_MODE="hang", NCCL_DEBUG="INFO"))
    envpolicy.check_launch(camp, rayjob(ok), rayjob(BASE_ENV), "run ev-r001")
    unset = forged(env_vars={"LD_LIBRARY_PATH": "/opt/cuda/lib64"})  # the baseline's FAKE_MODE and NCCL_DEBUG unset
    envpolicy.check_launch(camp, rayjob(unset), rayjob(BASE_ENV), "run ev-r001")


@pytest.mark.parametrize("attack,expected", [
    (lambda c: forged(working_dir=str(c / "scratch")), "runtime_env working_dir"),
    (lambda c: forged(working_dir="scratch"), "runtime_env working_dir"),
    (lambda c: forged(working_dir="."), "runtime_env working_dir"),
    (lambda c: forged(py_modules=["file://%s/scratch/evil" % c]), "runtime_env py_modules"),
    (lambda c: forged(py_modules=["/opt/lib/mine", str(c / "scratch" / "evil")]), "runtime_env py_modules"),
    (lambda c: forged(pip=["-r %s/scratch/requirements.txt" % c]), "runtime_env pip"),
    (lambda c: forged(pip={"packages": ["evil @ file://%s/scratch/evil" % c]}), "runtime_env pip"),
    (lambda c: forged(uv=["numpy"]), "runtime_env uv"),
    (lambda c: forged(py_executable="%s/scratch/python" % c), "runtime_env py_executable"),
    (lambda c: forged(image_uri="evil/image:latest"), "runtime_env image_uri"),
    (lambda c: forged(worker_process_setup_hook="evil.setup"), "runtime_env worker_process_setup_hook"),
    (lambda c: forged(working_dir=None), "runtime_env working_dir is missing"),
    (lambda c: forged(Working_Dir=str(c / "scratch")), "runtime_env key 'Working_Dir' is not on the allowlist"),
    (lambda c: forged(ENV_VARS={"LD_AUDIT": "x"}), "runtime_env key 'ENV_VARS' is not on the allowlist"),
    (lambda c: forged(plugins={"evil": 1}), "runtime_env key 'plugins' is not on the allowlist"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], LD_AUDIT="/opt/audit.so")), "LD_AUDIT makes the run"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], LD_LIBRARY_PATH=str(c / "scratch"))), "LD_LIBRARY_PATH"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], PYTHONWARNINGS="ignore::evil.Boom")), "PYTHONWARNINGS"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], NCCL_NET_PLUGIN="net")), "NCCL_NET_PLUGIN"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], VENDOR_KNOB="1")), "VENDOR_KNOB is not on the allowlist"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], NCCL_ALGO="scratch/x.so")), "NCCL_ALGO's value names"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], NCCL_ALGO="../../scratch/x.so")), "NCCL_ALGO's value"),
    (lambda c: forged(env_vars=dict(BASE_ENV["env_vars"], FAKE_MODE="%s/notes.md" % c)), "FAKE_MODE's value"),
    (lambda c: forged(env_vars={k: v for k, v in BASE_ENV["env_vars"].items() if k != "LD_LIBRARY_PATH"}),
     "LD_LIBRARY_PATH makes the run"),
    (lambda c: forged(env_vars="LD_AUDIT=x"), "env_vars is not a mapping"),
])
def test_a_forged_runtime_env_is_refused_before_launch(camp, attack, expected):
    assert expected in refused(camp, rayjob(attack(camp)))


def test_a_forged_entrypoint_is_refused_before_launch(camp):
    preload = rayjob(BASE_ENV, "LD_PRELOAD=/opt/x.so python3 /opt/app/train.py")
    assert "LD_PRELOAD makes the run" in refused(camp, preload)
    assert "the entrypoint runs" in refused(camp, rayjob(BASE_ENV, "python3 %s/scratch/evil.py" % camp))
    assert "the entrypoint runs" in refused(camp, rayjob(BASE_ENV, "python3 /opt/app/train.py --seed 2 && sh x"))
    assert "NCCL_DEBUG's value" in refused(camp, rayjob(BASE_ENV, "NCCL_DEBUG=%s/x python3 /opt/app/train.py" % camp))
    # an allowed variable before the program is a candidate's change like any other
    envpolicy.check_launch(camp, rayjob(BASE_ENV, "NCCL_ALGO=Ring python3 /opt/app/train.py"), rayjob(BASE_ENV),
                           "run ev-r001")


def test_the_baselines_own_code_is_refused_when_it_lives_where_the_agent_writes(camp):
    inside = rayjob(forged(working_dir=str(camp / "scratch")))
    assert "runtime_env working_dir names" in refused(camp, inside, inside)
    link = camp / "scratch" / "lib"
    link.symlink_to("/usr/lib")  # outside now; the agent may point it elsewhere later
    linked = rayjob(forged(py_modules=[str(link / "mine")]))
    assert "runtime_env py_modules names" in refused(camp, linked, linked)
    # the campaign's read-only frozen copy is not the agent's
    frozen = rayjob(forged(py_modules=[str(camp / ".attune" / "skill")]))
    envpolicy.check_launch(camp, frozen, frozen, "the baseline launch")
    remote = rayjob(forged(working_dir="s3://bucket/app.zip"))
    envpolicy.check_launch(camp, remote, remote, "the baseline launch")


# ------------------------------------------------------------------------------- by effect, on the local backend
SITE = "import pathlib\npathlib.Path(%r).write_text('ran')\n"


def forge_candidate(campaign, text: str) -> str:
    """A candidate written by hand into runs/ (an agent that got past `candidate new`): its recipe and record."""
    run = "fk-r099"
    directory = campaign.run_dir(run)
    directory.mkdir(parents=True)
    (directory / "recipe.yaml").write_text(text)
    (directory / "candidate.json").write_text(json.dumps({"run": run, "parent": "baseline", "change": [],
                                                          "lever": "other: x", "hypothesis": "h"}))
    return run


def with_env(text: str, **env) -> str:
    lines = "".join("      %s: %s\n" % (name, json.dumps(value)) for name, value in env.items())
    return text.replace("      FAKE_MODE: ok\n", "      FAKE_MODE: ok\n" + lines)


@pytest.mark.parametrize("how", ["pythonpath", "program", "working_dir"])
def test_a_forged_candidate_is_refused_on_the_local_backend_and_nothing_runs(tmp_path, how):
    for campaign, settings in local_campaign(tmp_path, FAKE, "fk-", "fk-test"):
        scratch = campaign.dir / "scratch"
        scratch.mkdir(exist_ok=True)
        canary = tmp_path / "canary"
        (scratch / "sitecustomize.py").write_text(SITE % str(canary))
        (scratch / "evil.py").write_text(SITE % str(canary))
        if how == "pythonpath":
            text = with_env(FAKE, PYTHONPATH=str(scratch))
        elif how == "program":
            text = FAKE.replace(str(DATA / "fake_megatron.py"), str(scratch / "evil.py"))
        else:
            text = FAKE.replace("    env_vars:\n", "    working_dir: %s\n    env_vars:\n" % scratch)
        recipe = Recipe(text)
        if how != "working_dir":  # the attack is real: run as the local backend would, it runs the agent's code
            env = dict(os.environ, **recipe.env())
            subprocess.run(recipe.command.text, shell=True, env=env, cwd=str(tmp_path), timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            assert canary.read_text() == "ran"
            canary.unlink()
        baseline = runs.launch_baseline(campaign, settings)["run"]
        wait(campaign, settings, baseline, ("succeeded",))
        run = forge_candidate(campaign, text)
        rows_before = campaign.ledger.rows()
        with pytest.raises(InputError, match="run fk-r099 refused before launch, nothing started"):
            runs.launch_candidate(campaign, settings, run)
        assert campaign.ledger.rows() == rows_before  # no launch row
        assert sorted(os.listdir(campaign.run_dir(run))) == ["candidate.json", "recipe.yaml"]
        assert cli.main(["launch", run, "--campaign", str(campaign.dir)]) == 2
        assert not canary.exists()


def test_a_baseline_whose_code_lives_in_the_campaign_is_refused_before_a_run_id_is_used(tmp_path):
    text = FAKE.replace("    env_vars:\n", "    working_dir: %s\n    env_vars:\n" % (tmp_path / "c" / "scratch"))
    for campaign, settings in local_campaign(tmp_path, text, "bk-", "bk-test"):
        rows = campaign.ledger.rows()
        with pytest.raises(InputError, match="the baseline refused before launch, nothing started: "
                                             "runtime_env working_dir names"):
            runs.launch_baseline(campaign, settings)
        assert campaign.ledger.rows() == rows and runs_written(campaign) == []


def test_only_attune_sets_a_replays_rows_sha256(camp):
    replay = rayjob(forged(env_vars=dict(BASE_ENV["env_vars"], ATTUNE_ROWS_SHA256="ab" * 32)))
    assert "ATTUNE_ROWS_SHA256 is not a recipe's choice" in refused(camp, replay)
    envpolicy.check_launch(camp, replay, rayjob(BASE_ENV), "the replay",
                           set_by_attune={"ATTUNE_ROWS_SHA256": "ab" * 32})
    with pytest.raises(InputError, match="ATTUNE_ROWS_SHA256"):
        envpolicy.check_launch(camp, replay, rayjob(BASE_ENV), "the replay",
                               set_by_attune={"ATTUNE_ROWS_SHA256": "cd" * 32})


def test_an_argument_naming_a_path_in_the_campaign_is_refused_unless_the_baseline_gives_it(camp):
    for value in ("%s/scratch/evil.json" % camp, "scratch/evil.json", "../../scratch/evil.json",
                  "file://%s/scratch/x" % camp):
        message = refused(camp, rayjob(BASE_ENV, "python3 /opt/app/train.py --tp-comm-overlap-cfg %s" % value))
        assert "argument --tp-comm-overlap-cfg" in message, message
    own = rayjob(BASE_ENV, "python3 /opt/app/train.py --save %s/scratch/ckpt" % camp)
    envpolicy.check_launch(camp, own, own, "the baseline launch")  # the user's own choice, as the baseline gives it
    envpolicy.check_launch(camp, rayjob(BASE_ENV, "python3 /opt/app/train.py --data-path /data/set"),
                           rayjob(BASE_ENV), "run ev-r001")
    envpolicy.check_launch(camp, rayjob(BASE_ENV, "python3 /opt/app/train.py --load %s/.attune/dumps/x" % camp),
                           rayjob(BASE_ENV), "run ev-r001")  # the campaign's read-only records


def test_a_rayjob_that_changes_what_its_job_runs_on_is_refused(camp):
    base = rayjob(BASE_ENV)
    assert "beyond its entrypoint" in refused(camp, Recipe(base.text.replace("replicas: 1", "replicas: 1\n"
                                                                             "        rayStartParams: {evil: x}"),
                                                           "recipe.yaml"))
    image = base.text.replace("- name: worker", "- name: worker\n                image: evil/image:latest")
    assert "beyond its entrypoint" in refused(camp, Recipe(image, "recipe.yaml"))
    # a layout change's GPU counts and the run's own name are a candidate's to change
    regrouped = base.text.replace("replicas: 1", "replicas: 2").replace("nvidia.com/gpu: 1", "nvidia.com/gpu: 2")
    envpolicy.check_launch(camp, Recipe(regrouped.replace("name: ev", "name: ev-r002", 1), "recipe.yaml"), base,
                           "run ev-r002")
