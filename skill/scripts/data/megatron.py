"""Train a Megatron-LM job on a rows file: a dataset in GPTDataset's shape, and a runner that installs it.

Usage (in the training pod, with skill/scripts on PYTHONPATH)::

    ATTUNE_ROWS_PATH=rows.parquet ATTUNE_ROWS_SHA256=HEX torchrun ... -m attune.data.megatron pretrain_gpt.py ARGS...
    python3 skill/scripts/data/megatron.py pretrain_gpt.py ARGS...     # the same, run as a file

The runner loads the rows (refusing a file whose rows_sha256 is not ``ATTUNE_ROWS_SHA256``), makes
``BlendedMegatronDatasetBuilder.build`` return ``(RowsDataset, None, None)``, then runs the script
as ``__main__`` with its own argv. Sample ``i`` is row ``i % rows``, in file order. Exit codes: the
script's own; 1 when the rows' hash is not the expected one; 2 for a usage error (no script, no
ATTUNE_ROWS_PATH, an unreadable rows file, Megatron not importable), all before the script runs.
What a sample holds, the flags a recipe needs and the Megatron versions checked: data/MEGATRON.md.
"""

from __future__ import annotations

import os
import sys

# Run as a file, Python puts this folder first on sys.path, where data/megatron.py would shadow Megatron's
# `megatron` package (and data/tokenize.py the standard library's): its parent goes there instead, to load the
# attune package from this tree (attune.py), which then takes that folder off sys.path again.
if __package__ in (None, ""):
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    sys.path.insert(0, os.path.dirname(_HERE))
    import attune  # noqa: F401,E402

import copy  # noqa: E402
import importlib  # noqa: E402
import runpy  # noqa: E402

import numpy as np  # noqa: E402

from attune.core.errors import InputError  # noqa: E402
from attune.data import rows, tokenize  # noqa: E402

PATH_ENV = "ATTUNE_ROWS_PATH"
SHA_ENV = "ATTUNE_ROWS_SHA256"
PREFIX = "attune-rows:"
BUILDER = "megatron.core.datasets.blended_megatron_dataset_builder"
USAGE = "usage: %s=FILE [%s=HEX] [torchrun ...] -m attune.data.megatron PRETRAIN_SCRIPT [ARGS...]" % (PATH_ENV, SHA_ENV)


class RowsMismatch(RuntimeError):
    """The rows file is not the one the campaign declared: the job refuses to train on it."""


# ---------------------------------------------------------------------------------------- loading
def _flat(column, path, name):
    """A list column (a pyarrow ChunkedArray) as flat numpy values and int64 per-row offsets."""
    values, offsets, base = [], [np.zeros(1, np.int64)], 0
    for chunk in column.chunks:
        if chunk.null_count:
            raise InputError("%s: %s has null rows. Fix: rebuild it with `attune rows build`" % (path, name))
        off = chunk.offsets.to_numpy().astype(np.int64)
        values.append(chunk.values.to_numpy(zero_copy_only=False)[off[0]:off[-1]])
        offsets.append(off[1:] - off[0] + base)
        base += int(off[-1] - off[0])
    return (np.concatenate(values) if values else np.zeros(0, np.int64)), np.concatenate(offsets)


def _bad_doc_rows(docs, offsets, seq: int):
    """Rows whose doc_offsets are not ``[0, end, ...]``, strictly increasing and within ``seq``."""
    counts = np.diff(offsets)
    bad = counts < 2
    row_of = np.repeat(np.arange(len(counts)), counts)
    first = np.zeros(len(docs), bool)
    first[offsets[:-1][counts > 0]] = True
    bad[row_of[first & (docs != 0)]] = True
    bad[row_of[1:][~first[1:] & (np.diff(docs) <= 0)]] = True
    last = offsets[1:][counts > 0] - 1
    bad[row_of[last[docs[last] > seq]]] = True
    return np.flatnonzero(bad)


