"""``attune profile --diff A B``: two runs' profiles side by side, per step, and the three largest
differences explained.

Usage: attune profile --diff A B [--steps A:B] [--partial] [--json]

``diff(a, b)`` takes two ``profile.run`` results. Every number is normalised per step: divided by the
number of ProfilerSteps in the rank's analysis window (``window_steps``), then averaged over ranks; a
rank whose window is not cut by steps (no ProfilerStep, or a single step name) counts per trace
instead, and the side says so. Each compared number is a row ``{a, b, delta, delta_pct}`` with
delta = b - a.

The differences explained are the largest absolute per-step changes in time among: exposed
communication per collective, compute time, GPU idle time, host-bound idle time and the top kernels'
total time. A mechanism is named only where the two sides' numbers show it (``_collective`` and the
functions next to it state each rule); otherwise the sentence gives the numbers alone.
"""

from __future__ import annotations

import statistics
from typing import Optional

from .analyze import TOP_KERNELS
from .diagnose import _mean, duration_text as _t

EXPLAINED = 3
STAYED = 0.10  # a total within 10% of the larger side counts as unchanged
KERNEL_LINES = 12  # kernels in the text table (--json has the whole union of both sides' top lists)
SMALLEST_US = 0.05  # per-step changes below this are rounding, not differences


def _round(value):
    return None if value is None else round(value, 2)


def row(a, b) -> dict:
    """``b - a``, and the change in percent of ``a`` (None when ``a`` is 0 or either side is unknown)."""
    delta = None if a is None or b is None else b - a
    pct = round(100.0 * delta / a, 2) if delta is not None and a else None
    return {"a": _round(a), "b": _round(b), "delta": _round(delta), "delta_pct": pct}


def _side(result: dict) -> dict:
    """What one side's numbers are divided by: per rank, its window's ProfilerStep count (1 for a rank
    analyzed per trace)."""
    ranks = result["ranks"]
    per_rank, steps = {}, set()
    for r in ranks:
        window = r.get("window_steps")
        per_rank[r["rank"]] = len(window) if window else 0
        steps.update(window or ())
    per_step = bool(ranks) and all(per_rank.values())
    all_steps = {int(n): t for n, t in (result["aggregate"].get("step_time_us") or {}).items()}
    chosen = [all_steps[n] for n in sorted(steps) if n in all_steps] or list(all_steps.values())
    info = {"files": list(result["files"]), "ranks": len(ranks), "window_steps": sorted(steps),
            "steps": len(steps), "steps_by_rank": per_rank, "per": "step" if per_step else "trace",
            "partial": bool(result.get("partial")),
            "step_time_us": statistics.median(chosen) if chosen else None}
    if not per_step:
        bare = sorted(rank for rank, n in per_rank.items() if not n)
        info["note"] = ("rank(s) %s: no ProfilerStep cuts the analysis window, so their numbers are per trace"
                        % ", ".join(str(n) for n in bare))
    return info


def _per_step(result: dict, side: dict, value) -> Optional[float]:
    """The mean over ranks of ``value(rank)`` divided by the rank's window steps."""
    return _mean([None if value(r) is None else value(r) / (side["steps_by_rank"][r["rank"]] or 1)
                  for r in result["ranks"]])


def _collectives(a: dict, sa: dict, b: dict, sb: dict) -> dict:
    labels = sorted({label for result in (a, b) for r in result["ranks"]
                     for label in r["communication"]["by_collective"]})
    out = {}
    for label in labels:
        entry = {}
        for key in ("exposed_us", "total_us", "kernels"):
            entry[key] = row(*(_per_step(res, side, lambda r, k=key: r["communication"]["by_collective"].get(
                label, {}).get(k, 0.0)) for res, side in ((a, sa), (b, sb))))
        overlap = []
        for side in ("a", "b"):
            total, exposed = entry["total_us"][side], entry["exposed_us"][side]
            overlap.append(100.0 * (total - exposed) / total if total else None)
        entry["overlap_pctg"] = row(*overlap)
        out[label] = entry
    return out


