"""slime rollouts to rows and back: ``from_slime``, ``to_slime`` and ``dump_sha256``.

slime saves a rollout with ``--save-debug-rollout-data path_{rollout_id}.pt`` as
``torch.save({"rollout_id": id, "samples": [sample.to_dict(), ...]})`` and replays it, without
SGLang, with ``--load-debug-rollout-data``. ``from_slime`` turns such dumps into a rows file: each
sample is one document (its ``tokens``; loss 0 on the prompt, then the sample's ``loss_mask``, all
ones when it is None), packed next-fit in rollout and sample order (GRPO normalises rewards over
consecutive samples, so the order is kept), with every other field of the sample in the
``doc_sample`` column as one JSON string per document. ``to_slime`` writes the rows back as dump
files slime loads, with a manifest (``attune_dump.json``); ``dump_sha256`` recomputes, from a dump's
samples, the rows_sha256 of the rows they came from, without torch when need be. The format and its
limits are documented in data/README.md.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import hashlib
import io
import json
import os
import pickle
import re
import zipfile
from pathlib import Path

import numpy as np

from attune.core.errors import InputError
from attune.core.files import atomic_write, make_folders, read_text

from . import rows as rows_mod

SOURCE = "slime-rollout"
DUMP_FORMAT = "attune-slime-dump"
DUMP_VERSION = 1
MANIFEST = "attune_dump.json"
TEMPLATE_KEY = "{rollout_id}"
ROUND = 128  # the default sequence length: the longest sample rounded up to a multiple of this
TORCH_FIX = "Fix: pip install torch (the pod extra: pip install -e '.[pod]')"


def _torch():
    """torch, or None when it is not installed (tests patch this to read dumps without it)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def is_manifest(path) -> bool:
    """Whether ``path`` names a dump manifest (``attune_dump.json``) rather than a rows Parquet file."""
    return str(path).endswith(".json")


# ---------------------------------------------------------------------------------------- reading dumps
def read_dump(path, expect_sha=None):
    """``(object, sha256 of the file's bytes)`` of a ``torch.save`` file, read without running code.

    With torch: ``torch.load(weights_only=True)`` (tensors, and numpy arrays and scalars, allowed).
    Without: the archive's ``data.pkl`` through an unpickler that builds only plain Python values
    (and ``collections.OrderedDict``); anything else, a tensor included, is refused. With
    ``expect_sha``, bytes that hash otherwise are refused before they are read.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("%s: no such dump file. Fix: give the files --save-debug-rollout-data wrote" % path)
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    if expect_sha is not None and sha != expect_sha:
        raise InputError("%s: its bytes hash to %s, not the %s the manifest lists: the file changed. Fix: write the "
                         "dump again with `attune rows to-slime`" % (path, sha, expect_sha))
    if not raw.startswith((b"PK\x03\x04", b"\x80")):  # torch.save writes a zip archive (a pickle before torch 1.6)
        raise InputError("%s: not a torch.save archive of plain values or tensors (%s). Fix: give the files "
                         "--save-debug-rollout-data wrote" % (path, "it is empty" if not raw else
                                                              "neither a zip archive nor a pickle"))
    torch = _torch()
    if torch is None:
        return _plain_load(raw, path), sha
    allow = getattr(torch.serialization, "safe_globals", None)
    try:
        with allow(_numpy_globals()) if allow else contextlib.nullcontext():
            return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True), sha
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ... for what it will not load
        lines = str(exc).strip().splitlines() or [type(exc).__name__]
        reason = next((line.strip() for line in lines if "unsupported global" in line.lower()), lines[0].strip())
        reason = reason.split(". ")[0]  # torch's first sentence says what; the rest is advice on weights_only
        raise InputError("%s: torch.load(weights_only=True) refuses it (%s). Fix: save plain values, tensors and "
                         "numpy arrays only (Sample.to_dict()), as slime's --save-debug-rollout-data does"
                         % (path, reason))


def _numpy_globals():
    """What torch's weights_only loader needs to rebuild numpy arrays and scalars (plain data)."""
    core = np._core if hasattr(np, "_core") else np.core
    dtypes = [getattr(np.dtypes, name) for name in getattr(getattr(np, "dtypes", None), "__all__", ())]
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype] + dtypes


