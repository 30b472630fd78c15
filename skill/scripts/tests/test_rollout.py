"""slime rollouts to rows and back (`attune rows from-slime`, `rows to-slime`), with real torch.save files.

The samples are shaped exactly like slime's ``Sample.to_dict()`` (slime/utils/types.py): every
field, mixed None and values, a dict reward, status strings, log-prob lists, nested metadata.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import random
import shutil
import struct
import types
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="pyarrow is not installed (the data extra: pip install -e '.[data]')")
torch = pytest.importorskip("torch", reason="torch is not installed (the pod extra: pip install -e '.[pod]')")
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from attune import cli  # noqa: E402
from attune.core.errors import InputError  # noqa: E402
from attune.data import check as check_mod, rollout, rows as rows_mod
from attune.campaign import rows_check as preship_mod  # noqa: E402

VOCAB = 500
STATUSES = ("completed", "truncated", "aborted", "failed", "pending")
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def make_sample(rng, rollout_id, i):
    """One ``Sample.to_dict()`` as slime saves it."""
    prompt, response = rng.randint(1, 40), rng.randint(0, 60)
    return {
        "group_index": i // 4 if i % 5 else None, "index": rollout_id * 100 + i,
        "rollout_id": rollout_id if i % 3 else None,
        "prompt": "question %d" % i if i % 2 else [{"role": "user", "content": "question %d" % i}],
        "tokens": [rng.randrange(VOCAB) for _ in range(prompt + response)],
        "multimodal_inputs": None, "multimodal_train_inputs": None, "multimodal_train_input_id": None,
        "apply_chat_template_kwargs": {"enable_thinking": bool(i % 2)},
        "response": "answer %d \u00e9\u4e2d" % i, "response_length": response, "label": "42" if i % 2 else None,
        "reward": {"acc": 1.0, "format": -0.5} if (rollout_id, i) == (1, 2) else rng.uniform(-1, 1),
        "loss_mask": None if i % 4 == 0 else [rng.randint(0, 1) for _ in range(response)],
        "weight_versions": ["w%d" % rollout_id],
        "rollout_log_probs": [-rng.random() for _ in range(response)] if i % 2 else None,
        "rollout_top_p_token_ids": None, "rollout_top_p_token_offsets": None, "rollout_routed_experts": None,
        "remove_sample": i == 5, "teacher_log_probs": None, "status": STATUSES[i % 5],
        "metadata": {"source": "gsm8k", "turns": [{"tool": "calc", "ok": True, "t": 0.5}], "note": None},
        "generate_function_path": None, "custom_rm_path": "rm.py" if i == 3 else None,
        "train_metadata": {"loss": "grpo"} if i % 3 == 0 else None, "session_id": "s-%d-%d" % (rollout_id, i),
        "non_generation_time": 0.25 * i,
        "spec_info": {"spec_accept_token_num": 0, "spec_draft_token_num": 0, "spec_verify_ct": 0,
                      "completion_token_num": response},
        "prefix_cache_info": {"cached_tokens": i, "total_prompt_tokens": prompt},
    }


def save_dumps(directory, samples_by_rollout, name="{rollout_id}.pt"):
    directory.mkdir(parents=True, exist_ok=True)
    for rid, samples in samples_by_rollout.items():
        torch.save({"rollout_id": rid, "samples": samples}, directory / name.format(rollout_id=rid))
    return str(directory / name)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    rng = random.Random(3)
    samples = {rid: [make_sample(rng, rid, i) for i in range(12)] for rid in range(3)}
    return save_dumps(tmp_path_factory.mktemp("dumps"), samples), samples


@pytest.fixture(scope="module")
def built(dumps, tmp_path_factory):
    template, samples = dumps
    out = tmp_path_factory.mktemp("rows") / "rows.parquet"
    return out, rollout.from_slime(template, out, seq_length=256, vocab_size=VOCAB, pad_token_id=1)


@pytest.fixture(scope="module")
def dumped(built, tmp_path_factory):
    out = tmp_path_factory.mktemp("dump")
    return out, rollout.to_slime(built[0], out)


def read(path):
    return pq.read_table(path).to_pydict()


def reference_sha(path):
    """The canonical encoding of data/README.md, written out again from the documentation."""
    cols, meta = read(path), json.loads(pq.ParquetFile(path).metadata.metadata[rows_mod.META_KEY])
    extra = "doc_sample" in cols
    sha = hashlib.sha256(b"attune-rows-sha/1\nseq_length=%d\n" % meta["seq_length"]
                         + (b"extra=doc_sample\n" if extra else b""))
    for r in range(len(cols["input_ids"])):
        for name, code in (("input_ids", "<i"), ("loss_mask", "B"), ("doc_offsets", "<i")):
            values = cols[name][r]
            sha.update(struct.pack("<i", len(values)) + b"".join(struct.pack(code, v) for v in values))
        if extra:
            sha.update(struct.pack("<i", len(cols["doc_sample"][r])))
            for text in cols["doc_sample"][r]:
                data = text.encode("utf-8")
                sha.update(struct.pack("<i", len(data)) + data)
    return sha.hexdigest()


# ---------------------------------------------------------------------------------------- from_slime
def test_rows_hold_the_samples_in_order_with_prompt_loss_zero(built, dumps):
    path, summary = built
    _, samples = dumps
    cols = read(path)
    assert set(cols) == {"input_ids", "loss_mask", "doc_offsets", "doc_sample"}
    schema = pq.read_schema(path)
    assert schema.field("doc_sample").type == pa.list_(pa.string()) and schema.field("input_ids").type == pa.list_(
        pa.int32())
    originals = [(rid, s) for rid in range(3) for s in samples[rid]]
    docs = list(zip(cols["input_ids"], cols["loss_mask"], cols["doc_offsets"], cols["doc_sample"]))
    seen = []
    for r, (ids, mask, bounds, texts) in enumerate(docs):
        assert len(ids) == len(mask) == 256 and len(texts) == len(bounds) - 1
        assert set(ids[bounds[-1]:]) <= {1} and not any(mask[bounds[-1]:])
        if r + 1 < len(docs):  # next-fit: the next row's first sample did not fit here
            nxt = docs[r + 1][2]
            assert bounds[-1] + nxt[1] > 256
        for k, text in enumerate(texts):
            a, b = bounds[k], bounds[k + 1]
            rid, original = originals[len(seen)]
            doc = json.loads(text)
            assert doc["rollout"] == rid and doc["sample"]["index"] == original["index"]
            assert ids[a:b] == original["tokens"]
            response = original["response_length"]
            expected = original["loss_mask"] if original["loss_mask"] is not None else [1] * response
            assert mask[a:b] == [0] * (b - a - response) + expected
            assert ("loss_mask" in doc["sample"]) is (original["loss_mask"] is None) and "tokens" not in doc["sample"]
            seen.append(rid)
    assert len(seen) == 36
    meta = json.loads(pq.ParquetFile(path).metadata.metadata[rows_mod.META_KEY])
    assert meta["source"] == "slime-rollout" and meta["rollouts"] == [0, 1, 2] and meta["vocab_size"] == VOCAB
    assert meta["pad_token_id"] == 1 and meta["seq_length"] == 256 and meta["format"] == rows_mod.FORMAT
    assert meta["inputs"] == [{"file": "%d.pt" % rid, "sha256": hashlib.sha256(
        Path(dumps[0].format(rollout_id=rid)).read_bytes()).hexdigest()} for rid in range(3)]
    counts = meta["counts"]
    assert counts["samples"] == 36 and counts["rollouts"] == 3 and counts["rows"] == len(cols["input_ids"])
    assert counts["tokens"] + counts["padding_tokens"] == counts["rows"] * 256
    assert counts["loss_tokens"] == sum(map(sum, cols["loss_mask"])) and meta["rows_sha256"] == summary["rows_sha256"]


def test_inputs_record_each_file_hash_and_templates_expand_in_rollout_order(tmp_path):
    rng = random.Random(5)
    template = save_dumps(tmp_path, {rid: [make_sample(rng, rid, 0)] for rid in (10, 2, 0)}, "roll_{rollout_id}.pt")
    torch.save({"rollout_id": 7, "samples": []}, tmp_path / "roll_eval_7.pt")  # an eval dump: not matched
    summary = rollout.from_slime(template, tmp_path / "rows.parquet")
    assert summary["rollouts"] == [0, 2, 10] and summary["counts"]["samples"] == 3
    assert summary["inputs"] == [{"file": "roll_%d.pt" % rid, "sha256": hashlib.sha256(
        (tmp_path / ("roll_%d.pt" % rid)).read_bytes()).hexdigest()} for rid in (0, 2, 10)]
    listed = rollout.from_slime([tmp_path / "roll_10.pt", tmp_path / "roll_2.pt"], tmp_path / "two.parquet")
    assert listed["rollouts"] == [2, 10]
    back = rollout.to_slime(tmp_path / "two.parquet", tmp_path / "dump")
    assert back["launch"].endswith("{rollout_id}.pt --num-rollout 11 --start-rollout-id 2")
    assert back["missing_rollouts"] == list(range(3, 10))
    with pytest.raises(InputError, match=r"roll_2\.pt and .*roll_2\.pt: both hold rollout 2"):
        rollout.from_slime([tmp_path / "roll_2.pt", template], tmp_path / "dup.parquet")


def test_the_default_row_length_is_the_longest_sample_rounded_up(tmp_path):
    sample = make_sample(random.Random(1), 0, 1)
    sample.update(tokens=list(range(300)), response_length=10, loss_mask=None)
    template = save_dumps(tmp_path, {0: [sample]})
    assert rollout.from_slime(template, tmp_path / "r.parquet")["seq_length"] == 384
    with pytest.raises(InputError, match=r"0\.pt: rollout 0 sample 0 field tokens: 300 tokens, longer than "
                                         r"--seq-length 256 .*Fix: --seq-length 300 or more"):
        rollout.from_slime(template, tmp_path / "r.parquet", seq_length=256)


def _bad(field, value):
    def change(sample):
        if value is KeyError:
            del sample[field]
        else:
            sample[field] = value
    return change


BAD = {
    "tokens not a list": (_bad("tokens", "1 2 3"), "field tokens: not a non-empty list"),
    "negative token": (lambda s: s["tokens"].__setitem__(0, -1), "field tokens: not a non-empty list"),
    "float token": (lambda s: s["tokens"].__setitem__(0, 1.0), "field tokens: not a non-empty list"),
    "empty tokens": (lambda s: s.update(tokens=[], response_length=0, loss_mask=None), "field tokens"),
    "tokens missing": (_bad("tokens", KeyError), "field tokens: missing"),
    "token past the vocabulary": (lambda s: s["tokens"].__setitem__(2, VOCAB), "field tokens: id 500 at position 2"),
    "response longer than tokens": (lambda s: s.update(response_length=len(s["tokens"]) + 1),
                                    "field response_length"),
    "negative response length": (_bad("response_length", -1), "field response_length: -1"),
    "mask length": (lambda s: s.update(loss_mask=s["loss_mask"] + [1]), "field loss_mask: 9 values, expected "
                                                                         "response_length 8"),
    "mask value": (lambda s: s["loss_mask"].__setitem__(0, 2), "field loss_mask: values other than 0 and 1"),
    "loss_mask missing": (_bad("loss_mask", KeyError), "field loss_mask: missing"),
    "key not a string": (lambda s: s["metadata"].__setitem__(3, "x"), r"field metadata: key 3 is not a string"),
    "bytes": (lambda s: s["metadata"].__setitem__("raw", b"\x00"), r"field metadata\.raw: a builtins\.bytes"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_bad_sample_names_file_rollout_sample_and_field(tmp_path, name):
    change, expected = BAD[name]
    rng = random.Random(2)
    samples = {4: [make_sample(rng, 4, i) for i in range(3)], 5: [make_sample(rng, 5, i) for i in range(3)]}
    samples[5][1].update(tokens=list(range(20)), response_length=8, loss_mask=[1, 0] * 4)
    change(samples[5][1])
    template = save_dumps(tmp_path, samples)
    with pytest.raises(InputError, match=r"5\.pt: rollout 5 sample 1 %s.*Fix" % expected.replace("(", r"\(")):
        rollout.from_slime(template, tmp_path / "rows.parquet", vocab_size=VOCAB)


def test_tensors_and_numpy_arrays_become_lists(tmp_path):
    sample = make_sample(random.Random(4), 0, 1)
    sample.update(tokens=torch.tensor(sample["tokens"]), rollout_routed_experts=torch.tensor([[1, 2], [3, 4]]),
                  rollout_log_probs=np.array([0.5, -0.25]), metadata={"step": np.int64(3)})
    summary = rollout.from_slime(save_dumps(tmp_path / "in", {0: [sample]}), tmp_path / "rows.parquet")
    rollout.to_slime(tmp_path / "rows.parquet", tmp_path / "out")
    got = torch.load(tmp_path / "out" / "0.pt", weights_only=False)["samples"][0]
    assert got["tokens"] == sample["tokens"].tolist() and got["rollout_routed_experts"] == [[1, 2], [3, 4]]
    assert got["rollout_log_probs"] == [0.5, -0.25] and got["metadata"] == {"step": 3}
    assert summary["counts"]["samples"] == 1


# ---------------------------------------------------------------------------------------- round trip
def test_to_slime_gives_back_exactly_the_saved_samples(built, dumps, dumped):
    _, samples = dumps
    out, summary = dumped
    manifest = json.loads((out / "attune_dump.json").read_text())
    assert manifest["format"] == "attune-slime-dump" and manifest["format_version"] == 1
    assert manifest["rows_sha256"] == built[1]["rows_sha256"] == summary["rows_sha256"]
    assert manifest["seq_length"] == 256 and manifest["pad_token_id"] == 1
    for rid in range(3):
        entry = manifest["files"][rid]
        assert entry == {"rollout_id": rid, "file": "%d.pt" % rid,
                         "sha256": hashlib.sha256((out / entry["file"]).read_bytes()).hexdigest()}
        data = torch.load(out / entry["file"], weights_only=False)  # as slime loads it
        assert data["rollout_id"] == rid and data["samples"] == samples[rid]
        assert [s["index"] for s in data["samples"]] == [s["index"] for s in samples[rid]]
        assert data["attune"]["rows_sha256"] == summary["rows_sha256"] and data["attune"]["rollouts"] == [0, 1, 2]
    assert summary["launch"] == "--load-debug-rollout-data %s --num-rollout 3" % (out / "{rollout_id}.pt")
    assert not list(out.glob("*.tmp"))


def test_the_restricted_reader_reads_a_dump_without_torch(dumps, dumped, monkeypatch):
    _, samples = dumps
    out, summary = dumped
    monkeypatch.setattr(rollout, "_torch", lambda: None)
    for rid in range(3):
        data, sha = rollout.read_dump(out / ("%d.pt" % rid))
        assert data["samples"] == samples[rid] and sha == hashlib.sha256((out / ("%d.pt" % rid)).read_bytes(
        )).hexdigest()
    assert rollout.dump_sha256(out / "attune_dump.json")[0] == summary["rows_sha256"]
    with pytest.raises(InputError, match="torch is not installed.*Fix: pip install torch"):
        rollout.to_slime(dumped[0] / "x.parquet", out)
    assert cli.main(["rows", "to-slime", str(out / "x.parquet"), "--out", str(out)]) == 2


def test_the_dump_hash_is_recomputed_and_equals_the_rows_hash(built, dumped, tmp_path):
    path, summary = built
    out, _ = dumped
    sha, info = rollout.dump_sha256(out / "attune_dump.json")
    assert sha == summary["rows_sha256"] == rows_mod.rows_sha256(path)[0] == reference_sha(path)
    assert info["rollouts"] == [0, 1, 2] and info["counts"]["samples"] == 36
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    manifest = json.loads((copy / "attune_dump.json").read_text())
    manifest["rows_sha256"] = "0" * 64  # the manifest's own hash is not trusted
    (copy / "attune_dump.json").write_text(json.dumps(manifest))
    assert rollout.dump_sha256(copy / "attune_dump.json")[0] == sha
    result = check_mod.check_dump(copy / "attune_dump.json")
    assert not result["ok"] and result["problems"][0].startswith("file field manifest.rows_sha256: the manifest "
                                                                 "records 0000")
    data = torch.load(copy / "1.pt", weights_only=False)
    data["samples"][0]["reward"] = 0.125
    torch.save(data, copy / "1.pt")
    with pytest.raises(InputError, match=r"copy/1\.pt: its bytes hash to .* not the .* the manifest lists"):
        rollout.dump_sha256(copy / "attune_dump.json")
    (copy / "2.pt").unlink()
    manifest["files"] = manifest["files"][2:]
    (copy / "attune_dump.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=r"2\.pt: listed in .* but missing"):
        rollout.dump_sha256(copy / "attune_dump.json")
    manifest["files"] = [{"rollout_id": 0, "file": "../0.pt", "sha256": "0" * 64}]
    (copy / "attune_dump.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="not an attune-slime-dump manifest"):
        rollout.dump_sha256(copy / "attune_dump.json")


@pytest.mark.parametrize("change", ["reward", "token"])
def test_the_sha_changes_when_a_reward_or_a_token_changes(dumps, built, tmp_path, change):
    _, samples = dumps
    changed = {rid: json.loads(json.dumps(value)) for rid, value in samples.items()}
    if change == "reward":
        changed[1][2]["reward"]["acc"] = 0.0
    else:
        changed[2][0]["tokens"][0] = (changed[2][0]["tokens"][0] + 1) % VOCAB
    template = save_dumps(tmp_path, changed)
    again = rollout.from_slime(template, tmp_path / "rows.parquet", seq_length=256, vocab_size=VOCAB, pad_token_id=1)
    assert again["rows_sha256"] != built[1]["rows_sha256"] and again["counts"] == built[1]["counts"]


def test_a_plain_rows_file_hashes_without_the_extra_lines(built, tmp_path):
    """The same rows without doc_sample hash by the original encoding (what `rows build` files use)."""
    cols = read(built[0])
    del cols["doc_sample"]
    meta = pq.ParquetFile(built[0]).metadata.metadata[rows_mod.META_KEY]
    plain = pa.Table.from_pydict(cols, schema=pa.schema([(name, pa.list_(getattr(pa, rows_mod.DTYPES[name])()))
                                                         for name in rows_mod.COLUMNS]))
    pq.write_table(plain.replace_schema_metadata({rows_mod.META_KEY: meta}), tmp_path / "plain.parquet")
    sha = rows_mod.rows_sha256(tmp_path / "plain.parquet")[0]
    assert sha == reference_sha(tmp_path / "plain.parquet") != built[1]["rows_sha256"]


@FAST
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 50), st.booleans(), st.integers(0, 2 ** 16)),
                min_size=1, max_size=12), st.integers(0, 3))
def test_any_lengths_and_masks_pack_in_order_and_round_trip(tmp_path_factory, docs, split):
    base = tmp_path_factory.mktemp("prop")
    rng = random.Random(len(docs))
    samples = {}
    for i, (total, response, none, seed) in enumerate(docs):
        response = min(response, total)
        bits = random.Random(seed)
        sample = {"tokens": [bits.randrange(VOCAB) for _ in range(total)], "response_length": response,
                  "loss_mask": None if none else [bits.randint(0, 1) for _ in range(response)],
                  "reward": bits.random(), "status": rng.choice(STATUSES), "index": i}
        samples.setdefault(min(i * 4 // len(docs), split), []).append(sample)
    template = save_dumps(base / "in", samples)
    summary = rollout.from_slime(template, base / "rows.parquet", seq_length=64)
    cols = read(base / "rows.parquet")
    order = [json.loads(text)["sample"]["index"] for texts in cols["doc_sample"] for text in texts]
    assert order == list(range(len(docs)))
    ends = [bounds[-1] for bounds in cols["doc_offsets"]]
    firsts = [bounds[1] for bounds in cols["doc_offsets"]]
    assert all(end + first > 64 for end, first in zip(ends, firsts[1:]))
    out = rollout.to_slime(base / "rows.parquet", base / "out")
    for rid, expected in samples.items():
        assert torch.load(base / "out" / ("%d.pt" % rid), weights_only=False)["samples"] == expected
    assert rollout.dump_sha256(base / "out" / "attune_dump.json")[0] == out["rows_sha256"] == summary["rows_sha256"]


# ---------------------------------------------------------------------------------------- refusing pickles
class _Boom(object):
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, ("touch %s" % self.marker,)


@pytest.mark.parametrize("have_torch", [True, False])
def test_a_pickle_that_calls_something_is_refused_without_running_it(tmp_path, monkeypatch, have_torch):
    marker = tmp_path / "ran"
    torch.save({"rollout_id": 0, "samples": []}, tmp_path / "good.pt")
    good = zipfile.ZipFile(tmp_path / "good.pt")
    with zipfile.ZipFile(tmp_path / "evil.pt", "w") as archive:  # a real torch.save archive, its data.pkl replaced
        for info in good.infolist():
            archive.writestr(info, pickle.dumps({"rollout_id": 0, "samples": [_Boom(marker)]}, protocol=2)
                             if info.filename.endswith("/data.pkl") else good.read(info))
    if not have_torch:
        monkeypatch.setattr(rollout, "_torch", lambda: None)
    with pytest.raises(InputError, match=r"evil\.pt: .*(posix|nt)\.system"):
        rollout.from_slime([tmp_path / "evil.pt"], tmp_path / "rows.parquet")
    assert not marker.exists()


def test_without_torch_a_tensor_is_refused_and_torch_named(tmp_path, monkeypatch):
    torch.save({"rollout_id": 0, "samples": [{"tokens": torch.tensor([1, 2])}]}, tmp_path / "0.pt")
    monkeypatch.setattr(rollout, "_torch", lambda: None)
    with pytest.raises(InputError, match=r"0\.pt: holds torch\._utils\._rebuild_tensor_v2.*Fix: pip install torch"):
        rollout.read_dump(tmp_path / "0.pt")
    (tmp_path / "1.pt").write_bytes(b"not a zip")
    with pytest.raises(InputError, match=r"1\.pt: not a torch\.save archive of plain values"):
        rollout.read_dump(tmp_path / "1.pt")


# ---------------------------------------------------------------------------------------- check
def test_check_passes_on_the_adapter_output_and_notes_a_missing_vocabulary(built, dumps, tmp_path):
    assert check_mod.check(built[0])["ok"] and check_mod.check(built[0])["notes"] == []
    no_vocab = rollout.from_slime(dumps[0], tmp_path / "nv.parquet")
    result = check_mod.check(tmp_path / "nv.parquet")
    assert result["ok"] and result["vocab_size"] is None and "token ids were not checked" in result["notes"][0]
    assert check_mod.check(tmp_path / "nv.parquet", vocab_size=VOCAB)["notes"] == []
    bad = check_mod.check(tmp_path / "nv.parquet", vocab_size=10)
    assert any(p.startswith("row 0 field input_ids: token id") for p in bad["problems"])
    assert no_vocab["vocab_size"] is None


def test_a_sample_without_loss_is_allowed_in_rollout_rows(tmp_path):
    sample = make_sample(random.Random(8), 0, 5)
    sample.update(loss_mask=[0] * sample["response_length"], remove_sample=True)
    rollout.from_slime(save_dumps(tmp_path, {0: [sample]}), tmp_path / "rows.parquet")
    assert check_mod.check(tmp_path / "rows.parquet")["ok"]


def _plant(built, tmp_path, change):
    cols = read(built[0])
    change(cols)
    meta = pq.ParquetFile(built[0]).metadata.metadata[rows_mod.META_KEY]
    table = pa.Table.from_pydict(cols, schema=pq.read_schema(built[0]))
    pq.write_table(table.replace_schema_metadata({rows_mod.META_KEY: meta}), tmp_path / "planted.parquet")
    return tmp_path / "planted.parquet"


@pytest.mark.parametrize("change, expected", [
    (lambda c: c["doc_sample"][0].__setitem__(0, "{not json"), "row 0 field doc_sample: document 0: not valid JSON"),
    (lambda c: c["doc_sample"][1].pop(), "row 1 field doc_sample: "),
    (lambda c: c["doc_sample"][2].__setitem__(0, '{"sample": {}}'), "row 2 field doc_sample: document 0: not {"),
    (lambda c: c["doc_sample"][0].__setitem__(0, json.dumps({"rollout": 0, "sample": {"response_length": 999}})),
     "row 0 field doc_sample: document 0: response_length 999"),
])
def test_check_catches_a_planted_bad_doc_sample(built, tmp_path, change, expected):
    result = check_mod.check(_plant(built, tmp_path, change))
    assert not result["ok"] and any(line.startswith(expected) for line in result["problems"]), result["problems"]
    assert any(line.startswith("file field metadata.rows_sha256") for line in result["problems"])


def test_to_slime_refuses_rows_it_cannot_rebuild(built, tmp_path):
    with pytest.raises(InputError, match=r"row 0 document 0 field doc_sample: not valid JSON"):
        rollout.to_slime(_plant(built, tmp_path, lambda c: c["doc_sample"][0].__setitem__(0, "{")), tmp_path / "o")

    def split_first_row(cols):  # the same samples, packed otherwise: the first sample alone in a row
        ids, mask, bounds, texts = (cols[key][0] for key in ("input_ids", "loss_mask", "doc_offsets", "doc_sample"))
        cut, end = bounds[1], bounds[-1]
        rows = [(ids[:cut] + [1] * (256 - cut), mask[:cut] + [0] * (256 - cut), [0, cut], texts[:1]),
                (ids[cut:end] + [1] * (256 - end + cut), mask[cut:end] + [0] * (256 - end + cut),
                 [b - cut for b in bounds[1:]], texts[1:])]
        for n, key in enumerate(("input_ids", "loss_mask", "doc_offsets", "doc_sample")):
            cols[key][0:1] = [one[n] for one in rows]

    with pytest.raises(InputError, match="not packed as `attune rows from-slime` packs them"):
        rollout.to_slime(_plant(built, tmp_path, split_first_row), tmp_path / "o")
    assert not (tmp_path / "o" / "attune_dump.json").exists()


# ---------------------------------------------------------------------------------------- cli and pre-ship
def test_cli_from_slime_to_slime_sha_and_check(dumps, built, tmp_path, capsys):
    template, _ = dumps
    out = tmp_path / "cli.parquet"
    assert cli.main(["rows", "from-slime", template, "--out", str(out), "--seq-length", "256", "--vocab-size",
                     str(VOCAB), "--pad-token-id", "1"]) == 0
    text = capsys.readouterr().out
    assert "source: slime-rollout" in text and "rollout_ids: 0 1 2" in text and "samples: 36" in text
    assert text.endswith("rows_sha256: %s\n" % built[1]["rows_sha256"])
    assert cli.main(["rows", "to-slime", str(out), "--out", str(tmp_path / "dump"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows_sha256"] == built[1]["rows_sha256"]
    manifest = str(tmp_path / "dump" / "attune_dump.json")
    assert cli.main(["rows", "sha", manifest]) == 0
    assert capsys.readouterr().out == "file: %s\nrows_sha256: %s\n" % (manifest, built[1]["rows_sha256"])
    assert cli.main(["rows", "check", manifest, "--expect-sha", built[1]["rows_sha256"]]) == 0
    assert "ok: yes" in capsys.readouterr().out
    assert cli.main(["rows", "check", manifest, "--expect-sha", "1" * 64]) == 1
    assert "problem: file field rows_sha256: %s, expected 1111" % built[1]["rows_sha256"] in capsys.readouterr().out
    assert cli.main(["rows", "check", str(out)]) == 0
    assert "ok: yes" in capsys.readouterr().out
    assert cli.main(["rows", "from-slime", str(tmp_path / "none_{rollout_id}.pt"), "--out", str(out)]) == 2
    assert "no file matches the template" in capsys.readouterr().err
    assert cli.main(["rows", "from-slime", template]) == 2
    assert cli.main(["rows", "to-slime", str(out)]) == 2
    assert cli.main(["rows", "sha", str(out), manifest]) == 2


def test_the_pre_ship_digest_of_a_dump(built, dumped, monkeypatch, tmp_path):
    from factory import settings as make_settings

    from attune.campaign import backends

    out, summary = dumped
    manifest = out / "attune_dump.json"
    local = make_settings(ATTUNE_ROWS_PATH=str(manifest), ATTUNE_ROWS_SHA256=summary["rows_sha256"])
    assert preship_mod.rows_digest(local) == summary["rows_sha256"]
    assert preship_mod.rows_digest(dataclasses.replace(local, rows_path=str(built[0]))) == summary["rows_sha256"]
    copied = []

    def copy_out(remote, target):  # the log pod's view of the shared volume: the dump folder
        copied.append(remote)
        shutil.copyfile(remote, target)
        return target

    monkeypatch.setattr(backends, "get", lambda name, settings: types.SimpleNamespace(copy_out=copy_out))
    remote = types.SimpleNamespace(backend="kuberay", rows_path=str(manifest))
    assert preship_mod.rows_digest(remote) == summary["rows_sha256"]
    assert copied == [str(manifest)] + [str(out / ("%d.pt" % rid)) for rid in range(3)]
