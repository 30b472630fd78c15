"""data.megatron: a rows file as Megatron-LM's GPTDataset samples, and the runner that installs it.

Rows files are real: built with the project's builder (a tokenizer trained in the test, as in
test_rows.py) or written with rows.write. There is no Megatron-LM here: the runner tests build a
STAND-IN for Megatron's interface (the module path megatron/core/datasets/
blended_megatron_dataset_builder.py with BlendedMegatronDatasetBuilder(cls, sizes, is_built_on_rank,
config).build(), and a pretrain_gpt.py whose dataset provider calls it as the real one does).
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the pod extra: pip install -e '.[pod]')")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (the data extra: pip install -e '.[data]')")
pytest.importorskip("transformers", reason="transformers is not installed (the data extra: pip install -e '.[data]')")
pytest.importorskip("jinja2", reason="jinja2 is not installed (the data extra: pip install -e '.[data]')")
import numpy as np  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

from attune.core.errors import InputError  # noqa: E402
from conftest import SCRIPTS  # noqa: E402
from attune.data import megatron, rows as rows_mod  # noqa: E402
from test_rows import FAST, SEQ, built, tok_dir  # noqa: E402,F401  (module fixtures: a real rows file)


@pytest.fixture(scope="module")
def path(built):
    return built[0] / "rows.parquet"


@pytest.fixture(scope="module")
def dataset(path):
    return megatron.RowsDataset(path)


def _docs(ds, row):
    return ds.docs[ds.docs_off[row]:ds.docs_off[row + 1]].tolist()


def write_rows(path, table, seq, pad=0):
    """Write hand-made rows: ``table`` is a list of rows, each a list of documents of (token, mask) pairs."""
    ids, mask = np.full((len(table), seq), pad, np.int32), np.zeros((len(table), seq), np.uint8)
    list_offsets, values = [0], []
    for r, docs in enumerate(table):
        ends = np.cumsum([0] + [len(doc) for doc in docs])
        for doc, start in zip(docs, ends):
            ids[r, start:start + len(doc)] = [token for token, _ in doc]
            mask[r, start:start + len(doc)] = [bit for _, bit in doc]
        values.extend(ends.tolist())
        list_offsets.append(len(values))
    batch = (len(table), ids.ravel(), mask.ravel(), np.array(list_offsets, np.int32), np.array(values, np.int32))
    return rows_mod.write(path, [batch], {"seq_length": seq, "pad_token_id": pad})


# ---------------------------------------------------------------------------------------- samples
def test_samples_are_the_rows_shifted_masked_and_positioned(dataset, path):
    table = rows_mod.tokenize.require("pyarrow.parquet").read_table(path).to_pydict()
    assert len(dataset) == dataset.rows == len(table["input_ids"]) > 2
    for row in range(dataset.rows):
        sample = dataset[row]
        assert sorted(sample) == ["labels", "loss_mask", "position_ids", "tokens"]
        assert {key: (value.dtype, tuple(value.shape)) for key, value in sample.items()} == {
            "tokens": (torch.int64, (SEQ,)), "labels": (torch.int64, (SEQ,)), "loss_mask": (torch.float32, (SEQ,)),
            "position_ids": (torch.int64, (SEQ,))}
        ids, mask, docs = table["input_ids"][row], table["loss_mask"][row], table["doc_offsets"][row]
        assert sample["tokens"].tolist() == ids
        assert sample["labels"].tolist() == ids[1:] + [dataset.pad_id]
        doc_ends = {end - 1 for end in docs[1:]}
        want = [0.0 if t in doc_ends or t == SEQ - 1 else float(mask[t + 1]) for t in range(SEQ)]
        assert sample["loss_mask"].tolist() == want and sum(want) > 0
        cu = docs[:-1] + [SEQ]  # each document restarts at 0; padding counts on from the last one
        assert sample["position_ids"].tolist() == [t - a for a, b in zip(cu, cu[1:]) for t in range(a, b)]


def test_samples_cycle_through_the_rows_in_file_order(path, dataset):
    longer = megatron.RowsDataset(path, num_samples=2 * dataset.rows + 3)
    assert len(longer) == 2 * dataset.rows + 3
    for i in (0, 1, dataset.rows - 1):
        first, again = longer[i], longer[i + dataset.rows]
        assert all(torch.equal(first[key], again[key]) for key in first)
        assert torch.equal(first["tokens"], dataset[i]["tokens"])
    with pytest.raises(IndexError):
        longer[len(longer)]
    assert longer[None]["loss_mask"].sum() == 0  # GPTDataset's batch-padding sample: row 0, no loss


def test_a_wrong_hash_is_refused_naming_both_and_the_right_one_passes(path):
    sha, _ = rows_mod.rows_sha256(path)
    assert megatron.RowsDataset(path, expect_sha=sha.upper()).verified
    with pytest.raises(megatron.RowsMismatch) as err:
        megatron.RowsDataset(path, expect_sha="ab" * 32)
    assert sha in str(err.value) and "ab" * 32 in str(err.value) and str(path) in str(err.value)
    assert "Fix:" in str(err.value)
    with pytest.raises(InputError, match="no such rows file"):
        megatron.RowsDataset(path.with_name("missing.parquet"))


def test_cu_seqlens_and_the_attention_mask_keep_documents_apart(dataset):
    packed, masked = dataset.view(cu_seqlens=True), dataset.view(attention_mask=True)
    for row in range(dataset.rows):
        docs, sample = _docs(dataset, row), packed[row]
        cu = docs[:-1] + [SEQ]  # padding folded into the last document, as GPTDataset does
        assert sample["cu_seqlens"].dtype == torch.int32
        assert sample["cu_seqlens"].tolist() == cu + [SEQ] * (SEQ + 1 - len(cu))  # a fixed length S + 1
        assert sample["max_seqlen"].dtype == torch.int32 and sample["max_seqlen"].dim() == 0
        assert sample["max_seqlen"].item() == max(np.diff(cu)) and "attention_mask" not in sample
        attn = masked[row]["attention_mask"]
        assert attn.dtype == torch.bool and tuple(attn.shape) == (1, SEQ, SEQ)
        seg = np.searchsorted(cu, np.arange(SEQ), side="right") - 1
        allowed = (seg[:, None] == seg[None, :]) & np.tri(SEQ, dtype=bool)
        assert np.array_equal(attn[0].numpy(), ~allowed)  # True = masked out, as Megatron's masks


def test_samples_collate_as_megatron_loads_them_and_the_dataset_pickles(dataset):
    packed = dataset.view(5, cu_seqlens=True)
    batch = next(iter(torch.utils.data.DataLoader(packed, batch_size=2)))
    assert {key: tuple(value.shape) for key, value in batch.items()} == {
        "tokens": (2, SEQ), "labels": (2, SEQ), "loss_mask": (2, SEQ), "position_ids": (2, SEQ),
        "cu_seqlens": (2, SEQ + 1), "max_seqlen": (2,)}  # what get_batch_on_this_tp_rank allocates
    again = pickle.loads(pickle.dumps(packed))  # DataLoader workers started with spawn get a pickled copy
    assert type(again) is megatron.RowsDataset and len(again) == 5
    assert torch.equal(again[4]["tokens"], packed[4]["tokens"])


@FAST
@given(st.integers(8, 24).flatmap(lambda seq: st.tuples(st.just(seq), st.lists(
    st.lists(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 1)), min_size=1, max_size=seq // 2),
             min_size=1, max_size=4).filter(lambda docs: sum(map(len, docs)) <= seq), min_size=1, max_size=3))))
def test_the_exposed_targets_are_the_marked_tokens_but_each_documents_first(tmp_path, example):
    seq, table = example
    write_rows(tmp_path / "hand.parquet", table, seq)
    ds = megatron.RowsDataset(tmp_path / "hand.parquet")
    assert ds.rows == len(table)
    for row, docs in enumerate(table):
        sample, start = ds[row], 0
        loss, labels = sample["loss_mask"].numpy(), sample["labels"].numpy()
        for doc in docs:
            end = start + len(doc)
            assert labels[start:end][loss[start:end] == 1].tolist() == [token for token, bit in doc[1:] if bit]
            assert sample["position_ids"][start:end].tolist() == list(range(len(doc)))
            start = end
        assert not loss[start:].any()


@pytest.mark.parametrize("offsets", [[0, 9], [0], [1, 4], [0, 4, 4]])
def test_malformed_boundaries_are_refused(tmp_path, offsets):
    batch = (1, np.ones(8, np.int32), np.ones(8, np.uint8), np.array([0, len(offsets)], np.int32),
             np.array(offsets, np.int32))
    rows_mod.write(tmp_path / "bad.parquet", [batch], {"seq_length": 8, "pad_token_id": 0})
    with pytest.raises(InputError, match=re.escape("row 0: doc_offsets %s" % offsets)):
        megatron.RowsDataset(tmp_path / "bad.parquet")


# ---------------------------------------------------------------------------------------- the runner
STAND_IN_BUILDER = '''\
"""STAND-IN for Megatron-LM's megatron/core/datasets/blended_megatron_dataset_builder.py (tests only).