class _PlainUnpickler(pickle.Unpickler):
    """Builds dicts, lists, strings, numbers and OrderedDicts; any other class or a tensor is an InputError."""

    def __init__(self, data: bytes, path):
        super().__init__(io.BytesIO(data))
        self.path = path

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        raise InputError("%s: holds %s.%s, not a plain Python value: without torch only plain values can be read "
                         "(not tensors or numpy arrays). %s" % (self.path, module, name, TORCH_FIX))

    def persistent_load(self, pid):
        raise InputError("%s: holds a tensor's storage: without torch only plain values can be read. %s"
                         % (self.path, TORCH_FIX))


def _plain_load(raw: bytes, path):
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        names = [name for name in archive.namelist() if name.count("/") == 1 and name.endswith("/data.pkl")]
        if len(names) != 1:
            raise zipfile.BadZipFile("%d data.pkl records" % len(names))
        return _PlainUnpickler(archive.read(names[0]), path).load()
    except InputError:
        raise
    except Exception as exc:  # BadZipFile, UnpicklingError, EOFError, ... for a file that is not a torch.save zip
        raise InputError("%s: not a torch.save archive of plain values (%s: %s); reading anything else needs torch. %s"
                         % (path, type(exc).__name__, exc, TORCH_FIX))


def _dump_paths(dumps):
    """The files named by paths and ``{rollout_id}`` templates (a template: the files that exist for it)."""
    paths = []
    for item in [dumps] if isinstance(dumps, (str, os.PathLike)) else dumps:
        item = str(item)
        if TEMPLATE_KEY not in item:
            paths.append(Path(item))
            continue
        pattern = re.compile(re.escape(item).replace(re.escape(TEMPLATE_KEY), r"\d+") + r"\Z")
        found = sorted(name for name in glob.glob(glob.escape(item).replace(TEMPLATE_KEY, "*")) if pattern.match(name))
        if not found:
            raise InputError("%s: no file matches the template. Fix: give the --save-debug-rollout-data template "
                             "of files that exist" % item)
        paths += [Path(name) for name in found]
    if not paths:
        raise InputError("no dump file given. Fix: attune rows from-slime DUMP.pt... or 'path_{rollout_id}.pt'")
    return paths


def _load_dumps(paths, expect_shas=None):
    """``[(rollout_id, samples, path, sha256)]`` in rollout-id order; each file is checked to be a slime dump."""
    dumps = []
    for path, expect_sha in zip(paths, expect_shas or [None] * len(paths)):
        data, sha = read_dump(path, expect_sha)
        if not isinstance(data, dict) or not isinstance(data.get("samples"), list) \
                or type(data.get("rollout_id")) is not int:
            raise InputError("%s: not a slime rollout dump ({\"rollout_id\": int, \"samples\": [...]}). Fix: give "
                             "the files --save-debug-rollout-data wrote" % path)
        dumps.append((data["rollout_id"], data["samples"], Path(path), sha))
    dumps.sort(key=lambda dump: dump[0])
    for (rid, _, one, _), (again, _, two, _) in zip(dumps, dumps[1:]):
        if rid == again:
            raise InputError("%s and %s: both hold rollout %d. Fix: give each rollout once" % (one, two, rid))
    return dumps


# ---------------------------------------------------------------------------------------- samples to rows
_SCALARS = (bool, int, float, str)


