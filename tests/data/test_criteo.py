"""The preprocessed-Criteo reader of MLPerf dlrm_dcnv2 (torchrec's numpy days + the synthetic multi-hot npz) on
files generated in that layout: the samples are the files' rows (ids shifted by one, 0 is padding), the training days
in order, the first half of the held-out day as validation; a malformed or mismatched file is refused naming the
file and the key; the tiny variant trains on them and learns the planted click signal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite import harness, registry
from suite.data.base import DataMissing
from suite.data.rec import criteo, criteo_fixture
from suite.specload import load_spec

SMALL = [50] * criteo.N_SPARSE


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    return criteo_fixture.write(tmp_path_factory.mktemp("criteo"), n_days=3, rows=200)


def _load(folder: Path, **kw) -> criteo.CriteoDays:
    return criteo.load(criteo.Config(path=str(folder), train_days=[0, 1], eval_day=2, num_embeddings_per_feature=SMALL,
                                     **kw))


def test_samples_are_the_files_rows_days_in_order_validation_half(files: Path) -> None:
    data = _load(files)
    train, val = data.split()
    assert len(train) == 400 and len(val) == 100
    dense1 = np.load(files / "day_1_dense.npy")
    np.testing.assert_array_equal(data.dense[200:400], dense1)
    with np.load(files / "day_2_sparse_multi_hot.npz") as z:
        np.testing.assert_array_equal(data.sparse[20][val], z["20"][:100] + 1)  # feature 20: 100 ids per row
    assert data.sparse[20].shape[1] == 100
    np.testing.assert_array_equal(data.label[val], np.load(files / "day_2_labels.npy")[:100, 0])
    assert (np.diff(data.window[train]) >= 0).all() and data.window[val].min() > data.window[train].max()


def _copy(files: Path, dest: Path) -> Path:
    dest.mkdir()
    for f in files.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def _resave(path: Path, **change) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays.update(change)
    for k in [k for k, v in change.items() if v is None]:
        del arrays[k]
    np.savez(path, **arrays)


def _case(name: str, folder: Path) -> str:
    npz = folder / "day_1_sparse_multi_hot.npz"
    if name == "missing_key":
        _resave(npz, **{"7": None})
        return "day_1_sparse_multi_hot.npz: no key '7'"
    if name == "wrong_hotness":
        _resave(npz, **{"4": np.zeros((200, 5), np.int32)})
        return "day_1_sparse_multi_hot.npz: key '4' has shape (200, 5), expected [200, 6]"
    if name == "id_out_of_range":
        _resave(npz, **{"3": np.full((200, 2), 50, np.int32)})
        return "day_1_sparse_multi_hot.npz: key '3': id 50 is out of range [0, 50)"
    if name == "labels_short":
        np.save(folder / "day_0_labels.npy", np.zeros((150, 1), np.int32))
        return "day_0_labels.npy: shape (150, 1), expected [200]"
    if name == "labels_not_binary":
        np.save(folder / "day_0_labels.npy", np.full((200, 1), 2, np.int32))
        return "day_0_labels.npy: labels must be 0 or 1"
    if name == "dense_width":
        np.save(folder / "day_1_dense.npy", np.zeros((200, 12), np.float32))
        return "day_1_dense.npy: shape (200, 12), expected [N, 13]"
    if name == "missing_day":
        (folder / "day_2_labels.npy").unlink()
        return "day_2_labels.npy: missing"
    raise AssertionError(name)


@pytest.mark.parametrize("case", ["missing_key", "wrong_hotness", "id_out_of_range", "labels_short",
                                  "labels_not_binary", "dense_width", "missing_day"])
def test_a_malformed_or_mismatched_file_is_refused_naming_it(case: str, files: Path, tmp_path: Path) -> None:
    folder = _copy(files, tmp_path / case)
    expected = _case(case, folder)
    with pytest.raises(DataMissing) as err:
        _load(folder)
    assert expected in str(err.value), str(err.value)


def test_the_eval_day_must_be_held_out(files: Path) -> None:
    with pytest.raises(DataMissing, match="data.eval_day 1 is also in data.train_days"):
        criteo.load(criteo.Config(path=str(files), train_days=[0, 1], eval_day=1, num_embeddings_per_feature=SMALL))


def test_the_tiny_variant_learns_the_planted_clicks(tmp_path: Path) -> None:
    data = criteo_fixture.write(tmp_path / "criteo")
    spec = load_spec(registry.workload_files()["rec/dlrm_dcnv2"],
                     {"data.path": str(data), "budget.max_steps": 150, "eval.every_steps": 150}, variant="tiny")
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1))
    assert result.status == "budget", result.error
    assert result.eval_curve[-1].metrics["auc"] > 0.58  # chance is 0.5; 0.63 measured at step 150-200
