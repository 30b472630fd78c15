"""The row schema of the ledger and the GPU-hour log (schema_version 1).

``skill/references/ledger_schema.md`` documents every kind and field; a test checks that the
document and these tables agree, and a snapshot test pins the tables so that a change names
what was added or removed. Standard library only, Python 3.7 syntax (the hooks import it).

Field types: ``str``, ``int``, ``number`` (int or float), ``bool``, ``list``, ``object``, ``any``;
``?`` after a type allows ``null``; ``enum:a|b|c`` allows only the listed strings;
``list[str]`` is a list of strings. Non-finite floats in run metrics (a NaN loss) are written as
the strings ``"nan"``, ``"inf"`` and ``"-inf"``, because strict JSON has no such numbers.
"""

from __future__ import annotations

LAUNCH_PURPOSES = ("baseline", "candidate", "repeat", "confirm", "profile", "replay")
RESULT_STATUSES = ("finished", "failed", "timeout", "cancelled", "incomplete", "stopped_early")

# kind -> (required fields, optional fields); each maps field -> type.
LEDGER_KINDS = {
    "campaign": (
        {"settings_sha256": "str", "attune_version": "str"},
        {"note": "str", "baseline_sha256": "str", "gate_rules_sha256": "str"},
    ),
    "session": (
        {"session": "str", "event": "enum:start|end"},
        {"agent": "str", "exit_code": "int", "model_cost_usd": "number", "detail": "str"},
    ),
    "launch": (
        {"run": "str", "purpose": "enum:" + "|".join(LAUNCH_PURPOSES), "recipe_sha256": "str",
         "gpus": "int", "backend": "str"},
        {"parent": "str?", "change": "any", "hypothesis": "str", "lever": "str", "leave_out": "str",
         "expected_gpu_hours": "number", "recipe_path": "str", "simulated": "bool",
         "cpu": "bool", "pod_hooks": "list", "rows_sha256": "str", "projection": "object"},
    ),
    "result": (
        {"run": "str", "status": "enum:" + "|".join(RESULT_STATUSES)},
        {"metrics": "object", "failure": "object", "log_sha256": "str", "simulated": "bool",
         "cpu": "bool", "warnings": "list[str]", "early_stop": "object"},
    ),
    "gate": (
        {"run": "str", "verdict": "enum:pass|fail", "against": "str"},
        {"checks": "object", "reasons": "list[str]", "replays": "object"},
    ),
    "leader": (
        {"run": "str", "recipe_sha256": "str", "tokens_per_s_per_gpu": "number", "band": "number"},
        {"previous": "str?", "gain": "str"},
    ),
    "stop": (
        {"reason": "str", "evidence": "list[str]"},
        {},
    ),
    "note": (
        {"text": "str"},
        {"run": "str"},
    ),
    "lesson": (
        {"run": "str", "lever": "str", "verdict": "enum:kept|rejected|hurt", "result": "str", "text": "str"},
        {"gain": "number?"},
    ),
    "integrity": (
        {"event": "str", "detail": "str"},
        {"files": "object"},
    ),
    "recovery": (
        {"torn_bytes": "int", "torn_sha256": "str", "side_file": "str"},
        {},
    ),
}

GPU_HOUR_KINDS = {
    "charge": (
        {"run": "str", "gpus": "int", "seconds": "number", "gpu_seconds": "int"},
        {"what": "str", "note": "str"},
    ),
    "recovery": LEDGER_KINDS["recovery"],
}

# Fields of ``result.metrics`` that ranking reads (documented in measurement.md). Per-iteration
# values are stored as columns, one list per field with one element per logged iteration: the
# ledger is re-read in full by every verify, rank and status, and columns parse fastest.
METRICS_FIELDS = {
    "global_batch_size": "int",
    "seq_length": "int",
    "gpus": "int",
}
ITERATION_COLUMNS = {
    "iter": "int",
    "step_ms": "number?",
    "loss": "any",
    "skipped": "int",
    "nan": "int",
}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_BASE_CHECKS = {
    "any": lambda value: True,
    "str": lambda value: isinstance(value, str),
    "int": _is_int,
    "number": _is_number,
    "bool": lambda value: isinstance(value, bool),
    "list": lambda value: isinstance(value, list),
    "list[str]": lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
    "object": lambda value: isinstance(value, dict),
}
_CHECKERS = {}


def _checker(kind):
    """The predicate for a type string, built once per type (verify runs it on every row)."""
    if kind in _CHECKERS:
        return _CHECKERS[kind]
    nullable = kind.endswith("?")
    base = kind[:-1] if nullable else kind
    if base.startswith("enum:"):
        allowed = frozenset(base[5:].split("|"))
        check = lambda value: isinstance(value, str) and value in allowed  # noqa: E731
    elif base in _BASE_CHECKS:
        check = _BASE_CHECKS[base]
    else:
        raise AssertionError("unknown schema type %r" % kind)
    if nullable:
        inner = check
        check = lambda value: value is None or inner(value)  # noqa: E731
    _CHECKERS[kind] = check
    return check