def load(path, expect_sha=None) -> dict:
    """The rows of ``path`` as numpy arrays (a memory-mapped read), their rows_sha256 checked when ``expect_sha``."""
    handle, meta = rows.open_file(path)
    if not meta or "seq_length" not in meta or "pad_token_id" not in meta:
        raise InputError("%s: no %s metadata with seq_length and pad_token_id: not a file `attune rows build` "
                         "wrote. Fix: rebuild it" % (path, rows.META_KEY.decode()))
    missing = [name for name in rows.COLUMNS if name not in handle.schema_arrow.names]
    if missing:
        raise InputError("%s: column(s) %s missing. Fix: rebuild it with `attune rows build`"
                         % (path, ", ".join(missing)))
    seq, before = int(meta["seq_length"]), os.stat(str(path))
    if not handle.metadata.num_rows:
        raise InputError("%s: no rows to train on. Fix: rebuild it with `attune rows build`" % path)
    table = tokenize.require("pyarrow.parquet").read_table(str(path), columns=list(rows.COLUMNS), memory_map=True)
    (ids, ids_off), (mask, mask_off), (docs, docs_off) = [_flat(table.column(name), path, name)
                                                          for name in rows.COLUMNS]
    for name, off in (("input_ids", ids_off), ("loss_mask", mask_off)):
        wrong = np.flatnonzero(np.diff(off) != seq)
        if len(wrong):
            raise InputError("%s: row %d: %s has %d values, not seq_length %d. Fix: see `attune rows check %s`"
                             % (path, wrong[0], name, off[wrong[0] + 1] - off[wrong[0]], seq, path))
    docs = docs.astype(np.int64)
    wrong = _bad_doc_rows(docs, docs_off, seq)
    if len(wrong):
        row = docs[docs_off[wrong[0]]:docs_off[wrong[0] + 1]].tolist()
        raise InputError("%s: row %d: doc_offsets %s is not [0, end of each document...] within %d tokens. Fix: see "
                         "`attune rows check %s`" % (path, wrong[0], row, seq, path))
    sha, _ = rows.rows_sha256(path)  # the canonical hash, as `attune rows sha` prints it
    after = os.stat(str(path))
    if (before.st_ino, before.st_size, before.st_mtime_ns) != (after.st_ino, after.st_size, after.st_mtime_ns):
        raise InputError("%s: the file changed while it was read. Fix: do not rewrite it while a job starts" % path)
    expect = (expect_sha or "").strip().lower() or None
    if expect and expect != sha:
        raise RowsMismatch("%s: rows_sha256 %s, but the expected rows_sha256 (%s) is %s: the job refuses to train "
                           "on other rows. Fix: point %s at the rows file the campaign declared (`attune rows sha "
                           "FILE` prints a file's hash), or rebuild it with the campaign's `attune rows build` command"
                           % (path, sha, SHA_ENV, expect, PATH_ENV))
    n = table.num_rows
    return dict(path=str(path), seq_length=seq, pad_id=int(meta["pad_token_id"]), rows=n, sha256=sha,
                verified=bool(expect), ids=ids.astype(np.int32, copy=False).reshape(n, seq),
                mask=mask.astype(np.uint8, copy=False).reshape(n, seq), docs=docs, docs_off=docs_off)


# ---------------------------------------------------------------------------------------- the dataset
class _Rows(object):
    """A rows file as Megatron's GPTDataset presents a sample (data/MEGATRON.md).

    ``RowsDataset(path, expect_sha=None, num_samples=None)``: the file is loaded once; with
    ``expect_sha`` its rows_sha256 must equal it (else ``RowsMismatch``). ``len`` is ``num_samples``
    (Megatron asks for train_iters x global batch size), else the row count; sample ``i`` is row
    ``i % rows``: deterministic, in file order, cycling. A sample holds ``tokens``, ``labels``,
    ``loss_mask`` and ``position_ids``; with ``cu_seqlens`` also ``cu_seqlens`` and ``max_seqlen``
    (Megatron's --dataloader-inter-document-masking), else with ``attention_mask`` a block-diagonal
    causal ``attention_mask`` (--create-attention-mask-in-dataloader).
    """

    def __init__(self, path, expect_sha=None, num_samples=None, attention_mask=False, cu_seqlens=False, loaded=None):
        self.__dict__.update(loaded if loaded is not None else load(path, expect_sha))
        self.num_samples, self.attention_mask, self.cu_seqlens = num_samples, attention_mask, cu_seqlens

    def view(self, num_samples=None, attention_mask=False, cu_seqlens=False):
        """The same rows (not copied) with another length and other outputs."""
        other = copy.copy(self)
        other.num_samples, other.attention_mask, other.cu_seqlens = num_samples, attention_mask, cu_seqlens
        return other

    def __len__(self) -> int:
        return self.rows if self.num_samples is None else int(self.num_samples)

    def arrays(self, idx) -> dict:
        """Sample ``idx`` as numpy arrays; ``None`` is row 0 with no loss (GPTDataset's batch padding)."""
        if idx is not None and not 0 <= idx < len(self):
            raise IndexError("sample %d of %d" % (idx, len(self)))
        row, seq = (0 if idx is None else int(idx) % self.rows), self.seq_length
        ids, docs = self.ids[row], self.docs[self.docs_off[row]:self.docs_off[row + 1]]
        labels = np.empty(seq, np.int64)
        labels[:-1], labels[-1] = ids[1:], self.pad_id
        loss = np.zeros(seq, np.float32)
        if idx is not None:
            loss[:-1] = self.mask[row][1:]  # a label is a target when the next token is one
            loss[docs[1:] - 1] = 0  # ... but not across a document's end (its label is the next document's)
        cu = np.append(docs[:-1], seq)  # the documents, padding folded into the last one (as GPTDataset does)
        lens = np.diff(cu)
        out = {"tokens": ids.astype(np.int64), "labels": labels}
        if self.attention_mask and not self.cu_seqlens:
            seg, pos = np.repeat(np.arange(len(lens)), lens), np.arange(seq)
            out["attention_mask"] = ~((seg[:, None] == seg[None, :]) & (pos[:, None] >= pos[None, :]))[None]
        out["loss_mask"] = loss
        out["position_ids"] = (np.arange(seq) - np.repeat(cu[:-1], lens)).astype(np.int64)
        if self.cu_seqlens:
            padded = np.full(seq + 1, seq, np.int32)  # a fixed length so that samples collate, as GPTDataset's
            padded[:len(cu)] = cu
            out.update(cu_seqlens=padded, max_seqlen=np.array(lens.max(), np.int32))
        return out


