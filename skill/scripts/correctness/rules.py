"""The argument classes the configuration check applies (``rules/numerics_list.yaml``).

Each entry names one argument (``kind: arg``, as written, with its dashes) or environment variable
(``kind: env``) and gives its class:

* ``numeric``: changes the math; a candidate may not change it (a user may reclass it, see below).
* ``fixed``: what a tuning campaign never changes (sequence length, global batch, data, seed,
  learning-rate schedule, precision recipe, loss definition, initialization, architecture); no
  override can reclass it.
* ``placement``: the same math, placed or scheduled differently. ``exact: true`` when the change is
  scheduling only and the loss is expected to be bitwise equal; ``false`` when kernels or the
  reduction order change.
* ``swap``: an allowlisted same-math swap between the values of one of its ``pairs``; any other
  change of that argument is numeric.

``init: true`` marks a placement change that re-draws the initial weights (Megatron-LM seeds
each tensor-, pipeline- and expert-parallel rank's random stream, so moving weights between ranks
initializes them differently): the convergence check then allows the offset that brings.

An unlisted name counts as numeric. ``default`` is the value the program gives an unset argument:
setting it to that value, or unsetting it from that value, is no change. ``numeric_when`` makes a placement or swap change numeric when
any of the named arguments is set in either recipe (token dropping makes expert parallelism change
the math, for example).

A user's overrides file (the ``ATTUNE_GATE_RULES`` setting, or ``attune gate --rules FILE``) has
the same format; each of its entries also carries a ``justification``, replaces the built-in entry
of the same name and kind, and is reported with that justification wherever it was used.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Optional

import yaml

from attune.core import files
from attune.core.errors import InputError
from attune.core.recipe import HOST_ENV

RULES_FILE = Path(__file__).resolve().parent / "rules" / "numerics_list.yaml"
CLASSES = ("numeric", "fixed", "placement", "swap")
KINDS = ("arg", "env")
_REQUIRED = ("name", "kind", "class", "stacks", "reason", "source")
_OPTIONAL = ("exact", "pairs", "numeric_when", "justification", "default", "init")


@dataclasses.dataclass(frozen=True)
class Rule:
    name: str
    kind: str
    cls: str
    reason: str
    source: str
    stacks: tuple = ()
    exact: bool = False
    pairs: tuple = ()  # frozensets of two values
    numeric_when: tuple = ()
    justification: Optional[str] = None  # set on a user's override
    origin: str = "numerics_list.yaml"
    default: Optional[str] = None  # the value an unset argument has
    init: bool = False  # a change re-draws the initial weights (which rank builds which weight)

    def effective(self, value) -> Optional[str]:
        """``value`` as the program sees it: the default when unset."""
        return self.default if value is None and self.default is not None else value

    def as_dict(self) -> dict:
        out = {"class": self.cls, "reason": self.reason, "source": self.source, "from": self.origin}
        if self.cls == "placement":
            out["exact"] = self.exact
        if self.pairs:
            out["pairs"] = [sorted(pair) for pair in self.pairs]
        if self.numeric_when:
            out["numeric_when"] = list(self.numeric_when)
        if self.justification:
            out["justification"] = self.justification
        if self.default is not None:
            out["default"] = self.default
        if self.init:
            out["init"] = True
        return out


UNLISTED = Rule(name="", kind="", cls="numeric", reason="not in the rules: an unlisted argument counts as numeric",
                source="PROTOCOL.md §2", origin="default")


def training_env(names, rules: "Rules") -> list:
    """Those of ``names`` (environment variable names) that are part of what a training run is: the ones the rules
    list, less the host's plumbing (``core.recipe.HOST_ENV``: library paths, visible GPUs)."""
    return [name for name in names if name not in HOST_ENV and rules.get("env", name) is not None]


def unlisted_reason(kind: str, name: str) -> str:
    """Why an unlisted name is numeric, and how to class it for one campaign."""
    what = "argument" if kind == "arg" else "environment variable"
    return ("%s %s is not in the gate's rules, so it counts as numeric. Fix: if it keeps the math, class it for this "
            "campaign in an overrides file named by ATTUNE_GATE_RULES (or attune gate --rules FILE): an entry "
            "`- {name: %s, kind: %s, class: placement, exact: false, stacks: [megatron], reason: ..., source: ..., "
            "justification: ...}` (correctness/rules/README.md)" % (what, name, name, kind))


def _value(value) -> str:
    """A value as the rules compare it: the text a command line carries."""
    if value is True:
        return "true"
    return str(value)


