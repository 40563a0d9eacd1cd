"""Recommender quality metrics: ROC AUC (MLPerf DLRM's and dlrmv4's target metric) and HR@k / NDCG@k of one
relevant item ranked among sampled candidates. Pure numpy, so evaluation imports no scikit-learn; the tests hold
them equal to scikit-learn's `roc_auc_score` and torchmetrics' retrieval metrics (tests/measure/test_rec_metrics.py).
"""

from __future__ import annotations

import numpy as np


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve as the Mann-Whitney U statistic, ties counted half (scikit-learn's definition).
    Refuses a set with one class only: its AUC is undefined, and a run must not read it as a number."""
    y = np.asarray(labels, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"labels ({y.size}) and scores ({s.size}) differ in length")
    n_pos = float((y > 0.5).sum())
    n_neg = float(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        raise ValueError("AUC is undefined: the evaluation set holds one class only")
    order = np.argsort(s, kind="mergesort")
    sorted_s = s[order]
    ranks = np.empty(y.size, dtype=np.float64)
    # average rank of each group of tied scores (1-based)
    bounds = np.flatnonzero(np.diff(sorted_s)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [y.size]])
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    rank_sum = ranks[y > 0.5].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def positive_ranks(scores: np.ndarray) -> np.ndarray:
    """scores [queries, candidates] with the relevant item in column 0 -> its 0-based rank among the candidates
    (how many candidates score strictly higher)."""
    s = np.asarray(scores, dtype=np.float64)
    return (s[:, 1:] > s[:, :1]).sum(axis=1)


def hit_rate_at_k(scores: np.ndarray, k: int) -> float:
    """Share of queries whose relevant item (column 0) is among the top k candidates."""
    return float((positive_ranks(scores) < k).mean())


def ndcg_at_k(scores: np.ndarray, k: int) -> float:
    """NDCG@k with one relevant item per query (ideal DCG 1): mean of 1/log2(rank + 2) over queries that rank it
    in the top k, 0 for the others."""
    r = positive_ranks(scores)
    gains = np.where(r < k, 1.0 / np.log2(r + 2.0), 0.0)
    return float(gains.mean())
