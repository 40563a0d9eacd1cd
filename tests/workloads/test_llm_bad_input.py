"""Bad input to the LLM workloads is refused before the clock starts (exit 2, no result written), naming the field
or file and what to do: heads that do not divide the width, KV heads that do not divide the heads, top-k above the
experts, an indexed dataset whose .idx does not describe its .bin."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.backend_util import env
from support.datafiles import write_c4_indexed

from suite import registry
from suite.spec import SpecError
from suite.specload import load_spec


def _run(tmp_path: Path, workload: str, *sets: str) -> subprocess.CompletedProcess:
    args = [a for s in sets for a in ("--set", s)]
    return subprocess.run([sys.executable, "-m", "suite.cli", "run", workload, "--variant", "tiny", "--threads", "1",
                           "--results", str(tmp_path / "results"), *args], capture_output=True, text=True, env=env(),
                          timeout=180)


@pytest.mark.parametrize(("workload", "setting", "says"), [
    ("nlp/topics_llama", "model.n_head=5", r"n_head \(5\) does not divide d_model \(32\): choose n_head dividing"),
    ("nlp/topics_llama", "model.n_kv_head=3", r"n_kv_head \(3\) does not divide n_head \(4\).*choose a divisor"),
    ("nlp/austen_moe", "model.moe.top_k=9", r"moe.top_k \(9\) is larger than moe.experts \(8\).*lower top_k"),
])
def test_an_impossible_shape_is_refused_naming_the_field(workload, setting, says):
    """At spec load, which `trainbench run` does before anything starts (it exits 2 with this message)."""
    key, value = setting.split("=")
    with pytest.raises(SpecError, match=says) as refused:
        load_spec(registry.workload_files()[workload], {key: int(value)}, variant="tiny")
    assert "model" in str(refused.value)


def test_the_cli_exits_2_on_an_impossible_shape_before_any_result(tmp_path):
    r = _run(tmp_path, "nlp/topics_llama", "model.n_kv_head=3")
    assert r.returncode == 2 and "n_kv_head (3) does not divide n_head (4)" in r.stderr, r.stdout + r.stderr
    assert "--set model.n_kv_head=3" in r.stderr
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.json"))


def test_an_idx_that_does_not_match_its_bin_is_refused_naming_both_files(tmp_path):
    data = write_c4_indexed(tmp_path / "c4", vocab=512)
    train = data / "c4-train.en_6_text_document"
    shutil.copy(data / "c4-validation-91205-samples.en_text_document.idx", f"{train}.idx")  # another run's index
    r = _run(tmp_path, "nlp/llama31_8b", f"data.path={data}")
    assert r.returncode == 2, r.stdout + r.stderr
    out = " ".join((r.stdout + r.stderr).split())  # the message may wrap
    assert f"{train}.idx does not match {train}.bin" in out and "same preprocessing run" in out, out
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.json"))