def _kernels_of(result: dict, side: dict) -> dict:
    """Per kernel name: total µs and count per step, mean over ranks. A kernel missing from a rank's full
    top list may still have run there, below the list's last entry: its total is then only bounded by
    that entry (``exact`` False, count unknown)."""
    names, classes = set(), {}
    tops = []
    for r in result["ranks"]:
        top = {k["name"]: k for k in r["top_kernels"]}
        full = len(top) >= TOP_KERNELS
        tops.append((r, top, min(k["total_us"] for k in top.values()) if full else 0.0))
        names.update(top)
        classes.update((name, k["class"]) for name, k in top.items())
    out = {}
    for name in names:
        totals, counts, exact = [], [], True
        for r, top, bound in tops:
            div = side["steps_by_rank"][r["rank"]] or 1
            if name in top:
                totals.append(top[name]["total_us"] / div)
                counts.append(top[name]["count"] / div)
            else:
                totals.append(bound / div)
                counts.append(0.0 if not bound else None)
                exact = exact and not bound
        out[name] = {"class": classes[name], "total_us": _mean(totals), "exact": exact,
                     "count": _mean(counts) if exact else None}
    return out


def _kernels(a: dict, sa: dict, b: dict, sb: dict) -> list:
    ka, kb = _kernels_of(a, sa), _kernels_of(b, sb)
    rows = []
    for name in set(ka) | set(kb):
        ea, eb = ka.get(name), kb.get(name)
        if ea is None:  # not in any of A's top lists: bounded as a kernel of no A rank's list would be
            ea = _absent(a, sa)
        if eb is None:
            eb = _absent(b, sb)
        total = row(ea["total_us"], eb["total_us"])
        bound = [side for side, e in (("a", ea), ("b", eb)) if not e["exact"]]
        if bound:
            total["delta"] = total["delta_pct"] = None
            total["at_most"] = bound
        rows.append({"name": name, "class": (ka.get(name) or kb.get(name))["class"], "total_us": total,
                     "count": row(ea["count"], eb["count"])})
    rows.sort(key=lambda k: (-max(k["total_us"]["a"] or 0, k["total_us"]["b"] or 0), k["name"]))
    return rows


def _absent(result: dict, side: dict) -> dict:
    tops = []
    for r in result["ranks"]:
        full = len(r["top_kernels"]) >= TOP_KERNELS
        bound = min(k["total_us"] for k in r["top_kernels"]) if full else 0.0
        tops.append(bound / (side["steps_by_rank"][r["rank"]] or 1))
    exact = not any(tops)
    return {"total_us": _mean(tops) or 0.0, "exact": exact, "count": 0.0 if exact else None}


def diff(a: dict, b: dict) -> dict:
    """Two ``profile.run`` results side by side, per step, with the largest differences explained."""
    sa, sb = _side(a), _side(b)

    def both(value):
        return row(_per_step(a, sa, value), _per_step(b, sb, value))

    def both_mean(value):
        return row(_mean([value(r) for r in a["ranks"]]), _mean([value(r) for r in b["ranks"]]))

    tb = lambda key: lambda r: r["temporal_breakdown"][key]  # noqa: E731
    out = {
        "a": sa, "b": sb, "per": sa["per"] if sa["per"] == sb["per"] else "mixed",
        "step_time_us": row(sa["step_time_us"], sb["step_time_us"]),
        "temporal_breakdown": {
            "idle_us": both(tb("idle_time_us")), "compute_us": both(tb("compute_time_us")),
            "non_compute_us": both(tb("non_compute_time_us")), "idle_pctg": both_mean(tb("idle_pctg")),
            "compute_pctg": both_mean(tb("compute_pctg")), "non_compute_pctg": both_mean(tb("non_compute_pctg"))},
        "communication": {
            "exposed_us": both(lambda r: r["communication"]["exposed_us"]),
            "total_us": both(lambda r: r["communication"]["total_us"]),
            "overlap_pctg": both_mean(lambda r: r["communication"]["overlap_pctg"]),
            "by_collective": _collectives(a, sa, b, sb)},
        "top_kernels": _kernels(a, sa, b, sb),
        "launches": {"matched": both(lambda r: r["launches"]["matched"]),
                     "short_kernels": both(lambda r: r["launches"].get("short_kernels", 0))},
        "gpu_idle": {"idle_us": both(lambda r: r["gpu_idle"]["idle_us"]),
                     "host_bound_us": both(lambda r: r["gpu_idle"]["host_bound_us"])},
    }
    warnings = ["A: %s" % w for w in a["warnings"]] + ["B: %s" % w for w in b["warnings"]]
    for name, side in (("A", sa), ("B", sb)):
        if side.get("note"):
            warnings.append("%s: %s" % (name, side["note"]))
        if side["partial"]:
            warnings.append("%s: PARTIAL, a trace ended early" % name)
    if out["per"] == "mixed":
        warnings.append("A is counted per %s and B per %s: the deltas compare unlike units" % (sa["per"], sb["per"]))
    if sa["ranks"] != sb["ranks"]:
        warnings.append("A has %d rank(s) and B %d: the numbers are means over each side's ranks"
                        % (sa["ranks"], sb["ranks"]))
    out["differences"] = explain(out)
    out["warnings"] = warnings
    return out


