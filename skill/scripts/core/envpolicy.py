"""What a candidate may change in a job's environment, and what a launch refuses in a recipe's runtime_env.

The jobs run outside the agent's sandbox (a host process on the local backend, a Ray job, a RayJob), so a
variable that makes a program load code, or a runtime_env that ships code, would run what the agent wrote there.
This module is the one place that says what is allowed, as ALLOWLISTS:

* ``ALLOWED_NAMES`` and ``ALLOWED_PREFIXES``: the environment variables a candidate may set or unset (``attune
  candidate new --env/--unset-env``), built from the lever catalog (``references/levers.md``), the gate's rules
  (``correctness/rules/numerics_list.yaml``), the simulated workload's knobs (``simulate/README.md``) and the
  frameworks' documentation. A variable the baseline recipe itself sets is the user's own knob: a candidate may
  change it too. Whatever the lists say, a name in ``LOADS_CODE`` (or under one of its prefixes, or naming a
  library or module to load), one naming a file or directory (``NAMES_A_PATH`` and the words in
  ``PATH_WORDS``) and one the scheduler or ``attune launch`` sets (``NOT_A_LEVER``) is refused, with its reason.
* ``RUNTIME_ENV_KEYS``: the runtime_env keys a recipe may carry. Every key but ``env_vars`` carries code or how
  the job is set up: a launched recipe's must equal the baseline recipe's (the user's baseline is trusted, a
  candidate is not), and none may name a path inside the campaign (the agent writes there) other than under its
  read-only ``.attune/``.

``check_name`` and ``check_changes`` answer for ``candidate new``; ``check_launch`` for every launch, on every
backend (``runs._submit``), before anything is written or started.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping, Optional
from urllib.parse import unquote, urlparse

from .errors import InputError

# ----------------------------------------------------------------------------------- the environment allowlist
# families: every variable under the prefix is a setting of that library (its words are still checked below)
ALLOWED_PREFIXES = {
    "NCCL_": "NCCL's algorithm, protocol, channel, buffer, transport and logging settings (levers nvls, "
             "nccl-cta-policy, p2p chunk size, GDR level, graph register; numerics_list classes each); the names "
             "that load a plugin (NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN, ...) or read a file are refused by word",
    "TORCH_NCCL_": "PyTorch c10d's NCCL stream, error-handling and timeout settings (levers high-priority-nccl-"
                   "streams, avoid-record-streams)",
    "NVTE_": "Transformer Engine's kernel choices and SM margins (levers layernorm SM margin, fused or flash "
             "attention, cuDNN norms, CUTLASS grouped GEMM); NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE is refused",
    "CUDA_": "CUDA runtime settings (CUDA_DEVICE_MAX_CONNECTIONS is a lever; graphs, module loading); "
             "CUDA_INJECTION64_PATH, CUDA_CACHE_PATH and CUDA_HOME are refused by word, CUDA_VISIBLE_DEVICES "
             "and CUDA_DEVICE_ORDER as the scheduler's",
}

# exact names, each with why a campaign may try it
ALLOWED_NAMES = {
    # the simulated workload's own knobs (simulate/README.md; settings.JOB_ENV); ATTUNE_SIM_TRUTH is a file it writes
    "ATTUNE_SIM_HARDWARE": "the simulated GPU", "ATTUNE_SIM_GPUS": "the simulated world size",
    "ATTUNE_SIM_GPUS_PER_NODE": "simulated GPUs per node", "ATTUNE_SIM_SEED": "which simulated run",
    "ATTUNE_SIM_FAULT": "a fault the simulated run injects (fault checks)",
    "ATTUNE_SIM_SPEED": "wall-clock seconds per simulated iteration",
    # DeepEP / HybridEP dispatchers and the NVSHMEM they run on (levers deepep, hybridep)
    "DEEP_EP_DEVICE_TO_HCA_MAPPING": "DeepEP's GPU-to-NIC mapping",
    "NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN": "HybridEP dispatcher chunking",
    "NUM_OF_TOKENS_PER_CHUNK_COMBINE_API": "HybridEP dispatcher chunking",
    "NVLINK_DOMAIN_SIZE": "HybridEP topology override",
    "NVSHMEM_ENABLE_NIC_PE_MAPPING": "NVSHMEM NIC mapping (lever deepep)",
    "NVSHMEM_IB_ENABLE_IBGDA": "NVSHMEM transport", "NVSHMEM_DISABLE_NCCL": "NVSHMEM transport",
    "NVSHMEM_MAX_CTAS": "NVSHMEM transport",
    # Transformer Engine userbuffers (lever tp-comm-overlap)
    "UB_SKIPMC": "TP-overlap userbuffers without CUDA multicast", "UB_TIMEOUT": "userbuffers timeout",
    # memory and threads
    "PYTORCH_CUDA_ALLOC_CONF": "the caching allocator's settings (lever expandable-segments)",
    "PYTORCH_ALLOC_CONF": "the caching allocator's settings (PyTorch >= 2.9 name)",
    "OMP_NUM_THREADS": "CPU threads per rank (numerics_list)", "MKL_NUM_THREADS": "MKL threads per rank",
    "CUDA_MODULE_LOADING": "lazy or eager CUDA module loading (a mode, not a module)",
    # numerics the gate classes (numerics_list: a change that is numeric cannot ship, but may be tried)
    "CUBLAS_WORKSPACE_CONFIG": "cuBLAS workspace (GEMM algorithm choice, determinism)",
    "NVIDIA_TF32_OVERRIDE": "TF32 matmuls on or off",
    # torch.compile off (the harness's CPU recipe sets TORCHDYNAMO_DISABLE)
    "TORCHDYNAMO_DISABLE": "run compiled functions eagerly", "TORCH_COMPILE_DISABLE": "run compiled functions eagerly",
    "TORCH_INDUCTOR_DISABLE": "no inductor backend",
    # UCX / UCC transport of the UCC backend (numerics_list); not the UCX_ family: UCX_MODULE_DIR loads modules
    "UCX_TLS": "UCX transports", "UCX_NET_DEVICES": "UCX devices", "UCX_RNDV_THRESH": "UCX rendezvous threshold",
    "UCX_MEMTYPE_CACHE": "UCX memory-type cache", "UCC_CL_BASIC_TLS": "UCC transports",
    "UCC_EC_CUDA_STREAM_TASK_MODE": "UCC CUDA stream tasks", "TORCH_UCC_BLOCKING_WAIT": "UCC waits",
    # which network interface the CPU-side groups use
    "GLOO_SOCKET_IFNAME": "Gloo's network interface", "TP_SOCKET_IFNAME": "TensorPipe's network interface",
    # logging only
    "TORCH_CPP_LOG_LEVEL": "c10d log level", "TORCH_DISTRIBUTED_DEBUG": "c10d debug checks",
    "TORCH_SHOW_CPP_STACKTRACES": "C++ stack traces in errors",
}

# names that make a program load or run code they name: refused whatever the lists above say, and also when the
# baseline sets them (a candidate may not change the user's)
LOADS_CODE = {
    "PATH": "the programs a shell runs by name", "HOME": "~/.local site-packages, ~/.bashrc and every ~ config",
    "BASH_ENV": "a file bash runs at start", "ENV": "a file sh runs at start", "SHELL": "the shell programs start",
    "SHELLOPTS": "bash options (xtrace with PS4 runs code)", "BASHOPTS": "bash options", "PS4": "code bash runs",
    "PROMPT_COMMAND": "code bash runs", "IFS": "how a shell splits words", "CDPATH": "where cd goes",
    "PERL5OPT": "options (-M modules) perl loads", "PERL5LIB": "perl's module path", "PERLLIB": "perl's module path",
    "PERL5DB": "code perl's debugger runs", "RUBYOPT": "options (-r libraries) ruby loads",
    "RUBYLIB": "ruby's library path", "NODE_OPTIONS": "options (--require) node loads",
    "NODE_PATH": "node's module path", "JAVA_TOOL_OPTIONS": "agents a JVM loads", "_JAVA_OPTIONS": "JVM options",
    "JDK_JAVA_OPTIONS": "JVM options", "CLASSPATH": "classes a JVM loads", "GCONV_PATH": "glibc charset modules",
    "GLIBC_TUNABLES": "glibc's loader tunables", "LOCPATH": "glibc locale files", "TMPDIR": "where temp files go",
    "OPENSSL_CONF": "OpenSSL config (loads engines)", "OPENSSL_ENGINES": "OpenSSL engine libraries",
    "VIRTUAL_ENV": "the Python environment", "TORCH_HOME": "torch.hub's code cache",
    "TORCH_EXTENSIONS_DIR": "compiled C++/CUDA extensions torch loads",
    "CUDA_INJECTION64_PATH": "a library the CUDA driver loads into the process",
    "NCCL_NET_PLUGIN": "a network plugin library NCCL loads", "NCCL_TUNER_PLUGIN": "a tuner plugin NCCL loads",
    "NCCL_PROFILER_PLUGIN": "a profiler plugin NCCL loads", "NCCL_ENV_PLUGIN": "an env plugin NCCL loads",
    "NCCL_CONF_FILE": "a file of NCCL settings (plugins included)",
    "NVSHMEM_BOOTSTRAP_PLUGIN": "a bootstrap library NVSHMEM loads", "UCX_MODULE_DIR": "UCX modules it loads",
    "OMP_TOOL_LIBRARIES": "OMPT tool libraries OpenMP loads",
    "NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE": "unpickling a checkpoint's extra state (unpickling runs code)",
}
LOADS_CODE_PREFIXES = {
    "LD_": "the dynamic loader loads or audits the libraries it names (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH)",
    "DYLD_": "the macOS loader loads the libraries it names",
    "PYTHON": "Python imports or runs what it names (PYTHONPATH, PYTHONSTARTUP, PYTHONWARNINGS imports a "
              "category's module, PYTHONBREAKPOINT a callable)",
    "RAY_": "Ray's own settings, some naming code it imports (RAY_RUNTIME_ENV_HOOK)",
    "PIP_": "pip's index and options (what it installs)", "UV_": "uv's index and options (what it installs)",
    "CONDA_": "the conda environment", "XDG_": "where programs read their config", "HF_": "Hugging Face caches "
    "(HF_MODULES_CACHE holds remote code transformers imports)", "TRANSFORMERS_": "transformers' caches",
    "TORCHINDUCTOR_": "inductor's caches hold compiled kernels it loads (TORCHINDUCTOR_CACHE_DIR, FX graph cache)",
    "TRITON_": "Triton's cache holds compiled kernels it loads (TRITON_CACHE_DIR), TRITON_CACHE_MANAGER names a "
               "class it imports, TRITON_PTXAS_PATH a compiler it runs",
}
# a word of the name (split at _) that says the variable names code to load
CODE_WORDS = frozenset(("PLUGIN", "PLUGINS", "PRELOAD", "AUDIT", "LIB", "LIBS", "LIBRARY", "LIBRARIES", "MODULE",
                        "MODULES", "EXECUTABLE", "EXE", "BIN", "CMD", "COMMAND", "SCRIPT"))
# a word that says it names a file or directory the run reads or writes (a cache, a dump, a config file)
PATH_WORDS = frozenset(("FILE", "FILES", "FILENAME", "PATH", "PATHS", "DIR", "DIRS", "DIRECTORY", "HOME", "ROOT",
                        "PIPE", "CACHE", "PREFIX"))
NAMES_A_PATH = {"ATTUNE_SIM_TRUTH": "the file the simulated run writes its truth to"}
# set by the scheduler or by `attune launch`, never a recipe's choice
NOT_A_LEVER = {
    "CUDA_VISIBLE_DEVICES": "which GPUs the run uses is the scheduler's (Ray, Kubernetes, the local GPU slots)",
    "CUDA_DEVICE_ORDER": "it renumbers the GPUs the scheduler gave the run",
    "ATTUNE_RUN_ID": "attune launch sets it", "ATTUNE_ROWS_PATH": "attune launch sets it from the campaign's settings",
    "ATTUNE_ROWS_SHA256": "attune launch sets it", "NCCL_COMM_ID": "it moves NCCL's rendezvous",
    "RANK": "the launcher sets it", "LOCAL_RANK": "the launcher sets it", "WORLD_SIZE": "the launcher sets it",
    "LOCAL_WORLD_SIZE": "the launcher sets it", "MASTER_ADDR": "the launcher sets it",
    "MASTER_PORT": "the launcher sets it",
}
NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")  # upper case only: a lower-case spelling is some other variable


def _words(name: str) -> set:
    return {word for word in name.split("_") if word}


def refusal(name: str) -> Optional[str]:
    """Why no candidate may change ``name`` whoever set it (it loads code, names a path, or is not a recipe's
    choice); None when nothing refuses it outright."""
    if name in LOADS_CODE:
        return "%s makes the run load or run code it names (%s)" % (name, LOADS_CODE[name])
    for prefix, why in LOADS_CODE_PREFIXES.items():
        if name.startswith(prefix):
            return "%s makes the run load or run code it names (%s*: %s)" % (name, prefix, why)
    if name in NOT_A_LEVER:
        return "%s is not a recipe's choice (%s)" % (name, NOT_A_LEVER[name])
    if name in NAMES_A_PATH:
        return "%s names a file the run reads or writes (%s)" % (name, NAMES_A_PATH[name])
    if name in ALLOWED_NAMES:
        return None
    words = _words(name.upper())
    if words & CODE_WORDS:
        return "%s makes the run load or run code it names (a %s)" % (name, "/".join(sorted(words & CODE_WORDS)))
    if words & PATH_WORDS:
        return "%s names a file or directory the run reads or writes (a %s)" % (
            name, "/".join(sorted(words & PATH_WORDS)))
    return None


def allowed(name: str) -> bool:
    """Whether ``name`` is on the allowlist (an exact name, or in a family) and nothing refuses it."""
    if not NAME.match(name) or refusal(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(tuple(ALLOWED_PREFIXES))


def check_name(name: str, baseline_env: Mapping = None, where: str = None) -> None:
    """Refuse (``InputError``, exit 2) a variable no candidate may set or unset: one ``refusal`` names, or one
    neither on the allowlist nor set by the baseline recipe (``baseline_env``). ``where`` starts the message
    (default: the name)."""
    where = where or name
    why = refusal(name)
    if why:
        raise InputError("%s: %s, so no candidate sets or unsets it (the job runs outside the agent's sandbox). "
                         "Fix: tune another setting; what the job needs belongs in the baseline recipe" % (where, why))
    if allowed(name) or (baseline_env is not None and name in baseline_env):
        return
    raise InputError("%s: %s is not on the allowlist of environment variables a candidate may change (%s: "
                     "ALLOWED_NAMES, ALLOWED_PREFIXES) and the baseline recipe does not set it. Fix: change a "
                     "variable the lever catalog names (references/levers.md), or set %s in the baseline recipe "
                     "if the job reads it" % (where, name, Path(__file__).resolve(), name))


# ------------------------------------------------------------------------------------------- paths in values
def _inside(path: str, campaign: Path, bases: Iterable) -> bool:
    """Whether ``path`` (resolved against each of ``bases`` when relative) lies inside ``campaign`` other than under
    its ``.attune/``: as written (a link the agent may change later) or with links followed."""
    path = re.sub(r"^/+", "/", os.path.expanduser(path))
    frozen = campaign / ".attune"
    for base in ([None] if os.path.isabs(path) else list(bases)):
        joined = Path(os.path.normpath(path if base is None else os.path.join(str(base), path)))
        for candidate in (joined, Path(os.path.realpath(str(joined)))):
            if _under(candidate, campaign) and not _under(candidate, frozen):
                return True
    return False


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _paths(text: str, all_paths: bool) -> list:
    """``(part, local path)`` for each part of ``text`` that names a file here: with ``all_paths`` the whole text
    (a working_dir, a py_modules entry); else the whole and its words (split at separators, whitespace and colons)
    that are absolute, start with ~, or are relative with a slash (or . or ..). A ``file:`` URI gives its path; a
    remote URI (s3://, https://) none."""
    words = [text]
    if not all_paths:
        for part in re.split(r"[,;=@'\"()\[\]{}]+", text):
            words += [part] + part.split()
        words += [piece for word in list(words) for piece in word.split(":")]
    out = []
    for word in dict.fromkeys(w.strip() for w in words if w.strip()):
        if word.lower().startswith("file:"):
            out.append((word, unquote(urlparse(word).path)))
        elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", word):
            continue  # not a file here
        elif all_paths or word.startswith(("/", "~", "\\")):
            out.append((word, word))
        elif not re.search(r"\s", word) and ("/" in word or "\\" in word or word in (".", "..")):
            out.append((word, word))
    return out


def campaign_path(text: str, campaign_dir, run_dir=None, all_paths: bool = False) -> Optional[str]:
    """The first part of ``text`` that names a path inside the campaign (other than its read-only ``.attune/``),
    relative paths resolved against the campaign, a run directory (a job's working directory) and this process's
    working directory; None when there is none."""
    campaign = Path(os.path.realpath(str(campaign_dir)))
    bases = [campaign, Path(run_dir) if run_dir else campaign / "runs" / "run", Path(os.getcwd())]
    for word, path in _paths(str(text), all_paths):
        if path and _inside(path, campaign, bases):
            return word
    return None


def check_value(name: str, value, campaign_dir, where: str = None, run_dir=None) -> None:
    """Refuse a variable's value that names a path inside the campaign (the agent writes there)."""
    found = campaign_path(str(value), campaign_dir, run_dir)
    if found is not None:
        raise InputError("%s: %s's value names %s, a path inside the campaign %s (a relative path is taken as one: "
                         "a job may start there), where the agent writes: the run would read it outside the "
                         "sandbox. Fix: give a value that is not a path into the campaign"
                         % (where or name, name, found, campaign_dir))


def check_changes(changes: list, baseline_env: Mapping, campaign_dir) -> None:
    """Refuse a candidate's change records (``recipe.diff``) that set or unset a variable ``check_name`` refuses,
    or set one to a path inside the campaign."""
    for change in changes:
        name = change.get("env")
        if name is None:
            continue
        where = "--env %s=%s" % (name, change.get("value")) if change.get("op") == "set" else "--unset-env %s" % name
        check_name(name, baseline_env, where)
        if change.get("op") == "set":
            check_value(name, change.get("value"), campaign_dir, where)


# ------------------------------------------------------------------------------------ runtime_env at launch
CODE_KEYS = ("working_dir", "py_modules", "py_executable", "excludes", "pip", "uv", "conda", "container",
             "image_uri", "java_jars", "worker_process_setup_hook", "nsight", "rocprof_sys", "mpi")
RUNTIME_ENV_KEYS = {"env_vars": "checked per variable: the allowlist, or the baseline's own value",
                    "config": "Ray's setup options (timeouts, eager install)",
                    **{key: "code the job runs or how it is set up" for key in CODE_KEYS}}
PATH_KEYS = ("working_dir", "py_modules", "java_jars")  # every string is a path (or a remote URI), bare or not


def _strings(value) -> list:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in _strings(key) + _strings(item)]
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _strings(item)]
    return []


