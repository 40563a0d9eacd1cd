"""The Megatron indexed dataset reader (suite/data/text/megatron_indexed.py) on small real files written by
megatron-core's own IndexedDatasetBuilder, cross-checked against megatron-core's reader; mismatched pairs refused."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from support.promised import require

from suite import registry
from suite.data.base import DataMissing
from suite.data.text import megatron_indexed as mi
from suite.workloads.language_model import window_batches


def write_dataset(prefix, documents: list[list[list[int]]], dtype=np.uint16):
    """Documents of sequences, through megatron-core's builder (add_item per sequence, end_document per document)."""
    indexed = require("megatron.core.datasets.indexed_dataset")
    builder = indexed.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for document in documents:
        for sequence in document:
            builder.add_item(torch.tensor(sequence, dtype=torch.int64))
        builder.end_document()
    builder.finalize(f"{prefix}.idx")
    return prefix


def _documents(seed: int, n_docs: int, vocab: int) -> list[list[list[int]]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, vocab, rng.integers(1, 30)).tolist() for _ in range(rng.integers(1, 4))]
            for _ in range(n_docs)]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_reads_what_megatron_writes_and_agrees_with_megatrons_reader(tmp_path, dtype):
    docs = _documents(0, 7, 60000 if dtype == np.uint16 else 128256)
    prefix = write_dataset(tmp_path / "c4-train.en_text_document", docs, dtype)
    ds = mi.read_indexed(prefix)
    flat = [t for doc in docs for seq in doc for t in seq]
    assert ds.tokens.dtype == dtype and ds.tokens.tolist() == flat
    assert ds.documents == len(docs)
    for i, doc in enumerate(docs):
        assert ds.document(i).tolist() == [t for seq in doc for t in seq]
    sequences = [seq for doc in docs for seq in doc]
    theirs = require("megatron.core.datasets.indexed_dataset").IndexedDataset(str(prefix))
    for i, seq in enumerate(sequences):
        assert ds.sequence(i).tolist() == seq == theirs[i].tolist()
    assert ds.document_indices.tolist() == theirs.document_indices.tolist()


def _pair(tmp_path, name="a", seed=0):
    return write_dataset(tmp_path / name, _documents(seed, 5, 1000))


def test_an_idx_from_another_run_is_refused_naming_both_files(tmp_path):
    a, b = _pair(tmp_path, "a", 0), _pair(tmp_path, "b", 1)
    shutil.copy(f"{b}.idx", f"{a}.idx")
    with pytest.raises(mi.IndexMismatch, match=r"a\.idx does not match .*a\.bin.*same preprocessing run"):
        mi.read_indexed(a)


def test_a_truncated_bin_or_idx_is_refused(tmp_path):
    a = _pair(tmp_path)
    data = (tmp_path / "a.bin").read_bytes()
    (tmp_path / "a.bin").write_bytes(data[:-2])
    with pytest.raises(mi.IndexMismatch, match=r"the \.bin is \d+ bytes"):
        mi.read_indexed(a)
    (tmp_path / "a.bin").write_bytes(data)
    index = (tmp_path / "a.idx").read_bytes()
    (tmp_path / "a.idx").write_bytes(index[:-8])
    with pytest.raises(mi.IndexMismatch, match="truncated or not an index"):
        mi.read_indexed(a)


def test_pointers_that_disagree_with_the_lengths_are_refused(tmp_path):
    a = _pair(tmp_path)
    raw = bytearray((tmp_path / "a.idx").read_bytes())
    n_seq = int(np.frombuffer(bytes(raw[18:26]), dtype="<u8")[0])
    pointer_1 = mi._HEAD + 4 * n_seq + 8  # the second sequence's byte pointer
    raw[pointer_1 : pointer_1 + 8] = np.int64(2).tobytes()
    (tmp_path / "a.idx").write_bytes(bytes(raw))
    with pytest.raises(mi.IndexMismatch, match="sequence 1 starts at byte 2"):
        mi.read_indexed(a)


def test_not_an_index_and_a_missing_half_are_refused(tmp_path):
    a = _pair(tmp_path)
    (tmp_path / "a.idx").write_bytes(b"\x00" * 64)
    with pytest.raises(mi.IndexMismatch, match="is not a Megatron index"):
        mi.read_indexed(a)
    (tmp_path / "a.idx").unlink()
    with pytest.raises(DataMissing, match=r"a\.idx is missing"):
        mi.read_indexed(a)


def test_component_loads_train_and_validation_for_the_language_model(tmp_path):
    write_dataset(tmp_path / "c4-train.en_6_text_document", _documents(0, 20, 500), np.int32)
    write_dataset(tmp_path / "c4-validation-91205-samples.en_text_document", _documents(1, 5, 500), np.int32)
    component = registry.data_component("megatron_indexed")
    splits = component.load(component.Config(path=str(tmp_path), vocab_size=500))
    assert len(splits.train) == 1 and len(splits.val) == 1 and splits.meta["documents"] == 20
    x, y = next(window_batches(splits.train, 8, 4, 0, 1, seed=0))
    assert x.shape == (4, 8) and torch.equal(x[:, 1:], y[:, :-1]) and int(x.max()) < 500


def test_missing_data_says_how_to_get_it(tmp_path):
    with pytest.raises(DataMissing, match="preprocess_data.py.*trainbench data prepare megatron_indexed"):
        mi.load(mi.Config(path=str(tmp_path)))


def test_prepare_checks_every_pair_then_links_the_folder(tmp_path, monkeypatch):
    from suite.data import prepare

    monkeypatch.setenv("TRAINBENCH_DATA", str(tmp_path / "data"))
    src = tmp_path / "c4"
    src.mkdir()
    write_dataset(src / "c4-train.en_6_text_document", _documents(0, 9, 500), np.int32)
    write_dataset(src / "c4-validation-91205-samples.en_text_document", _documents(1, 3, 500), np.int32)
    assert not prepare.status("megatron_indexed")[0]
    assert "9 documents" in prepare.prepare("megatron_indexed", src)
    assert prepare.status("megatron_indexed") == (True, str(tmp_path / "data" / "megatron_indexed"))
    splits = mi.load(mi.Config(vocab_size=500))  # from $TRAINBENCH_DATA/megatron_indexed
    assert splits.train_tokens() == sum(len(s) for d in _documents(0, 9, 500) for s in d)


def test_cli_prepare_refuses_a_mismatched_pair_with_exit_2(tmp_path):
    import subprocess
    import sys

    from support.backend_util import env

    src = tmp_path / "c4"
    src.mkdir()
    train = write_dataset(src / "c4-train.en_6_text_document", _documents(0, 9, 500), np.int32)
    write_dataset(src / "c4-validation-91205-samples.en_text_document", _documents(1, 3, 500), np.int32)
    shutil.copy(src / "c4-validation-91205-samples.en_text_document.idx", f"{train}.idx")
    r = subprocess.run([sys.executable, "-m", "suite.cli", "data", "prepare", "megatron_indexed", "--from", str(src)],
                       capture_output=True, text=True, env={**env(), "TRAINBENCH_DATA": str(tmp_path / "data")},
                       timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "c4-train.en_6_text_document.idx does not match" in r.stdout + r.stderr
    assert not (tmp_path / "data" / "megatron_indexed").exists()
