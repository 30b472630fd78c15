"""The configuration check: every argument and environment variable the candidate changed, classed.

A change is an argument or variable set in one recipe and not the other, or set to another value
(``--flag`` alone counts as ``true``; an argument unset in one recipe and set to its rule's
``default`` in the other is no change). Each change is classed by ``rules.Rules``; the check passes
when no change is ``numeric`` or ``fixed``. ``exact_only`` is true when there is no change, or
every change is placement with ``exact: true``: the convergence check then demands the loss be
reproduced exactly on a deterministic setup. ``same_init`` is true when no change re-draws the
initial weights (no rule with ``init: true``): both runs start from the same weights.
"""

from __future__ import annotations

from .rules import Rules


def _norm(value):
    if value is True:
        return "true"
    return None if value is None else str(value)


def changes(baseline: dict, candidate: dict) -> list:
    """``[(name, old, new)]`` in a stable order: the baseline's names first, then the candidate's new ones."""
    out = []
    for name in list(baseline) + [n for n in candidate if n not in baseline]:
        old, new = _norm(baseline.get(name)), _norm(candidate.get(name))
        if old != new:
            out.append((name, old, new))
    return out


def check(baseline, candidate, rules: Rules) -> dict:
    """Class every change from ``baseline`` to ``candidate`` (run directories or anything with ``args``
    and ``env``)."""
    rows, reasons = [], []
    for kind, old_map, new_map in (("arg", baseline.args, candidate.args), ("env", baseline.env, candidate.env)):
        for name, old, new in changes(old_map, new_map):
            known = rules.get(kind, name)
            if known is not None and known.effective(old) == known.effective(new):
                continue  # set to, or unset from, the program's default: no change
            cls, exact, rule, why = rules.classify(kind, name, old, new, baseline.args, candidate.args)
            row = {"name": name, "kind": kind, "old": old, "new": new, "class": cls, "rule": rule.as_dict()}
            if cls == "placement":
                row["exact"] = exact
            if why:
                row["why"] = why
            rows.append(row)
            if cls in ("numeric", "fixed"):
                what = "%s %s: %s -> %s" % ("argument" if kind == "arg" else "environment variable", name,
                                            old if old is not None else "unset", new if new is not None else "unset")
                reasons.append("config: %s is %s (%s)" % (what, cls, why or rule.reason))
    exact_only = all(row["class"] == "placement" and row.get("exact") for row in rows)
    same_init = not any(row["rule"].get("init") for row in rows)
    return {"passed": not reasons, "changes": rows, "reasons": reasons, "exact_only": exact_only,
            "same_init": same_init,
            "overrides_used": [{"name": row["name"], "kind": row["kind"], "class": row["class"],
                                "justification": row["rule"].get("justification")}
                               for row in rows if row["rule"].get("justification")]}
