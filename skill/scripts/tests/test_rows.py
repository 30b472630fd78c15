"""`attune rows`: build, sha and check, with a real tokenizer trained here and real Parquet files.

The tokenizer is a byte-level BPE trained in the test with the `tokenizers` library, saved with a
chat template and loaded back through transformers from the local directory (no network).
"""

from __future__ import annotations

import json
import random

import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (the data extra: pip install -e '.[data]')")
pytest.importorskip("transformers", reason="transformers is not installed (the data extra: pip install -e '.[data]')")
pytest.importorskip("jinja2", reason="jinja2 is not installed (the data extra: pip install -e '.[data]')")
import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from attune import cli  # noqa: E402
from attune.core.errors import InputError  # noqa: E402
from attune.data import check as check_mod, pack, rows as rows_mod, tokenize  # noqa: E402

WORDS = ("alpha", "beta", "gamma", "delta", "token", "model", "train", "row", "pack", "the", "a", "of", "and",
         "ship", "loss", "mask")
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SEQ = 128
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def save_tokenizer(directory, template=TEMPLATE):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    rng = random.Random(7)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|pad|>", "<|bos|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([_words(rng, 5, 40) for _ in range(300)], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>", eos_token="<|im_end|>",
                                   pad_token="<|pad|>")
    if template:
        fast.chat_template = template
    fast.save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return save_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def tok(tok_dir):
    return tokenize.load_tokenizer(tok_dir)


def records(seed, n=60):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append({"prompt": _words(rng, 1, 20), "response": _words(rng, 1, 40), "system": "be brief"})
        else:
            out.append({"messages": [{"role": "user", "content": _words(rng, 1, 15)},
                                     {"role": "assistant", "content": _words(rng, 1, 30)},
                                     {"role": "user", "content": _words(rng, 1, 10)},
                                     {"role": "assistant", "content": _words(rng, 1, 20)}]})
    return out


def write_jsonl(path, items):
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


@pytest.fixture(scope="module")
def built(tok_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("built")
    source = write_jsonl(base / "in.jsonl", records(1))
    summary = rows_mod.build(source, tok_dir, SEQ, base / "rows.parquet")
    return base, source, summary


def read(path):
    return pq.read_table(path).to_pydict()


def rewrite(source, out, cols, schema=None):
    """Write changed columns with the original's attune.rows metadata (a file-level key, not the schema's)."""
    meta = pq.ParquetFile(source).metadata.metadata[rows_mod.META_KEY]
    schema = (schema or pq.read_schema(source)).with_metadata({rows_mod.META_KEY: meta})
    pq.write_table(pa.Table.from_pydict(cols, schema=schema), out)
    return out


# ---------------------------------------------------------------------------------------- tokenize
def test_the_mask_covers_exactly_the_assistant_turns(tok):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the model"},
                {"role": "assistant", "content": "a row"}, {"role": "user", "content": "and"},
                {"role": "assistant", "content": "the loss"}]
    segs = tokenize.segments(tok, messages, "x")
    assert "".join(text for text, _ in segs) == tok.hf.apply_chat_template(messages, tokenize=False)
    ids, mask, lens = tokenize.encode(tok, [segs])
    assert len(ids) == len(mask) == lens[0]
    learned = tok.hf.decode(ids[mask == 1].tolist())
    assert learned == "a row<|im_end|>\nthe loss<|im_end|>\n"
    assert "the model" in tok.hf.decode(ids[mask == 0].tolist())


def test_without_a_chat_template_bos_and_eos_frame_the_text(tmp_path):
    plain = tokenize.load_tokenizer(save_tokenizer(tmp_path / "plain", template=None))
    segs = tokenize.segments(plain, [{"role": "user", "content": "the"}, {"role": "assistant", "content": "row"}], "x")
    assert segs == [("<|bos|>", 0), ("the", 0), ("row<|im_end|>", 1)]


def test_a_template_that_rewrites_earlier_turns_drops_the_record(tmp_path):
    rewriting = "{% for m in messages %}{{ m['content'] if loop.last else 'x' }}{% endfor %}" \
                "{% if add_generation_prompt %}>{% endif %}"
    odd = tokenize.load_tokenizer(save_tokenizer(tmp_path / "odd", template=rewriting))
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]
    assert tokenize.segments(odd, msgs, "x") is None


