"""Records to token ids and loss masks, through the tokenizer's chat template.

A record is one JSON object (a JSONL line, or a Parquet row) of one of two shapes:

* ``{"messages": [{"role": "system"|"user"|"assistant"|..., "content": "..."}, ...]}``
* ``{"prompt": "...", "response": "..."}`` (optionally ``"system": "..."``), read as a system
  message, a user message and an assistant message.

With a chat template, a conversation is cut into segments by rendering its prefixes: for each
assistant message ``i``, ``render(messages[:i], add_generation_prompt=True)`` ends where the
assistant's text begins and ``render(messages[:i+1])`` ends where its turn (end-of-turn marker
included) ends. The text before is prompt (loss 0), the text in between is the answer (loss 1).
Messages after the last assistant message have nothing to learn and are left out. Each segment is
tokenized on its own (``add_special_tokens=False``: the template writes the special tokens), so
the prompt's tokens are exactly what the model is given at generation time, and the mask falls on
token boundaries. A template whose prefixes are not prefixes of the longer renderings (one that
rewrites earlier turns) cannot be cut this way: such a record is dropped and counted
(``dropped_template``).

Without a chat template: the BOS token (when the tokenizer has one), then each message's content;
an assistant message's content is followed by the EOS token, and both are loss.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attune.core.errors import InputError

LOSS_ROLES = ("assistant",)
# The files a tokenizer's content hash covers (whichever are present): not model weights.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "vocab.txt", "merges.txt", "tokenizer.model", "chat_template.jinja",
                   "chat_template.json")


def require(module: str):
    """Import an optional dependency of the ``data`` extra, or say how to install it (exit 2)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InputError("%s is not installed (%s): `attune rows` needs the data extra. Fix: pip install -e '.[data]'"
                         % (module.split(".")[0], exc)) from None


@dataclass
class Tokenizer:
    hf: object  # a transformers tokenizer
    name: str
    sha256: str
    vocab_size: int
    pad_id: int
    has_template: bool

    def meta(self) -> dict:
        return {"tokenizer": self.name, "tokenizer_sha256": self.sha256, "vocab_size": self.vocab_size,
                "pad_token_id": self.pad_id, "chat_template": self.has_template}


def tokenizer_sha256(directory: Path) -> str:
    """SHA-256 over (name, size, bytes) of each tokenizer file present, in the order of TOKENIZER_FILES."""
    digest = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = directory / name
        if path.is_file():
            data = path.read_bytes()
            digest.update(b"%s\0%d\0" % (name.encode(), len(data)))
            digest.update(data)
    return digest.hexdigest()