# ---------------------------------------------------------------------------------------- explanations
def _signed(us: float) -> str:
    return ("+" if us >= 0 else "-") + _t(abs(us))


def _pct(value) -> str:
    return "?" if value is None else "%.0f%%" % value


def _stayed(a, b) -> bool:
    return abs(b - a) <= STAYED * max(abs(a), abs(b))


def _collective(label: str, entry: dict, unit: str) -> dict:
    """Exposure fell while the total stayed: now hidden under compute; the total fell: less or faster
    communication (and the reverse for a rise)."""
    ex, tot, ov = entry["exposed_us"], entry["total_us"], entry["overlap_pctg"]
    overlap = "overlap %s -> %s" % (_pct(ov["a"]), _pct(ov["b"]))
    total = "its total %s -> %s/%s" % (_t(tot["a"]), _t(tot["b"]), unit)
    fell = ex["delta"] < 0
    if _stayed(tot["a"], tot["b"]):
        why = ("communication now hidden under compute (%s, %s)" if fell else
               "less of the communication hidden under compute (%s, %s)") % (overlap, total.replace("its total",
                                                                                                    "total stayed"))
    elif (tot["delta"] < 0) == fell:
        why = "%s communication (%s; %s)" % ("less or faster" if fell else "more or slower", total, overlap)
    else:
        why = "%s of it overlapped with compute (%s) although %s" % ("more" if fell else "less", overlap,
                                                                     total.replace("its total", "its total went"))
    return {"category": "exposed_communication", "name": label, "metric": "exposed_us", "row": ex,
            "source": "ranks[*].communication.by_collective.%s.exposed_us" % label,
            "text": "%s exposed %s/%s -> %s/%s (%s/%s): %s" % (label, _t(ex["a"]), unit, _t(ex["b"]), unit,
                                                              _signed(ex["delta"]), unit, why)}


def _compute(out: dict, unit: str) -> dict:
    r = out["temporal_breakdown"]["compute_us"]
    text = "compute time %s/%s -> %s/%s (%s/%s)" % (_t(r["a"]), unit, _t(r["b"]), unit, _signed(r["delta"]), unit)
    kernels = [k for k in out["top_kernels"] if k["class"] == "computation" and k["total_us"]["delta"]]
    if kernels:
        k = max(kernels, key=lambda k: (abs(k["total_us"]["delta"]), k["name"]))
        text += ": the top kernel that changed most is %s (%s/%s)" % (k["name"][:60], _signed(k["total_us"]["delta"]),
                                                                      unit)
    return {"category": "compute", "name": "compute", "metric": "compute_us", "row": r,
            "source": "ranks[*].temporal_breakdown.compute_time_us", "text": text}