@pytest.mark.parametrize("line, field", [
    ('{"messages": []}', "field messages"), ('{"prompt": "a"}', "field response"), ('{"text": "a"}', "neither"),
    ('{"messages": [{"role": "user"}]}', "field messages[0]"), ('not json', "not valid JSON")])
def test_a_bad_record_names_file_line_and_field(tok_dir, tmp_path, line, field):
    source = tmp_path / "bad.jsonl"
    source.write_text('{"prompt": "a", "response": "b"}\n' + line + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:2.*%s.*Fix" % field.replace("[", r"\[").replace("]", r"\]")):
        rows_mod.build(source, tok_dir, SEQ, tmp_path / "o.parquet")


# ---------------------------------------------------------------------------------------- packing
@FAST
@given(st.lists(st.integers(1, 40), min_size=1, max_size=60), st.integers(40, 64))
def test_packing_never_drops_duplicates_or_reorders(lens, capacity):
    row, offset, n_rows = pack.best_fit(lens, capacity)
    grid = [[None] * capacity for _ in range(n_rows)]
    for doc, length in enumerate(lens):
        for k in range(length):
            assert grid[row[doc]][offset[doc] + k] is None  # no overlap
            grid[row[doc]][offset[doc] + k] = (doc, k)
    for r in range(n_rows):
        placed = [cell for cell in grid[r] if cell is not None]
        assert placed == sorted(placed)  # documents in input order, tokens in order, contiguous from 0
        assert all(cell is not None for cell in grid[r][:len(placed)])
    assert sorted(cell for line in grid for cell in line if cell) == [(d, k) for d, n in enumerate(lens)
                                                                        for k in range(n)]
    again = pack.best_fit(lens, capacity)
    assert np.array_equal(again[0], row) and np.array_equal(again[1], offset)


def test_best_fit_picks_the_tightest_row():
    row, offset, n_rows = pack.best_fit([6, 8, 3, 2], 10)
    assert n_rows == 2 and list(row) == [0, 1, 0, 1] and list(offset) == [0, 0, 6, 8]


@pytest.mark.parametrize("rule, kept, counted", [("drop", [3], {"dropped_overlong": 1}),
                                                 ("truncate", [3, 5], {"truncated": 1, "truncated_tokens": 2})])
def test_overlong_records_follow_the_rule_and_are_counted(rule, kept, counted):
    ids = np.arange(13, dtype=np.int32)
    mask = np.array([0, 1, 1] + [0, 1, 1, 1, 1, 1, 1] + [0, 0, 0], dtype=np.uint8)
    counts = {}
    out_ids, out_mask, lens = pack.fit(ids, mask, [3, 7, 3], 5, rule, counts)
    assert list(lens) == kept and counts["dropped_no_loss"] == 1
    assert all(counts[key] == value for key, value in counted.items())
    assert list(out_ids) == list(range(3 + (5 if rule == "truncate" else 0)))


# ---------------------------------------------------------------------------------------- build
def test_build_writes_fixed_rows_with_masks_and_boundaries(built, tok):
    base, source, summary = built
    counts = summary["counts"]
    table = read(base / "rows.parquet")
    assert counts["records_read"] == 60 and counts["rows"] == len(table["input_ids"])
    assert counts["tokens"] + counts["padding_tokens"] == counts["rows"] * SEQ
    meta = json.loads(pq.ParquetFile(base / "rows.parquet").metadata.metadata[rows_mod.META_KEY])
    assert meta["seq_length"] == SEQ and meta["tokenizer_sha256"] == tok.sha256 and meta["vocab_size"] == len(tok.hf)
    assert meta["builder_version"] == rows_mod.BUILDER_VERSION and meta["counts"] == counts
    for ids, mask, bounds in zip(table["input_ids"], table["loss_mask"], table["doc_offsets"]):
        assert len(ids) == len(mask) == SEQ and bounds[0] == 0 and bounds == sorted(set(bounds))
        assert not any(mask[bounds[-1]:]) and set(ids[bounds[-1]:]) <= {tok.pad_id} and any(mask)
        for start, end in zip(bounds, bounds[1:]):  # every document starts like the template does
            assert ids[start] == tok.hf.convert_tokens_to_ids("<|im_start|>") and mask[start] == 0
    assert check_mod.check(base / "rows.parquet")["ok"]


def test_kept_documents_appear_whole_and_in_order(built, tok):
    base, source, summary = built
    table = read(base / "rows.parquet")
    docs = [ids[a:b] for ids, bounds in zip(table["input_ids"], table["doc_offsets"])
            for a, b in zip(bounds, bounds[1:])]
    expected = []
    for line in source.read_text().splitlines():
        segs = tokenize.segments(tok, tokenize.to_messages(json.loads(line), "x"), "x")
        ids, _, lens = tokenize.encode(tok, [segs])
        if 0 < lens[0] <= SEQ:
            expected.append(ids.tolist())
    assert sorted(docs) == sorted(expected) and len(docs) == summary["counts"]["documents"]


def test_parquet_input_gives_the_same_rows(built, tok_dir, tmp_path):
    base, source, summary = built
    items = [json.loads(line) for line in source.read_text().splitlines()]
    normalised = [{"messages": tokenize.to_messages(item, "x")} for item in items]
    pq.write_table(pa.Table.from_pylist(normalised), tmp_path / "in.parquet")
    again = rows_mod.build(tmp_path / "in.parquet", tok_dir, SEQ, tmp_path / "rows.parquet")
    assert again["rows_sha256"] == summary["rows_sha256"]


@FAST
@given(seed=st.integers(0, 10 ** 6), compression=st.sampled_from(["zstd", "snappy", "none", "gzip"]),
       group=st.integers(1, 50))
def test_sha_is_stable_across_builds_and_layouts(tok_dir, tmp_path_factory, seed, compression, group):
    base = tmp_path_factory.mktemp("sha")
    source = write_jsonl(base / "in.jsonl", records(seed, n=20))
    one = rows_mod.build(source, tok_dir, SEQ, base / "a.parquet")
    two = rows_mod.build(source, tok_dir, SEQ, base / "b.parquet", compression=compression, row_group_size=group)
    assert one["rows_sha256"] == two["rows_sha256"] == rows_mod.rows_sha256(base / "b.parquet")[0]
    assert (base / "a.parquet").read_bytes() != (base / "b.parquet").read_bytes() or compression == "zstd"


@FAST
@given(data=st.data())
def test_sha_changes_when_any_token_changes(built, tmp_path_factory, data):
    base, _, summary = built
    table = pq.read_table(base / "rows.parquet")
    cols = table.to_pydict()
    r = data.draw(st.integers(0, len(cols["input_ids"]) - 1))
    p = data.draw(st.integers(0, SEQ - 1))
    field = data.draw(st.sampled_from(["input_ids", "loss_mask"]))
    old = cols[field][r][p]
    cols[field][r][p] = data.draw(st.integers(0, 255).filter(lambda v: v != old))
    out = tmp_path_factory.mktemp("changed") / "rows.parquet"
    rewrite(base / "rows.parquet", out, cols)
    assert rows_mod.rows_sha256(out)[0] != summary["rows_sha256"]


# ---------------------------------------------------------------------------------------- check
def plant(built, tmp_path, change, schema=None):
    base, _, _ = built
    table = pq.read_table(base / "rows.parquet")
    cols = table.to_pydict()
    change(cols)
    return rewrite(base / "rows.parquet", tmp_path / "planted.parquet", cols, schema)


def _set(field, row, pos, value):
    def change(cols):
        cols[field][row][pos] = value
    return change


def _pad_pos(cols, row):
    return cols["doc_offsets"][row][-1]


DEFECTS = {
    "short row": (lambda c: c["input_ids"].__setitem__(1, c["input_ids"][1][:-1]), "row 1 field input_ids: 127 values"),
    "mask length": (lambda c: c["loss_mask"].__setitem__(2, c["loss_mask"][2] + [0]), "row 2 field loss_mask: 129"),
    "id past vocab": (_set("input_ids", 3, 5, 9999), "row 3 field input_ids: token id 9999 at position 5"),
    "mask not 0/1": (_set("loss_mask", 0, 4, 2), "row 0 field loss_mask: value 2 at position 4"),
    "all-zero mask": (lambda c: c["loss_mask"].__setitem__(4, [0] * SEQ), "row 4 field loss_mask: all zero"),
    "offsets not at 0": (lambda c: c["doc_offsets"][0].__setitem__(0, 1), "row 0 field doc_offsets: starts at 1"),
    "offsets decrease": (lambda c: c["doc_offsets"].__setitem__(1, [0, 50, 40]), "row 1 field doc_offsets: entry 2"),
    "offsets past row": (lambda c: c["doc_offsets"].__setitem__(2, [0, SEQ + 1]),
                         "row 2 field doc_offsets: ends at 129"),
    "token changed after build": (_set("input_ids", 0, 0, 7), "file field metadata.rows_sha256"),
}


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_check_names_each_planted_defect(built, tmp_path, name):
    change, expected = DEFECTS[name]
    result = check_mod.check(plant(built, tmp_path, change))
    assert not result["ok"] and any(line.startswith(expected) for line in result["problems"]), result["problems"]


def test_check_finds_loss_and_tokens_in_padding(built, tmp_path):
    base, _, _ = built
    cols = pq.read_table(base / "rows.parquet").to_pydict()
    row = next(i for i, b in enumerate(cols["doc_offsets"]) if b[-1] < SEQ)
    at = _pad_pos(cols, row)
    problems = check_mod.check(plant(built, tmp_path, lambda c: (_set("loss_mask", row, at, 1)(c),
                                                                  _set("input_ids", row, at, 9)(c))))["problems"]
    assert any(p.startswith("row %d field loss_mask: 1 at position %d, in the padding" % (row, at)) for p in problems)
    assert any(p.startswith("row %d field input_ids: id 9 at position %d in the padding" % (row, at)) for p in problems)


def test_check_names_a_wrong_dtype_and_a_wrong_sha(built, tmp_path):
    base, _, summary = built
    table = pq.read_table(base / "rows.parquet")
    wide = table.schema.set(0, pa.field("input_ids", pa.list_(pa.int64())))
    result = check_mod.check(plant(built, tmp_path, lambda c: None, schema=wide), expect_sha="0" * 64)
    assert "file field input_ids: type list<int64>, expected list<int32>" in result["problems"]
    assert any(p.startswith("file field rows_sha256: %s, expected %s" % (summary["rows_sha256"], "0" * 64))
               for p in result["problems"])


# ---------------------------------------------------------------------------------------- cli
def test_cli_build_sha_and_check(built, tok_dir, tmp_path, capsys):
    base, source, summary = built
    out = tmp_path / "cli.parquet"
    assert cli.main(["rows", "build", "--input", str(source), "--tokenizer", str(tok_dir), "--seq-length", str(SEQ),
                     "--out", str(out)]) == 0
    assert "rows_sha256: %s" % summary["rows_sha256"] in capsys.readouterr().out
    assert cli.main(["rows", "sha", str(out)]) == 0
    assert capsys.readouterr().out.endswith("rows_sha256: %s\n" % summary["rows_sha256"])
    assert cli.main(["rows", "check", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert cli.main(["rows", "check", str(out), "--expect-sha", "1" * 64]) == 1
    captured = capsys.readouterr()
    assert "problem: file field rows_sha256:" in captured.out and "ok: no" in captured.out
    assert cli.main(["rows", "build", "--input", str(tmp_path / "missing.jsonl"), "--tokenizer", str(tok_dir),
                     "--seq-length", str(SEQ), "--out", str(out)]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err
    assert cli.main(["rows", "sha"]) == 2


def test_the_rows_pre_ship_check_recomputes_the_digest(built, tmp_path):
    """A campaign that declared rows ships only while they still hash to ATTUNE_ROWS_SHA256."""
    from factory import Builder, settings

    from attune.campaign import preship, snapshot
    from attune.data.rows import rows_sha256

    path = built[0] / "rows.parquet"
    digest = rows_sha256(path)[0]
    for expected, ok in ((digest, True), ("0" * 64, False)):
        b = Builder(tmp_path / expected[:4], settings(ATTUNE_ROWS_PATH=str(path), ATTUNE_ROWS_SHA256=expected))
        b.baseline(runs=3)
        snap = snapshot.take(b.campaign.dir)
        outcome = dict((name, (passed, detail)) for name, passed, detail in
                       preship.run_all(preship.ShipContext(snap, snap.ranking.leader, None)))
        assert outcome["rows_sha256"][0] is ok, outcome["rows_sha256"]
