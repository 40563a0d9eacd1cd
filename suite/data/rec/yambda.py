"""The processed Yambda layout that MLPerf dlrmv4's reference trains on (mlcommons/training recommendation_v4,
`dlrm_v3/datasets/yambda.py`; written by its `preprocess_public_data.py --dataset yambda-<size>`):

- `train_sessions.parquet`: one row per listening session: uid, session_id and the per-event lists item_ids,
  timestamps, event_types (0 listen, 1 like, ...), is_organic, played_ratio_pct (the columns the reference explodes);
- `test_events.parquet`: the events after the split, one per row (uid, item_id, timestamp, event_type, is_organic,
  played_ratio_pct), every one strictly later than the training stream. The reference's preprocessing writes it but
  no code of the reference reads it: this reader validates it (columns, count, item ids, timestamps) and uses none of
  its events (the evaluated window is a day of train_sessions.parquet, below);
- `session_index.parquet`: uid, session_id, n_events per training session (must agree with train_sessions);
- `item_popularity.npy`: one count per item id (its length is the item vocabulary);
- `split_meta.json`: split_timestamp, window_seconds, n_train_events, n_test_events, n_items;
- `artist_item_mapping.parquet`, `album_item_mapping.parquet`: item_id and its artist_id / album_id (Yambda's own
  metadata files, which the reference reads from its metadata_dir: put them beside the others).

Beside user, item and action, the reference builds eight more tables (configs.py `get_embedding_table_config
("yambda-5b")`): artist and album (of every history item and of the candidate) and seven hashed crosses of the
anchor (suite/data/rec/yambda_cross.py). Artist and album ids are shifted by one like items (0 pads a history).

Where each column comes from: train_sessions.parquet's are the ones the reference's yambda.py reads and explodes,
and item_popularity.npy is its item vocabulary; the version of the reference read here (2026-12-07) shows no reader
of test_events.parquet, session_index.parquet or split_meta.json, so their columns above are this reader's choice,
named after train_sessions' (check them against the preprocessing script before a real run).

A sample is one LISTEN event of train_sessions.parquet with at least min_history earlier events of its user (the
reference's anchor: datasets/yambda.py lines 370-372 keep `idx - user_start >= min_history & event_type == LISTEN`
over the flat store, the sessions sorted by uid, session_id and exploded, line 423); its label is the listen-plus bit (played_ratio_pct >= 50);
its history is the reference's per-pool gather (PoolGather: the last listen_plus_cap / like_cap / skip_cap events of
each pool among the user's last scan_window events before the anchor, merged in time order, the last max_history
kept), each tagged with its pool's action bit (listen-plus 1, like 2, skip 4). Histories are gathered per batch from
the flat event arrays (never materialised as [N, max_history]). Anchors fall in windows of window_seconds counted
from the first anchor's timestamp (the reference's `window_indices`, lines 656-660: `[t_min + w * W, t_min + (w + 1)
* W)`, t_min the earliest anchor's, line 626); the training windows are 0 .. eval_holdout_window - 1 (the reference's
start_ts 0 and num_train_ts, gin lines 580 and 573), the evaluated set is every anchor of window eval_holdout_window
(its `eval_holdout_indices`, lines 737-762, with train_split_percentage 1.0: no user held out), and anchors of later
windows are used by neither. A malformed or mismatched file, or a holdout window outside the data or without an
anchor, is refused naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import find_dir, named_dir
from suite.data.rec.yambda_config import Config
from suite.data.rec.yambda_cross import CROSS_SPECS, cross_ids
from suite.registry import Component

FILES = ("train_sessions.parquet", "test_events.parquet", "session_index.parquet", "item_popularity.npy",
         "split_meta.json", "artist_item_mapping.parquet", "album_item_mapping.parquet")
SIDE = ("artist", "album")  # the item's side tables (configs.py: artist_id, album_id)
SESSION_LISTS = ("item_ids", "timestamps", "event_types", "is_organic", "played_ratio_pct")
EVENT_COLUMNS = ("uid", "item_id", "timestamp", "event_type", "is_organic", "played_ratio_pct")
INDEX_COLUMNS = ("uid", "session_id", "n_events")
META_FIELDS = ("split_timestamp", "window_seconds", "n_train_events", "n_test_events", "n_items")
LISTEN, LIKE = 0, 1  # the reference's event_types
LISTEN_PLUS_PCT = 50  # the reference's LISTEN_PLUS_THRESHOLD
LP_BIT, LIKE_BIT, SKIP_BIT = 1, 2, 4  # the reference's action_weights [1, 2, 4]
ACTION_ROWS = 8  # action bits 0-7 (the model's candidate token, 6, is never a real combination: the pools exclude)

HINT = "set data.path to the folder (or put the files under $TRAINBENCH_DATA/yambda)"


class PoolGather:
    """The reference's per-pool history gather (datasets/yambda.py `_gather_interleaved_history`, `_read_scan_window`;
    `_build_sample`'s truncation) for a batch of anchors: the positions (into the flat event arrays) of each anchor's
    history, [len(idx), length], oldest first, left-padded -1.

    For an anchor at flat position p of a user whose events start at s: scan [max(s, p - scan_window), p); from it
    take the last cap events of each pool (listen-plus, like, skip; a pool with fewer gives what it has, an empty one
    nothing, and its unused slots go to no other pool); events of no pool (dislike, unlike, undislike) never enter;
    merge the three in flat (time) order; keep the last `length` (the sequence budget)."""

    def __init__(self, pool: np.ndarray, anchors: np.ndarray, user_start: np.ndarray, caps: tuple[int, ...],
                 scan_window: int, length: int):
        self.dtype = np.int32 if len(pool) < 2**31 else np.int64  # half the bytes to sort where it fits
        self.pool_pos = [np.flatnonzero(pool == k).astype(self.dtype) for k in range(len(caps))]
        self.anchors, self.user_start = anchors, user_start
        self.caps, self.scan_window, self.length = caps, scan_window, length
        self._last: tuple[bytes, np.ndarray] | None = None

    def positions(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        key = idx.tobytes()
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        p = self.anchors[idx]
        scan_start = np.maximum(self.user_start[idx], p - self.scan_window)
        widths = [min(cap, self.length) for cap in self.caps]  # of a pool, at most its last `length` survive
        out = np.full((len(idx), max(sum(widths), self.length)), -1, dtype=self.dtype)
        at = out.shape[1] - sum(widths)
        for pos, cap, w in zip(self.pool_pos, self.caps, widths, strict=True):
            if len(pos):
                hi = np.searchsorted(pos, p)  # this pool's events before the anchor
                lo = np.maximum(np.searchsorted(pos, scan_start), hi - cap)  # in the scan, the last cap of them
                cols = hi[:, None] - w + np.arange(w)[None, :]
                out[:, at:at + w] = np.where(cols >= lo[:, None], pos[np.clip(cols, 0, None)], -1)
            at += w
        out.sort(axis=1)  # merged in flat (time) order; the -1 padding first
        merged = out[:, -self.length:]
        self._last = (key, merged)
        return merged


class LazyHistory:
    """`hist[idx]` -> [len(idx), length] of the anchors' history events (items, action bits, times, side ids) as
    PoolGather picks them, left-padded 0. `values` holds every event's value (flat)."""

    def __init__(self, values: np.ndarray, gather: PoolGather):
        self.values, self.gather = values, gather

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        pos = self.gather.positions(idx)
        return np.where(pos >= 0, self.values[np.clip(pos, 0, None)], 0).astype(np.int64)