def _idle(out: dict, unit: str) -> dict:
    r, host = out["temporal_breakdown"]["idle_us"], out["gpu_idle"]["host_bound_us"]
    text = "GPU idle %s/%s -> %s/%s (%s/%s); of it host-bound %s -> %s/%s" % (
        _t(r["a"]), unit, _t(r["b"]), unit, _signed(r["delta"]), unit, _t(host["a"]), _t(host["b"]), unit)
    if host["delta"] and (host["delta"] < 0) == (r["delta"] < 0) and abs(host["delta"]) >= 0.5 * abs(r["delta"]):
        text += ": mostly host-bound idle (the GPU waiting for the host to queue work)"
    return {"category": "idle", "name": "idle", "metric": "idle_us", "row": r,
            "source": "ranks[*].temporal_breakdown.idle_time_us, ranks[*].gpu_idle.host_bound_us", "text": text}


def _host_bound(out: dict, unit: str) -> dict:
    r, launches = out["gpu_idle"]["host_bound_us"], out["launches"]["matched"]
    fell = r["delta"] < 0
    why = "the GPU waited %s for the host to queue work" % ("less" if fell else "more")
    if fell and launches["a"] and launches["b"] is not None and launches["b"] <= launches["a"] * (1 + STAYED):
        why += " (launch overhead removed)"
    text = "host-bound GPU idle %s/%s -> %s/%s (%s/%s): %s (launches %.0f -> %.0f/%s)" % (
        _t(r["a"]), unit, _t(r["b"]), unit, _signed(r["delta"]), unit, why, launches["a"] or 0, launches["b"] or 0,
        unit)
    return {"category": "host_bound_idle", "name": "host_bound", "metric": "host_bound_us", "row": r,
            "source": "ranks[*].gpu_idle.host_bound_us, ranks[*].launches.matched", "text": text}


def _kernel(k: dict, unit: str) -> Optional[dict]:
    """A kernel's time fell with its count: fewer launches (fused or removed); with its count unchanged:
    each call faster (and the reverse). A side outside its top list is only bounded: no mechanism."""
    r, c = k["total_us"], k["count"]
    name = k["name"][:60]
    if r.get("at_most"):
        side = r["at_most"][0]
        exact = "b" if side == "a" else "a"
        if r[exact] <= r[side]:
            return None  # the bound does not show a change
        shown = {side: "at most %s/%s (outside %s's top %d)" % (_t(r[side]), unit, side.upper(), TOP_KERNELS),
                 exact: "%s/%s" % (_t(r[exact]), unit)}
        return {"category": "kernel", "name": k["name"], "metric": "total_us", "row": r, "magnitude": r[exact] - r[side],
                "source": "ranks[*].top_kernels", "text": "%s %s -> %s (a change of at least %s/%s)" % (
                    name, shown["a"], shown["b"], _t(r[exact] - r[side]), unit)}
    text = "%s %s/%s -> %s/%s (%s/%s), count %.1f -> %.1f/%s" % (
        name, _t(r["a"]), unit, _t(r["b"]), unit, _signed(r["delta"]), unit, c["a"], c["b"], unit)
    if c["a"] and c["b"] is not None:
        fell = r["delta"] < 0
        if not _stayed(c["a"], c["b"]) and (c["delta"] < 0) == fell:
            text += ": %s" % ("fewer launches (fused or removed)" if fell else "more launches")
        elif _stayed(c["a"], c["b"]):
            text += ": each call %s (mean %s -> %s)" % ("faster" if fell else "slower", _t(r["a"] / c["a"]),
                                                        _t(r["b"] / c["b"]) if c["b"] else "?")
    return {"category": "kernel", "name": k["name"], "metric": "total_us", "row": r, "source": "ranks[*].top_kernels",
            "text": text}


