"""The MovieLens-100K reader on small files it writes in RecBole's atomic format (tab-separated, `name:type`
header), and on the real files where `make data` unpacked RecBole's wheel: time order, equal-count windows,
histories that never hold the interaction itself, and bad files refused naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite.data.base import DataMissing
from suite.data.locate import registry_dir
from suite.data.rec import movielens

USERS = "user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n" + "".join(
    f"{u}\t{20 + u}\t{'MF'[u % 2]}\tjob{u % 3}\t{10000 + u}\n" for u in range(1, 5))
ITEMS = "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n" + "".join(
    f"{i}\tMovie {i}\t{1980 + i}\tDrama Comedy\n" for i in range(1, 7))


def write(folder: Path, rows: list[tuple[int, int, float, int]], header: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    head = header or "user_id:token\titem_id:token\trating:float\ttimestamp:float"
    (folder / "ml-100k.inter").write_text(head + "\n" + "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows))
    (folder / "ml-100k.user").write_text(USERS)
    (folder / "ml-100k.item").write_text(ITEMS)
    return folder


ROWS = [(1, 1, 5, 100), (2, 2, 3, 90), (1, 3, 4, 110), (3, 1, 2, 120), (1, 2, 1, 130), (2, 4, 5, 140),
        (4, 5, 4, 150), (2, 6, 2, 160)]


def test_time_order_windows_and_histories(tmp_path: Path) -> None:
    d = movielens.load(movielens.Config(path=str(write(tmp_path, ROWS)), n_windows=4, max_history=2))
    assert list(d.timestamp) == sorted(t for *_, t in ROWS)
    assert list(np.bincount(d.window)) == [2, 2, 2, 2]
    assert list(d.label) == [float(r >= 4) for r in sorted(ROWS, key=lambda x: x[3]) for r in [r[2]]]
    # user "1" (first seen second in time, so dense id 2) rated items 1, 3, 2 at times 100, 110, 130
    rows = np.flatnonzero(d.user == d.user[1])
    assert [list(d.hist_item[r]) for r in rows] == [[0, 0], [0, d.item[1]], [d.item[1], d.item[rows[1]]]]
    assert [list(d.hist_rating[r]) for r in rows] == [[0, 0], [0, 5], [5, 4]]
    train, evaluated = d.split(4)
    assert d.timestamp[train].max() < d.timestamp[evaluated].min()  # the evaluated window is strictly later
    assert d.user_features["gender"][d.user].min() >= 1 and d.item_features["genres"].shape[1] == 6


def test_a_missing_label_column_is_refused_naming_file_and_column(tmp_path: Path) -> None:
    folder = write(tmp_path, ROWS)
    (folder / "ml-100k.inter").write_text("user_id:token\titem_id:token\ttimestamp:float\n1\t1\t100\n")
    with pytest.raises(DataMissing, match=r"ml-100k.inter: no column 'rating'"):
        movielens.load(movielens.Config(path=str(folder)))


def test_an_empty_window_and_a_short_row_are_refused(tmp_path: Path) -> None:
    folder = write(tmp_path, ROWS)
    with pytest.raises(DataMissing, match=r"window \d+ of 12 is empty"):
        movielens.load(movielens.Config(path=str(folder), n_windows=12))
    with open(folder / "ml-100k.inter", "a") as f:
        f.write("5\t1\t3\n")
    with pytest.raises(DataMissing, match=r"ml-100k.inter: line 10: 3 fields"):
        movielens.load(movielens.Config(path=str(folder)))


def test_a_rating_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    folder = write(tmp_path, ROWS[:3] + [(3, 1, "five", 120)])  # type: ignore[list-item]
    with pytest.raises(DataMissing, match=r"column 'rating', data row 4: 'five'"):
        movielens.load(movielens.Config(path=str(folder)))


def test_the_real_files_from_recboles_wheel() -> None:
    folder = registry_dir("recbole") / "recbole/dataset_example/ml-100k"
    if not (folder / "ml-100k.inter").is_file():
        pytest.skip("RecBole's ml-100k is not unpacked here: run `make data`")
    d = movielens.load(movielens.Config())
    assert (len(d), d.n_users, d.n_items) == (100_000, 943, 1682)
    assert d.label.mean() == pytest.approx(0.55375)  # 55,375 ratings of 4 or 5 in ML-100K
    assert (np.diff(d.timestamp) >= 0).all()
