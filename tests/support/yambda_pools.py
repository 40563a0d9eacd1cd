"""Processed-Yambda files (the seven of suite/data/rec/yambda.py, in the reference's layout) holding chosen event
lists, for the per-pool history tests: `write(folder, users)` where users[uid] is a list of (event_type,
played_ratio_pct) in time order, split into sessions of `per_session` events `step_s` seconds apart (one minute by
default), the user's first at T0 + offset_s[uid] (0 by default); every user also gets one listen in
test_events.parquet (the layout has the file; the reader validates it and uses none of its events). Item ids are each
event's running index (so a history names its events)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from suite.data.rec.yambda_fixture import write_train_sessions

T0, DAY_S = 1_700_000_000, 86400


def write(folder: Path, users: dict[int, list[tuple[int, float]]], per_session: int = 7, step_s: int = 60,
          offset_s: dict[int, int] | None = None) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows: dict[str, list] = {k: [] for k in ("uid", "session_id", "item_ids", "timestamps", "event_types",
                                             "is_organic", "played_ratio_pct")}
    item, sid = 0, 0
    for uid, events in users.items():
        for s in range(0, len(events), per_session):
            chunk = events[s:s + per_session]
            rows["uid"].append(uid)
            rows["session_id"].append(sid)
            rows["item_ids"].append(list(range(item, item + len(chunk))))
            rows["timestamps"].append([T0 + (offset_s or {}).get(uid, 0) + step_s * (s + j)
                                       for j in range(len(chunk))])
            rows["event_types"].append([e for e, _ in chunk])
            rows["is_organic"].append([1] * len(chunk))
            rows["played_ratio_pct"].append([float(p) for _, p in chunk])
            item, sid = item + len(chunk), sid + 1
    n_items, split_ts = item + len(users), max(max(t) for t in rows["timestamps"]) + 3600
    write_train_sessions(rows, folder)
    uids = list(users)
    pq.write_table(pa.table({"uid": pa.array(uids, pa.int64()),
                             "item_id": pa.array(range(item, item + len(uids)), pa.int64()),
                             "timestamp": pa.array([split_ts + 60] * len(uids), pa.int64()),
                             "event_type": pa.array([0] * len(uids), pa.int8()),
                             "is_organic": pa.array([1] * len(uids), pa.int8()),
                             "played_ratio_pct": pa.array([80.0] * len(uids), pa.float32())}),
                   folder / "test_events.parquet")
    pq.write_table(pa.table({"uid": pa.array(rows["uid"], pa.int64()),
                             "session_id": pa.array(rows["session_id"], pa.int64()),
                             "n_events": pa.array([len(x) for x in rows["item_ids"]], pa.int64())}),
                   folder / "session_index.parquet")
    np.save(folder / "item_popularity.npy", np.ones(n_items, np.int64))
    for name in ("artist", "album"):
        pq.write_table(pa.table({"item_id": pa.array(range(n_items), pa.int64()),
                                 f"{name}_id": pa.array([i // 3 for i in range(n_items)], pa.int64())}),
                       folder / f"{name}_item_mapping.parquet")
    (folder / "split_meta.json").write_text(json.dumps({
        "split_timestamp": split_ts, "window_seconds": DAY_S, "n_train_events": item, "n_test_events": len(uids),
        "n_items": n_items}, indent=1))
    return folder
