"""A stand-in of MovieLens-100K in RecBole's atomic format (ml-100k.inter / .user / .item, the same headers and
columns), for the recommender workloads' tiny variants where the real files are absent (benchmarks/device_check.py
on a device machine, which cannot download). Ratings follow a planted user x item affinity, so AUC can rise above
0.5. `write(folder)` writes the three files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

OCCUPATIONS = ("student", "engineer", "artist", "other")
GENRES = ("Drama", "Comedy", "Action", "Thriller", "Romance")


def write(folder: Path, n: int = 4000, users: int = 60, items: int = 120, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    u_vec, i_vec = rng.normal(size=(users, 4)), rng.normal(size=(items, 4))
    u = rng.integers(1, users + 1, n)
    i = rng.integers(1, items + 1, n)
    affinity = (u_vec[u - 1] * i_vec[i - 1]).sum(1) + rng.normal(scale=0.5, size=n)
    rating = np.clip(np.round(3 + affinity), 1, 5).astype(int)
    ts = 880_000_000 + np.sort(rng.integers(0, 10_000_000, n))
    lines = ["user_id:token\titem_id:token\trating:float\ttimestamp:float"]
    lines += [f"{a}\t{b}\t{r}\t{t}" for a, b, r, t in zip(u, i, rating, ts, strict=True)]
    (folder / "ml-100k.inter").write_text("\n".join(lines) + "\n")
    (folder / "ml-100k.user").write_text(
        "user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n" + "".join(
            f"{k}\t{18 + k % 50}\t{'MF'[k % 2]}\t{OCCUPATIONS[k % 4]}\t{10000 + 37 * k}\n" for k in range(1, users + 1)))
    (folder / "ml-100k.item").write_text(
        "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n" + "".join(
            f"{k}\tMovie {k}\t{1950 + k % 48}\t{GENRES[k % 5]} {GENRES[(k * 3) % 5]}\n" for k in range(1, items + 1)))
    return folder
