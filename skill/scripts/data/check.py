"""Verify a rows file: every problem is one line naming the row (or ``file``) and the field.

Checked: the ``attune.rows`` metadata and its sequence length; each column's type
(``input_ids`` list<int32>, ``loss_mask`` list<uint8>, ``doc_offsets`` list<int32>); per row, that
``input_ids`` and ``loss_mask`` hold exactly the sequence length, that token ids lie in
``[0, vocab_size)``, that mask values are 0 or 1, that ``doc_offsets`` starts at 0, strictly
increases and ends within the row, that the padding after the last document holds the pad token
and no loss, and that the mask is not all zero; then ``rows_sha256`` against the hash the file
records and against the expected one (``--expect-sha`` or ``ATTUNE_ROWS_SHA256``).

Rows from slime rollouts (metadata ``source`` ``slime-rollout``) are checked the same way, plus
the ``doc_sample`` column: list<string>, exactly one JSON string per document, each
``{"rollout": int, "sample": {...}}`` with a ``response_length`` within the document. A row with no
loss is allowed there (a sample may carry none: slime's ``remove_sample``). Without a vocabulary
size (none recorded, no ``--vocab-size``) the ids are not checked against one, and ``notes`` says so.
A dump manifest (``check_dump``) is checked by recomputing its rows_sha256 from its samples.
"""

from __future__ import annotations

import json

import numpy as np

from attune.core.errors import InputError

from . import rollout as rollout_mod, rows as rows_mod
from .tokenize import require

LIMIT = 200  # problems kept in full; the rest are counted


class Problems(object):
    def __init__(self):
        self.lines, self.total = [], 0

    def add(self, row, field: str, text: str) -> None:
        self.total += 1
        if len(self.lines) < LIMIT:
            self.lines.append("%s field %s: %s" % ("file" if row is None else "row %d" % row, field, text))


def check(path, seq_length=None, vocab_size=None, expect_sha=None, expect_source="--expect-sha") -> dict:
    """Check ``path``; the result's ``problems`` is empty when the file is good."""
    pa = require("pyarrow")
    handle, meta = rows_mod.open_file(path)
    found = Problems()
    meta = meta or {}
    if not meta:
        found.add(None, "metadata", "no %s metadata: not a file `attune rows build` wrote" % rows_mod.META_KEY.decode())
    elif meta.get("format") != rows_mod.FORMAT or meta.get("format_version") != rows_mod.FORMAT_VERSION:
        found.add(None, "metadata.format", "%r version %r, expected %r version %d" % (
            meta.get("format"), meta.get("format_version"), rows_mod.FORMAT, rows_mod.FORMAT_VERSION))
    seq = seq_length or meta.get("seq_length")
    if not seq:
        raise InputError("%s: %s, so no sequence length to check against. Fix: give a file `attune rows build` "
                         "wrote, or pass --seq-length N" % (path, "no %s metadata" % rows_mod.META_KEY.decode()
                                                            if not meta else "its metadata has no seq_length"))
    if seq_length and meta.get("seq_length") not in (None, seq_length):
        found.add(None, "metadata.seq_length", "%s, expected %d" % (meta.get("seq_length"), seq_length))
    vocab = vocab_size or meta.get("vocab_size")
    pad = meta.get("pad_token_id")
    schema = handle.schema_arrow
    rollout = meta.get("source") == rollout_mod.SOURCE
    samples = rows_mod.SAMPLES in schema.names
    for name in rows_mod.COLUMNS + ((rows_mod.SAMPLES,) if rollout or samples else ()):
        if name not in schema.names:
            found.add(None, name, "column missing")
            continue
        kind = schema.field(name).type
        want = getattr(pa, rows_mod.DTYPES[name])()
        if not pa.types.is_list(kind) or kind.value_type != want:
            shown = "list<%s>" % kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else kind
            found.add(None, name, "type %s, expected list<%s>" % (shown, want))
    hashable = all(name in schema.names and pa.types.is_list(schema.field(name).type)
                   and pa.types.is_integer(schema.field(name).type.value_type) for name in rows_mod.COLUMNS)
    samples = samples and pa.types.is_list(schema.field(rows_mod.SAMPLES).type) \
        and pa.types.is_string(schema.field(rows_mod.SAMPLES).type.value_type)
    hashable = hashable and (samples or rows_mod.SAMPLES not in schema.names)
    hasher = rows_mod.Hasher(int(seq), samples) if hashable else None
    n_rows = 0
    for batch in rows_mod.batches(handle):
        _check_batch(batch, int(seq), vocab, pad, found, no_loss_ok=rollout)
        if samples:
            _check_samples(batch, found)
        if hasher is not None:
            rows_mod.feed(hasher, batch, path)
        n_rows += batch.n
    sha = hasher.hexdigest() if hasher is not None else None
    if sha is None:
        found.add(None, "rows_sha256", "not computed: a column is missing or not a list of integers")
    notes = [] if vocab else ["vocab_size: none recorded and no --vocab-size: token ids were not checked against a "
                              "vocabulary (pass --vocab-size V to check them)"]
    return _result(path, n_rows, int(seq), vocab, pad, sha, meta.get("rows_sha256"), "metadata", expect_sha,
                   expect_source, found, notes)