_CLASS = []


def dataset_class():
    """``RowsDataset``, a ``torch.utils.data.Dataset``: made on first use, so importing this module needs no torch."""
    if not _CLASS:
        import torch
        from torch.utils.data import Dataset

        def getitem(self, idx):
            return {key: torch.from_numpy(value) for key, value in self.arrays(idx).items()}

        _CLASS.append(type("RowsDataset", (_Rows, Dataset), {"__module__": __name__, "__doc__": _Rows.__doc__,
                                                             "__getitem__": getitem}))
    return _CLASS[0]


def __getattr__(name):  # PEP 562: data.megatron.RowsDataset (and pickle) get the class made on first use
    if name == "RowsDataset":
        return dataset_class()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ---------------------------------------------------------------------------------------- Megatron
def install(path, expect_sha=None):
    """Make ``BlendedMegatronDatasetBuilder.build`` return ``(RowsDataset(path, expect_sha, num_samples=the train
    size it is asked for), None, None)``; return the loaded dataset (checked against ``expect_sha`` first)."""
    try:
        module = importlib.import_module(BUILDER)
    except ImportError as exc:
        raise InputError("Megatron-LM is not importable (%s: %s). Fix: run in the training image that has it, or "
                         "put the Megatron-LM checkout on PYTHONPATH" % (type(exc).__name__, exc)) from None
    loaded = load(path, expect_sha)  # refuse other rows before torch is even imported
    base = dataset_class()(path, loaded=loaded)

    def build(builder):
        return _build(builder, base)

    module.BlendedMegatronDatasetBuilder.build = build
    return base


def _build(builder, base):
    """The patched build: the train split is the rows, validation and test are off; on the ranks Megatron
    builds datasets on (``is_built_on_rank``), as the real build."""
    import torch
    config, sizes = builder.config, list(builder.sizes)
    if getattr(builder.cls, "__name__", "") == "SFTDataset":
        raise InputError("--sft: Megatron's SFT dataset tokenizes text at run time; the rows are tokens already. "
                         "Fix: drop --sft (see data/MEGATRON.md)")
    if getattr(config, "hybrid_context_parallel", False):
        raise InputError("--hybrid-context-parallel: not supported with attune rows. Fix: drop it")
    seq = getattr(config, "sequence_length", base.seq_length)
    if seq != base.seq_length:
        raise InputError("--seq-length %s, but %s holds rows of %d tokens. Fix: --seq-length %d, or rows built "
                         "with --seq-length %s" % (seq, base.path, base.seq_length, base.seq_length, seq))
    if any(sizes[1:]) or (sizes[1:2] == [None] and getattr(config, "full_validation", False)):
        raise InputError("validation/test samples asked for (%s), but with attune rows only training reads data. "
                         "Fix: --eval-iters 0" % sizes[1:])
    if torch.distributed.is_available() and torch.distributed.is_initialized() and not builder.is_built_on_rank():
        return [None, None, None]
    inter = bool(getattr(config, "inter_document_masking", False))
    train = base.view(sizes[0], attention_mask=bool(getattr(config, "create_attention_mask", False)) and not inter,
                      cu_seqlens=inter)
    return [train, None, None]


# ---------------------------------------------------------------------------------------- runner
def _log(message: str) -> None:
    print("%s %s" % (PREFIX, message), file=sys.stderr, flush=True)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("%s\n\n%s" % (USAGE, __doc__), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    script, path = argv[0], os.environ.get(PATH_ENV, "").strip()
    if not os.path.isfile(script):
        _log("error: %s: no such training script. Fix: give the script Megatron runs, e.g. pretrain_gpt.py" % script)
        return 2
    if not path:
        _log("error: %s is not set: the job must be told which rows to train on. Fix: export %s=/path/rows.parquet "
             "(the campaign's rows file; %s=its rows_sha256 to verify it)" % (PATH_ENV, PATH_ENV, SHA_ENV))
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script.py` would: Megatron's folder
    try:
        dataset = install(path, os.environ.get(SHA_ENV))
    except RowsMismatch as exc:
        _log("error: %s" % exc)
        return 1
    except InputError as exc:
        _log("error: %s" % exc)
        return 2
    if os.environ.get("LOCAL_RANK", "0") in ("", "0"):  # once per pod, not once per process
        _log("training on %s (%d rows \u00d7 %d, rows_sha256 %s\u2026, %s)" % (
            path, dataset.rows, dataset.seq_length, dataset.sha256[:16], "verified" if dataset.verified
            else "not verified"))
    sys.argv = [script] + argv[1:]
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    # the importable module: its RowsDataset is attune.data.megatron.RowsDataset
    from attune.data.megatron import main as _main

    raise SystemExit(_main())
