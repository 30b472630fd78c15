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

LAUNCH_PURPOSES = ("baseline", "candidate", "repeat", "confirm", "profile")
RESULT_STATUSES = ("finished", "failed", "timeout", "cancelled", "incomplete")

# kind -> (required fields, optional fields); each maps field -> type.
LEDGER_KINDS = {
    "campaign": (
        {"settings_sha256": "str", "attune_version": "str"},
        {"note": "str"},
    ),
    "session": (
        {"session": "str", "event": "enum:start|end"},
        {"agent": "str", "exit_code": "int", "model_cost_usd": "number", "detail": "str"},
    ),
    "launch": (
        {"run": "str", "purpose": "enum:" + "|".join(LAUNCH_PURPOSES), "recipe_sha256": "str",
         "gpus": "int", "backend": "str"},
        {"parent": "str?", "change": "any", "hypothesis": "str", "lever": "str",
         "expected_gpu_hours": "number", "recipe_path": "str", "simulated": "bool"},
    ),
    "result": (
        {"run": "str", "status": "enum:" + "|".join(RESULT_STATUSES)},
        {"metrics": "object", "failure": "object", "log_sha256": "str", "simulated": "bool"},
    ),
    "gate": (
        {"run": "str", "verdict": "enum:pass|fail", "against": "str"},
        {"checks": "object", "reasons": "list[str]"},
    ),
    "leader": (
        {"run": "str", "recipe_sha256": "str", "tokens_per_s_per_gpu": "number", "band": "number"},
        {"previous": "str?"},
    ),
    "stop": (
        {"reason": "str", "evidence": "list[str]"},
        {},
    ),
    "note": (
        {"text": "str"},
        {"run": "str"},
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

# Fields of ``result.metrics`` that ranking reads (documented in measurement.md).
METRICS_FIELDS = {
    "global_batch_size": "int",
    "seq_length": "int",
    "gpus": "int",
    "iterations": "list",
}
ITERATION_FIELDS = {
    "iter": "int",
    "step_ms": "number",
    "loss": "any",
    "skipped": "int",
    "nan": "int",
}


def _type_ok(value, kind):
    if kind.endswith("?"):
        if value is None:
            return True
        kind = kind[:-1]
    if kind == "any":
        return True
    if kind.startswith("enum:"):
        return isinstance(value, str) and value in kind[5:].split("|")
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list)
    if kind == "list[str]":
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if kind == "object":
        return isinstance(value, dict)
    raise AssertionError("unknown schema type %r" % kind)


def check_fields(kinds, kind, row, envelope=("schema_version", "campaign", "seq", "ts", "kind", "prev")):
    """Raise ``ValueError`` naming the first problem of ``row`` against ``kinds[kind]``."""
    if kind not in kinds:
        raise ValueError("unknown kind %r (known: %s)" % (kind, ", ".join(sorted(kinds))))
    required, optional = kinds[kind]
    for field, ftype in required.items():
        if field not in row:
            raise ValueError("%s row is missing field %r" % (kind, field))
        if not _type_ok(row[field], ftype):
            raise ValueError("%s row field %r must be %s, not %r" % (kind, field, ftype, row[field]))
    for field, value in row.items():
        if field in required or field in envelope:
            continue
        if field not in optional:
            raise ValueError("%s row has unknown field %r" % (kind, field))
        if not _type_ok(value, optional[field]):
            raise ValueError("%s row field %r must be %s, not %r" % (kind, field, optional[field], value))
    if kind == "charge" and row["gpu_seconds"] < 0:
        raise ValueError("charge row gpu_seconds must not be negative")
    if kind == "charge" and (row["seconds"] < 0 or row["gpus"] < 0):
        raise ValueError("charge row seconds and gpus must not be negative")
    if kind == "result" and "metrics" in row:
        check_metrics(row["metrics"])


def check_metrics(metrics):
    """Validate the shape of ``result.metrics``; raise ``ValueError`` naming the field."""
    for field, ftype in METRICS_FIELDS.items():
        if field in metrics and not _type_ok(metrics[field], ftype):
            raise ValueError("result metrics field %r must be %s" % (field, ftype))
    for index, item in enumerate(metrics.get("iterations", [])):
        if not isinstance(item, dict):
            raise ValueError("result metrics iterations[%d] must be an object" % index)
        for field, ftype in ITERATION_FIELDS.items():
            if field in item and not _type_ok(item[field], ftype):
                raise ValueError("result metrics iterations[%d].%s must be %s" % (index, field, ftype))
        if "iter" not in item:
            raise ValueError("result metrics iterations[%d] has no 'iter'" % index)


def validate_ledger_row(kind, row):
    check_fields(LEDGER_KINDS, kind, row)


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
        "iteration": dict(ITERATION_FIELDS),
    }