def _type_ok(value, kind):
    return _checker(kind)(value)


ENVELOPE = ("schema_version", "campaign", "seq", "ts", "kind", "prev")  # around every row's payload
_PY_TYPES = {"str": (str,), "int": (int,), "number": (int, float), "bool": (bool,), "list": (list,),
             "list[str]": (list,), "object": (dict,)}
_COMPILED = {}


def _compile(kinds, kind):
    """Per kind: the required and allowed field names, and per field the exact Python types
    accepted (``type(value) in types``, so a bool is never taken for an int) plus, for enums and
    ``list[str]``, the predicate that must also hold."""
    required, optional = kinds[kind]
    types, extra = {}, {}
    for field, ftype in list(required.items()) + list(optional.items()):
        base = ftype[:-1] if ftype.endswith("?") else ftype
        if base == "any":
            continue
        accepted = _PY_TYPES.get("str" if base.startswith("enum:") else base)
        assert accepted is not None, "unknown schema type %r" % ftype
        types[field] = frozenset(accepted + ((type(None),) if ftype.endswith("?") else ()))
        if base.startswith("enum:") or base == "list[str]":
            extra[field] = _checker(ftype)
    compiled = (frozenset(required), frozenset(required) | frozenset(optional) | frozenset(ENVELOPE),
                types, extra, dict(required, **optional))
    _COMPILED[(id(kinds), kind)] = compiled
    return compiled


def check_fields(kinds, kind, row):
    """Raise ``ValueError`` naming the first problem of ``row`` against ``kinds[kind]``."""
    compiled = _COMPILED.get((id(kinds), kind))
    if compiled is None:
        if kind not in kinds:
            raise ValueError("unknown kind %r (known: %s)" % (kind, ", ".join(sorted(kinds))))
        compiled = _compile(kinds, kind)
    required, allowed, types, extra, declared = compiled
    keys = row.keys()
    if not required <= keys:
        missing = sorted(required - set(keys))
        raise ValueError("%s row is missing field %r" % (kind, missing[0]))
    if not keys <= allowed:
        unknown = sorted(set(keys) - allowed)
        raise ValueError("%s row has unknown field %r" % (kind, unknown[0]))
    for field, accepted in types.items():
        if field in row:
            value = row[field]
            if type(value) not in accepted or (field in extra and not extra[field](value)):
                raise ValueError("%s row field %r must be %s, not %r" % (kind, field, declared[field], value))
    if kind == "charge" and (row["gpu_seconds"] < 0 or row["seconds"] < 0 or row["gpus"] < 0):
        raise ValueError("charge row gpu_seconds, seconds and gpus must not be negative")


def check_metrics(metrics):
    """Validate the shape of ``result.metrics``; raise ``ValueError`` naming the field."""
    for field, ftype in METRICS_FIELDS.items():
        if field in metrics and not _type_ok(metrics[field], ftype):
            raise ValueError("result metrics field %r must be %s" % (field, ftype))
    length = None
    for field, ftype in ITERATION_COLUMNS.items():
        if field not in metrics:
            continue
        column = metrics[field]
        if not isinstance(column, list):
            raise ValueError("result metrics field %r must be a list (one value per iteration)" % field)
        if length is None:
            length = len(column)
        elif len(column) != length:
            raise ValueError("result metrics column %r has %d values, the others %d" % (field, len(column), length))
        check = _checker(ftype)
        for index, value in enumerate(column):
            if not check(value):
                raise ValueError("result metrics %s[%d] must be %s, not %r" % (field, index, ftype, value))
    if length and "iter" not in metrics:
        raise ValueError("result metrics have per-iteration columns but no 'iter'")


def validate_ledger_row(kind, row):
    """The per-row check run on every append and in ``verify``."""
    check_fields(LEDGER_KINDS, kind, row)


def validate_new_ledger_row(kind, row):
    """Deeper checks run only when a row is appended (too slow to repeat on every verify)."""
    if kind == "result" and "metrics" in row:
        check_metrics(row["metrics"])


def validate_gpu_hour_row(kind, row):
    check_fields(GPU_HOUR_KINDS, kind, row)


def snapshot() -> dict:
    """The public schema as plain data, for the snapshot test and ``ledger_schema.md``."""
    def dump(kinds):
        return {kind: {"required": dict(req), "optional": dict(opt)} for kind, (req, opt) in sorted(kinds.items())}
    return {
        "schema_version": 1,
        "ledger": dump(LEDGER_KINDS),
        "gpu_hours": dump(GPU_HOUR_KINDS),
        "metrics": dict(METRICS_FIELDS),
        "iteration_columns": dict(ITERATION_COLUMNS),
    }
