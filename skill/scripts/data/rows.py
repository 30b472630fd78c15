"""Build a rows file, write and read its Parquet layout, and compute ``rows_sha256``.

The layout and the canonical encoding behind ``rows_sha256`` are documented in data/README.md.
Columns: ``input_ids`` list<int32>, ``loss_mask`` list<uint8>, ``doc_offsets`` list<int32>
(``[0, end of document 1, ..., end of document K]``; positions from the last offset to the row's
end are padding), and in rows from slime rollouts (``rollout.py``) ``doc_sample`` list<string>, one
JSON string per document. The file's key-value metadata ``attune.rows`` is a JSON object (``META_KEY``).
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attune.core import __version__, files
from attune.core.errors import InputError

from . import pack, tokenize

FORMAT = "attune-rows"
FORMAT_VERSION = 1
BUILDER_VERSION = "attune %s rows/%d" % (__version__, FORMAT_VERSION)
META_KEY = b"attune.rows"
COLUMNS = ("input_ids", "loss_mask", "doc_offsets")
SAMPLES = "doc_sample"  # the optional column of one JSON string per document (rollout.py)
DTYPES = {"input_ids": "int32", "loss_mask": "uint8", "doc_offsets": "int32", SAMPLES: "string"}
SHA_HEADER = b"attune-rows-sha/%d\nseq_length=%d\n"
SHA_SAMPLES = b"extra=%s\n" % SAMPLES.encode()
CHUNK_RECORDS = 2048
ROWS_PER_BATCH = 256


def build(input_path, tokenizer_dir, seq_length: int, out_path, overlong: str = "drop", compression: str = "zstd",
          row_group_size: int = 1024, log=None) -> dict:
    """Records to a rows Parquet file; returns the summary (counts, hashes, timing) also stored in it."""
    if seq_length < 8:
        raise InputError("--seq-length %d: too short for a training row. Fix: give the workload's --seq-length, "
                         "e.g. 4096" % seq_length)
    if overlong not in pack.OVERLONG_RULES:
        raise InputError("--overlong %s: unknown rule. Fix: one of %s" % (overlong, ", ".join(pack.OVERLONG_RULES)))
    started = time.perf_counter()
    tok = tokenize.load_tokenizer(tokenizer_dir)
    pq = tokenize.require("pyarrow.parquet")
    counts = {"records_read": 0, "dropped_template": 0}
    input_hash = hashlib.sha256()
    ids_parts, mask_parts, lens_parts, chunk = [], [], [], []

    def flush():
        ids, mask, lens = tokenize.encode(tok, chunk)
        ids, mask, lens = pack.fit(ids, mask, lens, seq_length, overlong, counts)
        ids_parts.append(ids), mask_parts.append(mask), lens_parts.append(lens)
        chunk.clear()

    for where, record in tokenize.read_records(input_path, input_hash):
        counts["records_read"] += 1
        segs = tokenize.segments(tok, tokenize.to_messages(record, where), where)
        if segs is None:
            counts["dropped_template"] += 1
            if log and counts["dropped_template"] <= 3:
                log("%s: the chat template rewrites earlier turns; record dropped (dropped_template)" % where)
            continue
        chunk.append(segs)
        if len(chunk) >= CHUNK_RECORDS:
            flush()
    if chunk:
        flush()
    ids = np.concatenate(ids_parts) if ids_parts else np.zeros(0, np.int32)
    mask = np.concatenate(mask_parts) if mask_parts else np.zeros(0, np.uint8)
    lens = np.concatenate(lens_parts) if lens_parts else np.zeros(0, np.int64)
    if not len(lens):
        raise InputError("--input %s: no record left to train on (%s). Fix: give records with an assistant answer "
                         "shorter than --seq-length, or --overlong truncate"
                         % (input_path, ", ".join("%s %d" % item for item in sorted(counts.items()))))
    row, offset, n_rows = pack.best_fit(lens, seq_length)
    counts.update(records_kept=int(len(lens)), documents=int(len(lens)), rows=n_rows, tokens=int(len(ids)),
                  loss_tokens=int(mask.sum()), padding_tokens=n_rows * seq_length - int(len(ids)))
    for key in ("truncated", "truncated_tokens"):
        counts.setdefault(key, 0)
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "builder_version": BUILDER_VERSION,
            "seq_length": seq_length, "overlong": overlong, "input": Path(input_path).name,
            "input_sha256": input_hash.hexdigest(), "counts": counts, **tok.meta()}
    batches = _row_batches(ids, mask, lens, row, offset, n_rows, seq_length, tok.pad_id)
    meta["rows_sha256"] = write(out_path, batches, meta, compression, row_group_size)
    seconds = time.perf_counter() - started
    return dict(meta, out=str(out_path), seconds=round(seconds, 3),
                tokens_per_s=round(counts["tokens"] / seconds, 1) if seconds else None,
                packing_efficiency=round(counts["tokens"] / float(n_rows * seq_length), 4))


def _row_batches(ids, mask, lens, row, offset, n_rows: int, seq: int, pad: int, samples=None):
    """Yield ``(n, ids_2d_flat, mask_2d_flat, doc_list_offsets, doc_values)`` for ROWS_PER_BATCH rows at a time.

    With ``samples`` (one string per document), each batch also holds its documents' strings and their
    per-row list offsets: ``(..., strings, string_list_offsets)``.
    """
    starts = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    order = np.lexsort((offset, row))
    sorted_rows = row[order]
    for first in range(0, n_rows, ROWS_PER_BATCH):
        n = min(ROWS_PER_BATCH, n_rows - first)
        lo, hi = np.searchsorted(sorted_rows, [first, first + n])
        docs = order[lo:hi]
        doc_lens = lens[docs]
        within = np.arange(int(doc_lens.sum()), dtype=np.int64) - np.repeat(np.cumsum(doc_lens) - doc_lens, doc_lens)
        dst = np.repeat((row[docs] - first) * seq + offset[docs], doc_lens) + within
        src = np.repeat(starts[docs], doc_lens) + within
        out_ids = np.full(n * seq, pad, dtype=np.int32)
        out_mask = np.zeros(n * seq, dtype=np.uint8)
        out_ids[dst] = ids[src]
        out_mask[dst] = mask[src]
        per_row = np.bincount(row[docs] - first, minlength=n)
        list_offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(per_row + 1, out=list_offsets[1:])
        values = np.zeros(int(list_offsets[-1]), dtype=np.int32)
        is_start = np.zeros(len(values), dtype=bool)
        is_start[list_offsets[:-1]] = True
        values[~is_start] = offset[docs] + doc_lens
        if samples is None:
            yield n, out_ids, out_mask, list_offsets, values
        else:
            yield (n, out_ids, out_mask, list_offsets, values, [samples[d] for d in docs],
                   list_offsets - np.arange(n + 1, dtype=np.int32))


def _fixed(n: int, seq: int):
    """List offsets of ``n`` rows of exactly ``seq`` values."""
    return np.arange(0, (n + 1) * seq, seq, dtype=np.int32)


def write(path, batches, meta: dict, compression: str = "zstd", row_group_size: int = 1024,
          samples: bool = False) -> str:
    """Write row batches (from ``_row_batches``) to ``path`` atomically; return their rows_sha256.

    With ``samples``, the batches carry per-document strings (``_row_batches(samples=...)``), written as
    the ``doc_sample`` column and hashed with it.
    """
    pa = tokenize.require("pyarrow")
    pq = tokenize.require("pyarrow.parquet")
    seq = meta["seq_length"]
    schema = pa.schema([(name, pa.list_(getattr(pa, DTYPES[name])()))
                        for name in COLUMNS + ((SAMPLES,) if samples else ())])
    hasher = Hasher(seq, samples)
    path = Path(path)
    files.make_folders(path.parent)  # a new folder for the rows, as `rows to-slime` makes its own
    with files.replacing(path) as handle, pq.ParquetWriter(handle, schema, compression=compression) as writer:
        for batch in batches:
            n, ids, mask, doc_offsets, doc_values = batch[:5]
            hasher.update_rows(batch)
            fixed = _fixed(n, seq)
            arrays = [pa.ListArray.from_arrays(pa.array(fixed), pa.array(ids)),
                      pa.ListArray.from_arrays(pa.array(fixed), pa.array(mask)),
                      pa.ListArray.from_arrays(pa.array(doc_offsets), pa.array(doc_values))]
            if samples:
                arrays.append(pa.ListArray.from_arrays(pa.array(batch[6]), pa.array(batch[5], pa.string())))
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema), row_group_size=row_group_size)
        sha = hasher.hexdigest()
        writer.add_key_value_metadata({META_KEY: json.dumps(dict(meta, rows_sha256=sha), sort_keys=True)})
    return sha


class Hasher(object):
    """rows_sha256: SHA-256 of the canonical encoding (data/README.md), fed a batch of rows at a time.

    With ``samples`` (a file with the ``doc_sample`` column), the header names the column and each
    row's strings follow its ``doc_offsets``.
    """

    def __init__(self, seq_length: int, samples: bool = False):
        self.seq_length, self.samples = seq_length, samples
        self._sha = hashlib.sha256(SHA_HEADER % (FORMAT_VERSION, seq_length) + (SHA_SAMPLES if samples else b""))

    def update_rows(self, batch) -> None:
        """Hash a batch as ``_row_batches`` yields it: rows of exactly seq_length values."""
        fixed = _fixed(batch[0], self.seq_length)
        self.update(batch[1], fixed, batch[2], fixed, batch[4], batch[3], *batch[5:])

    def update(self, ids, ids_offsets, mask, mask_offsets, docs, doc_offsets, strings=None, string_offsets=None):
        assert (strings is not None) == self.samples, "doc_sample strings given to a hasher not made for them"
        ids = np.ascontiguousarray(ids, dtype="<i4")
        mask = np.ascontiguousarray(mask, dtype="u1")
        docs = np.ascontiguousarray(docs, dtype="<i4")
        ids_b, mask_b, docs_b = memoryview(ids).cast("B"), memoryview(mask).cast("B"), memoryview(docs).cast("B")
        update, count = self._sha.update, struct.Struct("<i").pack
        for i in range(len(ids_offsets) - 1):
            a, b = int(ids_offsets[i]), int(ids_offsets[i + 1])
            c, d = int(mask_offsets[i]), int(mask_offsets[i + 1])
            e, f = int(doc_offsets[i]), int(doc_offsets[i + 1])
            update(count(b - a)), update(ids_b[4 * a:4 * b])
            update(count(d - c)), update(mask_b[c:d])
            update(count(f - e)), update(docs_b[4 * e:4 * f])
            if strings is not None:
                g, h = int(string_offsets[i]), int(string_offsets[i + 1])
                update(count(h - g))
                for text in strings[g:h]:
                    data = text.encode("utf-8")
                    update(count(len(data))), update(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


# ---------------------------------------------------------------------------------------- reading
@dataclass
class Batch:
    first: int  # index of the batch's first row in the file
    n: int
    columns: dict  # name -> (values, offsets, null_rows) as numpy arrays
    types: dict  # name -> the Arrow type as read


def open_file(path):
    """``(ParquetFile, metadata dict or None)``; a file Parquet cannot read is an InputError."""
    pq = tokenize.require("pyarrow.parquet")
    path = Path(path)
    if not path.is_file():
        raise InputError("%s: no such rows file. Fix: give the file `attune rows build` wrote" % path)
    try:
        handle = pq.ParquetFile(str(path))
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a file that is not Parquet
        raise InputError("%s: not a readable Parquet file (%s). Fix: rebuild it with `attune rows build`"
                         % (path, " ".join(str(exc).split())))
    raw = (handle.metadata.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else None
    except ValueError:
        meta = None
    return handle, meta


def batches(handle, batch_size: int = ROWS_PER_BATCH):
    """Yield ``Batch``es of the columns present among COLUMNS and SAMPLES, as flat numpy values and offsets."""
    pa = tokenize.require("pyarrow")
    present = [name for name in COLUMNS + (SAMPLES,) if name in handle.schema_arrow.names]
    first = 0
    for record_batch in handle.iter_batches(batch_size=batch_size, columns=present):
        columns, types = {}, {}
        for name in present:
            array = record_batch.column(name)
            types[name] = array.type
            if not pa.types.is_list(array.type) and not pa.types.is_large_list(array.type):
                continue
            offsets = array.offsets.to_numpy().astype(np.int64)
            values = array.values.to_numpy(zero_copy_only=False)
            nulls = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
            columns[name] = (values, offsets - offsets[0], nulls) if offsets[0] == 0 else \
                (values[offsets[0]:], offsets - offsets[0], nulls)
        yield Batch(first, record_batch.num_rows, columns, types)
        first += record_batch.num_rows


def rows_sha256(path):
    """``(rows_sha256, metadata)`` of a rows file; its metadata gives the sequence length."""
    handle, meta = open_file(path)
    if not meta or "seq_length" not in meta:
        raise InputError("%s: no %s metadata with seq_length: not a file `attune rows build` wrote. Fix: rebuild it"
                         % (path, META_KEY.decode()))
    missing = [name for name in COLUMNS if name not in handle.schema_arrow.names]
    if missing:
        raise InputError("%s: column(s) %s missing. Fix: rebuild it with `attune rows build`"
                         % (path, ", ".join(missing)))
    hasher = Hasher(int(meta["seq_length"]), SAMPLES in handle.schema_arrow.names)
    for batch in batches(handle):
        feed(hasher, batch, path)
    return hasher.hexdigest(), meta


def feed(hasher: Hasher, batch: Batch, path) -> None:
    """Hash one batch; a column whose values cannot be read as integers (or doc_sample as strings) is an InputError."""
    try:
        parts = [batch.columns[name] for name in COLUMNS]
        strings = batch.columns[SAMPLES][:2] if hasher.samples else ()
        hasher.update(parts[0][0].astype("<i4"), parts[0][1], parts[1][0].astype("u1"), parts[1][1],
                      parts[2][0].astype("<i4"), parts[2][1], *strings)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise InputError("%s: rows %d-%d: a column is not a list of integers, or doc_sample of strings (%s). Fix: "
                         "rebuild it with `attune rows build` or `attune rows from-slime`"
                         % (path, batch.first, batch.first + batch.n - 1, exc))