def check_dump(manifest, seq_length=None, expect_sha=None, expect_source="--expect-sha") -> dict:
    """Check a dump (``attune_dump.json``): its rows_sha256 recomputed from its samples, against the manifest's
    and the expected one. A file that is missing, changed or unreadable is an InputError."""
    sha, info = rollout_mod.dump_sha256(manifest)
    found = Problems()
    if seq_length and info["seq_length"] != seq_length:
        found.add(None, "manifest.seq_length", "%d, expected %d" % (info["seq_length"], seq_length))
    notes = ["a dump is checked by its hash: its token ids are the rows' when it matches (check the rows file for "
             "ids and masks)"]
    return _result(manifest, info["counts"]["rows"], info["seq_length"], None, info["pad_token_id"], sha,
                   info["recorded_sha256"], "manifest", expect_sha, expect_source, found, notes)


def _result(path, n_rows, seq, vocab, pad, sha, recorded, recorder, expect_sha, expect_source, found, notes):
    """The check's result; ``recorded`` is the hash the ``recorder`` (metadata, manifest) holds."""
    if sha is not None:
        if recorded and recorded != sha:
            found.add(None, recorder + ".rows_sha256", "the %s records %s but its rows hash to %s: the rows changed "
                      "after they were built" % ("file" if recorder == "metadata" else recorder, recorded, sha))
        if expect_sha and expect_sha != sha:
            found.add(None, "rows_sha256", "%s, expected %s (%s)" % (sha, expect_sha, expect_source))
    if found.total > len(found.lines):
        found.lines.append("... and %d more problem(s)" % (found.total - len(found.lines)))
    return {"file": str(path), "rows": n_rows, "seq_length": seq, "vocab_size": vocab, "pad_token_id": pad,
            "rows_sha256": sha, "expected_sha256": expect_sha or None, "expected_from": expect_source if expect_sha
            else None, "ok": found.total == 0, "problem_count": found.total, "problems": found.lines, "notes": notes}


def _lengths(batch, name):
    column = batch.columns.get(name)
    if column is None:
        return None, None, None
    values, offsets, nulls = column
    if values.dtype.kind not in "iub":
        return None, None, None
    lengths = np.diff(offsets)
    lengths[nulls] = -1
    return values, offsets, lengths


