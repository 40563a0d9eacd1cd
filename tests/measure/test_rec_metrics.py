"""The recommender metrics against code nobody here wrote: AUC against scikit-learn's `roc_auc_score`, HR@10 and
NDCG@10 against torchmetrics' retrieval metrics, on the same predictions; each with a negative control (a changed
score moves both, or a wrong formula fails the match)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from suite.measure.rec_metrics import hit_rate_at_k, ndcg_at_k, positive_ranks, roc_auc


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auc_equals_scikit_learn(seed: int) -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, 2000).astype(np.float32)
    scores = labels * 0.7 + rng.normal(size=2000)
    scores[:300] = np.round(scores[:300], 1)  # ties, counted half by both
    assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_auc_negative_control_one_score_changed() -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, 500).astype(np.float32)
    scores = labels + rng.normal(size=500)
    changed = scores.copy()
    k = int(np.argmax(labels))  # a positive moved to the bottom: fewer pairs ordered right
    changed[k] = scores.min() - 1
    assert roc_auc(labels, changed) < roc_auc_score(labels, scores) - 1e-4
    assert roc_auc(labels, changed) == pytest.approx(roc_auc_score(labels, changed), abs=1e-12)


def test_auc_refuses_one_class() -> None:
    with pytest.raises(ValueError, match="one class"):
        roc_auc(np.ones(5), np.arange(5.0))


def _torchmetrics(scores: np.ndarray, k: int) -> tuple[float, float]:
    from torchmetrics.retrieval import RetrievalHitRate, RetrievalNormalizedDCG

    q, c = scores.shape
    preds = torch.from_numpy(scores).float().reshape(-1)
    target = torch.zeros(q, c, dtype=torch.bool)
    target[:, 0] = True  # the relevant item sits in column 0
    indexes = torch.arange(q).repeat_interleave(c)
    hr = RetrievalHitRate(top_k=k)(preds, target.reshape(-1), indexes=indexes)
    ndcg = RetrievalNormalizedDCG(top_k=k)(preds, target.reshape(-1), indexes=indexes)
    return float(hr), float(ndcg)


@pytest.mark.parametrize("seed", [0, 1])
def test_hr_and_ndcg_equal_torchmetrics(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(400, 101)).astype(np.float32)
    scores[:, 0] += rng.uniform(0, 3, size=400).astype(np.float32)  # spread the positive's rank over 0..100
    hr, ndcg = _torchmetrics(scores, 10)
    assert 0.1 < hr < 0.95  # the fixture exercises hits and misses
    assert hit_rate_at_k(scores, 10) == pytest.approx(hr, abs=1e-6)
    assert ndcg_at_k(scores, 10) == pytest.approx(ndcg, abs=1e-5)


def test_hr_ndcg_negative_control() -> None:
    """A rank off by one (a plausible slip: 1-based rank in the gain) breaks the match with torchmetrics."""
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(300, 101)).astype(np.float32)
    scores[:, 0] += 2.0
    _, ndcg = _torchmetrics(scores, 10)
    r = positive_ranks(scores)
    off_by_one = float(np.where(r < 10, 1.0 / np.log2(r + 3.0), 0.0).mean())
    assert abs(off_by_one - ndcg) > 1e-2
    assert ndcg_at_k(scores, 10) == pytest.approx(ndcg, abs=1e-5)
