"""The over-long rule, and deterministic best-fit packing of documents into fixed-length rows.

Over-long documents (more tokens than a row holds) follow one stated rule:

* ``drop`` (the default): the document is left out; ``dropped_overlong`` counts it.
* ``truncate``: its first ``seq_length`` tokens are kept and the rest cut off; ``truncated``
  counts it and ``truncated_tokens`` the tokens cut. A document left with no loss token is dropped.

Documents with no loss token (nothing to learn: no assistant message) are dropped and counted
(``dropped_no_loss``), so no row's loss mask is all zero.

Packing is online best-fit in input order: each document goes into the open row with the least
free space that still holds it (ties: the lowest row index); when none holds it, a new row opens
after the others. A document's tokens stay contiguous and in order, documents within a row keep
their input order, and nothing is dropped or duplicated. Input order is kept (rather than sorting
by length, best-fit decreasing) so the first rows, the ones a 20-iteration benchmark trains on,
mix document lengths the way the corpus does. The result depends only on the lengths and the row
length: the same input always packs the same way.
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np

OVERLONG_RULES = ("drop", "truncate")


def fit(ids, mask, lens, capacity: int, overlong: str, counts: dict):
    """Apply the over-long and no-loss rules to flat ``ids``/``mask`` with per-document ``lens``.

    Returns the kept ``(ids, mask, lens)``; ``counts`` gains dropped_overlong, truncated,
    truncated_tokens and dropped_no_loss.
    """
    assert overlong in OVERLONG_RULES, overlong
    lens = np.asarray(lens, dtype=np.int64)
    n = len(lens)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    owner = np.repeat(np.arange(n), lens)
    position = np.arange(len(ids), dtype=np.int64) - starts[owner]
    over = lens > capacity
    keep_doc = ~over if overlong == "drop" else np.ones(n, dtype=bool)
    keep_tok = keep_doc[owner] & (position < capacity)
    loss = np.bincount(owner, weights=mask * keep_tok, minlength=n)
    no_loss = keep_doc & (loss == 0)
    keep_doc &= ~no_loss
    keep_tok &= keep_doc[owner]
    counts["dropped_overlong"] = counts.get("dropped_overlong", 0) + (int(over.sum()) if overlong == "drop" else 0)
    if overlong == "truncate":
        kept_over = over & keep_doc
        counts["truncated"] = counts.get("truncated", 0) + int(kept_over.sum())
        counts["truncated_tokens"] = counts.get("truncated_tokens", 0) + int((lens[kept_over] - capacity).sum())
    counts["dropped_no_loss"] = counts.get("dropped_no_loss", 0) + int(no_loss.sum())
    return ids[keep_tok], mask[keep_tok], np.minimum(lens, capacity)[keep_doc]


def best_fit(lens, capacity: int):
    """Place documents of ``lens`` (each 1..capacity tokens) into rows of ``capacity`` tokens.

    Returns ``(row, offset, n_rows)``: per document its row index and its first position in the row.
    """
    lens = [int(x) for x in lens]
    row = np.empty(len(lens), dtype=np.int64)
    offset = np.empty(len(lens), dtype=np.int64)
    free_sizes = []  # sorted distinct free-space sizes that some open row has
    by_free = {}  # free space -> heap of row indexes with that much free space
    n_rows = 0
    for doc, length in enumerate(lens):
        assert 0 < length <= capacity, (doc, length, capacity)
        at = bisect.bisect_left(free_sizes, length)
        if at == len(free_sizes):
            chosen, free = n_rows, capacity
            n_rows += 1
        else:
            free = free_sizes[at]
            bucket = by_free[free]
            chosen = heapq.heappop(bucket)
            if not bucket:
                del by_free[free]
                free_sizes.pop(at)
        row[doc] = chosen
        offset[doc] = capacity - free
        left = free - length
        if left:
            bucket = by_free.get(left)
            if bucket is None:
                by_free[left] = [chosen]
                bisect.insort(free_sizes, left)
            else:
                heapq.heappush(bucket, chosen)
    return row, offset, n_rows
