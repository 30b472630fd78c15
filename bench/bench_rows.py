"""Benchmark (not a test): `attune rows build` throughput in tokens/s on a SYNTHETIC JSONL corpus,
beside the tokenizer's own batch encoding of the same text.

    .venv/bin/python bench/bench_rows.py [--mb 200] [--seq-length 4096] [--keep DIR] [--json]

1. Writes a seeded SYNTHETIC corpus of ``--mb`` MB: a third prompt/response pairs with a system
   prompt, two thirds four-message chats; the words come from a Zipf-distributed vocabulary of
   generated pseudo-words. Nothing in it is real text.
2. Trains a byte-level BPE tokenizer (``--vocab`` tokens) on the first 2 MB with the `tokenizers`
   library, saves it with a ChatML-style chat template, and loads it through transformers.
3. Baseline: the chat-template renderings of every record (made untimed beforehand) encoded by
   the tokenizer's batch call, ``CHUNK_RECORDS`` texts per call: what tokenizing the same text
   costs with nothing else around it.
4. Build: ``data.rows.build`` on the JSONL file, timed end to end (reading, templating, tokenizing,
   packing, writing Parquet and hashing). Tokens counted are the kept documents' tokens.

The goal is a build within 2x of the baseline (``ratio`` = baseline tokens/s / build tokens/s).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" notice
sys.path.insert(0, str(REPO / "skill" / "scripts"))

from attune.data import rows as rows_mod, tokenize  # noqa: E402

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SEED = 20261201


def make_corpus(path: Path, megabytes: float, seed: int = SEED) -> int:
    rng = random.Random(seed)
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    vocab = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(6000)})
    weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocab))))

    def text(lo, hi):
        words = rng.choices(vocab, cum_weights=weights, k=rng.randint(lo, hi))
        return " ".join(words).capitalize() + "."

    target, written, count = int(megabytes * 1024 * 1024), 0, 0
    with open(path, "w") as handle:
        while written < target:
            if count % 3 == 0:
                record = {"system": "You are a helpful assistant.", "prompt": text(10, 120), "response": text(20, 600)}
            else:
                record = {"messages": [{"role": "user", "content": text(5, 80)},
                                       {"role": "assistant", "content": text(10, 300)},
                                       {"role": "user", "content": text(5, 60)},
                                       {"role": "assistant", "content": text(10, 300)}]}
            line = json.dumps(record) + "\n"
            handle.write(line)
            written += len(line)
            count += 1
    return count


def make_tokenizer(corpus: Path, directory: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    sample = []
    with open(corpus) as handle:
        size = 0
        for line in handle:
            sample.append(line)
            size += len(line)
            if size > 2 * 1024 * 1024:
                break
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sample, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(str(directory))


def baseline(corpus: Path, tok_dir: Path):
    tok = tokenize.load_tokenizer(tok_dir)
    texts = []
    for where, record in tokenize.read_records(corpus):
        texts.append("".join(text for text, _ in tokenize.segments(tok, tokenize.to_messages(record, where), where)))
    started, tokens = time.perf_counter(), 0
    for first in range(0, len(texts), rows_mod.CHUNK_RECORDS):
        encoded = tok.hf(texts[first:first + rows_mod.CHUNK_RECORDS], add_special_tokens=False,
                         return_attention_mask=False)["input_ids"]
        tokens += sum(map(len, encoded))
    return tokens, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=200, help="corpus size in MB (default 200)")
    parser.add_argument("--seq-length", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=8192, help="BPE vocabulary size of the trained tokenizer")
    parser.add_argument("--keep", metavar="DIR", help="write the corpus, tokenizer and rows here and keep them")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-rows-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus, tok_dir = work / "corpus.jsonl", work / "tokenizer"
    started = time.perf_counter()
    records = make_corpus(corpus, args.mb)
    print("bench_rows: corpus %.1f MB, %d records in %.1f s" % (corpus.stat().st_size / 2 ** 20, records,
                                                               time.perf_counter() - started), file=sys.stderr)
    make_tokenizer(corpus, tok_dir, args.vocab)
    base_tokens, base_s = baseline(corpus, tok_dir)
    summary = rows_mod.build(corpus, tok_dir, args.seq_length, work / "rows.parquet")
    build_tps = summary["counts"]["tokens"] / summary["seconds"]
    base_tps = base_tokens / base_s
    result = {"synthetic": True, "nproc": os.cpu_count(), "corpus_mb": round(corpus.stat().st_size / 2 ** 20, 1),
              "records": records, "seq_length": args.seq_length, "vocab": args.vocab,
              "baseline_tokens": base_tokens, "baseline_seconds": round(base_s, 2),
              "baseline_tokens_per_s": round(base_tps), "build_tokens": summary["counts"]["tokens"],
              "build_seconds": summary["seconds"], "build_tokens_per_s": round(build_tps),
              "ratio": round(base_tps / build_tps, 2), "within_2x": base_tps / build_tps <= 2.0,
              "rows": summary["counts"]["rows"], "packing_efficiency": summary["packing_efficiency"],
              "dropped_overlong": summary["counts"]["dropped_overlong"], "rows_sha256": summary["rows_sha256"]}
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print("".join("%s: %s\n" % item for item in result.items()), end="")
    if not args.keep:
        for path in sorted(work.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        work.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
