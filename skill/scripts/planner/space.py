"""The planner's search space: the catalog's levers as named sets of discrete alternatives.

Signatures (stable; a benchmark drives them without the CLI)::

    space(recipe, baseline=None, *, gpu=None, gate_rules=None, catalog=None, include_empty=False) -> list[Lever]
    apply(recipe, alternative) -> Recipe
    predict(recipe, levers, hardware=None) -> tuple[Optional[Prediction], dict[(lever_id, name), Prediction]]
    project_recipe(recipe, hardware=None) -> Optional[Prediction]
    as_recipe(recipe_or_text) -> Recipe
    undo(parent, child, lever, name) -> Optional[Alternative]   # the change that takes child back to parent
    leave_one_out(leader, parent, child, lever, name, baseline=None, *, gpu=None, gate_rules=None)
        -> Optional[Alternative]                               # undo, applied to the leader and checked
    check(parent, child, baseline, gpu, gate_rules) -> str     # why child cannot be a candidate ("" if it can)

``recipe`` is an ``attune.core.recipe.Recipe`` or its YAML text. An ``Alternative`` is one candidate change
in ``attune candidate new`` syntax: ``changes`` is a tuple of ``(option, value)`` pairs with option one of
``--set`` (value ``ARG`` or ``ARG=VALUE``), ``--unset`` (``ARG``), ``--env`` (``NAME=VALUE``) and
``--unset-env`` (``NAME``), arguments written without their dashes; ``argv()`` is what follows
``candidate new``. Every alternative changes its lever's own flags (the catalog entry's *Flags*) and, where a
coupling requires it, the companions the lever declares (``COMPANIONS``: the catalog's *Couples with* and the
legality rules), never another lever's flags.

Each alternative of ``space(recipe)`` has been applied to ``recipe`` and passed, against ``baseline``
(default: ``recipe`` itself), the checks ``attune candidate new`` makes and the gate's configuration check:
the fixed-shape workload (``workload.compare``), Megatron-LM's legality (``attune.core.legality``) and the
model-construction asserts the projection checks (``projection.config.parse``), and the gate's classes
(``correctness.config_check``: no ``numeric`` or ``fixed`` change, so the candidate can ship). Those that fail
are kept in ``Lever.rejected`` with the reason. A lever with no alternative left is dropped unless
``include_empty``. Nothing here starts a process or writes a file.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence, Tuple

SCRIPTS = Path(__file__).resolve().parents[1]
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

from attune.campaign.candidates import known_flags, parse_changes  # noqa: E402
from attune.core import legality, levers as levers_mod, slime as slime_mod, workload  # noqa: E402
from attune.core.errors import AttuneError  # noqa: E402
from attune.core.recipe import Recipe, diff  # noqa: E402
from attune.planner.generators import BOTTLENECKS, GENERATORS, Context, as_int  # noqa: E402

__all__ = ["Alternative", "Lever", "Prediction", "space", "no_mechanism", "apply", "predict", "project_recipe", "as_recipe", "undo",
           "leave_one_out", "check", "LEVER_IDS", "COMPANIONS", "OPTIONS"]

OPTIONS = ("--set", "--unset", "--env", "--unset-env")

# The levers of the space, in the catalog's order (ids of skill/references/levers.md).
LEVER_IDS = (
    "tensor-parallel-size", "sequence-parallel", "tp-comm-overlap", "pipeline-parallel-size", "virtual-pipeline",
    "context-parallel-size", "expert-parallel-size", "moe-a2a-overlap", "delay-wgrad-compute", "token-dispatcher",
    "micro-batch-size", "selective-recompute", "full-recompute",
    "distributed-optimizer", "expandable-segments", "overlap-grad-reduce", "overlap-param-gather", "ddp-bucket-size",
    "cuda-device-max-connections", "high-priority-nccl-streams", "nvls", "nccl-cta-policy", "nccl-p2p-chunksize",
    "avoid-record-streams", "slime-offload", "sglang-mem-fraction", "dynamic-batch-size", "rollout-engine-tp",
    "log-probs-max-tokens",
)
# slime's own levers, offered first on a slime recipe: they address what an RL step adds to training (padded
# micro-batches of uneven samples, the rollout engines); the Megatron-LM layout levers follow
SLIME_LEVER_IDS = ("dynamic-batch-size", "rollout-engine-tp", "sglang-mem-fraction", "slime-offload",
                   "log-probs-max-tokens")
SLIME_SEQ_LENGTH = "4096"  # slime's --seq-length when a recipe sets none (slime/backends/megatron_utils/arguments.py)

# Flags a lever's alternative may change besides its own, each because a rule couples them (the catalog's
# "Couples with" or a legality rule): levers.yaml's companions, name -> why.
COMPANIONS = {lever: spec["companions"] for lever, spec in levers_mod.specs().items() if spec["companions"]}



@dataclasses.dataclass(frozen=True)
class Alternative:
    """One candidate change: ``lever`` (catalog id), ``name`` (what it sets, the same whatever the parent,
    e.g. ``micro-batch-size=2``) and ``changes`` (``(option, value)`` pairs in ``candidate new`` syntax)."""
    lever: str
    name: str
    changes: tuple
    companions: tuple = ()  # the companion flags among the changes
    child: object = dataclasses.field(default=None, compare=False, hash=False, repr=False)  # parent + change

    @property
    def key(self) -> tuple:
        return (self.lever, self.name)

    def argv(self) -> list:
        """The words after ``attune candidate new --parent P``: e.g. ``["--set", "micro-batch-size=2"]``."""
        return [word for pair in self.changes for word in pair]

    def records(self) -> list:
        """The changes as recipe change records (``Recipe.apply``)."""
        sets = [v for o, v in self.changes if o == "--set"]
        unsets = [v for o, v in self.changes if o == "--unset"]
        envs = [v for o, v in self.changes if o == "--env"]
        unset_envs = [v for o, v in self.changes if o == "--unset-env"]
        return parse_changes(sets, unsets, envs, unset_envs)

    def names(self) -> set:
        """The argument (``--flag``) and variable names this alternative changes."""
        out = set()
        for option, value in self.changes:
            if option in ("--set", "--unset"):
                out.add("--" + value.split("=", 1)[0].lstrip("-"))
            else:
                out.add(value.split("=", 1)[0])
        return out

    def describe(self) -> str:
        return " ".join("%s %s" % pair for pair in self.changes)


@dataclasses.dataclass(frozen=True)
class Lever:
    id: str
    addresses: tuple  # the profile analyzer's bottleneck names the catalog entry names
    flags: tuple  # the lever's own arguments and variables (the catalog's Flags)
    alternatives: tuple  # legal, shippable alternatives against the parent
    rejected: tuple = ()  # (Alternative, why) filtered out
    exact: bool = False  # every own flag it changes is placement, exact: true (scheduling only)

    def alternative(self, name: str) -> Optional[Alternative]:
        return next((alt for alt in self.alternatives if alt.name == name), None)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """The projection of one recipe (``projection.api.project``), as the policy reads it."""
    tokens_per_s_per_gpu: float
    step_s: float
    fits: bool
    memory_gib: float
    usable_gib: float
    compute_s: float = 0.0
    exposed_comm_s: float = 0.0
    bubble_s: float = 0.0
    exposed: dict = dataclasses.field(default_factory=dict, compare=False, hash=False)  # seconds per kind (approx.)
    error: str = ""  # the projection refused the layout (then nothing else holds)

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def headroom_gib(self) -> float:
        return self.usable_gib - self.memory_gib


# ------------------------------------------------------------------------------------------ helpers
def as_recipe(recipe) -> Recipe:
    if isinstance(recipe, Recipe):
        return recipe
    return Recipe(str(recipe), "recipe")


def apply(recipe, alternative: Alternative) -> Recipe:
    """``recipe`` with ``alternative`` applied and the benchmark flags enforced, as ``candidate new`` writes it."""
    parent = workload.enforce(as_recipe(recipe))
    return workload.enforce(parent.apply(alternative.records()))


@functools.lru_cache(maxsize=4)
def _catalog(path: str) -> dict:
    return {entry["id"]: entry for entry in levers_mod.load(Path(path))}


@functools.lru_cache(maxsize=4)
def _rules(overrides: Optional[str]):
    from attune.correctness.rules import Rules
    return Rules(overrides=overrides or None)


def _addresses(entry: dict) -> tuple:
    text = entry.get("Addresses", "")
    return tuple(name for name in BOTTLENECKS if name in text)


# ------------------------------------------------------------------------------------------ checks
def check(parent: Recipe, child: Recipe, baseline: Recipe, gpu: Optional[str], gate_rules: Optional[str]) -> str:
    """Why ``child`` cannot be a candidate (empty: it can): the checks of ``candidate new`` and the gate's
    configuration check, against ``baseline``."""
    if not diff(parent, child):
        return "no change: the recipe already has it"
    problems = workload.compare(baseline, child)
    if problems:
        return "workload: " + "; ".join(problems)
    violations = legality.check(child.args(), child.env(), child.gpus(), gpu, trusted=baseline.args(),
                                known=known_flags(child))
    if violations:
        return "legality: " + "; ".join(str(v) for v in violations)
    env = child.env()
    from attune.projection import config as proj_config
    gpus = int(env["ATTUNE_SIM_GPUS"]) if env.get("ATTUNE_SIM_GPUS", "").isdigit() else child.gpus()
    per_node = env.get("ATTUNE_SIM_GPUS_PER_NODE", "")
    args = child.args()
    if slime_mod.is_slime(child.command.program, args) and "--seq-length" not in args:
        args = dict(args, **{"--seq-length": SLIME_SEQ_LENGTH})  # what slime sets when the recipe sets none
    try:
        proj_config.parse(args, gpus, gpu, int(per_node) if per_node.isdigit() else 8)
    except AttuneError as exc:
        return "megatron: " + str(exc).splitlines()[0]
    from attune.correctness import config_check
    found = config_check.check(SimpleNamespace(args=baseline.args(), env=baseline.env()),
                               SimpleNamespace(args=child.args(), env=child.env()), _rules(gate_rules))
    if not found["passed"]:
        return "gate: " + "; ".join(found["reasons"])
    return ""


def _exact(entry_flags: tuple, gate_rules: Optional[str]) -> bool:
    rules = _rules(gate_rules)
    found = []
    for name in entry_flags:
        rule = rules.get("arg", name) if name.startswith("--") else rules.get("env", name)
        if rule is not None:
            found.append(rule.cls == "placement" and rule.exact)
    return bool(found) and all(found)


def no_mechanism(lever_id: str, own: Sequence[str], recipe, cpu: bool = False) -> Optional[str]:
    """Why a lever cannot act on the platform ``recipe`` runs on (None when it can): the NCCL library's variables
    do nothing when the collectives are not NCCL's (``--distributed-backend gloo``), and the CUDA runtime's and
    allocator's do nothing on a CPU run (``cpu``: through the cpu pod hook)."""
    backend = str(recipe.args().get("--distributed-backend") or "nccl")
    if own and backend != "nccl" and all(name.startswith(("NCCL_", "TORCH_NCCL_")) for name in own):
        return "its variables configure NCCL, and this recipe's collectives are %s's (--distributed-backend %s)" % (
            backend, backend)
    if own and cpu and all(name in CUDA_ONLY for name in own):
        return "%s act%s on the CUDA runtime or allocator, and this is a CPU run (the cpu pod hook)" % (
            " and ".join(own), "s" if len(own) == 1 else "")
    return None