Only the interface data.megatron relies on: BlendedMegatronDatasetBuilder(cls, sizes, is_built_on_rank,
config), and build() returning one dataset (or None) per split, train, valid and test.
"""


class BlendedMegatronDatasetBuilder(object):
    def __init__(self, cls, sizes, is_built_on_rank, config):
        self.cls, self.sizes, self.is_built_on_rank, self.config = cls, sizes, is_built_on_rank, config

    def build(self):
        return [self.cls(size, self.config) if size else None for size in self.sizes]
'''

STAND_IN_PRETRAIN = '''\
"""STAND-IN for Megatron-LM's pretrain_gpt.py (tests only): the dataset provider calls the builder as the
real one does; the train split's first samples, the argv and the split lengths go to --out as JSON."""
import json
import sys
from functools import partial

from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder


class GPTDataset(object):  # what the builder would build without data.megatron: no rows in it
    def __init__(self, size, config):
        self.size = size

    def __len__(self):
        return self.size


class GPTDatasetConfig(object):
    def __init__(self, **fields):
        self.__dict__.update(fields)


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def is_dataset_built_on_rank(vp_stage=None):
    return True


def train_valid_test_datasets_provider(train_val_test_num_samples, vp_stage=None):
    config = GPTDatasetConfig(sequence_length=int(arg("--seq-length")), create_attention_mask=False,
                              inter_document_masking="--dataloader-inter-document-masking" in sys.argv)
    train_ds, valid_ds, test_ds = BlendedMegatronDatasetBuilder(
        GPTDataset, train_val_test_num_samples, partial(is_dataset_built_on_rank, vp_stage=vp_stage), config
    ).build()
    return train_ds, valid_ds, test_ds


