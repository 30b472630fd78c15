"""Campaign settings: one typed, frozen object, read from the environment and a config file.

``SPECS`` is the single source of truth: each entry's help text is what ``config.example.env``
says (``attune settings --example`` prints it, and a test checks the checked-in file against it).

Precedence: values from ``--config FILE`` first, then the environment, which wins. Once a campaign
has started, its frozen copy ``<campaign>/.attune/settings.env`` is the only source: the campaign
keeps the settings it started with (``core/frozen.py``).

Every problem is one line that names the variable, the bad value, the rule and the fix; all the
problems are reported at once.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import os
import re
import shlex
from pathlib import Path
from typing import Mapping, Optional

from . import files
from .errors import InputError, SettingsError

PREFIXES = ("ATTUNE_", "AUTOTUNE_")
# Variables with these prefixes that are not settings, never frozen: read from the environment of the command
# that names them (where a command works, the test corpus, how the launcher starts an agent, what it passes to
# the agent). A settings file may hold them; they are ignored there.
NOT_SETTINGS = {
    "ATTUNE_CAMPAIGN_DIR": "the campaign directory a verb works in without --campaign (default: the current "
                           "directory); the launcher sets it for the agent",
    "ATTUNE_CAMPAIGN_LOCK": "set by a campaign's attune wrapper (.attune/bin/attune): its verbs work on that campaign "
                            "only, read only files inside it and write only into its scratch/",
    "ATTUNE_CORPUS_DIR": "where the reference corpora are read from (default: ../shared/data beside the repository)",
    "ATTUNE_PYTHON": "the Python launch_campaign.sh runs the launcher with (default: python3, or the demo's .venv)",
    "ATTUNE_CLAUDE_BIN": "the Claude Code program the launcher starts for ATTUNE_AGENT=claude (default: claude on "
                         "PATH)",
    "ATTUNE_SESSION_ID": "set by the launcher for the agent it starts: the agent session's id",
    "ATTUNE_PROMPT_FILE": "set by the launcher for --agent-command: the prompt file",
    "ATTUNE_MEGATRON_DIR": "a Megatron-LM checkout for the real demo and the real-Megatron tests and benchmarks "
                           "(harness/megatron_cpu.py; tested: tag core_v0.16.1)",
    "ATTUNE_MEGATRON_ARCHIVE": "a `git archive` tarball of a Megatron-LM tag, unpacked into ATTUNE_CACHE_DIR when "
                               "ATTUNE_MEGATRON_DIR is unset",
    "ATTUNE_CACHE_DIR": "where unpacked Megatron-LM sources are kept (default: ~/.cache/attune)",
    "ATTUNE_PLANNER_FAULT": "for the resume tests: after-launch:N, after-candidate:N or exit-after-launch:N ends the "
                            "planner after its N-th launch or candidate",
}
# Read by the training job from its own environment, not by ATTUNE: the simulated workload's knobs, set in the
# recipe's runtimeEnvYAML env_vars (skill/scripts/simulate/README.md), and what attune launch adds to every job.
JOB_ENV = {
    "ATTUNE_SIM_HARDWARE": "the simulated GPU (H100, H200, B200, ...); required by the simulated workload",
    "ATTUNE_SIM_GPUS": "the simulated world size (default: WORLD_SIZE, else 8)",
    "ATTUNE_SIM_GPUS_PER_NODE": "simulated GPUs per node (default: the projection's for that GPU)",
    "ATTUNE_SIM_SEED": "which run of the recipe the simulation prints: an integer, or auto (the run's id)",
    "ATTUNE_SIM_FAULT": "none, nccl_timeout, hang or crash, optionally @STEP",
    "ATTUNE_SIM_SPEED": "wall-clock seconds per simulated iteration (default 0.02)",
    "ATTUNE_SIM_TRUTH": "a JSON file for the values the simulated run meant to print",
    "ATTUNE_RUN_ID": "set by attune launch in every job: the run's id",
}
TRAIN_ITERS = 20  # the fixed-shape workload: 20 iterations (measurement.md §2)
TESTED_CLAUDE_VERSION = "2.1.332"  # the Claude Code the harness is tested with (.ci/run installs it)

_PREFIX_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}-$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclasses.dataclass(frozen=True)
class Spec:
    env: str
    field: str
    kind: str  # str, path, int, float, bool, enum
    default: Optional[str]
    help: str
    example: str = ""
    choices: tuple = ()
    group: str = "campaign"


SPECS = (
    Spec("ATTUNE_RUN_PREFIX", "run_prefix", "str", None,
         "prefix of every run and RayJob name of this campaign: <user>-<tag>-, lowercase, ends with '-'",
         "alice-llama70b-"),
    Spec("ATTUNE_BASELINE_YAML", "baseline_yaml", "path", None,
         "the working, untuned baseline recipe: a RayJob YAML running Megatron-LM or slime",
         "/path/to/baseline_rayjob.yaml"),
    Spec("ATTUNE_BACKEND", "backend", "enum", "kuberay",
         "where runs execute: kuberay (RayJobs on Kubernetes), ray (job submissions to a running Ray cluster) or "
         "local (processes on this host)",
         "kuberay", choices=("kuberay", "ray", "local")),
    Spec("ATTUNE_RAY_ADDRESS", "ray_address", "str", "",
         "the Ray cluster's job server, its dashboard address (ray: required)", "http://ray-head:8265",
         group="cluster"),
    Spec("ATTUNE_KUBE_CONTEXT", "kube_context", "str", "",
         "kubectl context of the cluster (kuberay: required)", "my-cluster", group="cluster"),
    Spec("ATTUNE_NAMESPACE", "namespace", "str", "",
         "namespace the campaign's RayJobs run in (kuberay: required)", "ml-tuning", group="cluster"),
    Spec("ATTUNE_IMAGE", "image", "str", "",
         "container image of the training job (kuberay: required; a RayJob whose pod templates name another image "
         "is refused at submission)", "registry.example.com/megatron:25.04",
         group="cluster"),
    Spec("ATTUNE_SHARED_DIR", "shared_dir", "str", "",
         "shared volume path where run pods write logs and traces (kuberay: required)", "/mnt/shared/attune",
         group="cluster"),
    Spec("AUTOTUNE_LOG_POD", "log_pod", "str", "",
         "pod that mounts the shared volume read-only to read run logs (kuberay: required)", "attune-log-reader",
         group="cluster"),
    Spec("ATTUNE_POD_SCRIPTS", "pod_scripts", "str", "",
         "skill/scripts as the run pods see it (a copy on the shared volume), for launches through the in-pod "
         "hooks (kuberay: needed for --pod-hook and --profile-of; local: this installation's)", "/mnt/shared/attune/scripts",
         group="cluster"),
    Spec("ATTUNE_POD_HOOKS", "pod_hooks", "str", "",
         "in-pod hooks every run of the campaign goes through, space-separated NAME[:KEY=VALUE,...] "
         "(skill/scripts/pod_hooks/README.md); e.g. cpu for Megatron-LM on a CPU-only host (its runs are marked cpu); "
         "empty: none", "", group="cluster"),
    Spec("AUTOTUNE_GPUH_BUDGET", "gpuh_budget", "float", "",
         "budget in GPU-hours; set exactly one of this and AUTOTUNE_BUDGET", "200", group="budget"),
    Spec("AUTOTUNE_BUDGET", "run_budget", "int", "",
         "budget in runs (every finalized run counts, failed and profile runs included, but not a launch whose "
         "submission failed); set exactly one of this "
         "and AUTOTUNE_GPUH_BUDGET",
         "", group="budget"),
    Spec("ATTUNE_GPU_HOUR_USD", "gpu_hour_usd", "float", "",
         "price of one GPU-hour in USD, for cost and payback in RESULTS.md and REPORT.md (empty: no cost)",
         "2.50", group="budget"),
    Spec("ATTUNE_AGENT", "agent", "enum", "claude",
         "who runs the loop: claude (Claude Code) or planner (the deterministic planner)", "claude",
         choices=("claude", "planner"), group="agent"),
    Spec("ATTUNE_CLAUDE_MODEL", "claude_model", "str", "",
         "model for Claude Code (empty: Claude Code's default)", "", group="agent"),
    Spec("ATTUNE_CLAUDE_VERSION", "claude_version", "str", "",
         "Claude Code version the campaign needs, as claude --version prints it (checked by attune doctor; a prefix "
         "such as 2.1 takes any 2.1.x; empty: any version); the harness is tested with %s" % TESTED_CLAUDE_VERSION,
         TESTED_CLAUDE_VERSION,
         group="agent"),
    Spec("ATTUNE_PLANNER_SEED", "planner_seed", "int", "0",
         "seed of the planner agent (ATTUNE_AGENT=planner): breaks ties between equally ranked alternatives; the same "
         "seed and campaign give the same decisions", "0", group="agent"),
    Spec("ATTUNE_PLANNER_GPU", "planner_gpu", "str", "",
         "GPU model the planner passes as --gpu and projects on (h100, b200, ...; empty: the recipe's "
         "ATTUNE_SIM_HARDWARE; with neither the planner has no projection and takes the catalog's levers in order)",
         "", group="agent"),
    Spec("ATTUNE_PLANNER_MAX_BAND", "planner_max_band", "float", "0.25",
         "widest noise band (its full range, a fraction) the planner agent goes on with: over it the campaign stops, "
         "since only a change larger than the band counts (a shared host whose levers are far larger than its "
         "noise may go higher)", "0.25", group="agent"),
    Spec("AUTOTUNE_ALLOW_WEB", "allow_web", "bool", "1",
         "let the agent use web search and fetch (0 for evaluation campaigns)", "1", group="agent"),
    Spec("ATTUNE_ROWS_PATH", "rows_path", "str", "",
         "the fixed-length training rows every run trains on, as the run pods see it: the rows Parquet file, or a "
         "slime dump's attune_dump.json", "", group="data"),
    Spec("ATTUNE_ROWS_SHA256", "rows_sha256", "str", "",
         "rows_sha256 of those rows (attune rows sha); checked at every launch and before shipping", "",
         group="data"),
    Spec("ATTUNE_SCORE_FIRST_STEP", "score_first_step", "int", "5",
         "first iteration of the scoring window (iterations are numbered 1..20 as Megatron prints them)", "5",
         group="measurement"),
    Spec("ATTUNE_SCORE_LAST_STEP", "score_last_step", "int", "19",
         "last iteration of the scoring window, inclusive", "19", group="measurement"),
    Spec("ATTUNE_NOISE_FLOOR", "noise_floor", "float", "0.01",
         "smallest gain that can lead, whatever the noise, as a fraction (0.01 = 1%)", "0.01", group="measurement"),
    Spec("ATTUNE_FALSE_WIN_RATE", "false_win_rate", "float", "0.05",
         "the most often a campaign may crown a change that does nothing (0.05 = 1 campaign in 20); split over the "
         "candidates it tests", "0.05", group="measurement"),
    Spec("ATTUNE_BASELINE_REPEATS", "baseline_repeats", "int", "3",
         "baseline runs needed before any candidate can lead (at least 2)", "3", group="measurement"),
    Spec("ATTUNE_MAX_IN_FLIGHT", "max_in_flight", "int", "1",
         "most runs in flight at once: above 1, up to this many one-lever candidates against the same leader run "
         "together (each still one change from its parent), when the budget holds their reservations and the "
         "cluster can place them; launch refuses a run past it (runs launched and not yet finalized)", "1",
         group="budget"),
    Spec("ATTUNE_EARLY_STOP", "early_stop", "bool", "0",
         "stop a candidate whose scored iterations so far show, at the leader test's own level, that it cannot beat "
         "the leader (recorded stopped_early, charged for what it used, never ranked; never a baseline, repeat, "
         "confirmation or leave-one-out run)", "0", group="measurement"),
    Spec("ATTUNE_HANG_AFTER_S", "hang_after_s", "float", "900",
         "seconds a running job may print nothing of its own (launcher chatter does not count) before it is torn "
         "down as a hang", "900", group="measurement"),
    Spec("ATTUNE_LOCAL_MEMORY_MB", "local_memory_mb", "float", "",
         "memory (MiB) a local run's processes may hold together before the local backend kills them as out of "
         "memory (empty: 85% of this host's memory; 0: no limit)", "", group="measurement"),
    Spec("ATTUNE_LOCAL_CONFINE", "local_confine", "enum", "on",
         "on: each local run runs in a bubblewrap sandbox of its own (it writes only its run's work/, pod_hooks/ and "
         "tmp/ folders, reaches no network beyond its own loopback, and cannot write its log); a launch is refused "
         "where bwrap cannot make one. off: local runs run unconfined, with all your rights, on purpose",
         "on", choices=("on", "off"), group="measurement"),
    Spec("ATTUNE_GATE_RULES", "gate_rules", "str", "",
         "your overrides of the gate's argument classes (YAML, see skill/scripts/correctness/rules/README.md; "
         "each entry with its justification); empty: the built-in classes only", "", group="measurement"),
)
SPEC_BY_ENV = {spec.env: spec for spec in SPECS}


@dataclasses.dataclass(frozen=True)
class Settings:
    run_prefix: str
    baseline_yaml: str
    backend: str
    kube_context: str
    ray_address: str
    namespace: str
    image: str
    shared_dir: str
    log_pod: str
    gpuh_budget: Optional[float]
    run_budget: Optional[int]
    allow_web: bool
    rows_path: str
    rows_sha256: str
    agent: str
    claude_model: str
    gpu_hour_usd: Optional[float]
    score_first_step: int
    score_last_step: int
    noise_floor: float
    baseline_repeats: int
    gate_rules: str = ""
    pod_scripts: str = ""
    pod_hooks: str = ""
    false_win_rate: float = 0.05
    planner_seed: int = 0
    planner_gpu: str = ""
    planner_max_band: Optional[float] = 0.25
    claude_version: str = ""
    hang_after_s: float = 900.0
    local_memory_mb: Optional[float] = None
    local_confine: str = "on"
    max_in_flight: int = 1
    early_stop: bool = False
    # (attribute, the path the settings gave) for each input a campaign reads from its frozen copy instead
    given: tuple = dataclasses.field(default=(), compare=False, repr=False)

    def as_given(self) -> "Settings":
        """These settings with the paths they were given, where a campaign reads its frozen copies instead."""
        return dataclasses.replace(self, given=(), **dict(self.given)) if self.given else self

    @property
    def budget_kind(self) -> str:
        """``gpu_hours`` or ``runs``: which budget the campaign spends."""
        return "gpu_hours" if self.gpuh_budget is not None else "runs"

    @property
    def budget_limit(self) -> float:
        return self.gpuh_budget if self.gpuh_budget is not None else float(self.run_budget)

    @property
    def window(self) -> tuple:
        return (self.score_first_step, self.score_last_step)

    def as_env(self) -> dict:
        """The settings as ``{ENV_NAME: text}``, the inverse of ``load``."""
        return {spec.env: _render(spec, getattr(self, spec.field)) for spec in SPECS}

    def render_env(self) -> str:
        """Canonical ``KEY=value`` text, one setting a line (the frozen campaign copy)."""
        return "".join("%s=%s\n" % (key, shlex.quote(val) if val else "") for key, val in self.as_env().items())

    def sha256(self) -> str:
        return hashlib.sha256(self.render_env().encode("utf-8")).hexdigest()

    def check_files(self) -> None:
        """Check the paths that must exist on this host (the launcher does this before starting)."""
        problems = []
        if not Path(self.baseline_yaml).is_file():
            problems.append("ATTUNE_BASELINE_YAML=%s: no such file. Fix: point it at the baseline RayJob YAML."
                            % self.baseline_yaml)
        if problems:
            raise SettingsError(problems)


def _render(spec: Spec, value) -> str:
    if value is None:
        return ""
    if spec.kind == "bool":
        return "1" if value else "0"
    if spec.kind == "float":
        return repr(float(value))
    return str(value)


def differences(frozen: Settings, env: Mapping[str, str] = None, config_file=None) -> list:
    """What the environment (and ``config_file``) set that differs from a campaign's frozen settings, one
    line a setting: the campaign keeps its own, so a resumed campaign never silently runs with other values."""
    env = os.environ if env is None else env
    given = dict(parse_env_file(config_file)) if config_file is not None else {}
    given.update({key: value for key, value in env.items() if value != ""})
    kept = frozen.as_given().as_env()
    lines = []
    for key in sorted(k for k in given if k in SPEC_BY_ENV):
        spec = SPEC_BY_ENV[key]
        problems = []
        value = _convert(spec, given[key], problems)
        if problems or _render(spec, value) != kept[key]:
            lines.append("%s: %r here, %r in the campaign" % (key, given[key], kept[key]))
    return lines


def parse_env_file(path) -> dict:
    """Read ``KEY=value`` lines (optional ``export``, shell quoting, ``#`` comments).

    A file that holds no setting (only comments), or more lines that are not ``KEY=value`` than
    lines that are, is not a settings file: one line says so instead of one per line."""
    path = Path(path)
    try:
        text = files.read_text(path, "settings file", "give a config.env of KEY=value lines (`attune settings "
                               "--example` prints one)")
    except InputError as exc:
        raise SettingsError([str(exc)])
    values = {}
    problems = []
    lines, first_bad = 0, None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        lines += 1
        if len(problems) == 0:
            first_bad = (number, raw)
        if line.startswith("export "):
            line = line[len("export "):].strip()
        key, sep, rest = line.partition("=")
        key = key.strip()
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            problems.append("%s:%d: %r is not KEY=value. Fix: write one setting per line as KEY=value."
                            % (path, number, raw))
            continue
        try:
            parts = shlex.split(rest, comments=True)
        except ValueError as exc:
            problems.append("%s:%d: %s: %s. Fix: balance the quotes." % (path, number, key, exc))
            continue
        if len(parts) > 1:
            problems.append("%s:%d: %s has several words; quote the value. Fix: %s=%s"
                            % (path, number, key, key, shlex.quote(" ".join(parts))))
            continue
        values[key] = parts[0] if parts else ""
    if not lines:
        raise SettingsError(["%s: holds no setting, only comments. Fix: write one setting per line as KEY=value "
                             "(`attune settings --example` lists them)" % path])
    if len(problems) > len(values):
        raise SettingsError(["%s: not a settings file: %d of its %d lines are not KEY=value settings (line %d: %r). "
                             "Fix: give a config.env of KEY=value lines (`attune settings --example` prints one)"
                             % ((path, len(problems), lines) + first_bad)])
    if problems:
        raise SettingsError(problems)
    return values


def _unknown_problems(values: Mapping[str, str], where: str) -> list:
    problems = []
    for key in sorted(values):
        if not key.startswith(PREFIXES) or key in SPEC_BY_ENV or key in NOT_SETTINGS:
            continue
        if key in JOB_ENV:
            problems.append("%s in %s: not a setting: the training job reads it from its own environment (%s). Fix: "
                            "remove it here; a job's environment is its recipe's runtimeEnvYAML env_vars"
                            % (key, where, JOB_ENV[key]))
            continue
        close = difflib.get_close_matches(key, list(SPEC_BY_ENV), n=1)
        hint = "did you mean %s?" % close[0] if close else "see config.example.env for the settings"
        problems.append("%s: unknown setting in %s. Fix: remove it or rename it (%s)" % (key, where, hint))
    return problems


def _convert(spec: Spec, text: str, problems: list):
    """Convert one value; append a problem line and return None when it is bad."""
    def bad(rule, fix):
        problems.append("%s=%r: %s. Fix: %s." % (spec.env, text, rule, fix))
        return None

    if spec.kind in ("int", "float") and text == "":
        return None
    if spec.kind == "int":
        try:
            return int(text)
        except ValueError:
            return bad("not an integer", "give a whole number, e.g. %s=%s" % (spec.env, spec.example or 3))
    if spec.kind == "float":
        try:
            value = float(text)
        except ValueError:
            return bad("not a number", "give a number, e.g. %s=%s" % (spec.env, spec.example or 1))
        if value != value or value in (float("inf"), float("-inf")):
            return bad("not a finite number", "give a finite number")
        return value
    if spec.kind == "bool":
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        return bad("not a boolean", "use 1 or 0")
    if spec.kind == "enum":
        if text not in spec.choices:
            return bad("must be one of %s" % ", ".join(spec.choices), "set %s=%s" % (spec.env, spec.choices[0]))
        return text
    return text


def load(env: Mapping[str, str] = None, config_file=None) -> Settings:
    """Build and validate the settings; raise ``SettingsError`` listing every problem."""
    env = os.environ if env is None else env
    merged = {}
    problems = []
    if config_file is not None:
        file_values = parse_env_file(config_file)
        problems += _unknown_problems(file_values, str(config_file))
        merged.update(file_values)
    problems += _unknown_problems(env, "the environment")
    merged.update({key: value for key, value in env.items() if key in SPEC_BY_ENV and value != ""})

    values = {}
    bad = set()  # fields whose value could not be converted: no cross-field check repeats them
    for spec in SPECS:
        text = merged.get(spec.env)
        if text is None or text == "":
            text = spec.default
        if text is None:
            problems.append("%s: missing. Fix: set it (%s), e.g. %s=%s"
                            % (spec.env, spec.help, spec.env, spec.example))
            values[spec.field] = None
            continue
        before = len(problems)
        values[spec.field] = _convert(spec, text, problems)
        if len(problems) > before:
            bad.add(spec.field)
    problems += _cross_checks(values, bad)
    if problems:
        raise SettingsError(problems)
    return Settings(**values)


def _cross_checks(v: dict, bad: set) -> list:
    problems = []
    prefix = v.get("run_prefix")
    if prefix is not None and not _PREFIX_RE.match(prefix):
        problems.append(
            "ATTUNE_RUN_PREFIX=%r: must be lowercase letters, digits and '-', start with a letter, end with '-' "
            "and be at most 32 characters (it starts Kubernetes object names). Fix: e.g. ATTUNE_RUN_PREFIX=alice-llama70b-"
            % prefix)
    if v.get("backend") == "kuberay":
        for env_name, field in (("ATTUNE_KUBE_CONTEXT", "kube_context"), ("ATTUNE_NAMESPACE", "namespace"),
                                ("ATTUNE_IMAGE", "image"), ("ATTUNE_SHARED_DIR", "shared_dir"),
                                ("AUTOTUNE_LOG_POD", "log_pod")):
            if not v.get(field):
                spec = SPEC_BY_ENV[env_name]
                problems.append("%s: missing; ATTUNE_BACKEND=kuberay needs it. Fix: set %s=<%s>, or ATTUNE_BACKEND=local"
                                % (env_name, env_name, spec.help.split(" (")[0]))
    if v.get("backend") == "ray":
        address = v.get("ray_address") or ""
        if not address:
            problems.append("ATTUNE_RAY_ADDRESS: missing; ATTUNE_BACKEND=ray needs it. Fix: set "
                            "ATTUNE_RAY_ADDRESS=http://HOST:8265 (the Ray dashboard), or ATTUNE_BACKEND=local")
        elif not address.startswith(("http://", "https://")):
            problems.append("ATTUNE_RAY_ADDRESS=%r: not an http(s) address. Fix: give the Ray dashboard's job address, "
                            "e.g. http://ray-head:8265" % address)
    if v.get("max_in_flight") is not None and v["max_in_flight"] < 1:
        problems.append("ATTUNE_MAX_IN_FLIGHT=%d: at least 1 run must be allowed in flight. Fix: 1 (one at a time) or "
                        "more" % v["max_in_flight"])
    namespace = v.get("namespace")
    if namespace and not _DNS_LABEL_RE.match(namespace):
        problems.append("ATTUNE_NAMESPACE=%r: not a valid Kubernetes namespace (lowercase DNS label, at most 63 "
                        "characters). Fix: give the namespace exactly as `kubectl get ns` prints it" % namespace)
    gpuh, runs = v.get("gpuh_budget"), v.get("run_budget")
    if {"gpuh_budget", "run_budget"} & bad:
        pass
    elif gpuh is None and runs is None:
        problems.append("AUTOTUNE_GPUH_BUDGET and AUTOTUNE_BUDGET: neither is set. Fix: set exactly one, "
                        "e.g. AUTOTUNE_GPUH_BUDGET=200 (GPU-hours) or AUTOTUNE_BUDGET=40 (ranked runs)")
    elif gpuh is not None and runs is not None:
        problems.append("AUTOTUNE_GPUH_BUDGET=%r and AUTOTUNE_BUDGET=%r: both are set. Fix: keep exactly one of them"
                        % (gpuh, runs))
    if gpuh is not None and gpuh <= 0:
        problems.append("AUTOTUNE_GPUH_BUDGET=%r: must be greater than 0. Fix: give the GPU-hours the campaign may spend"
                        % gpuh)
    if runs is not None and runs <= 0:
        problems.append("AUTOTUNE_BUDGET=%r: must be greater than 0. Fix: give the number of runs the campaign may rank"
                        % runs)
    price = v.get("gpu_hour_usd")
    if price is not None and price < 0:
        problems.append("ATTUNE_GPU_HOUR_USD=%r: must not be negative. Fix: give the price of one GPU-hour" % price)
    if bool(v.get("rows_path")) != bool(v.get("rows_sha256")):
        problems.append("ATTUNE_ROWS_PATH and ATTUNE_ROWS_SHA256: set both or neither. Fix: set ATTUNE_ROWS_SHA256 "
                        "to what `attune rows sha` prints for ATTUNE_ROWS_PATH")
    sha = v.get("rows_sha256")
    if sha and not _SHA_RE.match(sha):
        problems.append("ATTUNE_ROWS_SHA256=%r: not 64 lowercase hex digits. Fix: copy it from `attune rows sha`" % sha)
    first, last = v.get("score_first_step"), v.get("score_last_step")
    if first is not None and last is not None:
        if not (2 <= first <= last <= TRAIN_ITERS) or last - first + 1 < 3:
            problems.append(
                "ATTUNE_SCORE_FIRST_STEP=%r and ATTUNE_SCORE_LAST_STEP=%r: the window must lie in iterations 2..%d "
                "(iteration 1 includes warm-up) and span at least 3 iterations. Fix: use the defaults 5 and 19"
                % (first, last, TRAIN_ITERS))
    floor = v.get("noise_floor")
    if floor is not None and not (0 < floor < 0.5):
        problems.append("ATTUNE_NOISE_FLOOR=%r: must be a fraction between 0 and 0.5. Fix: e.g. 0.01 for 1%%" % floor)
    rate = v.get("false_win_rate")
    if rate is not None and not (0 < rate < 0.5):
        problems.append("ATTUNE_FALSE_WIN_RATE=%r: must be a fraction between 0 and 0.5. Fix: e.g. 0.05 for 1 campaign "
                        "in 20" % rate)
    repeats = v.get("baseline_repeats")
    if repeats is not None and repeats < 2:
        problems.append("ATTUNE_BASELINE_REPEATS=%r: at least 2 baseline runs are needed to measure noise. "
                        "Fix: set 3 (the default)" % repeats)
    return problems


def render_example() -> str:
    """The text of ``config.example.env``: every setting, one line each with a short comment, then, as comments,
    every other ``ATTUNE_``/``AUTOTUNE_`` variable ATTUNE reads or a message names (``NOT_SETTINGS``, ``JOB_ENV``)."""
    lines = [
        "# ATTUNE settings. Copy to config.env, fill in, then: set -a; . ./config.env; set +a",
        "# Generated from skill/scripts/core/settings.py (attune settings --example); a test keeps them equal.",
    ]
    group = None
    for spec in SPECS:
        if spec.group != group:
            group = spec.group
            lines.append("")
            lines.append("# --- %s" % group)
        required = " (required)" if spec.default is None else ""
        value = spec.example if spec.default is None else (spec.default if spec.default != "" else spec.example)
        lines.append("%s=%s  # %s%s" % (spec.env, value, spec.help, required))
    lines += ["", "# --- named in messages, but not settings: never frozen, never read from a settings file"]
    lines += ["# %s: not a setting, read from the environment: %s" % item for item in NOT_SETTINGS.items()]
    lines += ["# %s: not a setting, read from the job's environment (the recipe's runtimeEnvYAML env_vars): %s"
              % item for item in JOB_ENV.items()]
    return "\n".join(lines) + "\n"