# variables and flags with a mechanism only on a GPU
CUDA_ONLY = ("CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def space(recipe, baseline=None, *, gpu: Optional[str] = None, gate_rules: Optional[str] = None,
          catalog: Optional[str] = None, include_empty: bool = False, cpu: bool = False) -> List[Lever]:
    """The levers and their legal, shippable alternatives against ``recipe`` (see the module docstring).

    ``baseline``: the campaign's baseline recipe (workload and gate reference; default ``recipe``);
    ``gpu``: the GPU model for the rules that depend on it (default: the recipe's ``ATTUNE_SIM_HARDWARE``);
    ``gate_rules``: the campaign's gate overrides file (``ATTUNE_GATE_RULES``); ``catalog``: the lever catalog
    (default the skill's ``references/levers.md``); ``cpu``: the runs are CPU runs (the cpu pod hook). A lever
    with no mechanism on the recipe's platform (``no_mechanism``) has every alternative rejected, saying why."""
    parent = workload.enforce(as_recipe(recipe))
    base = workload.enforce(as_recipe(baseline)) if baseline is not None else parent
    ctx = Context(parent, gpu)
    gpu = ctx.gpu
    entries = _catalog(str(catalog or levers_mod.CATALOG))
    out = []
    order = LEVER_IDS if ctx.slime is None else SLIME_LEVER_IDS + tuple(i for i in LEVER_IDS if i not in SLIME_LEVER_IDS)
    for lever_id in order:
        entry = entries.get(lever_id)
        if entry is None:
            continue
        own = tuple(entry["flags"]) + tuple(entry["env"])
        allowed = set(own) | set(COMPANIONS.get(lever_id, {}))
        legal, rejected = [], []
        inert = no_mechanism(lever_id, own, parent, cpu)
        for name, changes in GENERATORS[lever_id](ctx):
            alt = Alternative(lever_id, name, tuple(changes))
            touched = alt.names()
            if not touched <= allowed:  # a generator bug: never let a second lever in
                raise AssertionError("lever %s alternative %s changes %s outside its flags"
                                     % (lever_id, name, sorted(touched - allowed)))
            companions = tuple(sorted(touched - set(own)))
            try:
                # the parent is enforced and no alternative touches the benchmark flags: enforcing the child again
                # would change nothing (and cost a YAML parse per flag)
                child = parent.apply(alt.records())
                why = check(parent, child, base, gpu, gate_rules)
            except AttuneError as exc:
                child, why = None, "recipe: " + str(exc).splitlines()[0]
            why = why or (inert and "no mechanism here: " + inert)
            alt = dataclasses.replace(alt, companions=companions, child=child)
            (rejected.append((alt, why)) if why else legal.append(alt))
        if legal or include_empty:
            out.append(Lever(id=lever_id, addresses=_addresses(entry), flags=own, alternatives=tuple(legal),
                             rejected=tuple(rejected), exact=_exact(own, gate_rules)))
    return out


