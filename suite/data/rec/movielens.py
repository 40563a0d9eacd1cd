"""MovieLens-100K (GroupLens; 943 users, 1,682 movies, 100,000 ratings) as RecBole 1.2.1's wheel ships it, in
RecBole's atomic-file format: tab-separated, a header of `name:type` (`user_id:token  item_id:token  rating:float
timestamp:float`). Read here without importing RecBole (scripts/install_data.sh unpacks only the data files).

The interactions are ordered by time and cut into `n_windows` windows of equal count, as MLPerf dlrmv4's streaming
loop cuts Yambda into days: the workloads train on the earlier windows and evaluate on the last, strictly-future one.
Every interaction carries the same user's previous `max_history` interactions (items, ratings and timestamps,
left-padded with 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from suite.data.base import DataMissing
from suite.data.locate import find_dir, install_hint, named_dir, registry_dir
from suite.data.rec.movielens_config import Config
from suite.registry import Component

FILES = ("ml-100k.inter", "ml-100k.user", "ml-100k.item")
INTER_COLUMNS = ("user_id", "item_id", "rating", "timestamp")
AGE_BUCKETS = (18, 25, 35, 45, 50, 56)  # MovieLens-1M's age groups, applied to 100K's exact ages
YEAR_BUCKETS = tuple(range(1920, 2000, 5))


@dataclass
class Interactions:
    """Interactions in time order; ids are dense and 1-based (0 is padding). `hist_*` are [N, max_history]."""

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    label: np.ndarray
    timestamp: np.ndarray
    window: np.ndarray
    hist_item: np.ndarray
    hist_rating: np.ndarray
    hist_time: np.ndarray  # [N, max_history] the history's timestamps (ml-100k.inter 'timestamp', seconds), 0 padding
    n_users: int
    n_items: int
    user_features: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [n_users + 1] ids
    item_features: dict[str, np.ndarray] = field(default_factory=dict)  # name -> [n_items + 1] or [.., k] ids
    cardinality: dict[str, int] = field(default_factory=dict)  # feature -> rows its table needs
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.user)

    def split(self, n_windows: int) -> tuple[np.ndarray, np.ndarray]:
        """Indices of the training windows (all but the last) and of the evaluated last window."""
        return np.flatnonzero(self.window < n_windows - 1), np.flatnonzero(self.window == n_windows - 1)


def read_atomic(path: Path, required: tuple[str, ...]) -> dict[str, list[str]]:
    """A RecBole atomic file as {column: [values as text]}; a missing required column or a short row is refused
    naming the file, the column and the line."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as e:
        raise DataMissing(f"{path}: cannot read ({e.strerror or e})") from None
    if not lines:
        raise DataMissing(f"{path}: empty file (expected a header of name:type columns)")
    names = [h.split(":", 1)[0] for h in lines[0].split("\t")]
    for col in required:
        if col not in names:
            raise DataMissing(f"{path}: no column {col!r} (header has: {', '.join(names)})")
    cols: dict[str, list[str]] = {n: [] for n in names}
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != len(names):
            raise DataMissing(f"{path}: line {lineno}: {len(parts)} fields, the header names {len(names)}")
        for n, v in zip(names, parts, strict=True):
            cols[n].append(v)
    return cols


