"""A log at rec/dlrmv4's full recipe passes the official checker's whole 6.1.0 ruleset (common, closed_common and
closed_dlrmv4.yaml), its keys taken from the full spec through the code a run logs them with: the workload's own
`mllog_hyperparameters()`, `suite.measure.mlperf_keys.hyperparameters` and `instruments.sample_counts`, assembled as
`suite.measure.instruments.Instruments.setup` assembles them. One key changed in the spec fails that key, named.

Two keys the rules fix are facts of the data, not of the spec: `train_samples` (2,290,835,423: the LISTEN anchors
of Yambda-5b's training windows, closed_dlrmv4.yaml line 10) and `eval_samples` (2,058,204, line 58) are counted
from the files that were read (`len(train_idx)`, `len(eval_idx)`), which are not here; the test gives the workload
index arrays of those lengths (zero-stride views, no memory) in place of the loaded data, and everything else (the
cross-feature count that makes max_sequence_length 4096 is the reader's CROSS_NAMES) as a run would have it."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.mllog_rules import failed_rules

from suite import registry
from suite.data.rec.yambda_cross import CROSS_NAMES
from suite.measure import mlperf_keys, op_dtypes
from suite.measure.instruments import sample_counts
from suite.measure.mllog import MLLogRecorder, check_benchmark
from suite.specload import load_spec
from suite.workloads.base import WorkloadBase
from suite.workloads.recsys import StreamingRecommendation

YAMBDA_5B_TRAIN, YAMBDA_5B_EVAL = 2_290_835_423, 2_058_204  # closed_dlrmv4.yaml lines 10 and 58


def _workload(spec) -> StreamingRecommendation:
    """The dlrmv4 workload over the full spec, its data replaced by what Yambda-5b's reader would hand it."""
    w = object.__new__(StreamingRecommendation)
    WorkloadBase.__init__(w, spec, SimpleNamespace(device=torch.device("cpu"), seed=1))
    w.data = SimpleNamespace(cross=dict.fromkeys(CROSS_NAMES))
    w.train_idx = np.broadcast_to(np.int64(0), (YAMBDA_5B_TRAIN,))
    w.eval_idx = np.broadcast_to(np.int64(0), (YAMBDA_5B_EVAL,))
    return w


def _log(spec, path: Path, auc: float = 0.76, first_step: int | None = None) -> Path:
    """init, the hyper-parameters and submission keys as Instruments.setup logs them, one evaluation at the
    spec's first evaluation step (or `first_step`), run_stop."""
    w = _workload(spec)
    rec = MLLogRecorder(spec.mlperf_benchmark)
    rec.init_start()
    own = dict(w.mllog_hyperparameters())
    clip = (spec.backends.get("torch") or {}).get("grad_clip")
    rec.hyperparameters(seed=1, global_batch_size=own.pop("global_batch_size", spec.data.batch_size),
                        optimizer=own.pop("opt_name", spec.optimizer.name), learning_rate=spec.optimizer.lr,
                        platform="8xH100", extra={"precision": spec.precision, "world_size": 8,
                                                  **mlperf_keys.hyperparameters(spec, w, clip), **own})
    dtypes = op_dtypes.op_dtypes("cuda", spec.precision)
    train, evals = sample_counts(w)
    batch = spec.data.batch_size
    rec.submission(org="Example Org", division="closed", train_samples=train, eval_samples=evals,
                   precision_by_class={c: op_dtypes.MLPERF_DTYPE[d.dtype] for c, d in dtypes.items()},
                   comm_precision="bfloat16", layout={"dp": 8}, micro_batch_size=batch // 8,
                   gradient_accumulation_steps=1, config_filename="rec/dlrmv4", cache_clear=False, staging_s=1.0)
    rec.init_stop()
    rec.run_start()
    step = first_step or spec.eval.first_step
    rec.eval_start(step, step * batch)
    rec.eval_stop(step, step * batch, "auc", {"auc": auc}, running=False)
    rec.run_stop("reached", step, step * batch)
    return rec.write(path)


def _spec(gbs: int, **over):
    """The full spec; at another batch the reference's linear lr (1e-6 x GBS/8192, rcps_dlrmv4.json) and the 0.1%
    cadence in steps (the reference's data_pct_to_global_steps), its first evaluation on that grid."""
    every = max(1, math.ceil(0.001 * YAMBDA_5B_TRAIN / gbs))
    first = math.ceil(math.floor((4480 * gbs + 135_331_840) / 3) / (every * gbs)) * every  # closed_dlrmv4.yaml:42
    base = {} if gbs == 8192 else {"data.batch_size": gbs, "optimizer.lr": 1e-6 * gbs / 8192,
                                   "eval.every_steps": every, "eval.first_step": first}
    return load_spec(registry.workload_files()["rec/dlrmv4"], {**base, **over})


@pytest.mark.parametrize("gbs", [8192, 16384, 32768])
def test_the_full_recipe_passes_the_official_rules(gbs: int, tmp_path: Path) -> None:
    spec = _spec(gbs)
    if gbs == 8192:  # the spec file's own values, unchanged
        assert (spec.eval.every_steps, spec.eval.first_step, spec.optimizer.lr) == (280, 7000, 1e-6)
    passed, messages = check_benchmark(_log(spec, tmp_path / "full.mllog"))
    assert passed, "\n".join(messages)


@pytest.mark.parametrize("over,key", [
    ({"optimizer.betas": [0.9, 0.999]}, "opt_adam_beta_1"),
    ({"optimizer.eps": 1e-6}, "opt_adam_epsilon"),
    ({"optimizer.weight_decay": 0.01}, "opt_weight_decay"),
    ({"data.max_history": 4086}, "max_sequence_length"),
    ({"schedule.warmup_steps": 20000}, "opt_learning_rate_warmup_steps"),
    ({"optimizer.lr": 2e-6}, "opt_base_learning_rate"),  # outside the band 0.5-1.5e-6 at GBS 8192
    ({"optimizer.name": "adam"}, "opt_sparse_name"),  # one Adam for the tables too
    ({"backends.torch.grad_clip": 0.5}, "opt_gradient_clip_norm"),
    ({"eval.every_steps": 300}, "eval_every_data_pct"),  # a coarser grid (1.07e-3 of the samples)
])
def test_one_key_changed_in_the_spec_fails_that_key(over: dict, key: str, tmp_path: Path) -> None:
    passed, messages = check_benchmark(_log(_spec(8192, **over), tmp_path / "bad.mllog"))
    assert not passed and failed_rules(messages) == {key}, "\n".join(messages)


def test_an_evaluation_one_grid_point_early_or_short_of_the_target_fails(tmp_path: Path) -> None:
    spec = _spec(8192)
    early = _log(spec, tmp_path / "early.mllog", first_step=spec.eval.first_step - spec.eval.every_steps)
    assert failed_rules(check_benchmark(early)[1]) == {"eval_accuracy"}
    short = _log(spec, tmp_path / "short.mllog", auc=0.74)
    assert failed_rules(check_benchmark(short)[1]) == {"eval_accuracy"}
