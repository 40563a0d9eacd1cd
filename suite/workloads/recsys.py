"""Recommendation tasks trained and evaluated in temporal windows, as MLPerf dlrmv4's streaming loop: the training
stream walks the earlier windows in time order (shuffled within a window, a new order each pass), and evaluation
scores the last window, strictly in the future of every training sample.

`sequential_recommendation` (HSTU): will the user rate the next item >= the positive rating, given the history;
reports AUC, and HR@10 / NDCG@10 of a positive next item ranked among sampled negatives.
`click_through` (DLRM-DCNv2): the same label from dense and categorical features of the interaction; reports AUC.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.data.base import DataMissing
from suite.measure.rec_metrics import hit_rate_at_k, ndcg_at_k, roc_auc
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import SequentialRecommendationChecks, WindowedChecks
from suite.workloads.contract import Batch, Context

EVAL_NEGATIVES = 100  # sampled items each positive is ranked against (HR@10 / NDCG@10)
DENSE_SPARSE = "suite.algorithms.dense_sparse:AdamRowWiseAdagrad"  # dlrmv4's Adam + RowWiseAdagrad
MLPERF_EVAL_FRACTION = 0.001  # closed_dlrmv4.yaml: eval_every_data_pct
RANKING_QUERIES = 1000  # positives of the evaluated window ranked (the first N in time)
# where each table's ids come from, for the message that refuses one out of range (check_ids)
SEQUENCE_ID_FIELDS = {
    "movielens_100k": {"user": "ml-100k.inter field 'user_id'", "item": "ml-100k.inter field 'item_id'",
                       "rating": "ml-100k.inter field 'rating'"},
    "yambda": {"user": "train_sessions.parquet field 'uid'",
               "item": "train_sessions.parquet field 'item_ids'",
               "rating": "fields 'event_type' and 'played_ratio_pct' (action bits)"}}
MOVIELENS_FEATURE_FIELDS = {
    "user": "ml-100k.inter field 'user_id'", "item": "ml-100k.inter field 'item_id'",
    "age": "ml-100k.user field 'age'", "gender": "ml-100k.user field 'gender'",
    "occupation": "ml-100k.user field 'occupation'", "zip3": "ml-100k.user field 'zip_code'",
    "year": "ml-100k.item field 'release_year'", "genres": "ml-100k.item field 'class'"}


def window_stream(train_idx: np.ndarray, window: np.ndarray, local_bs: int, rank: int, world: int,
                  seed: int) -> Iterator[np.ndarray]:
    """Endless passes over the training windows in time order, shuffled inside each window by (seed, pass);
    a step's global batch may straddle two windows. Rank r takes the r-th slice of each global batch."""
    global_bs = local_bs * world
    if len(train_idx) < global_bs:
        raise DataMissing(f"data.batch_size {global_bs} is larger than the training windows ({len(train_idx)} "
                          "interactions)")
    w = window[train_idx]
    bounds = np.flatnonzero(np.diff(w)) + 1
    pieces = np.split(train_idx, bounds)
    epoch = 0
    while True:
        rng = np.random.default_rng([seed, epoch])
        order = np.concatenate([rng.permutation(p) for p in pieces])
        for i in range(len(order) // global_bs):
            yield order[i * global_bs + rank * local_bs : i * global_bs + (rank + 1) * local_bs]
        epoch += 1


class _Windowed(WindowedChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.data = self.data_component.load(self.data_cfg)
        n_windows = getattr(self.data_cfg, "n_windows", None)  # Yambda's windows are days of its own split
        self.train_idx, eval_idx = self.data.split(n_windows)
        if len(self.train_idx) == 0:
            raise DataMissing(f"data {spec.data.name}: the training windows are empty")
        if spec.eval.subset:
            eval_idx = eval_idx[: spec.eval.subset]
        self.eval_idx = eval_idx
        labels = self.data.label[eval_idx]
        if labels.min() == labels.max():
            raise DataMissing(f"data {spec.data.name}: the evaluated window holds one label only (label "
                              f"{labels[0]:g}): AUC is undefined; raise data.limit or eval.subset")
        self.check_batch_fits(len(self.train_idx), "interactions")
        self.meta = self.model_meta()
        self.check_ids()

    def model_meta(self) -> dict[str, Any]:
        raise NotImplementedError

    def train_samples(self) -> int:
        """The MLLOG's train_samples and eval_samples (instruments.sample_counts reads no `eval_idx`)."""
        return int(len(self.train_idx))

    def eval_samples(self) -> int:
        return int(len(self.eval_idx))

    def features(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def id_columns(self) -> list[tuple[str, str, np.ndarray]]:
        """(table, the file and field its ids come from, the ids) for every table lookup the features make."""
        raise NotImplementedError

    def check_ids(self) -> None:
        """Every id the model will look up fits its table: an id past a table's rows is bad input, refused during
        the untimed init (exit 2) naming the file, the field, the table and its largest id, not an error mid-run."""
        card, source = self.meta["cardinality"], self.data.meta.get("source", self.spec.data.name)
        for table, where, ids in self.id_columns():
            rows = int(card[table])
            if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= rows):
                bad = int(ids.max()) if int(ids.max()) >= rows else int(ids.min())
                what = "the actions 'rating'" if table == "rating" else f"embedding table {table!r}"  # HSTU's
                raise DataMissing(f"{source}: {where}: id {bad} is out of range for {what} "  # ActionEncoder
                                  f"(ids 0..{rows - 1}, {rows} rows)")

    def build_model(self) -> nn.Module:
        return self.model_component.build(self.model_cfg, self.meta)

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        for idx in window_stream(self.train_idx, self.data.window, self.local_batch_size(world), rank, world,
                                 self.ctx.seed):
            yield self.features(idx)

    def batch_samples(self, batch: Batch) -> int:
        return int(batch["label"].shape[0])

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(model(batch).float(), batch["label"])

    def _scores(self, model: nn.Module, idx: np.ndarray, extra: dict[str, torch.Tensor] | None = None) -> np.ndarray:
        bs = self.spec.data.eval_batch_size or 4096
        out = []
        for i in range(0, len(idx), bs):
            b = self.features(idx[i : i + bs])
            if extra:
                b.update({k: v[i : i + bs] for k, v in extra.items()})
            out.append(model({k: v.to(self.device) for k, v in b.items()}).float().cpu())
        return torch.cat(out).numpy()

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        was_training = model.training
        model.eval()
        try:
            metrics = self.metrics(model)
        finally:
            model.train(was_training)
        return metrics

    def metrics(self, model: nn.Module) -> dict[str, float]:
        scores = self._scores(model, self.eval_idx)
        labels = self.data.label[self.eval_idx]
        loss = float(F.binary_cross_entropy_with_logits(torch.from_numpy(scores), torch.from_numpy(labels)))
        return {"auc": roc_auc(labels, scores), "loss": loss}

    def flops_per_sample(self) -> float:
        return float(self.model_component.flops_per_sample(self.model_cfg, self.meta))

    def bytes_per_sample(self) -> float:
        return float(self.model_component.bytes_per_sample(self.model_cfg, self.meta))


class SequentialRecommendation(SequentialRecommendationChecks, _Windowed):
    """HSTU over the user's history with the next item as the one candidate (dlrmv4's max_num_candidates = 1).
    The training loss is the reference's multitask loss for its one binary task: the mean binary cross-entropy times
    causal_multitask_weights 0.2 (multitask_module.py _compute_loss; configs.py get_hstu_configs); the evaluated
    `loss` stays the plain mean."""

    CAUSAL_MULTITASK_WEIGHTS = 0.2  # configs.py get_hstu_configs: causal_multitask_weights=0.2
    # configs.py contextual_feature_to_min_uih_length: {"user_id": 20} for MovieLens (its 20m / 13b / 18b sets and
    # 1m's user features alike); Yambda's are 0 (StreamingRecommendation)
    CONTEXTUAL_MIN_UIH_LENGTH: ClassVar[dict[str, int]] = {"user": 20}

    def model_meta(self) -> dict[str, Any]:
        return {"cardinality": self.data.cardinality, "max_history": self.data_cfg.max_history,
                "contextual_min_uih_length": dict(self.CONTEXTUAL_MIN_UIH_LENGTH)}

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        return super().loss(model, batch) * self.CAUSAL_MULTITASK_WEIGHTS

    def query_time(self, idx: np.ndarray, hist_item: np.ndarray, hist_time: np.ndarray) -> np.ndarray:
        """The candidate's query time: its history's last event's (movie_lens.py: item_query_time = max of the
        history's timestamps, 0 for an empty history)."""
        return hist_time[:, -1].copy()

    def id_columns(self) -> list[tuple[str, str, np.ndarray]]:
        d = self.data
        hist_item, hist_rating = (getattr(h, "values", h) for h in (d.hist_item, d.hist_rating))  # Yambda's: flat
        fields = SEQUENCE_ID_FIELDS.get(self.spec.data.name, {})
        return [("user", fields.get("user", "user ids"), d.user), ("item", fields.get("item", "item ids"), d.item),
                ("item", fields.get("item", "item ids") + " (history)", hist_item),
                ("rating", fields.get("rating", "ratings / actions") + " (history)", hist_rating)]

    def features(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        d = self.data
        hist_item, hist_time = d.hist_item[idx], d.hist_time[idx]
        return {"user": torch.from_numpy(d.user[idx]), "hist_item": torch.from_numpy(hist_item),
                "hist_rating": torch.from_numpy(d.hist_rating[idx]), "hist_time": torch.from_numpy(hist_time),
                "query_time": torch.from_numpy(self.query_time(idx, hist_item, hist_time)),
                "cand_item": torch.from_numpy(d.item[idx]), "label": torch.from_numpy(d.label[idx])}

    def candidate_features(self, cands: np.ndarray) -> dict[str, torch.Tensor]:
        """The model's candidate inputs for ranked items [N, C]: the item ids (and, on Yambda, their side ids)."""
        out = {"cand_item": torch.from_numpy(cands)}
        out.update({f"cand_{n}": torch.from_numpy(m[cands]) for n, (m, _, _) in getattr(self.data, "side",
                                                                                          {}).items()})
        return out

    def metrics(self, model: nn.Module) -> dict[str, float]:
        out = super().metrics(model)
        positives = self.eval_idx[self.data.label[self.eval_idx] > 0][:RANKING_QUERIES]
        rng = np.random.default_rng(0)  # the same negatives for every run and every evaluation
        negatives = rng.integers(1, self.data.n_items + 1, size=(len(positives), EVAL_NEGATIVES))
        clash = negatives == self.data.item[positives][:, None]
        negatives[clash] = negatives[clash] % self.data.n_items + 1
        cands = np.concatenate([self.data.item[positives][:, None], negatives], axis=1)
        scores = self._scores(model, positives, self.candidate_features(cands))
        out.update({"hr@10": hit_rate_at_k(scores, 10), "ndcg@10": ndcg_at_k(scores, 10)})
        return out


class StreamingRecommendation(SequentialRecommendation):
    """MLPerf dlrmv4: HSTU over the user's Yambda history, the listen-plus bit of the next listen as the label; logs
    the keys closed_dlrmv4.yaml reads, each from what runs (the spec, the data that was read)."""

    def model_meta(self) -> dict[str, Any]:
        """The reference's eleven tables (configs.py, yambda-5b): user, item, the item's artist and album,
        the seven hashed crosses as contextual tokens."""
        return {**super().model_meta(), "item_side": list(self.data.side), "contextual": list(self.data.cross),
                "action_weights": [1, 2, 4],  # configs.py; the reader's LP_BIT, LIKE_BIT, SKIP_BIT
                "contextual_min_uih_length": {}}  # configs.py yambda-5b: 0 for uid and every cross

    def query_time(self, idx: np.ndarray, hist_item: np.ndarray, hist_time: np.ndarray) -> np.ndarray:
        """datasets/yambda.py: the history's last event's timestamp, the anchor's own for an empty history."""
        return np.where(hist_item[:, -1] > 0, hist_time[:, -1], self.data.timestamp[idx])

    def features(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        out = super().features(idx)
        for name, (_, anchor_ids, hist) in self.data.side.items():
            out[f"cand_{name}"], out[f"hist_{name}"] = torch.from_numpy(anchor_ids[idx]), torch.from_numpy(hist[idx])
        out.update({f"ctx:{n}": torch.from_numpy(ids[idx]) for n, ids in self.data.cross.items()})
        return out

    def id_columns(self) -> list[tuple[str, str, np.ndarray]]:
        out = super().id_columns()
        for name, (_, anchor_ids, hist) in self.data.side.items():
            where = f"{name}_item_mapping.parquet field '{name}_id'"
            out += [(name, where, anchor_ids), (name, where + " (history)", hist.values)]
        return out + [(n, f"cross feature {n!r} (hashed)", ids) for n, ids in self.data.cross.items()]

    def mllog_hyperparameters(self) -> dict[str, Any]:
        spec, opt = self.spec, self.spec.optimizer
        beta_1, beta_2 = opt.params().get("betas", (0.9, 0.999))  # torch.optim.Adam's defaults when silent
        clip = (spec.backends.get("torch") or {}).get("grad_clip")
        pair = opt.name == DENSE_SPARSE
        dense_name = "Adam" if pair or opt.name == "adam" else opt.name  # MLPerf's spelling of torch.optim.Adam
        out: dict[str, Any] = {
            "opt_name": dense_name,
            # contextual tokens (user, crosses) + history + one candidate
            "max_sequence_length": 1 + len(self.data.cross) + int(self.data_cfg.max_history) + 1,
            "opt_adam_beta_1": float(beta_1), "opt_adam_beta_2": float(beta_2),
            "opt_adam_epsilon": float(opt.params().get("eps", 1e-8)), "opt_weight_decay": float(opt.weight_decay),
            # the tables' optimizer: row-wise Adagrad under the pair (suite/algorithms/dense_sparse.py), else the
            # spec's one optimizer trains them too, and the log says so
            "opt_sparse_name": "RowWiseAdagrad" if pair else dense_name, "opt_sparse_base_learning_rate": opt.lr,
            "opt_learning_rate_warmup_start_lr": 0.0,  # suite/algorithms/schedules.py: a linear ramp (step+1)/warmup
            "eval_every_data_pct": self.eval_every_data_pct()}
        if clip:
            out["opt_gradient_clip_norm"] = float(clip)
        return out

    def eval_every_data_pct(self) -> float:
        """The reference's cadence is a fraction of the training samples, turned into steps once, rounding up
        (data_pct_to_global_steps): MLPerf's 0.1% when eval.every_steps is that fraction's step count, else the
        fraction eval.every_steps really is."""
        steps, batch, n = self.spec.eval.every_steps, self.spec.data.batch_size, self.train_samples()
        if max(1, math.ceil(MLPERF_EVAL_FRACTION * n / batch)) == steps:
            return MLPERF_EVAL_FRACTION
        return steps * batch / n

    def train_samples(self) -> int:
        return int(len(self.train_idx))

    def eval_samples(self) -> int:
        return int(len(self.eval_idx))


class ClickThrough(_Windowed):
    """DCNv2 over per-interaction features: dense counts and rates known before the interaction, one categorical
    id per user / item attribute, the genres as a multi-hot bag."""

    SPARSE = ("user", "item", "age", "gender", "occupation", "zip3", "year")
    N_DENSE = 4

    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)

    def model_meta(self) -> dict[str, Any]:
        d = self.data
        self.dense = self._dense_features()
        self.sparse = np.stack([d.user, d.item] + [d.user_features[n][d.user] for n in ("age", "gender",
                                "occupation", "zip3")] + [d.item_features["year"][d.item]], axis=1)
        self.genres = d.item_features["genres"][d.item]
        return {"cardinality": d.cardinality, "sparse_features": list(self.SPARSE), "multi_features": ["genres"],
                "n_dense": self.N_DENSE, "multi_mean_ids": {"genres": float((self.genres > 0).sum(1).mean())}}

    def _dense_features(self) -> np.ndarray:
        """Known before the interaction: the history's length and mean rating, the item's and the user's count
        of earlier interactions (log-scaled)."""
        d = self.data
        hist_len = (d.hist_item > 0).sum(1)
        mean_rating = np.where(hist_len > 0, d.hist_rating.sum(1) / np.maximum(hist_len, 1), 0.0)
        item_prior = _prior_counts(d.item)
        user_prior = _prior_counts(d.user)
        return np.stack([hist_len / d.hist_item.shape[1], mean_rating / 5.0, np.log1p(item_prior) / 7.0,
                         np.log1p(user_prior) / 7.0], axis=1).astype(np.float32)

    def id_columns(self) -> list[tuple[str, str, np.ndarray]]:
        out = [(name, MOVIELENS_FEATURE_FIELDS[name], self.sparse[:, j]) for j, name in enumerate(self.SPARSE)]
        return out + [("genres", MOVIELENS_FEATURE_FIELDS["genres"], self.genres)]

    def features(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        return {"dense": torch.from_numpy(self.dense[idx]), "sparse": torch.from_numpy(self.sparse[idx]),
                "multi:genres": torch.from_numpy(self.genres[idx]), "label": torch.from_numpy(self.data.label[idx])}


class CriteoClickThrough(_Windowed):
    """MLPerf dlrm_dcnv2 on Criteo's preprocessed days: 13 dense features and 26 categorical ones (multi-hot where
    the reference's multi_hot_sizes say so: one table row for a 1-hot feature, the mean of the present rows for the
    others; the reference sums them), the click as the label; days in order, validation on the held-out day."""

    def model_meta(self) -> dict[str, Any]:
        d = self.data
        names = [f"c{j}" for j in range(len(d.sparse))]
        self.one_hot = [j for j, k in enumerate(d.multi_hot_sizes) if k == 1]
        self.multi_hot = [j for j, k in enumerate(d.multi_hot_sizes) if k > 1]
        return {"cardinality": d.cardinality, "sparse_features": [names[j] for j in self.one_hot],
                "multi_features": [names[j] for j in self.multi_hot], "n_dense": int(d.dense.shape[1]),
                "multi_mean_ids": {names[j]: float(d.multi_hot_sizes[j]) for j in self.multi_hot}}

    def id_columns(self) -> list[tuple[str, str, np.ndarray]]:
        return [(f"c{j}", f"day_*_sparse_multi_hot.npz key {str(j)!r}", ids) for j, ids in enumerate(self.data.sparse)]

    def features(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        d = self.data
        out = {"dense": torch.from_numpy(d.dense[idx]),
               "sparse": torch.from_numpy(np.stack([d.sparse[j][idx, 0] for j in self.one_hot], axis=1)),
               "label": torch.from_numpy(d.label[idx])}
        out.update({f"multi:c{j}": torch.from_numpy(d.sparse[j][idx]) for j in self.multi_hot})
        return out

    def mllog_hyperparameters(self) -> dict[str, Any]:
        """The optimizer keys MLPerf v5.1's closed_dlrm_dcnv2.yaml reads (ruleset 5.1.0), torch.optim.Adagrad's
        settings under the reference's names; none for another optimizer. Decay start and steps are 0 for a
        constant schedule (a decaying one's come from suite/measure/mlperf_keys.py)."""
        opt = self.spec.optimizer
        if opt.name not in ("torch.optim:Adagrad", "adagrad"):
            return {}
        p = opt.params()
        out: dict[str, Any] = {
            "opt_name": "adagrad", "opt_adagrad_learning_rate_decay": float(p.get("lr_decay", 0.0)),
            "opt_adagrad_initial_accumulator_value": float(p.get("initial_accumulator_value", 0.0)),
            "opt_adagrad_epsilon": float(p.get("eps", 1e-10)),  # torch.optim.Adagrad's default when silent
            "opt_weight_decay": float(opt.weight_decay)}
        if self.spec.schedule.name == "constant":
            out.update(opt_learning_rate_decay_start_step=0, opt_learning_rate_decay_steps=0)
        return out


def _prior_counts(ids: np.ndarray) -> np.ndarray:
    """For each position (time order), how many earlier positions hold the same id."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
    out = np.empty(len(ids), dtype=np.int64)
    out[order] = np.arange(len(ids)) - run_start
    return out