def _numbers(values: list[str], path: Path, column: str) -> np.ndarray:
    try:
        return np.asarray(values, dtype=np.float64)
    except ValueError:
        bad = next(i for i, v in enumerate(values) if not _is_number(v))
        raise DataMissing(f"{path}: column {column!r}, data row {bad + 1}: {values[bad]!r} is not a number") from None


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _dense_ids(raw: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    """Tokens -> 1-based ids in first-seen order (0 stays padding)."""
    index: dict[str, int] = {}
    ids = np.fromiter((index.setdefault(t, len(index) + 1) for t in raw), dtype=np.int64, count=len(raw))
    return ids, index


def histories(user: np.ndarray, item: np.ndarray, rating: np.ndarray, length: int,
              timestamp: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """For each interaction (in time order) the same user's previous `length` items and ratings (and timestamps,
    when given), oldest first, left-padded with 0; the interaction itself is never in its own history."""
    n = len(user)
    cols = [item, rating.astype(np.int64)] + ([timestamp.astype(np.int64)] if timestamp is not None else [])
    out = [np.zeros((n, length), dtype=np.int64) for _ in cols]
    order = np.argsort(user, kind="stable")  # each user's interactions, still in time order
    bounds = np.flatnonzero(np.diff(user[order])) + 1
    for rows in np.split(order, bounds):
        for dst, src in zip(out, cols, strict=True):
            padded = np.concatenate([np.zeros(length, np.int64), src[rows]])
            dst[rows] = np.lib.stride_tricks.sliding_window_view(padded, length)[: len(rows)]
    return tuple(out)


def _bucket(values: np.ndarray, edges: tuple[int, ...]) -> np.ndarray:
    return np.searchsorted(np.asarray(edges), values, side="right").astype(np.int64) + 1


def _user_features(path: Path, users: dict[str, int]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    cols = read_atomic(path, ("user_id", "age", "gender", "occupation", "zip_code"))
    n = len(users) + 1
    feats = {k: np.zeros(n, dtype=np.int64) for k in ("age", "gender", "occupation", "zip3")}
    ages = _numbers(cols["age"], path, "age")
    _, genders = _dense_ids(cols["gender"])
    _, occupations = _dense_ids(cols["occupation"])
    _, zips = _dense_ids([z[:3] for z in cols["zip_code"]])
    for k, uid in enumerate(cols["user_id"]):
        u = users.get(uid)
        if u is None:
            continue  # a user without interactions in the kept range
        feats["age"][u] = _bucket(ages[k : k + 1], AGE_BUCKETS)[0]
        feats["gender"][u] = genders[cols["gender"][k]]
        feats["occupation"][u] = occupations[cols["occupation"][k]]
        feats["zip3"][u] = zips[cols["zip_code"][k][:3]]
    card = {"age": len(AGE_BUCKETS) + 2, "gender": len(genders) + 1, "occupation": len(occupations) + 1,
            "zip3": len(zips) + 1}
    return feats, card


def _item_features(path: Path, items: dict[str, int], max_genres: int = 6) -> tuple[dict[str, np.ndarray],
                                                                                    dict[str, int]]:
    cols = read_atomic(path, ("item_id", "release_year", "class"))
    n = len(items) + 1
    year = np.zeros(n, dtype=np.int64)
    genres = np.zeros((n, max_genres), dtype=np.int64)
    genre_ids: dict[str, int] = {}
    for k, iid in enumerate(cols["item_id"]):
        i = items.get(iid)
        if i is None:
            continue
        y = cols["release_year"][k]
        year[i] = _bucket(np.array([int(y)]), YEAR_BUCKETS)[0] if y.isdigit() else 0
        gs = [genre_ids.setdefault(g, len(genre_ids) + 1) for g in cols["class"][k].split()][:max_genres]
        genres[i, : len(gs)] = gs
    return {"year": year, "genres": genres}, {"year": len(YEAR_BUCKETS) + 2, "genres": len(genre_ids) + 1}


def locate(cfg: Config) -> Path:
    pkg = registry_dir("recbole") / "recbole/dataset_example/ml-100k"
    return find_dir("movielens_100k", [Path(cfg.path) if cfg.path else None, named_dir("movielens_100k"), pkg],
                    FILES, install_hint("movielens_100k"))


def load(cfg: Config) -> Interactions:
    folder = locate(cfg)
    path = folder / FILES[0]
    cols = read_atomic(path, INTER_COLUMNS)
    ts = _numbers(cols["timestamp"], path, "timestamp")
    rating = _numbers(cols["rating"], path, "rating")
    order = np.argsort(ts, kind="stable")[: cfg.limit]
    raw_user = [cols["user_id"][k] for k in order]
    raw_item = [cols["item_id"][k] for k in order]
    user, users = _dense_ids(raw_user)
    item, items = _dense_ids(raw_item)
    rating, ts = rating[order], ts[order].astype(np.int64)
    n = len(order)
    window = (np.arange(n) * cfg.n_windows) // max(n, 1)
    counts = np.bincount(window, minlength=cfg.n_windows)
    if (counts == 0).any():
        empty = int(np.flatnonzero(counts == 0)[0])
        raise DataMissing(f"{path}: temporal window {empty} of {cfg.n_windows} is empty ({n} interactions): "
                          "lower data.n_windows or raise data.limit")
    hist_item, hist_rating, hist_time = histories(user, item, rating, cfg.max_history, ts)
    user_feats, user_card = _user_features(folder / FILES[1], users)
    item_feats, item_card = _item_features(folder / FILES[2], items)
    label = (rating >= cfg.positive_rating).astype(np.float32)
    card = {"user": len(users) + 1, "item": len(items) + 1, "rating": 7, **user_card, **item_card}
    return Interactions(user=user, item=item, rating=rating.astype(np.float32), label=label, timestamp=ts,
                        window=window, hist_item=hist_item, hist_rating=hist_rating, hist_time=hist_time,
                        n_users=len(users),
                        n_items=len(items), user_features=user_feats, item_features=item_feats, cardinality=card,
                        meta={"source": str(folder), "license": "GroupLens MovieLens terms (research use)",
                              "positive_rate": float(label.mean()) if n else 0.0})


def prepare(source: Path | None) -> str:
    data = load(Config(path=str(source) if source else None))
    return (f"movielens_100k: {data.meta['source']} ({len(data)} interactions, {data.n_users} users, "
            f"{data.n_items} items)")


COMPONENT = Component(Config, load=load, prepare=prepare)