def undo(parent, child, lever: str, name: str) -> Optional[Alternative]:
    """The alternative that takes ``child`` back to ``parent`` on the arguments and variables they differ in
    (``None`` when they do not differ); ``name`` is the new alternative's name."""
    before, after = as_recipe(parent), as_recipe(child)
    changes = []
    for record in diff(before, after):
        if "arg" in record:
            flag = record["arg"]
            old = before.args().get(flag)
            if old is None:
                changes.append(("--unset", flag[2:]))
            elif old is True:
                changes.append(("--set", flag[2:]))
            else:
                changes.append(("--set", "%s=%s" % (flag[2:], old)))
        elif "env" in record:
            old = before.env().get(record["env"])
            changes.append(("--unset-env", record["env"]) if old is None else ("--env", "%s=%s" % (record["env"], old)))
    if not changes:
        return None
    return Alternative(lever, name, tuple(changes))


def leave_one_out(leader, parent, child, lever: str, name: str, baseline=None, *, gpu: Optional[str] = None,
                  gate_rules: Optional[str] = None) -> Optional[Alternative]:
    """The candidate that removes from ``leader`` the change that turned ``parent`` into ``child`` (a step of
    the leader's lineage), checked like any alternative (``check`` against ``baseline``, default ``leader``);
    None when it is not a legal, shippable candidate or changes nothing."""
    alt = undo(parent, child, lever, name)
    if alt is None:
        return None
    lead = workload.enforce(as_recipe(leader))
    base = workload.enforce(as_recipe(baseline)) if baseline is not None else lead
    try:
        result = lead.apply(alt.records())
        why = check(lead, result, base, gpu or lead.env().get("ATTUNE_SIM_HARDWARE"), gate_rules)
    except AttuneError:
        return None
    return None if why else dataclasses.replace(alt, child=result)


