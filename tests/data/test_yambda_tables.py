"""rec/dlrmv4 builds the tables MLPerf's reference builds for yambda-5b (mlcommons/training recommendation_v4,
`dlrm_v3/configs.py` get_embedding_table_config: item_id, artist_id, album_id, uid and the seven hashed crosses of
YAMBDA_5B_CROSS_SPECS), beside the action table: artist and album from the item mapping files, the crosses hashed
exactly as the reference's xxhash_cross (xxHash64 of little-endian int64s, seed = salt, mod rows), checked against
the `xxhash` package, with a negative control (the keys in another order hash elsewhere)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from suite import registry
from suite.data.base import DataMissing
from suite.data.rec import yambda, yambda_fixture
from suite.data.rec.yambda_cross import CROSS_NAMES, CROSS_SPECS, cross_ids, xxh64_int64s
from suite.specload import load_spec
from suite.workloads.contract import Context

# the reference's yambda-5b tables (configs.py) in our names: uid -> user, item_id -> item, artist_id -> artist,
# album_id -> album; the actions are the model's ActionEncoder (inside the model, as the reference's), no table
REFERENCE_TABLES = {"user", "item", "artist", "album", *CROSS_NAMES}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    return yambda_fixture.write(tmp_path_factory.mktemp("yambda"))


def test_the_hash_is_xxhash64_of_little_endian_int64s() -> None:
    xxhash = pytest.importorskip("xxhash")
    rng = np.random.default_rng(0)
    cols = [rng.integers(-2**62, 2**62, 64), rng.integers(0, 24, 64), rng.integers(0, 10**8, 64)]
    for keys in (cols[:2], cols):
        for salt in (0, 7):
            want = [xxhash.xxh64(struct.pack(f"<{len(keys)}q", *(int(k[i]) for k in keys)), seed=salt).intdigest()
                    for i in range(64)]
            assert [int(h) for h in xxh64_int64s(keys, salt)] == want
    # negative control: the same values in another key order hash elsewhere
    assert (xxh64_int64s(cols[:2][::-1]) != xxh64_int64s(cols[:2])).mean() > 0.95


def test_cross_ids_follow_the_reference_specs() -> None:
    assert len(CROSS_SPECS) == 7 and dict((n, r) for n, _, r, _ in CROSS_SPECS)["user_x_artist"] == 100_000_000
    anchor = {"uid": np.array([5, 6]), "artist_id": np.array([3, 3]), "album_id": np.array([1, 2]),
              "item_id": np.array([9, 9]), "hour_of_day": np.array([13, 0]), "is_organic": np.array([1, 0])}
    ids = cross_ids(anchor)
    for name, keys, rows, salt in CROSS_SPECS:
        assert ids[name][0] == int(xxh64_int64s([anchor[k][:1] for k in keys], salt)[0]) % rows
        assert 0 <= ids[name].min() and ids[name].max() < rows
    assert cross_ids(anchor, {"user_x_hour": 5})["user_x_hour"].max() < 5


def test_dlrmv4_builds_the_reference_tables_from_the_files(files: Path) -> None:
    spec = load_spec(registry.find_workload("rec/dlrmv4"), {"data.path": str(files)}, "tiny")
    w = registry.task_class(spec.task)(spec, Context(Path("."), 0, torch.device("cpu")))
    tables = set(w.build_model().tables.specs)
    assert tables == REFERENCE_TABLES
    data = w.data
    artist = pq.read_table(files / "artist_item_mapping.parquet").to_pydict()
    by_item = dict(zip(artist["item_id"], artist["artist_id"], strict=True))
    k = int(w.train_idx[3])
    assert data.side["artist"][1][k] == by_item[int(data.item[k]) - 1] + 1  # the candidate's artist, shifted by one
    hist_items, hist_artists = data.hist_item[np.array([k])][0], data.side["artist"][2][np.array([k])][0]
    assert all(a == (by_item[i - 1] + 1 if i else 0) for i, a in zip(hist_items, hist_artists, strict=True))
    assert w.mllog_hyperparameters()["max_sequence_length"] == 8 + 8 + 1  # 8 contextual tokens, history, candidate


def test_a_mapping_naming_an_unknown_item_is_refused_naming_the_file(files: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in files.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    pq.write_table(pa.table({"item_id": pa.array([0, 500], pa.int64()), "album_id": pa.array([1, 2], pa.int64())}),
                   bad / "album_item_mapping.parquet")
    with pytest.raises(DataMissing, match=r"album_item_mapping.parquet: row 1: item_id 500 / album_id 2 is out of "):
        yambda.load(yambda.Config(path=str(bad)))
