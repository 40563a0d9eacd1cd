"""rec/dlrmv4 logs MLPerf's benchmark name and every key closed_dlrmv4.yaml reads, and the official checker
(mlperf-logging's compliance_checker, ruleset 6.1.0, closed_dlrmv4.yaml) judges the log of a real tiny run on
generated Yambda files: it fails exactly the rules on what the tiny variant changes or cannot have, listed below;
one logged constant set to another value fails on that key too (the check is real)."""

from __future__ import annotations

from pathlib import Path

from support.mllog_rules import failed_rules

from suite import registry
from suite.data.rec import yambda_fixture
from suite.harness import RunRequest, run
from suite.measure.mllog import check_benchmark, parse
from suite.specload import load_spec

# what the tiny variant changes (sequence, lr and warm-up at batch 32), and what generated files cannot have (the
# 2,290,835,423 training and 2,058,204 evaluation samples of Yambda-5b, hence also the 0.1% cadence and the fixed
# first evaluation at 57,344,000 samples)
TINY_FAILS = {"max_sequence_length", "opt_base_learning_rate", "opt_learning_rate_warmup_steps", "train_samples",
              "eval_samples", "eval_every_data_pct", "eval_accuracy"}


def test_the_tiny_variant_fails_exactly_the_rules_it_changes(tmp_path: Path) -> None:
    data = yambda_fixture.write(tmp_path / "yambda")
    spec = load_spec(registry.workload_files()["rec/dlrmv4"], {"data.path": str(data)}, variant="tiny")
    result, path = run(RunRequest(spec=spec, threads=1, results_dir=tmp_path / "results", measure_peak=False,
                                  mlperf_org="Example Org", mlperf_division="closed"))
    assert result.status in ("reached", "budget"), result.error
    log = path.parent / result.mllog
    events = {e["key"]: e["value"] for e in parse(log.read_text())}
    assert events["submission_benchmark"] == "dlrmv4"
    # the full spec's constants, kept by the variant, are what the rules fix
    assert (events["opt_name"], events["opt_adam_beta_1"], events["opt_adam_beta_2"], events["opt_adam_epsilon"],
            events["opt_weight_decay"], events["opt_gradient_clip_norm"]) == ("Adam", 0.95, 0.999, 1e-8, 0.0, 1.0)
    assert events["opt_sparse_name"] == "RowWiseAdagrad"  # suite/algorithms/dense_sparse.py ran the tables
    assert events["opt_sparse_base_learning_rate"] == events["opt_base_learning_rate"] == 0.001
    assert events["max_sequence_length"] == 8 + 8 + 1 and events["global_batch_size"] == 32
    passed, messages = check_benchmark(log)
    assert not passed and failed_rules(messages) == TINY_FAILS, "\n".join(messages)
    bad = tmp_path / "bad.mllog"
    bad.write_text(log.read_text().replace('"key": "opt_adam_beta_1", "value": 0.95',
                                           '"key": "opt_adam_beta_1", "value": 0.9'))
    assert failed_rules(check_benchmark(bad)[1]) == TINY_FAILS | {"opt_adam_beta_1"}
    adam = tmp_path / "adam.mllog"  # the tables trained with Adam would be refused
    adam.write_text(log.read_text().replace('"value": "RowWiseAdagrad"', '"value": "Adam"'))
    assert failed_rules(check_benchmark(adam)[1]) == TINY_FAILS | {"opt_sparse_name"}


def test_no_evaluation_before_the_first_step_then_the_same_grid(tmp_path: Path) -> None:
    """closed_dlrmv4.yaml's FIRST_CHECK fixes the first evaluation (step 7000 at batch 8192: the full spec's
    eval.first_step); after it the 0.1% grid goes on. Here: every 2 steps from step 6 of 10."""
    full = load_spec(registry.workload_files()["rec/dlrmv4"])
    assert full.eval.first_step * full.data.batch_size == 57_344_000 and full.eval.first_step % full.eval.every_steps == 0
    data = yambda_fixture.write(tmp_path / "yambda")
    spec = load_spec(registry.workload_files()["rec/dlrmv4"], {"data.path": str(data), "eval.every_steps": 2,
                                                               "eval.first_step": 6, "budget.max_steps": 10},
                     variant="tiny")
    result, path = run(RunRequest(spec=spec, threads=1, results_dir=tmp_path / "results", measure_peak=False))
    assert [p.step for p in result.eval_curve] == [6, 8, 10]
    samples = [e["metadata"]["samples_count"] for e in parse((path.parent / result.mllog).read_text())
               if e["key"] == "eval_accuracy"]
    assert samples == [6 * 32, 8 * 32, 10 * 32]
