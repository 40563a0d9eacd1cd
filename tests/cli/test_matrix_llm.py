"""`trainbench list --matrix` for the LLM workloads of issue 30: every backend either runs each one or says why
not, in the words of its own `supports` (the table's reason lines and `--json`)."""

from __future__ import annotations

import json
import subprocess
import sys

from support.backend_util import env

from suite import registry
from suite.backends.matrix import unsupported_reason
from suite.specload import load_spec

LLM = ("nlp/topics_llama", "nlp/austen_llama", "nlp/austen_moe", "nlp/llama31_8b", "nlp/gpt_oss_20b",
       "nlp/deepseekv3_671b")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "suite.cli", "list", "--matrix", *args], capture_output=True,
                          text=True, env=env(), timeout=120)


def test_matrix_json_says_which_backends_run_each_llm_workload_and_why_not():
    r = _cli("--json")
    assert r.returncode == 0, r.stderr
    grid = json.loads(r.stdout)
    for name in LLM:
        spec = load_spec(registry.workload_files()[name])
        for backend, cell in grid[name].items():
            assert cell["reason"] == unsupported_reason(backend, spec)  # the backend's own words
            assert cell["supported"] is (cell["reason"] is None)
    assert grid["nlp/topics_llama"]["torch"]["supported"] and grid["nlp/austen_moe"]["deepspeed"]["supported"]
    assert grid["nlp/austen_llama"]["megatron"]["supported"]  # Megatron's GPTModel built from the Llama config
    assert "attention_bias" not in (grid["nlp/gpt_oss_20b"]["megatron"]["reason"] or "")  # mapped: add_bias_linear
    # the full specs name fsdp=8 + full checkpointing (what fits 8 x H100): the torch backend checkpoints the
    # Llama's layers; DeepSpeed says which field to change
    assert grid["nlp/llama31_8b"]["torch"]["supported"] and grid["nlp/gpt_oss_20b"]["torch"]["supported"]
    # fsdp=8 is ZeRO-3 over 8 ranks (suite/backends/translate.py), and Megatron's distributed optimizer
    assert grid["nlp/gpt_oss_20b"]["deepspeed"]["supported"] and grid["nlp/llama31_8b"]["deepspeed"]["supported"]
    assert grid["nlp/llama31_8b"]["megatron"]["supported"]
    # a refused cell says which kind of no (suite/backends/limits.py)
    assert grid["nlp/deepseekv3_671b"]["deepspeed"]["limit"]["kind"] == "engine limit"
    # its reference layout {pp: 4, ep: 64, ac: full}: the Llama pipeline checkpoints each stage's layers (issue 45)
    assert grid["nlp/deepseekv3_671b"]["torch"]["supported"] and "limit" not in grid["nlp/deepseekv3_671b"]["torch"]
    assert grid["nlp/gpt_oss_20b"]["megatron"]["supported"]  # attention biases mapped (issue 45, point 3)
    assert "limit" not in grid["nlp/llama31_8b"]["megatron"]
    assert grid["nlp/deepseekv3_671b"]["npu"]["reason"] == grid["nlp/deepseekv3_671b"]["torch"]["reason"]  # one loop


def test_matrix_table_prints_the_reason_of_every_refused_pair():
    r = _cli("--tier", "full", "--why")  # the reasons on --why (issue 49: the plain table ends with a summary)
    assert r.returncode == 0, r.stderr
    assert "nlp/llama31_8b x megatron:" not in r.stdout and "nlp/llama31_8b x deepspeed:" not in r.stdout
    assert "nlp/deepseekv3_671b x deepspeed: parallel.tp/pp: " in r.stdout  # its pipeline engine's PipelineModule
    assert "nlp/gpt_oss_20b x torch:" not in r.stdout  # supported (only tp/pp probes are refused)
    assert "nlp/topics_llama" not in r.stdout  # --tier full
