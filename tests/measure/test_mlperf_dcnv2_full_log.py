"""rec/dlrm_dcnv2's full recipe against MLPerf v5.1's closed_dlrm_dcnv2.yaml (mlperf-logging's checker, ruleset
5.1.0, the benchmark's own rules through configured_checks: dlrm_dcnv2 is not in ruleset 6.1.0, so the common
6.1.0 rules a run is checked by are not these). The keys come from the full spec through the code a run logs them
with (the workload's `mllog_hyperparameters()`, suite/measure/mlperf_keys.py, instruments.sample_counts).

What cannot come from the spec: eval_samples (89,137,319, the first half of Criteo's day 23) is counted from the
files read, given here as an index of that length; and the rules' eval_accuracy CHECK wants `epoch_num` in its
metadata, which MLPerf 6.1's logs (and so our recorder, suite/measure/mllog.py) replace with samples_count: a
log from the recorder fails eval_accuracy on exactly that, one with epoch_num added passes."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from support.mllog_rules import closed_rules_check

from suite import registry
from suite.measure import mlperf_keys
from suite.measure.instruments import sample_counts
from suite.measure.mllog import MLLogRecorder
from suite.specload import load_spec
from suite.workloads.base import WorkloadBase
from suite.workloads.recsys import CriteoClickThrough

CRITEO_TRAIN, CRITEO_EVAL = 4_195_197_692, 89_137_319  # the reference README's days 0-22; the rules' eval_samples


def _check(log: Path) -> tuple[set[str], list[str]]:
    return closed_rules_check("closed_dlrm_dcnv2.yaml", log, ruleset="5.1.0")


def _log(spec, path: Path, epoch_num: bool) -> Path:
    w = object.__new__(CriteoClickThrough)
    WorkloadBase.__init__(w, spec, SimpleNamespace(device=torch.device("cpu"), seed=1))
    w.train_idx = np.broadcast_to(np.int64(0), (CRITEO_TRAIN,))
    w.eval_idx = np.broadcast_to(np.int64(0), (CRITEO_EVAL,))
    rec = MLLogRecorder("dlrm_dcnv2")
    rec.init_start()
    own = dict(w.mllog_hyperparameters())
    rec.hyperparameters(seed=1, global_batch_size=spec.data.batch_size,
                        optimizer=own.pop("opt_name", spec.optimizer.name), learning_rate=spec.optimizer.lr,
                        platform="8xH100", extra={**mlperf_keys.hyperparameters(spec, w, None), **own})
    rec.event("eval_samples", sample_counts(w)[1])
    step = spec.eval.every_steps * 14  # 0.7 epoch, inside the RCP's 0.65-0.75
    samples = step * spec.data.batch_size
    if epoch_num:  # as MLPerf v5.1's reference logs it
        rec.event("eval_accuracy", 0.8028, {"epoch_num": samples / CRITEO_TRAIN, "samples_count": samples})
    else:
        rec.eval_start(step, samples)
        rec.eval_stop(step, samples, "auc", {"auc": 0.8028}, running=False)
    return rec.write(path)


def _spec(**over):
    return load_spec(registry.workload_files()["rec/dlrm_dcnv2"], over)


def test_the_full_recipe_passes_the_v51_rules_but_for_epoch_num(tmp_path: Path) -> None:
    failed, other = _check(_log(_spec(), tmp_path / "epoch.mllog", epoch_num=True))
    assert not failed and not other, (failed, other)
    failed, other = _check(_log(_spec(), tmp_path / "ours.mllog", epoch_num=False))
    assert failed == {"eval_accuracy"} and not other, (failed, other)


@pytest.mark.parametrize("over,key", [
    ({"optimizer.eps": 1e-6}, "opt_adagrad_epsilon"),
    ({"optimizer.lr_decay": 0.1}, "opt_adagrad_learning_rate_decay"),
    ({"optimizer.initial_accumulator_value": 0.1}, "opt_adagrad_initial_accumulator_value"),
    ({"optimizer.weight_decay": 1e-5}, "opt_weight_decay"),
    ({"schedule.warmup_steps": 100}, "opt_learning_rate_warmup_steps"),
])
def test_one_key_changed_in_the_spec_fails_that_key(over: dict, key: str, tmp_path: Path) -> None:
    failed, other = _check(_log(_spec(**over), tmp_path / "bad.mllog", epoch_num=True))
    assert failed == {key} and not other, (failed, other)