def _launcher(recipe) -> tuple:
    """The entrypoint less its arguments and the variables before the program: the launcher words, the program and
    what follows the arguments (``&& ...``)."""
    command = recipe.command
    words = command.words
    before = [w.value for w in words[:command.program_index] if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w.value)]
    return tuple(before + [command.program] + [w.value for w in words[command.args_end:]])


def _rest(recipe):
    """The recipe's RayJob less what a candidate may change (the entrypoint, the runtime_env, each worker group's
    replicas and GPU counts) and its metadata: the images, pod templates, volumes and submitter a job runs."""
    import copy

    import yaml
    doc = copy.deepcopy(yaml.safe_load(recipe.text))
    doc.pop("metadata", None)
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    spec.pop("entrypoint", None)
    spec.pop("runtimeEnvYAML", None)
    cluster = spec.get("rayClusterSpec") if isinstance(spec.get("rayClusterSpec"), dict) else {}
    for group in cluster.get("workerGroupSpecs") or []:
        if not isinstance(group, dict):
            continue
        for key in ("replicas", "minReplicas", "maxReplicas"):
            group.pop(key, None)
        for container in ((group.get("template") or {}).get("spec") or {}).get("containers") or []:
            for amounts in ((container or {}).get("resources") or {}).values():
                if isinstance(amounts, dict):
                    amounts.pop("nvidia.com/gpu", None)
    return doc


