"""Interval arithmetic on numpy arrays of starts and ends (microseconds)."""

from __future__ import annotations

import numpy as np

EMPTY = (np.zeros(0), np.zeros(0))


def union(starts, ends) -> tuple:
    """Merged ``(starts, ends)`` of the intervals, sorted; touching intervals merge (as HTA's do)."""
    starts = np.asarray(starts, dtype=float)
    ends = np.asarray(ends, dtype=float)
    if starts.size == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]
    block = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(out_s.size)
    np.maximum.at(out_e, block, e)
    return out_s, out_e


def length(merged: tuple) -> float:
    s, e = merged
    return float(np.sum(e - s)) if s.size else 0.0


def union_length(*merged) -> float:
    """Length of the union of already merged sets."""
    starts = np.concatenate([m[0] for m in merged]) if merged else np.zeros(0)
    ends = np.concatenate([m[1] for m in merged]) if merged else np.zeros(0)
    return length(union(starts, ends))


def intersection_length(a: tuple, b: tuple) -> float:
    """|A ∩ B| for merged A and B: |A| + |B| - |A ∪ B|."""
    return length(a) + length(b) - union_length(a, b)


def clip(merged: tuple, lo: float, hi: float) -> tuple:
    s, e = merged
    if not s.size:
        return merged
    s2, e2 = np.maximum(s, lo), np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]