def load_tokenizer(path) -> Tokenizer:
    """A fast Hugging Face tokenizer from a local directory (never the hub)."""
    directory = Path(path)
    if not (directory / "tokenizer.json").is_file() and not (directory / "tokenizer_config.json").is_file():
        raise InputError("--tokenizer %s: no tokenizer.json or tokenizer_config.json there. Fix: give the local "
                         "directory a tokenizer was saved to (save_pretrained)" % directory)
    require("jinja2")
    # transformers warns on import that PyTorch is missing; a tokenizer does not need it.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    transformers = require("transformers")
    try:
        hf = transformers.AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as exc:  # transformers raises many types for a bad directory
        raise InputError("--tokenizer %s: transformers could not load it (%s). Fix: give a directory written by "
                         "save_pretrained" % (directory, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
    if not getattr(hf, "is_fast", False):
        raise InputError("--tokenizer %s: not a fast tokenizer. Fix: save a tokenizer.json (tokenizers library)"
                         % directory)
    pad = hf.pad_token_id if hf.pad_token_id is not None else hf.eos_token_id
    if pad is None:
        raise InputError("--tokenizer %s: no pad token and no EOS token to pad with. Fix: set pad_token in "
                         "tokenizer_config.json" % directory)
    return Tokenizer(hf, directory.resolve().name, tokenizer_sha256(directory), len(hf), int(pad),
                     bool(getattr(hf, "chat_template", None)))


# ---------------------------------------------------------------------------------------- records
def read_records(path, hasher=None):
    """Yield ``(where, record)`` from a .jsonl or .parquet file; ``hasher`` sees the file's bytes."""
    path = Path(path)
    if not path.is_file():
        raise InputError("--input %s: no such file. Fix: give a .jsonl or .parquet file of records" % path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        try:
            import orjson
            loads = orjson.loads
        except ImportError:  # orjson is a core dependency; json reads the same records, slower
            loads = json.loads
        with open(path, "rb") as handle:
            for line_no, line in enumerate(handle, 1):
                if hasher is not None:
                    hasher.update(line)
                if not line.strip():
                    continue
                try:
                    record = loads(line)
                except ValueError as exc:
                    raise InputError("%s:%d: not valid JSON (%s). Fix: one JSON object per line" % (path, line_no, exc))
                yield "%s:%d" % (path, line_no), record
    elif suffix == ".parquet":
        pq = require("pyarrow.parquet")
        if hasher is not None:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    hasher.update(block)
        number = 0
        try:
            batches = pq.ParquetFile(path).iter_batches(batch_size=4096)
            for batch in batches:
                for record in batch.to_pylist():
                    yield "%s: row %d" % (path, number), record
                    number += 1
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid and ArrowIOError are among these
            raise InputError("--input %s: not a readable Parquet file after %d records (%s). Fix: give a .jsonl or "
                             ".parquet file of records" % (path, number, " ".join(str(exc).split())))
    else:
        raise InputError("--input %s: unknown format %r. Fix: give a .jsonl or .parquet file" % (path, suffix))


def to_messages(record, where: str) -> list:
    """The record as a list of ``{"role", "content"}`` messages; a malformed record is an InputError."""
    if not isinstance(record, dict):
        raise InputError("%s: not a JSON object. Fix: each record is {\"messages\": [...]} or "
                         "{\"prompt\": ..., \"response\": ...}" % where)
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages:
            raise InputError("%s: field messages: expected a non-empty list. Fix: [{\"role\": \"user\", "
                             "\"content\": \"...\"}, ...]" % where)
        for index, message in enumerate(messages):
            if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                    and isinstance(message.get("content"), str)):
                raise InputError("%s: field messages[%d]: expected {\"role\": str, \"content\": str}, got %.80r. "
                                 "Fix: give every message a role and a string content" % (where, index, message))
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    if "prompt" in record or "response" in record:
        for key in ("prompt", "response"):
            if not isinstance(record.get(key), str):
                raise InputError("%s: field %s: expected a string, got %.80r. Fix: give both prompt and response "
                                 "as strings" % (where, key, record.get(key)))
        messages = [{"role": "user", "content": record["prompt"]},
                    {"role": "assistant", "content": record["response"]}]
        if isinstance(record.get("system"), str) and record["system"]:
            messages.insert(0, {"role": "system", "content": record["system"]})
        return messages
    raise InputError("%s: neither `messages` nor `prompt`/`response` (keys: %s). Fix: each record is "
                     "{\"messages\": [...]} or {\"prompt\": ..., \"response\": ...}"
                     % (where, ", ".join(sorted(map(str, record))) or "none"))


def segments(tok: Tokenizer, messages: list, where: str):
    """``[(text, loss)]`` whose texts join to the rendered conversation; None when it cannot be cut."""
    hf = tok.hf
    if not tok.has_template:
        out = [(hf.bos_token, 0)] if hf.bos_token else []
        for message in messages:
            if message["role"] in LOSS_ROLES:
                out.append((message["content"] + (hf.eos_token or ""), 1))
            else:
                out.append((message["content"], 0))
        return out
    out, done = [], ""
    try:
        for index, message in enumerate(messages):
            if message["role"] not in LOSS_ROLES:
                continue
            prompt = hf.apply_chat_template(messages[:index], tokenize=False, add_generation_prompt=True)
            turn = hf.apply_chat_template(messages[:index + 1], tokenize=False)
            if not (prompt.startswith(done) and turn.startswith(prompt)):
                return None
            out.append((prompt[len(done):], 0))
            out.append((turn[len(prompt):], 1))
            done = turn
    except Exception as exc:  # jinja2 raises TemplateError subclasses, templates call raise_exception
        raise InputError("%s: the chat template refused the messages (%s). Fix: give messages in the order the "
                         "template accepts (e.g. user and assistant alternating)" % (where, exc))
    return out


def encode(tok: Tokenizer, conversations: list):
    """Token ids (int32), loss mask (uint8) and per-conversation lengths, flat over ``conversations``.

    ``conversations`` is a list of segment lists (``segments``); all segments are tokenized in one
    batch call, which the tokenizer runs in parallel.
    """
    texts, flags, counts = [], [], []
    for segs in conversations:
        counts.append(len(segs))
        for text, loss in segs:
            texts.append(text)
            flags.append(loss)
    if not texts:
        return np.zeros(0, np.int32), np.zeros(0, np.uint8), np.zeros(len(conversations), np.int64)
    encoded = tok.hf(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]
    seg_lens = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    total = int(seg_lens.sum())
    ids = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int32, count=total)
    mask = np.repeat(np.asarray(flags, dtype=np.uint8), seg_lens)
    owner = np.repeat(np.arange(len(conversations)), counts)
    lens = np.bincount(owner, weights=seg_lens, minlength=len(conversations)).astype(np.int64)
    return ids, mask, lens