def _plain(value, where: str, sep: str = "."):
    """``value`` as JSON values: tensors and numpy arrays (anything with ``tolist``) become lists, tuples lists."""
    if value is None or type(value) in _SCALARS:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item, where) for item in value]
    if isinstance(value, dict):
        for key in value:
            if type(key) is not str:
                raise InputError("%s: key %r is not a string, so JSON would not give it back. Fix: use string keys"
                                 % (where, key))
        return {key: _plain(item, where + sep + key) for key, item in value.items()}
    if callable(getattr(value, "tolist", None)):
        return _plain(value.tolist(), where)
    raise InputError("%s: a %s.%s is not a plain value (JSON). Fix: store lists, dicts, strings, numbers, tensors "
                     "or numpy arrays in the sample" % (where, type(value).__module__, type(value).__name__))


def _document(rid: int, number: int, sample, path, vocab_size):
    """One sample: ``(ids int32, mask uint8, JSON string)``; a sample slime could not train on is an InputError."""
    where = "%s: rollout %d sample %d" % (path, rid, number)
    if not isinstance(sample, dict):
        raise InputError("%s: a %s, not a dict. Fix: save Sample.to_dict() values" % (where, type(sample).__name__))
    rest = _plain(sample, where + " field", " ")
    for field in ("tokens", "response_length", "loss_mask"):
        if field not in rest:
            raise InputError("%s field %s: missing. Fix: save Sample.to_dict() values (loss_mask None: all ones)"
                             % (where, field))
    tokens, length, loss = rest.pop("tokens"), rest["response_length"], rest["loss_mask"]
    if not isinstance(tokens, list) or not tokens or not all(type(t) is int and 0 <= t < 2 ** 31 for t in tokens):
        raise InputError("%s field tokens: not a non-empty list of token ids (ints in [0, 2^31)). Fix: save the "
                         "sample's prompt and response token ids" % where)
    ids = np.array(tokens, dtype=np.int32)
    if vocab_size is not None and int(ids.max()) >= vocab_size:
        at = int(np.argmax(ids >= vocab_size))
        raise InputError("%s field tokens: id %d at position %d is outside the vocabulary [0, %d). Fix: give the "
                         "model's --vocab-size, or dumps of this model" % (where, ids[at], at, vocab_size))
    if type(length) is not int or not 0 <= length <= len(ids):
        raise InputError("%s field response_length: %r, but the sample has %d tokens. Fix: an int in [0, %d]: the "
                         "last response_length tokens are the response" % (where, length, len(ids), len(ids)))
    mask = np.zeros(len(ids), dtype=np.uint8)
    if loss is None:
        mask[len(ids) - length:] = 1
    elif not isinstance(loss, list) or len(loss) != length:
        raise InputError("%s field loss_mask: %s values, expected response_length %d. Fix: one 0/1 per response "
                         "token, or None" % (where, len(loss) if isinstance(loss, list) else repr(loss), length))
    elif not all(type(v) is int and v in (0, 1) for v in loss):
        raise InputError("%s field loss_mask: values other than 0 and 1. Fix: one 0/1 per response token" % where)
    else:
        mask[len(ids) - length:] = loss
        del rest["loss_mask"]  # kept (as null) only when None, so the round trip gives None back
    text = json.dumps({"rollout": rid, "sample": rest}, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return ids, mask, text


def _rows(dumps, seq_length, vocab_size, pad_token_id: int):
    """Validate and pack the samples of ``dumps``: ``(batches, seq_length, counts)``."""
    ids, masks, texts = [], [], []
    for rid, samples, path, _ in dumps:
        for number, sample in enumerate(samples):
            one, mask, text = _document(rid, number, sample, path, vocab_size)
            if seq_length is not None and len(one) > seq_length:
                raise InputError("%s: rollout %d sample %d field tokens: %d tokens, longer than --seq-length %d (a "
                                 "sample is not cut: that would change the workload). Fix: --seq-length %d or more, or leave "
                                 "it out" % (path, rid, number, len(one), seq_length, len(one)))
            ids.append(one), masks.append(mask), texts.append(text)
    if not ids:
        raise InputError("%s: no sample. Fix: give dumps of rollouts that produced samples"
                         % ", ".join(path.name for _, _, path, _ in dumps))
    lens = np.array([len(one) for one in ids], dtype=np.int64)
    if seq_length is None:
        seq_length = int(-(-lens.max() // ROUND) * ROUND)
    row, offset, n_rows = next_fit(lens, seq_length)
    flat_ids, flat_mask = np.concatenate(ids), np.concatenate(masks)
    counts = {"samples": len(ids), "rollouts": len(dumps), "rows": n_rows, "tokens": int(lens.sum()),
              "loss_tokens": int(flat_mask.sum(dtype=np.int64)), "padding_tokens": n_rows * seq_length - int(lens.sum())}
    batches = rows_mod._row_batches(flat_ids, flat_mask, lens, row, offset, n_rows, seq_length, pad_token_id, texts)
    return batches, seq_length, counts


def _digest(dumps, seq_length: int, pad_token_id: int):
    """``(rows_sha256, counts)`` of the rows ``from_slime`` would write for ``dumps``, without writing them."""
    batches, _, counts = _rows(dumps, seq_length, None, pad_token_id)
    hasher = rows_mod.Hasher(seq_length, True)
    for batch in batches:
        hasher.update_rows(batch)
    return hasher.hexdigest(), counts


def next_fit(lens, capacity: int):
    """``(row, offset, n_rows)``: documents in order, a new row when the next one does not fit the current one."""
    row = np.empty(len(lens), dtype=np.int64)
    offset = np.empty(len(lens), dtype=np.int64)
    current, used = 0, 0
    for doc, length in enumerate(lens.tolist()):
        if used + length > capacity:
            current, used = current + 1, 0
        row[doc], offset[doc] = current, used
        used += length
    return row, offset, current + 1


def from_slime(dumps, out_path, seq_length=None, vocab_size=None, pad_token_id: int = 0) -> dict:
    """slime dump files (paths, or ``{rollout_id}`` templates) to a rows file; returns its metadata."""
    if seq_length is not None and seq_length < 1:
        raise InputError("--seq-length %d: must be positive. Fix: the workload's sequence length, or leave it out "
                         "(the longest sample, rounded up to a multiple of %d)" % (seq_length, ROUND))
    if pad_token_id < 0 or vocab_size is not None and pad_token_id >= vocab_size:
        raise InputError("--pad-token-id %d: outside the vocabulary [0, %s). Fix: the tokenizer's pad token id"
                         % (pad_token_id, vocab_size))
    dumps = _load_dumps(_dump_paths(dumps))
    batches, seq_length, counts = _rows(dumps, seq_length, vocab_size, pad_token_id)
    meta = {"format": rows_mod.FORMAT, "format_version": rows_mod.FORMAT_VERSION,
            "builder_version": rows_mod.BUILDER_VERSION, "seq_length": seq_length, "source": SOURCE,
            "inputs": [{"file": path.name, "sha256": sha} for _, _, path, sha in dumps],
            "rollouts": [rid for rid, _, _, _ in dumps], "vocab_size": vocab_size, "pad_token_id": pad_token_id,
            "counts": counts}
    meta["rows_sha256"] = rows_mod.write(out_path, batches, meta, samples=True)
    return dict(meta, out=str(out_path))


# ---------------------------------------------------------------------------------------- rows to dumps
def _rows_samples(path):
    """``(rows_sha256, metadata, [(rollout_id, [sample dicts])])`` of a rows file ``from_slime`` wrote."""
    handle, meta = rows_mod.open_file(path)
    if not meta or meta.get("source") != SOURCE or rows_mod.SAMPLES not in handle.schema_arrow.names:
        raise InputError("%s: not rows from slime rollouts (metadata source %r, no doc_sample column). Fix: give a "
                         "file `attune rows from-slime` wrote" % (path, (meta or {}).get("source")))
    seq = int(meta["seq_length"])
    hasher = rows_mod.Hasher(seq, True)
    rollouts = []
    for batch in rows_mod.batches(handle):
        rows_mod.feed(hasher, batch, path)
        (ids, ids_off, _), (mask, _, _), (docs, doc_off, _), (texts, text_off, _) = (
            batch.columns[name] for name in rows_mod.COLUMNS + (rows_mod.SAMPLES,))
        for i in range(batch.n):
            bounds, strings = docs[doc_off[i]:doc_off[i + 1]], texts[text_off[i]:text_off[i + 1]]
            if len(strings) != len(bounds) - 1:
                raise InputError("%s: row %d field doc_sample: %d strings for %d documents. Fix: run `attune rows "
                                 "check` on it, and rebuild it" % (path, batch.first + i, len(strings), len(bounds) - 1))
            for k, text in enumerate(strings):
                a, b = ids_off[i] + bounds[k], ids_off[i] + bounds[k + 1]
                rid, sample = _parse(text, "%s: row %d document %d field doc_sample" % (path, batch.first + i, k))
                length = sample.get("response_length")
                if type(length) is not int or not 0 <= length <= b - a:
                    raise InputError("%s: row %d document %d field doc_sample: response_length %r for %d tokens. Fix: "
                                     "rebuild the rows" % (path, batch.first + i, k, length, b - a))
                sample["tokens"] = ids[a:b].tolist()
                if "loss_mask" not in sample:
                    sample["loss_mask"] = mask[b - length:b].tolist()
                if not rollouts or rollouts[-1][0] != rid:
                    if rollouts and rid < rollouts[-1][0]:
                        raise InputError("%s: row %d document %d: rollout %d after rollout %d, not in rollout order. "
                                         "Fix: rebuild it with `attune rows from-slime`"
                                         % (path, batch.first + i, k, rid, rollouts[-1][0]))
                    rollouts.append((rid, []))
                rollouts[-1][1].append(sample)
    return hasher.hexdigest(), meta, rollouts


def _parse(text, where: str):
    """``(rollout id, sample dict)`` of one doc_sample string."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InputError("%s: not valid JSON (%s). Fix: rebuild the rows with `attune rows from-slime`" % (where, exc))
    if not isinstance(doc, dict) or type(doc.get("rollout")) is not int or not isinstance(doc.get("sample"), dict):
        raise InputError("%s: not {\"rollout\": int, \"sample\": {...}}. Fix: rebuild the rows with "
                         "`attune rows from-slime`" % where)
    return doc["rollout"], doc["sample"]


def _write_atomic(path: Path, write) -> str:
    """Write ``path`` whole (``files.atomic_write``) with what ``write(handle)`` puts in a binary file object;
    return the sha256 of its bytes."""
    buffer = io.BytesIO()
    write(buffer)
    data = buffer.getvalue()
    atomic_write(path, data)
    return hashlib.sha256(data).hexdigest()


def to_slime(rows_path, out_dir) -> dict:
    """Write ``out_dir/<rollout_id>.pt`` per rollout of a from-slime rows file, and the manifest; return a summary.

    The samples are rebuilt exactly (tokens, loss_mask, every other field) in their order. Before
    writing, their rows are rebuilt from them and must hash to the rows file's own rows_sha256, so
    the manifest's hash is what ``dump_sha256`` will find.
    """
    torch = _torch()
    if torch is None:
        raise InputError("torch is not installed: `attune rows to-slime` writes torch.save files for slime. %s"
                         % TORCH_FIX)
    sha, meta, rollouts = _rows_samples(rows_path)
    seq, pad = int(meta["seq_length"]), int(meta.get("pad_token_id", 0))
    again = _digest([(rid, samples, Path(rows_path), None) for rid, samples in rollouts], seq, pad)[0]
    if again != sha:
        raise InputError("%s: its samples, packed again, hash to %s, not the file's %s: the rows are not packed as "
                         "`attune rows from-slime` packs them. Fix: rebuild it with `attune rows from-slime`"
                         % (rows_path, again, sha))
    out_dir = Path(out_dir)
    make_folders(out_dir)
    ids = [rid for rid, _ in rollouts]
    stamp = {"format": DUMP_FORMAT, "format_version": DUMP_VERSION, "rows_sha256": sha, "seq_length": seq,
             "pad_token_id": pad, "rollouts": ids}
    files = []
    for rid, samples in rollouts:
        name = "%d.pt" % rid
        payload = {"rollout_id": rid, "samples": samples, "attune": stamp}
        files.append({"rollout_id": rid, "file": name,
                      "sha256": _write_atomic(out_dir / name, lambda handle: torch.save(payload, handle))})
    manifest = dict(stamp, files=files)
    del manifest["rollouts"]
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    _write_atomic(out_dir / MANIFEST, lambda handle: handle.write(text.encode("utf-8")))
    launch = "--load-debug-rollout-data %s --num-rollout %d" % (out_dir / ("%s.pt" % TEMPLATE_KEY), ids[-1] + 1)
    if ids[0]:
        launch += " --start-rollout-id %d" % ids[0]
    return {"out": str(out_dir), "manifest": str(out_dir / MANIFEST), "rows_sha256": sha, "seq_length": seq,
            "rollouts": ids, "samples": sum(len(samples) for _, samples in rollouts), "files": files,
            "launch": launch, "missing_rollouts": sorted(set(range(ids[0], ids[-1] + 1)) - set(ids))}


# ---------------------------------------------------------------------------------------- a dump's hash
def read_manifest(path) -> dict:
    """The manifest ``to_slime`` wrote, checked: format, seq_length, pad_token_id, files (plain ``.pt`` names)."""
    path = Path(path)
    fix = "give the %s `attune rows to-slime` wrote" % MANIFEST
    text = read_text(path, "dump manifest", fix)
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise InputError("%s: not JSON (%s). Fix: %s" % (path, exc, fix))
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list) or not files or manifest.get("format") != DUMP_FORMAT \
            or manifest.get("format_version") != DUMP_VERSION or type(manifest.get("seq_length")) is not int \
            or type(manifest.get("pad_token_id")) is not int \
            or not all(isinstance(entry, dict) and isinstance(entry.get("file"), str) and isinstance(
                entry.get("sha256"), str) and re.match(r"\d+\.pt\Z", entry["file"]) for entry in files):
        raise InputError("%s: not an %s manifest version %d (format, seq_length, pad_token_id, files of <id>.pt "
                         "with sha256). Fix: give the %s `attune rows to-slime` wrote"
                         % (path, DUMP_FORMAT, DUMP_VERSION, MANIFEST))
    return manifest


def dump_sha256(manifest_path):
    """``(rows_sha256, info)`` of a dump: recomputed from its files' samples, not taken from the manifest.

    Each file's bytes must hash to what the manifest lists. Works without torch for dumps of plain
    values, as ``to_slime`` writes them.
    """
    manifest_path = Path(manifest_path)
    manifest = read_manifest(manifest_path)
    paths = [manifest_path.parent / entry["file"] for entry in manifest["files"]]
    for path in paths:
        if not path.is_file():
            raise InputError("%s: listed in %s but missing. Fix: copy the whole dump folder" % (path, manifest_path))
    dumps = _load_dumps(paths, [entry["sha256"] for entry in manifest["files"]])
    sha, counts = _digest(dumps, manifest["seq_length"], manifest["pad_token_id"])
    info = {"manifest": str(manifest_path), "seq_length": manifest["seq_length"],
            "pad_token_id": manifest["pad_token_id"], "rollouts": [rid for rid, _, _, _ in dumps], "files": len(paths),
            "counts": counts, "recorded_sha256": manifest.get("rows_sha256")}
    return sha, info