# ------------------------------------------------------------------------------------------ projection
def _overlapped(args: dict) -> dict:
    sp = "--sequence-parallel" in args and as_int(args, "--tensor-model-parallel-size", 1) > 1
    return {"tp": "--tp-comm-overlap" in args and sp, "ep": "--overlap-moe-expert-parallel-comm" in args,
            "dp_reduce_scatter": "--overlap-grad-reduce" in args, "dp_all_gather": "--overlap-param-gather" in args,
            "cp": True, "pp": False}


def project_recipe(recipe, hardware: Optional[str] = None) -> Optional[Prediction]:
    """The projection of one recipe; None without hardware (the recipe's ``ATTUNE_SIM_HARDWARE`` by default), and
    None for a slime recipe: the projection times a pretraining step, and an RL step is rollout, log-probs and
    training on samples of uneven length, so its levers are tried in the space's order instead.
    A layout the projection refuses gives a ``Prediction`` with ``error`` set."""
    recipe = as_recipe(recipe)
    env = recipe.env()
    hardware = hardware or env.get("ATTUNE_SIM_HARDWARE")
    if not hardware or slime_mod.is_slime(recipe.command.program, recipe.args()):
        return None
    from attune.projection.api import project
    gpus = int(env["ATTUNE_SIM_GPUS"]) if env.get("ATTUNE_SIM_GPUS", "").isdigit() else recipe.gpus()
    per_node = env.get("ATTUNE_SIM_GPUS_PER_NODE", "")
    args = recipe.args()
    try:
        out = project(args, gpus, hardware, int(per_node) if per_node.isdigit() else None)
    except AttuneError as exc:
        return Prediction(0.0, 0.0, False, 0.0, 0.0, error=str(exc).splitlines()[0])
    time_ = out["time"]
    comm = dict(time_["comm_s"])
    # Exposed seconds per kind, approximately: the projection reports the total; it is shared out by each
    # kind's transfer time, an overlapped kind weighing a tenth (what stays exposed of a pipelined transfer).
    overlapped = _overlapped(args)
    weights = {kind: value * (0.1 if overlapped.get(kind) else 1.0) for kind, value in comm.items()}
    total = sum(weights.values())
    exposed_total = time_["exposed_comm_s"]
    exposed = {}
    for kind, weight in weights.items():
        group = "dp" if kind.startswith("dp_") else kind
        exposed[group] = exposed.get(group, 0.0) + (exposed_total * weight / total if total > 0 else 0.0)
    mem = out["memory"]
    return Prediction(tokens_per_s_per_gpu=out["tokens_per_s_per_gpu"], step_s=time_["step_s"], fits=mem["fits"],
                      memory_gib=mem["total_gib"], usable_gib=mem["usable_gib"], compute_s=time_["compute_s"],
                      exposed_comm_s=exposed_total, bubble_s=time_["bubble_s"], exposed=exposed)


def predict(recipe, levers: List[Lever], hardware: Optional[str] = None) \
        -> Tuple[Optional[Prediction], Dict[tuple, Prediction]]:
    """The projection of ``recipe`` and of every alternative of ``levers`` applied to it (keyed by
    ``Alternative.key``); ``(None, {})`` when no hardware is known or the projection refuses ``recipe``."""
    parent = workload.enforce(as_recipe(recipe))
    base = project_recipe(parent, hardware)
    if base is None or not base.ok:  # no hardware, or a projection that refuses the parent: no projection at all
        return None, {}
    out = {}
    for lever in levers:
        for alt in lever.alternatives:
            child = alt.child if alt.child is not None else apply(parent, alt)
            out[alt.key] = project_recipe(child, hardware)
    return base, out