class YambdaAnchors:
    """Anchors in time order (the training windows first, then the evaluated window); ids 1-based (0 is padding)."""

    def __init__(self, *, user: np.ndarray, item: np.ndarray, label: np.ndarray, window: np.ndarray,
                 is_eval: np.ndarray, hist_item: LazyHistory, hist_rating: LazyHistory, n_users: int, n_items: int,
                 meta: dict[str, Any], side: dict[str, Any] | None = None, cross: dict[str, np.ndarray] | None = None,
                 cross_rows: dict[str, int] | None = None, timestamp: np.ndarray | None = None,
                 hist_time: LazyHistory | None = None):
        self.user, self.item, self.label, self.window, self.is_eval = user, item, label, window, is_eval
        self.hist_item, self.hist_rating = hist_item, hist_rating
        # the anchors' timestamps and the histories' (the files' 'timestamps' / 'timestamp', seconds; 0 padding)
        self.timestamp, self.hist_time = timestamp, hist_time
        self.n_users, self.n_items, self.meta = n_users, n_items, meta
        self.cardinality = {"user": n_users + 1, "item": n_items + 1, "rating": ACTION_ROWS}
        # side[name] = (the item id -> its id map (shifted, 0 = none), the anchors' ids, the histories' LazyHistory)
        self.side, self.cross = side or {}, cross or {}
        self.cardinality.update({n: int(m.max()) + 1 for n, (m, _, _) in self.side.items()})
        self.cardinality.update(cross_rows or {})

    def __len__(self) -> int:
        return len(self.user)

    def split(self, n_windows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Training anchors (the windows before eval_holdout_window) and the evaluated ones (that window's)."""
        return np.flatnonzero(~self.is_eval), np.flatnonzero(self.is_eval)


def _read_parquet(path: Path, required: tuple[str, ...]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a file that is not parquet
        raise DataMissing(f"{path}: not a readable parquet file ({e})") from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise DataMissing(f"{path}: no column {missing[0]!r} (it has: {', '.join(table.column_names)})")
    return {c: table.column(c) for c in required}


def _flat(col: Any, path: Path, name: str, dtype: type) -> np.ndarray:
    try:
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)
    except (TypeError, ValueError) as e:
        raise DataMissing(f"{path}: column {name!r} is not numeric ({e})") from None


def _sessions(path: Path) -> dict[str, np.ndarray]:
    """train_sessions.parquet exploded into flat event columns, with each session's uid and length."""
    import pyarrow as pa

    cols = _read_parquet(path, ("uid", "session_id", *SESSION_LISTS))
    lengths = None
    out: dict[str, np.ndarray] = {}
    for name in SESSION_LISTS:
        col = cols[name].combine_chunks() if isinstance(cols[name], pa.ChunkedArray) else cols[name]
        if not pa.types.is_list(col.type) and not pa.types.is_large_list(col.type):
            raise DataMissing(f"{path}: column {name!r} is {col.type}, not a list per session")
        n = np.asarray(col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        if lengths is None:
            lengths = n
        elif not np.array_equal(n, lengths):
            row = int(np.flatnonzero(n != lengths)[0])
            raise DataMissing(f"{path}: session row {row}: column {name!r} holds {n[row]} events, item_ids holds "
                              f"{lengths[row]}")
        out[name] = _flat(col.flatten(), path, name, np.float64 if name == "played_ratio_pct" else np.int64)
    assert lengths is not None
    out["session_uid"] = _flat(cols["uid"], path, "uid", np.int64)
    out["session_id"] = _flat(cols["session_id"], path, "session_id", np.int64)
    out["session_len"] = lengths
    return out


def _meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise DataMissing(f"{path}: not readable JSON ({e})") from None
    if not isinstance(meta, dict):
        raise DataMissing(f"{path}: expected a JSON object with {', '.join(META_FIELDS)}")
    for key in META_FIELDS:
        if not isinstance(meta.get(key), int) or isinstance(meta.get(key), bool):
            raise DataMissing(f"{path}: field {key!r} must be an integer, got {meta.get(key)!r}")
    return meta


def _item_map(path: Path, name: str, n_items: int) -> np.ndarray:
    """item id + 1 -> its artist (album) id + 1, 0 for an item the file does not name (the reference's default)."""
    cols = _read_parquet(path, ("item_id", f"{name}_id"))
    items, ids = _flat(cols["item_id"], path, "item_id", np.int64), _flat(cols[f"{name}_id"], path, f"{name}_id",
                                                                         np.int64)
    bad = np.flatnonzero((items < 0) | (items >= n_items) | (ids < 0))
    if len(bad):
        k = int(bad[0])
        raise DataMissing(f"{path}: row {k}: item_id {int(items[k])} / {name}_id {int(ids[k])} is out of range "
                          f"(item ids 0..{n_items - 1} of split_meta.json's n_items, {name} ids >= 0)")
    out = np.zeros(n_items + 1, dtype=np.int64)
    out[items + 1] = ids + 1
    return out


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise DataMissing(message)


def locate(cfg: Config) -> Path:
    return find_dir("yambda", [Path(cfg.path) if cfg.path else None, named_dir("yambda")], FILES, HINT)


def load(cfg: Config) -> YambdaAnchors:
    folder = locate(cfg)
    meta_path, pop_path = folder / "split_meta.json", folder / "item_popularity.npy"
    meta = _meta(meta_path)
    sess = _sessions(folder / "train_sessions.parquet")
    test_path = folder / "test_events.parquet"
    test_cols = _read_parquet(test_path, EVENT_COLUMNS)
    test = {k: _flat(v, test_path, k, np.float64 if k == "played_ratio_pct" else np.int64)
            for k, v in test_cols.items()}
    index_path = folder / "session_index.parquet"
    index = {k: _flat(v, index_path, k, np.int64) for k, v in _read_parquet(index_path, INDEX_COLUMNS).items()}
    side_maps = {name: _item_map(folder / f"{name}_item_mapping.parquet", name, meta["n_items"]) for name in SIDE}
    try:
        popularity = np.load(pop_path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataMissing(f"{pop_path}: not a readable .npy array ({e})") from None

    n_train, n_test = int(sess["session_len"].sum()), len(test["uid"])
    _check(popularity.ndim == 1, f"{pop_path}: expected one count per item (1-D), got shape {popularity.shape}")
    _check(len(popularity) == meta["n_items"], f"{pop_path}: {len(popularity)} items, but {meta_path} field "
           f"'n_items' says {meta['n_items']}")
    _check(n_train == meta["n_train_events"], f"{folder / 'train_sessions.parquet'}: {n_train} events, but "
           f"{meta_path} field 'n_train_events' says {meta['n_train_events']}")
    _check(n_test == meta["n_test_events"], f"{test_path}: {n_test} events, but {meta_path} field "
           f"'n_test_events' says {meta['n_test_events']}")
    ref = {(int(u), int(s)): int(n) for u, s, n in zip(sess["session_uid"], sess["session_id"],
                                                       sess["session_len"], strict=True)}
    got = {(int(u), int(s)): int(n) for u, s, n in zip(index["uid"], index["session_id"], index["n_events"],
                                                       strict=True)}
    if got != ref:
        diff = sorted(set(ref.items()) ^ set(got.items()))[0]
        raise DataMissing(f"{index_path}: does not match train_sessions.parquet (first difference: uid {diff[0][0]} "
                          f"session {diff[0][1]}, n_events {diff[1]})")
    n_items = meta["n_items"]
    for name, items in (("train_sessions.parquet", sess["item_ids"]), ("test_events.parquet", test["item_id"])):
        bad = np.flatnonzero((items < 0) | (items >= n_items))
        _check(len(bad) == 0, f"{folder / name}: item id {int(items[bad[0]]) if len(bad) else 0} is out of range "
               f"[0, {n_items}) of {pop_path.name}")
    split_ts = meta["split_timestamp"]
    late = np.flatnonzero(sess["timestamps"] >= split_ts)
    _check(len(late) == 0, f"{folder / 'train_sessions.parquet'}: event at timestamp "
           f"{int(sess['timestamps'][late[0]]) if len(late) else 0} is not before {meta_path} split_timestamp "
           f"{split_ts}")
    early = np.flatnonzero(test["timestamp"] < split_ts)
    _check(len(early) == 0, f"{test_path}: event at timestamp {int(test['timestamp'][early[0]]) if len(early) else 0}"
           f" is before {meta_path} split_timestamp {split_ts}: the file (validated, not read as samples) must hold "
           "only events after the training stream")
    _check(meta["window_seconds"] > 0, f"{meta_path}: field 'window_seconds' must be > 0")

    # the reference's flat store: train_sessions.parquet sorted by uid, session_id, each session's events in its
    # list order (datasets/yambda.py line 423); test_events.parquet is validated above and used nowhere
    sessions_path = folder / "train_sessions.parquet"
    uid = np.repeat(sess["session_uid"], sess["session_len"])
    sid = np.repeat(sess["session_id"], sess["session_len"])
    order = np.lexsort((np.arange(n_train), sid, uid))
    uid, ts, item, etype, played, organic = (a[order] for a in (
        uid, sess["timestamps"], sess["item_ids"] + 1, sess["event_types"], np.nan_to_num(sess["played_ratio_pct"]),
        sess["is_organic"]))
    listen = etype == LISTEN
    plus = listen & (played >= LISTEN_PLUS_PCT)
    action = np.where(plus, LP_BIT, 0) | np.where(etype == LIKE, LIKE_BIT, 0) | np.where(listen & ~plus, SKIP_BIT, 0)
    starts = np.r_[0, np.flatnonzero(np.diff(uid)) + 1]
    user_start = np.repeat(starts, np.diff(np.r_[starts, len(uid)]))
    _, dense_user = np.unique(uid, return_inverse=True)

    # anchors: LISTENs after min_history earlier events of the user (datasets/yambda.py lines 370-372)
    eligible = np.flatnonzero(listen & (np.arange(len(uid)) - user_start >= cfg.min_history))
    _check(len(eligible) > 0, f"{sessions_path}: no LISTEN event (event_type {LISTEN}) with data.min_history "
           f"{cfg.min_history} earlier events of its user: no anchor")
    width = meta["window_seconds"]
    t0 = int(ts[eligible].min())  # the reference's t_min: the earliest anchor's timestamp (line 626)
    all_windows = (ts[eligible] - t0) // width  # lines 656-660
    n_windows = int(all_windows.max()) + 1  # its num_windows (lines 630-635)
    held = n_windows - 1 if cfg.eval_holdout_window is None else cfg.eval_holdout_window
    _check(held < n_windows, f"{sessions_path}: data.eval_holdout_window {held} is beyond the data: its anchors "
           f"fill windows 0..{n_windows - 1} ({meta_path.name} window_seconds {width}, counted from the first "
           f"anchor at {t0})")
    _check(held >= 1, f"{sessions_path}: data.eval_holdout_window 0 leaves no training window before it")
    evaluated = eligible[all_windows == held]
    _check(len(evaluated) > 0, f"{sessions_path}: data.eval_holdout_window {held} holds no anchor (the window "
           f"[{t0 + held * width}, {t0 + (held + 1) * width}) of {meta_path.name} window_seconds {width})")
    train = eligible[all_windows < held]
    train = train[np.lexsort((train, ts[train]))][: cfg.limit]  # by time
    evaluated = evaluated[np.lexsort((evaluated, ts[evaluated]))]
    _check(len(train) > 0, f"{sessions_path}: the training windows 0..{held - 1} before data.eval_holdout_window "
           f"{held} hold no anchor")
    anchors = np.concatenate([train, evaluated])
    is_eval = np.r_[np.zeros(len(train), bool), np.ones(len(evaluated), bool)]
    window = (ts[anchors] - t0) // width
    n_users = int(dense_user.max()) + 1
    pool = np.select([plus, etype == LIKE, listen & ~plus], [0, 1, 2], -1)  # the reference's 3 pools, -1: none
    gather = PoolGather(pool, anchors, user_start[anchors], (cfg.listen_plus_cap, cfg.like_cap, cfg.skip_cap),
                        cfg.scan_window, cfg.max_history)
    side = {name: (m, m[item[anchors]], LazyHistory(m[item], gather)) for name, m in side_maps.items()}
    raw = {"uid": uid[anchors], "item_id": item[anchors] - 1, "hour_of_day": (ts[anchors] // 3600) % 24,
           "is_organic": organic[anchors], **{f"{n}_id": np.maximum(side[n][1] - 1, 0) for n in SIDE}}
    rows = {name: cfg.cross_rows or n for name, _, n, _ in CROSS_SPECS}
    return YambdaAnchors(
        user=dense_user[anchors].astype(np.int64) + 1, item=item[anchors].astype(np.int64),
        label=plus[anchors].astype(np.float32), window=window.astype(np.int64), is_eval=is_eval,
        hist_item=LazyHistory(item, gather), hist_rating=LazyHistory(action, gather),
        timestamp=ts[anchors].astype(np.int64), hist_time=LazyHistory(ts, gather),
        n_users=n_users, n_items=n_items, side=side, cross=cross_ids(raw, rows), cross_rows=rows,
        meta={"source": str(folder), "license": "the Yambda data set card's terms", "train_events": n_train,
              "test_events_unused": n_test, "windows": n_windows, "eval_window": held, "first_anchor_ts": t0,
              "positive_rate": float(plus[anchors].mean())})


def prepare(source: Path | None) -> str:
    data = load(Config(path=str(source) if source else None))
    train, evaluated = data.split()
    return (f"yambda: {data.meta['source']} ({len(train)} training anchors in windows 0..{data.meta['eval_window'] - 1},"
            f" {len(evaluated)} evaluated anchors in window {data.meta['eval_window']} of {data.meta['windows']})")


COMPONENT = Component(Config, load=load, prepare=prepare)