def launch_problems(campaign_dir, recipe, baseline, run_dir=None, set_by_attune: Mapping = None) -> list:
    """Every reason ``check_launch`` refuses ``recipe`` against the trusted ``baseline``, one line each."""
    set_by_attune = set_by_attune or {}
    problems = []
    own, base = recipe.runtime_env(), baseline.runtime_env()
    for key in sorted(own, key=str):
        if key not in RUNTIME_ENV_KEYS:
            problems.append("runtime_env key %r is not on the allowlist (%s). Fix: remove it from the recipe"
                            % (key, ", ".join(RUNTIME_ENV_KEYS)))
        elif key != "env_vars" and own[key] != base.get(key):
            problems.append("runtime_env %s is %r where the baseline recipe's is %r: a candidate may not change "
                            "the code its job runs or how it is set up. Fix: write the candidate with `attune "
                            "candidate new` from the baseline; code the job needs belongs in the baseline recipe"
                            % (key, own[key], base.get(key)))
    for key in sorted(set(base) - set(own), key=str):
        if key != "env_vars":
            problems.append("runtime_env %s is missing where the baseline recipe has %r. Fix: keep the baseline's"
                            % (key, base[key]))
    for key in CODE_KEYS:
        value = own.get(key)
        if key == "image_uri" or (key == "container" and isinstance(value, dict)):  # an image is a registry's name
            value = {k: v for k, v in value.items() if k != "image"} if isinstance(value, dict) else None
        for text in _strings(value):
            found = campaign_path(text, campaign_dir, run_dir, all_paths=key in PATH_KEYS)
            if found is not None:
                problems.append("runtime_env %s names %s, inside the campaign %s (a relative path is taken as "
                                "one) where the agent writes: the job would run it. Fix: point it at code outside "
                                "the campaign, by an absolute path or a remote URI" % (key, found, campaign_dir))
    if "env_vars" in own and not isinstance(own["env_vars"], dict):
        problems.append("runtime_env env_vars is not a mapping. Fix: give NAME: value pairs")
        return problems
    env, base_env = recipe.env(), baseline.env()
    for name in sorted(set(env) | set(base_env)):
        where = "environment variable %s" % name
        # the user's own, as the baseline sets it, and what attune itself set (a replay's rows_sha256) pass by name
        own_value = name in env and env[name] in (base_env.get(name), set_by_attune.get(name))
        try:
            if not own_value:
                check_name(name, base_env, where)
            if name in env:
                check_value(name, env[name], campaign_dir, where, run_dir)
        except InputError as exc:
            problems.append(str(exc))
    base_args = baseline.args()
    for flag, value in sorted(recipe.args().items()):
        if value is True or value == base_args.get(flag):
            continue  # the baseline's own value: the user's choice
        found = campaign_path(str(value), campaign_dir, run_dir)
        if found is not None:
            problems.append("argument %s %s names %s, a path inside the campaign %s (a relative path is taken as one) "
                            "where the agent writes: the run would read it outside the sandbox. Fix: give a value "
                            "that is not a path into the campaign" % (flag, value, found, campaign_dir))
    if _rest(recipe) != _rest(baseline):
        problems.append("the RayJob differs from the baseline recipe's beyond its entrypoint, runtime_env and GPU "
                        "counts (images, pod templates, volumes or the submitter): a candidate may not change what "
                        "its job runs on. Fix: write the candidate with `attune candidate new` from the baseline")
    if _launcher(recipe) != _launcher(baseline):
        problems.append("the entrypoint runs %r where the baseline recipe runs %r: a candidate changes arguments, "
                        "not the program or its launcher. Fix: write the candidate with `attune candidate new`"
                        % (" ".join(_launcher(recipe)), " ".join(_launcher(baseline))))
    return problems


def check_launch(campaign_dir, recipe, baseline, what: str, run_dir=None, set_by_attune: Mapping = None) -> None:
    """Refuse (``InputError``, exit 2) to launch ``recipe`` when its runtime_env or environment would run code the
    baseline recipe does not: a runtime_env key off the allowlist, a code-carrying key (``CODE_KEYS``) that differs
    from the baseline's, a path inside the campaign (other than ``.attune/``) in one of them or in a variable's
    value or in an argument's value other than the baseline's, a variable ``check_name`` refuses that the baseline
    does not set to that value, or another program.
    ``what`` names the launch (``run r001``); ``set_by_attune``: variables the launch itself set, with their values
    (a replay's ``ATTUNE_ROWS_SHA256``)."""
    problems = launch_problems(campaign_dir, recipe, baseline, run_dir, set_by_attune)
    if problems:
        raise InputError("%s refused before launch, nothing started: %s" % (what, " | ".join(problems)))
