"""MLPerf dlrmv4's seven hashed cross features of Yambda-5b, as its reference computes them (mlcommons/training
recommendation_v4, `dlrm_v3/configs.py` YAMBDA_5B_CROSS_SPECS and `datasets/utils.py` xxhash_cross): for each anchor,
xxHash64 (seed = the salt) of the little-endian int64 concatenation of the keyed values, modulo the table's rows.
The keys are the anchor's user id, item id, the item's artist and album, the hour of day of its timestamp
((ts // 3600) % 24) and its is_organic flag.

xxHash64 here is the published algorithm (Collet, xxhash.com spec) over numpy uint64 lanes, vectorised over every
anchor at once; tests/data/test_yambda_cross.py checks it against the `xxhash` package where that is installed.
"""

from __future__ import annotations

import numpy as np

# (name, keys, rows, salt): configs.py YAMBDA_5B_CROSS_SPECS (sizes from Primus-DLRM's bench config, per its comment)
CROSS_SPECS: tuple[tuple[str, tuple[str, ...], int, int], ...] = (
    ("user_x_artist", ("uid", "artist_id"), 100_000_000, 0),
    ("user_x_album", ("uid", "album_id"), 40_000_000, 0),
    ("user_x_hour", ("uid", "hour_of_day"), 24_000_000, 0),
    ("item_x_hour", ("item_id", "hour_of_day"), 40_000_000, 0),
    ("artist_x_hour", ("artist_id", "hour_of_day"), 32_000_000, 0),
    ("user_x_is_organic", ("uid", "is_organic"), 2_000_000, 0),
    ("user_x_artist_x_hour", ("uid", "artist_id", "hour_of_day"), 40_000_000, 0),
)
CROSS_NAMES = tuple(name for name, *_ in CROSS_SPECS)

_P1, _P2, _P3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_P4, _P5 = np.uint64(0x85EBCA77C2B2AE63), np.uint64(0x27D4EB2F165667C5)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def xxh64_int64s(columns: list[np.ndarray], seed: int = 0) -> np.ndarray:
    """xxHash64 of each row's values packed as little-endian int64s (8 x len(columns) bytes, fewer than 32: the
    short-input path), for every row at once."""
    n_bytes = 8 * len(columns)
    if n_bytes >= 32:
        raise ValueError(f"xxh64_int64s: {len(columns)} keys; the short-input path takes at most 3")
    with np.errstate(over="ignore"):
        h = np.full(len(columns[0]), np.uint64(seed) + _P5, dtype=np.uint64) + np.uint64(n_bytes)
        for col in columns:
            k = np.asarray(col, dtype=np.int64).astype("<i8").view(np.uint64)
            k = _rotl(k * _P2, 31) * _P1
            h = _rotl(h ^ k, 27) * _P1 + _P4
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def cross_ids(anchor: dict[str, np.ndarray], rows: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Every cross feature's id per anchor (0 .. rows - 1); `rows` overrides a table's size (tiny variants)."""
    out = {}
    for name, keys, n, salt in CROSS_SPECS:
        n = (rows or {}).get(name, n)
        out[name] = (xxh64_int64s([anchor[k] for k in keys], salt) % np.uint64(n)).astype(np.int64)
    return out