def _parse(data, path: str, overrides: bool) -> dict:
    problems = []
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        raise InputError("%s: expected a mapping with `version: 1` and an `entries:` list. Fix: see "
                         "correctness/rules/README.md" % path)
    if data.get("version") != 1:
        problems.append("%s: version is %r, expected 1" % (path, data.get("version")))
    rules = {}
    for index, entry in enumerate(data["entries"]):
        where = "%s: entries[%d]" % (path, index)
        if not isinstance(entry, dict):
            problems.append("%s is not a mapping" % where)
            continue
        where = "%s (%s)" % (where, entry.get("name"))
        required = _REQUIRED + (("justification",) if overrides else ())
        missing = [key for key in required if entry.get(key) in (None, "", [])]
        unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
        if missing:
            problems.append("%s: missing %s" % (where, ", ".join(missing)))
        if unknown:
            problems.append("%s: unknown key(s) %s" % (where, ", ".join(unknown)))
        if missing:
            continue
        name, kind, cls = str(entry["name"]), entry["kind"], entry["class"]
        if kind not in KINDS:
            problems.append("%s: kind %r is not one of %s" % (where, kind, ", ".join(KINDS)))
        if cls not in CLASSES:
            problems.append("%s: class %r is not one of %s" % (where, cls, ", ".join(CLASSES)))
        if kind == "arg" and not name.startswith("--"):
            problems.append("%s: an argument is named with its leading dashes (--%s)" % (where, name.lstrip("-")))
        if cls == "placement" and not isinstance(entry.get("exact"), bool):
            problems.append("%s: a placement entry says `exact: true` or `exact: false`" % where)
        if cls != "placement" and "exact" in entry:
            problems.append("%s: only placement entries have `exact`" % where)
        if "init" in entry and (cls not in ("placement", "swap") or not isinstance(entry["init"], bool)):
            problems.append("%s: `init: true` or `init: false` is for placement and swap entries" % where)
        pairs = entry.get("pairs") or []
        if cls == "swap":
            if not pairs or not all(isinstance(pair, list) and len(pair) == 2 and _value(pair[0]) != _value(pair[1])
                                    for pair in pairs):
                problems.append("%s: a swap entry lists `pairs:` of two different values each" % where)
                pairs = []
        elif pairs:
            problems.append("%s: only swap entries have `pairs`" % where)
        when = entry.get("numeric_when") or []
        if not isinstance(when, list) or not all(isinstance(flag, str) for flag in when):
            problems.append("%s: numeric_when is a list of argument names" % where)
            when = []
        stacks = entry["stacks"]
        if not isinstance(stacks, list) or not all(isinstance(stack, str) for stack in stacks):
            problems.append("%s: stacks is a list of names" % where)
            stacks = []
        key = (kind, name)
        if key in rules:
            problems.append("%s: %s %s is listed twice" % (where, kind, name))
        rules[key] = Rule(name=name, kind=kind, cls=cls, reason=str(entry["reason"]), source=str(entry["source"]),
                          stacks=tuple(stacks), exact=bool(entry.get("exact", False)),
                          pairs=tuple(frozenset(_value(v) for v in pair) for pair in pairs), numeric_when=tuple(when),
                          justification=entry.get("justification"),
                          default=_value(entry["default"]) if entry.get("default") is not None else None,
                          init=bool(entry.get("init", False)),
                          origin=Path(path).name if overrides else "numerics_list.yaml")
    if problems:
        raise InputError("\n".join(problems))
    return rules


# libyaml's loader where PyYAML has it (the rules file is some 4,000 lines: 7 x faster than the pure-Python one)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# parsed rule files by the SHA-256 of their text, so that a process that gates many runs parses each once
_PARSED = {}


def _rules_of(path: Path, overrides: bool) -> tuple:
    """``(rules, sha256)`` of a rules file: its text read each time, parsed once per process for each text."""
    text = files.read_text(path, "gate rules file (YAML)", "give a YAML file of rules (correctness/rules/README.md)")
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    key = (digest, str(path), overrides)
    if key not in _PARSED:
        try:
            data = yaml.load(text, Loader=_LOADER)
        except yaml.YAMLError as exc:
            raise InputError("%s: not valid YAML (%s), so not a gate rules file. Fix: see correctness/rules/README.md"
                             % (path, files.yaml_problem(exc)))
        _PARSED[key] = _parse(data, str(path), overrides=overrides)
    return dict(_PARSED[key]), digest


class Rules(object):
    """The built-in classes, with a user's overrides on top."""

    def __init__(self, path=RULES_FILE, overrides=None):
        self.rules, self.sha256 = _rules_of(Path(path), overrides=False)
        self.path = str(path)
        self.overrides_path, self.overrides_sha256 = None, None
        if overrides:
            extra, self.overrides_sha256 = _rules_of(Path(overrides), overrides=True)
            self.overrides_path = str(overrides)
            problems = []
            for key, rule in extra.items():
                base = self.rules.get(key)
                if base is not None and base.cls == "fixed":
                    problems.append("%s: %s is fixed: what a campaign may never change cannot be overridden. Fix: "
                                    "remove the entry" % (overrides, rule.name))
                self.rules[key] = rule
            if problems:
                raise InputError("\n".join(problems))

    def get(self, kind: str, name: str) -> Optional[Rule]:
        return self.rules.get((kind, name))

    def classify(self, kind: str, name: str, old, new, baseline_args: dict, candidate_args: dict) -> tuple:
        """``(class, exact, rule, why)`` for one change; ``why`` explains a class other than the rule's own."""
        rule = self.get(kind, name)
        if rule is None:
            return "numeric", False, dataclasses.replace(UNLISTED, name=name, kind=kind, reason=unlisted_reason(kind, name)), None
        cls, why = rule.cls, None
        old, new = rule.effective(old), rule.effective(new)
        if cls == "swap":
            pair = frozenset((_value(old), _value(new))) if old is not None and new is not None else None
            if pair not in rule.pairs:
                cls, why = "numeric", ("%s -> %s is not an allowlisted pair (%s)"
                                       % (_value(old) if old is not None else "unset",
                                          _value(new) if new is not None else "unset",
                                          "; ".join(" <-> ".join(sorted(p)) for p in rule.pairs)))
        if cls in ("placement", "swap"):
            set_by = [flag for flag in rule.numeric_when if flag in baseline_args or flag in candidate_args]
            if set_by:
                cls, why = "numeric", "numeric when %s is set" % ", ".join(set_by)
        return cls, cls == "placement" and rule.exact, rule, why