def _check_batch(batch, seq: int, vocab, pad, found: Problems, no_loss_ok: bool = False) -> None:
    ids, ids_off, ids_len = _lengths(batch, "input_ids")
    mask, mask_off, mask_len = _lengths(batch, "loss_mask")
    docs, doc_off, doc_len = _lengths(batch, "doc_offsets")
    ends = np.full(batch.n, -1, dtype=np.int64)  # where the padding starts; -1: boundaries unusable
    for name, lengths in (("input_ids", ids_len), ("loss_mask", mask_len)):
        if lengths is None:
            continue
        for i in np.flatnonzero(lengths != seq):
            found.add(batch.first + int(i), name, "null" if lengths[i] < 0 else
                      "%d values, expected the sequence length %d" % (lengths[i], seq))
    if docs is not None:
        for i in range(batch.n):
            row, entries = batch.first + i, docs[doc_off[i]:doc_off[i + 1]]
            if doc_len[i] < 0:
                found.add(row, "doc_offsets", "null")
            elif len(entries) < 2:
                found.add(row, "doc_offsets", "%s: expected [0, end of each document...], at least one document"
                          % list(map(int, entries)))
            elif entries[0] != 0:
                found.add(row, "doc_offsets", "starts at %d, not 0" % entries[0])
            elif np.any(np.diff(entries) <= 0):
                k = int(np.argmax(np.diff(entries) <= 0)) + 1
                found.add(row, "doc_offsets", "entry %d (%d) does not exceed entry %d (%d): not strictly increasing"
                          % (k, entries[k], k - 1, entries[k - 1]))
            elif entries[-1] > seq:
                found.add(row, "doc_offsets", "ends at %d, past the sequence length %d" % (entries[-1], seq))
            else:
                ends[i] = int(entries[-1])
    if ids is not None:
        good = np.flatnonzero(ids_len == seq)
        grid = ids[ids_off[good][:, None] + np.arange(seq)] if len(good) else np.zeros((0, seq), np.int64)
        bad = (grid < 0) | (grid >= vocab) if vocab else grid < 0
        for r, p in _firsts(bad):
            found.add(batch.first + int(good[r]), "input_ids", "token id %d at position %d is outside the vocabulary "
                      "[0, %s)" % (grid[r, p], p, vocab if vocab else "?"))
        if pad is not None:
            padding = np.arange(seq)[None, :] >= ends[good][:, None]
            padding &= (ends[good] >= 0)[:, None]
            for r, p in _firsts(padding & (grid != pad)):
                found.add(batch.first + int(good[r]), "input_ids", "id %d at position %d in the padding (documents end "
                          "at %d), not the pad token %d" % (grid[r, p], p, ends[good[r]], pad))
    if mask is not None:
        good = np.flatnonzero(mask_len == seq)
        grid = mask[mask_off[good][:, None] + np.arange(seq)] if len(good) else np.zeros((0, seq), np.int64)
        for r, p in _firsts(grid > 1):
            found.add(batch.first + int(good[r]), "loss_mask", "value %d at position %d: not 0 or 1" % (grid[r, p], p))
        for r in () if no_loss_ok else np.flatnonzero(grid.sum(axis=1, dtype=np.int64) == 0):
            found.add(batch.first + int(good[r]), "loss_mask", "all zero: the row trains on nothing")
        padding = (np.arange(seq)[None, :] >= ends[good][:, None]) & (ends[good] >= 0)[:, None]
        for r, p in _firsts(padding & (grid != 0)):
            found.add(batch.first + int(good[r]), "loss_mask", "%d at position %d, in the padding (documents end at %d)"
                      % (grid[r, p], p, ends[good[r]]))


def _check_samples(batch, found: Problems) -> None:
    """doc_sample: one JSON string per document, each {"rollout": int, "sample": {...}} fitting its document."""
    texts, text_off, nulls = batch.columns[rows_mod.SAMPLES]
    docs, doc_off, _ = batch.columns.get("doc_offsets", (None, None, None))
    for i in range(batch.n):
        row, strings = batch.first + i, texts[text_off[i]:text_off[i + 1]]
        bounds = docs[doc_off[i]:doc_off[i + 1]] if docs is not None else None
        if nulls[i]:
            found.add(row, rows_mod.SAMPLES, "null")
            continue
        if bounds is not None and len(strings) != max(len(bounds) - 1, 0):
            found.add(row, rows_mod.SAMPLES, "%d strings for %d documents: expected one JSON string per document"
                      % (len(strings), max(len(bounds) - 1, 0)))
            continue
        for k, text in enumerate(strings):
            try:
                doc = json.loads(text)
            except (TypeError, ValueError) as exc:
                found.add(row, rows_mod.SAMPLES, "document %d: not valid JSON (%s)" % (k, exc))
                continue
            sample = doc.get("sample") if isinstance(doc, dict) else None
            if type(doc.get("rollout") if isinstance(doc, dict) else None) is not int or not isinstance(sample, dict):
                found.add(row, rows_mod.SAMPLES, "document %d: not {\"rollout\": int, \"sample\": {...}}" % k)
                continue
            length = sample.get("response_length")
            if bounds is not None and (type(length) is not int or not 0 <= length <= bounds[k + 1] - bounds[k]):
                found.add(row, rows_mod.SAMPLES, "document %d: response_length %r, but the document has %d tokens"
                          % (k, length, bounds[k + 1] - bounds[k]))


def _firsts(bad):
    """``(row, first bad position)`` for each row of a boolean grid with a True."""
    rows = np.flatnonzero(bad.any(axis=1))
    return zip(rows, np.argmax(bad[rows], axis=1)) if len(rows) else ()