if __name__ == "__main__":
    train, valid, test = train_valid_test_datasets_provider([int(arg("--train-samples")), 0, 0])
    samples = [{key: [str(value.dtype), value.tolist()] for key, value in train[i].items()} for i in range(3)]
    with open(arg("--out"), "w") as out:
        json.dump({"argv": sys.argv, "len": len(train), "valid": valid, "test": test, "samples": samples}, out)
'''


@pytest.fixture()
def stand_in(tmp_path):
    """A stand-in Megatron-LM checkout (tmp_path/mlm); the job runs from tmp_path, so `megatron` is found only
    through the script's folder, as in a real checkout."""
    mlm = tmp_path / "mlm"
    package = mlm / "megatron" / "core" / "datasets"
    package.mkdir(parents=True)
    for folder in (mlm / "megatron", mlm / "megatron" / "core", package):
        (folder / "__init__.py").write_text('"""STAND-IN for Megatron-LM (tests only)."""\n')
    (package / "blended_megatron_dataset_builder.py").write_text(STAND_IN_BUILDER)
    (mlm / "pretrain_gpt.py").write_text(STAND_IN_PRETRAIN)
    return mlm / "pretrain_gpt.py"


def run(tmp_path, argv, env, as_file=False):
    full = {key: value for key, value in os.environ.items() if not key.startswith(("ATTUNE_", "PYTHONPATH"))}
    full.update(env)
    if not as_file:
        full["PYTHONPATH"] = str(SCRIPTS)
    lead = [str(SCRIPTS / "data" / "megatron.py")] if as_file else ["-m", "attune.data.megatron"]
    return subprocess.run([sys.executable] + lead + [str(a) for a in argv], cwd=str(tmp_path), timeout=120,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, env=full)


@pytest.mark.parametrize("as_file, packed", [(False, True), (True, False)], ids=["module", "file"])
def test_the_runner_makes_megatron_train_on_the_rows(tmp_path, stand_in, path, dataset, as_file, packed):
    sha, _ = rows_mod.rows_sha256(path)
    out = tmp_path / "samples.json"
    argv = [stand_in, "--seq-length", SEQ, "--train-samples", 7, "--some-flag", "--out", out] + \
        (["--dataloader-inter-document-masking"] if packed else [])
    done = run(tmp_path, argv, {"ATTUNE_ROWS_PATH": str(path), "ATTUNE_ROWS_SHA256": sha}, as_file)
    assert done.returncode == 0, done.stderr
    line = "attune-rows: training on %s (%d rows \u00d7 %d, rows_sha256 %s\u2026, verified)" % (
        path, dataset.rows, SEQ, sha[:16])
    assert line in done.stderr.splitlines()
    got = json.loads(out.read_text())
    assert got["argv"] == [str(a) for a in argv] and got["len"] == 7 and got["valid"] is got["test"] is None
    want = dataset.view(7, cu_seqlens=packed)
    for i, sample in enumerate(got["samples"]):
        assert sample == {key: [str(value.dtype), value.tolist()] for key, value in want[i].items()}
    assert ("cu_seqlens" in got["samples"][0]) is packed


def test_the_runner_refuses_other_rows_before_any_sample_is_read(tmp_path, stand_in, path):
    out = tmp_path / "samples.json"
    argv = [stand_in, "--seq-length", SEQ, "--train-samples", 7, "--out", out]
    done = run(tmp_path, argv, {"ATTUNE_ROWS_PATH": str(path), "ATTUNE_ROWS_SHA256": "ab" * 32})
    sha, _ = rows_mod.rows_sha256(path)
    assert done.returncode == 1 and sha in done.stderr and "ab" * 32 in done.stderr and not out.exists()
    done = run(tmp_path, argv, {})
    assert done.returncode == 2 and "ATTUNE_ROWS_PATH is not set" in done.stderr and "Fix:" in done.stderr
    done = run(tmp_path, argv[:1] + ["--seq-length", 64] + argv[3:], {"ATTUNE_ROWS_PATH": str(path)})
    assert done.returncode != 0 and "--seq-length 64, but" in done.stderr and not out.exists()


def test_install_needs_megatron(path):
    if importlib.util.find_spec("megatron") is not None:
        pytest.skip("a megatron package is importable here")
    with pytest.raises(InputError, match="Megatron-LM is not importable.*Fix:"):
        megatron.install(path)
