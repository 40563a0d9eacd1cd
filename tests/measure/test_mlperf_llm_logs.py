"""The MLPerf-named LLM recipes (nlp/llama31_8b, nlp/gpt_oss_20b) log MLPerf's benchmark name and every
hyper-parameter its rules read, and the official checker (mlperf-logging's compliance_checker, ruleset 6.1.0,
with the benchmark's own closed_<benchmark>.yaml) judges the logs of real runs:
- a run with the full spec's settings passes it (only the model's shape and vocabulary, the data, and when the run
  stops and evaluates are changed: none of them is a key the rules read);
- a tiny variant fails exactly the rules on the constants the variant changes, listed below."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from support.datafiles import write_c4_indexed, write_megatron_indexed
from support.mllog_rules import failed_rules

from suite import registry
from suite.harness import RunRequest, run
from suite.measure.mllog import check_benchmark, parse
from suite.spec import MLPERF_BENCHMARKS
from suite.specload import load_spec

CHECKER = Path(__import__("mlperf_logging.compliance_checker", fromlist=["x"]).__file__).parent
# the rules a tiny variant is allowed to fail: what it changes, and the target a tiny model does not reach
TINY_CHANGES = {"max_sequence_length", "max_steps", "opt_learning_rate_decay_steps", "eval_samples", "eval_accuracy"}




def test_the_benchmark_names_are_the_checkers():
    text = (CHECKER / "training_6.1.0" / "closed_common.yaml").read_text()
    listed = re.search(r"v\['value'\] in \[([^\]]*)\]", text).group(1)
    assert set(re.findall(r"'(\w+)'", listed)) == set(MLPERF_BENCHMARKS)
    files = registry.workload_files()
    assert load_spec(files["nlp/llama31_8b"]).mlperf_benchmark == "llama31_8b"
    assert load_spec(files["nlp/gpt2_124m"]).mlperf_benchmark is None  # not an MLPerf benchmark: logs its own name


def _run(spec, tmp_path: Path):
    result, path = run(RunRequest(spec=spec, threads=1, results_dir=tmp_path / "results", measure_peak=False,
                                  mlperf_org="Example Org", mlperf_division="closed"))
    assert result.status in ("reached", "budget"), result.error
    return result, path.parent / result.mllog


@pytest.mark.parametrize("name", ["nlp/llama31_8b", "nlp/gpt_oss_20b"])
def test_a_tiny_variant_fails_only_the_rules_on_what_it_changes(name, tmp_path):
    data = write_c4_indexed(tmp_path / "c4", vocab=512)
    spec = load_spec(registry.workload_files()[name], {"data.path": str(data)}, variant="tiny")
    _, log = _run(spec, tmp_path)
    events = {e["key"]: e["value"] for e in parse(log.read_text())}
    benchmark = name.split("/")[1]
    assert events["submission_benchmark"] == benchmark
    full = load_spec(registry.workload_files()[name])
    assert events["opt_adamw_beta_2"] == 0.95 and events["opt_adamw_epsilon"] == 1e-5  # the full spec's constants
    assert events["opt_learning_rate_decay_schedule"] == "cosine with linear warmup"
    assert events["opt_gradient_clip_norm"] == full.backends["torch"]["grad_clip"] == 1.0
    passed, messages = check_benchmark(log)
    assert not passed and failed_rules(messages) == TINY_CHANGES, "\n".join(messages)
    # the same log with one logged constant set to another value fails on that key too: the check is real
    bad = tmp_path / "bad.mllog"
    bad.write_text(log.read_text().replace('"key": "opt_adamw_weight_decay", "value": 0.1',
                                           '"key": "opt_adamw_weight_decay", "value": 0.01'))
    assert failed_rules(check_benchmark(bad)[1]) == TINY_CHANGES | {"opt_adamw_weight_decay"}


def write_full_length_c4(folder: Path, seq_len: int, windows: int, vocab: int) -> Path:
    """Enough tokens for `windows` validation windows and one batch of training windows of seq_len + 1."""
    rng = np.random.default_rng(0)
    for name, tokens in (("c4-train.en_6_text_document", 40 * (seq_len + 1)),
                         ("c4-validation-91205-samples.en_text_document", windows * seq_len + 1)):
        docs = np.array_split(rng.integers(0, vocab, tokens), max(1, tokens // 4096))
        write_megatron_indexed(folder / name, docs)
    return folder


@pytest.mark.slow  # one training step and one evaluation over 1024 sequences of 8192 tokens: ~1-5 min each on 2 busy cores
@pytest.mark.parametrize("name", ["nlp/llama31_8b", "nlp/gpt_oss_20b"])
def test_a_run_with_the_full_specs_settings_passes_the_official_checker(name, tmp_path):
    """Every value the benchmark's rules read is the full spec's: sequence 8192, batch, AdamW constants, schedule,
    1.2M max steps, 1024 evaluation sequences, the target. The model is one layer 8 wide (one head) over a 16-token
    vocabulary (so an untrained model's loss, ln 16 = 2.77, is below the target: this checks the log, not the
    model), the data is synthetic in the real format, and the run stops after one step and one evaluation."""
    full = load_spec(registry.workload_files()[name])
    data = write_full_length_c4(tmp_path / "c4", 8192, full.eval.subset, vocab=16)
    shape = {"model.n_layer": 1, "model.d_model": 8, "model.n_head": 1, "model.n_kv_head": 1, "model.head_dim": 8,
             "model.ffn_dim": 16, "model.vocab_size": 16, "data.vocab_size": 16, "data.path": str(data),
             "data.eval_batch_size": 16, "budget.max_steps": 1, "eval.every_steps": 1, "parallel": None,
             "precision": "fp32", "compile": False}
    if full.model.params().get("moe") is not None or "gpt_oss" in name:
        shape.update({"model.moe.experts": 4, "model.moe.top_k": 2, "model.moe.expert_ffn_dim": 8})
    spec = load_spec(registry.workload_files()[name], shape)
    result, log = _run(spec, tmp_path)
    assert result.status == "reached"
    passed, messages = check_benchmark(log)
    assert passed, "\n".join(messages)
    events = {e["key"]: e["value"] for e in parse(log.read_text())}
    assert events["max_sequence_length"] == 8192 and events["eval_samples"] == 1024 and events["max_steps"] == 1200000