def explain(out: dict) -> list:
    """The three largest per-step time differences, each with its sentence; none where nothing changed."""
    unit = "step" if out["per"] == "step" else "trace"
    found = []
    for label, entry in out["communication"]["by_collective"].items():
        if abs(entry["exposed_us"]["delta"]) >= SMALLEST_US:
            found.append(_collective(label, entry, unit))
    if abs(out["temporal_breakdown"]["compute_us"]["delta"] or 0) >= SMALLEST_US:
        found.append(_compute(out, unit))
    if abs(out["temporal_breakdown"]["idle_us"]["delta"] or 0) >= SMALLEST_US:
        found.append(_idle(out, unit))
    if abs(out["gpu_idle"]["host_bound_us"]["delta"] or 0) >= SMALLEST_US:
        found.append(_host_bound(out, unit))
    for k in out["top_kernels"]:
        if k["total_us"].get("at_most") or abs(k["total_us"]["delta"]) >= SMALLEST_US:
            item = _kernel(k, unit)
            if item is not None:
                found.append(item)
    for item in found:
        item["magnitude"] = round(item["magnitude"] if "magnitude" in item else abs(item["row"]["delta"]), 2)
    order = ("exposed_communication", "compute", "idle", "host_bound_idle", "kernel")
    found.sort(key=lambda i: (-i["magnitude"], order.index(i["category"]), i["name"]))
    return [dict(item, rank=n + 1) for n, item in enumerate(f for f in found if f["magnitude"] >= SMALLEST_US)][
        :EXPLAINED]


# ---------------------------------------------------------------------------------------- text
def _line(label: str, r: dict) -> str:
    def num(v):
        return "-" if v is None else "%.1f" % v
    pct = "-" if r.get("delta_pct") is None else "%+.1f%%" % r["delta_pct"]
    bound = " (%s: at most)" % ",".join(s.upper() for s in r["at_most"]) if r.get("at_most") else ""
    return "%-44s %12s %12s %12s %8s%s" % (label, num(r["a"]), num(r["b"]), num(r["delta"]), pct, bound)


def render(d: dict) -> str:
    """The side-by-side table, the explanations and the warnings, as lines."""
    unit = "step" if d["per"] == "step" else "trace"

    def side(name, s):
        return "%s: %d file(s), %d rank(s), %d step(s) analyzed, per %s: %s" % (
            name, len(s["files"]), s["ranks"], s["steps"], s["per"], ", ".join(s["files"][:3]) +
            (" and %d more" % (len(s["files"]) - 3) if len(s["files"]) > 3 else ""))
    lines = [side("A", d["a"]), side("B", d["b"]),
             "%-44s %12s %12s %12s %8s" % ("metric (us per %s unless %%)" % unit, "A", "B", "delta", "delta%"),
             _line("step_time_us (median)", d["step_time_us"])]
    tb = d["temporal_breakdown"]
    for key in ("idle", "compute", "non_compute"):
        lines.append(_line("%s_us" % key, tb["%s_us" % key]))
        lines.append(_line("%s_pctg" % key, tb["%s_pctg" % key]))
    comm = d["communication"]
    lines += [_line("comm exposed_us", comm["exposed_us"]), _line("comm overlap_pctg", comm["overlap_pctg"])]
    for label, entry in comm["by_collective"].items():
        lines += [_line("%s exposed_us" % label, entry["exposed_us"]), _line("%s total_us" % label, entry["total_us"])]
    for n, k in enumerate(d["top_kernels"][:KERNEL_LINES]):
        lines += [_line("kernel#%d_us %s" % (n + 1, k["name"][:30]), k["total_us"]),
                  _line("kernel#%d_count" % (n + 1), k["count"])]
    lines += [_line("launches", d["launches"]["matched"]), _line("short_kernels", d["launches"]["short_kernels"]),
              _line("gpu_idle_us", d["gpu_idle"]["idle_us"]), _line("host_bound_us", d["gpu_idle"]["host_bound_us"])]
    for item in d["differences"]:
        lines.append("explain: %d. %s [%s]" % (item["rank"], item["text"], item["source"]))
    if not d["differences"]:
        lines.append("explain: none (no per-%s time difference between A and B)" % unit)
    lines += ["warning: %s" % w for w in d["warnings"]]
    return "\n".join(lines)
