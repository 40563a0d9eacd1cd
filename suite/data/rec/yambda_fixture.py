"""Generated files in the processed Yambda layout (suite/data/rec/yambda.py: train_sessions.parquet,
test_events.parquet, session_index.parquet, item_popularity.npy, split_meta.json, artist_item_mapping.parquet,
album_item_mapping.parquet), for the reader's tests and the
dlrmv4 tiny variant where the real data is absent. Whether a listen is played to >= 50% follows a planted
user x item affinity plus
an item appeal, so AUC can rise above 0.5. `write(folder)` writes the seven files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DAY_S = 86400


def write(folder: Path, users: int = 40, items: int = 80, sessions_per_user: int = 6, events_per_session: int = 12,
          test_per_user: int = 8, days: int = 5, seed: int = 0) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    u_vec, i_vec = rng.normal(size=(users, 4)), rng.normal(size=(items, 4))
    i_bias = 1.5 * rng.normal(size=items)  # each item's appeal: the part a few hundred steps can learn
    t0 = 1_700_000_000
    split_ts = t0 + days * DAY_S

    def events(u: int, n: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        item = rng.integers(0, items, n)
        ts = np.sort(rng.integers(lo, hi, n))
        etype = np.where(rng.random(n) < 0.15, 1, 0)
        affinity = (u_vec[u] * i_vec[item]).sum(1) + i_bias[item] + rng.normal(scale=0.5, size=n)
        played = np.clip(50 + 30 * affinity, 0, 100).round(1)
        return {"item_ids": item, "timestamps": ts, "event_types": etype,
                "is_organic": rng.integers(0, 2, n).astype(np.int8), "played_ratio_pct": played}

    rows: dict[str, list] = {"uid": [], "session_id": [], "item_ids": [], "timestamps": [], "event_types": [],
                             "is_organic": [], "played_ratio_pct": []}
    test_rows: dict[str, list] = {k: [] for k in ("uid", "item_id", "timestamp", "event_type", "is_organic",
                                                 "played_ratio_pct")}
    sid = 0
    for u in range(users):
        bounds = np.linspace(t0, split_ts, sessions_per_user + 1).astype(np.int64)
        for s in range(sessions_per_user):
            ev = events(u, events_per_session, int(bounds[s]), int(bounds[s + 1]))
            rows["uid"].append(u)
            rows["session_id"].append(sid)
            sid += 1
            for k, v in ev.items():
                rows[k].append(v.tolist())
        ev = events(u, test_per_user, split_ts, split_ts + DAY_S)
        test_rows["uid"] += [u] * test_per_user
        for src, dst in (("item_ids", "item_id"), ("timestamps", "timestamp"), ("event_types", "event_type"),
                         ("is_organic", "is_organic"), ("played_ratio_pct", "played_ratio_pct")):
            test_rows[dst] += ev[src].tolist()
    write_train_sessions(rows, folder)
    pq.write_table(pa.table({"uid": pa.array(test_rows["uid"], pa.int64()),
                             "item_id": pa.array(test_rows["item_id"], pa.int64()),
                             "timestamp": pa.array(test_rows["timestamp"], pa.int64()),
                             "event_type": pa.array(test_rows["event_type"], pa.int8()),
                             "is_organic": pa.array(test_rows["is_organic"], pa.int8()),
                             "played_ratio_pct": pa.array(test_rows["played_ratio_pct"], pa.float32())}),
                   folder / "test_events.parquet")
    pq.write_table(pa.table({"uid": pa.array(rows["uid"], pa.int64()),
                             "session_id": pa.array(rows["session_id"], pa.int64()),
                             "n_events": pa.array([len(x) for x in rows["item_ids"]], pa.int64())}),
                   folder / "session_index.parquet")
    all_items = np.concatenate([np.concatenate([np.asarray(x) for x in rows["item_ids"]]),
                                np.asarray(test_rows["item_id"])])
    np.save(folder / "item_popularity.npy", np.bincount(all_items, minlength=items).astype(np.int64))
    n_train = sum(len(x) for x in rows["item_ids"])
    artist = rng.integers(0, max(2, items // 8), items)  # a few items per artist, a few albums per artist
    album = artist * 2 + rng.integers(0, 2, items)
    for name, ids in (("artist", artist), ("album", album)):
        pq.write_table(pa.table({"item_id": pa.array(np.arange(items), pa.int64()),
                                 f"{name}_id": pa.array(ids, pa.int64())}), folder / f"{name}_item_mapping.parquet")
    (folder / "split_meta.json").write_text(json.dumps({
        "split_timestamp": split_ts, "window_seconds": DAY_S, "n_train_events": n_train,
        "n_test_events": len(test_rows["uid"]), "n_items": items}, indent=1))
    return folder


def write_train_sessions(rows: dict[str, list], folder: Path) -> Path:
    """`train_sessions.parquet` in the processed layout's exact schema, from column lists (one row per session)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = folder / "train_sessions.parquet"
    pq.write_table(pa.table({
        "uid": pa.array(rows["uid"], pa.int64()), "session_id": pa.array(rows["session_id"], pa.int64()),
        "item_ids": pa.array(rows["item_ids"], pa.list_(pa.int64())),
        "timestamps": pa.array(rows["timestamps"], pa.list_(pa.int64())),
        "event_types": pa.array(rows["event_types"], pa.list_(pa.int8())),
        "is_organic": pa.array(rows["is_organic"], pa.list_(pa.int8())),
        "played_ratio_pct": pa.array(rows["played_ratio_pct"], pa.list_(pa.float32()))}), path)
    return path
