"""rl/qwen35_397b_grpo (MLPerf Training 6.1): the full recipe's values checked by the official checker's
closed_qwen35_397b_grpo.yaml and its RCP file's hyperparameters; the tiny variant's log fails exactly the keys the
rules fix; the R2E-Gym task files read in NeMo Gym's row format (rows generated here as NVIDIA NeMo-RL's
tools/create_r2e_gym_easy_subset_jsonl.py writes them), a malformed row refused naming file, line and field; the
task-container contract; Qwen3.5-397B-A17B's parameter counts against transformers' implementation."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support.mllog_rules import closed_rules_check

from suite import harness
from suite.data.base import DataMissing
from suite.data.rl import r2e_gym
from suite.measure.mllog import MLLogRecorder
from suite.specload import load_spec
from suite.workloads.agentic.task import mllog_keys

GRPO_RULES = "closed_qwen35_397b_grpo.yaml"  # MLPerf 6.1's GRPO rules

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "workloads" / "rl" / "qwen35_397b_grpo.yaml"


def _rcps() -> dict:
    from mlperf_logging import rcp_checker

    return json.loads((Path(rcp_checker.__file__).parent / "training_6.1.0" / "rcps_qwen35_397b_grpo.json").read_text())


def _log(spec, path: Path, accuracy: float, samples: int) -> Path:
    """The keys a run of `spec` logs (the workload's own GRPO keys, the harness's optimizer name, learning rate and
    eval samples) and one evaluation at `samples`."""
    rec = MLLogRecorder("qwen35_397b_grpo")
    rec.init_start()
    keys = mllog_keys(spec)
    rec.hyperparameters(seed=1, global_batch_size=keys.pop("global_batch_size"), optimizer=spec.optimizer.name,
                        learning_rate=spec.optimizer.lr, platform="cpu", extra=keys)
    rec.event("eval_samples", spec.data.eval_tasks)
    rec.event("eval_accuracy", accuracy, {"samples_count": samples, "epoch_num": samples})
    return rec.write(path)


@pytest.mark.parametrize("gbs", [256, 512, 1024])
def test_the_full_recipe_at_each_rcp_batch_passes_the_official_rules(gbs, tmp_path):
    """The spec at GBS 256; at 512 and 1024 with the RCP file's learning rate and clip (the yaml's formulas)."""
    ref = _rcps()[f"qwen35_397b_grpo_ref_{gbs}"]["Hyperparams"]
    over = {} if gbs == 256 else {"data.batch_size": ref["num_prompts_per_step"],
                                  "optimizer.lr": ref["opt_base_learning_rate"],
                                  "backends.torch.grad_clip": ref["opt_gradient_clip_norm"]}
    spec = load_spec(SPEC, over)
    assert spec.optimizer.lr == pytest.approx(1e-6 * math.sqrt(gbs / 256), abs=1e-15)
    assert spec.backends["torch"]["grad_clip"] == pytest.approx(2 / math.sqrt(gbs), abs=1e-10)
    first = gbs * math.ceil(2.5 + 3840 / gbs)  # the yaml's validation_start_samples
    failed, other = closed_rules_check(GRPO_RULES, _log(spec, tmp_path / "full.mllog", 0.70, first))
    assert not other and not failed, (failed, other)
    # negative controls: the first evaluation one step early, or (below) GBS 256's learning rate, fails
    failed, _ = closed_rules_check(GRPO_RULES, _log(spec, tmp_path / "early.mllog", 0.70, first - gbs))
    assert failed == {"eval_accuracy"}
    if gbs != 256:
        failed, _ = closed_rules_check(GRPO_RULES, _log(load_spec(SPEC, {**over, "optimizer.lr": 1e-6}), tmp_path / "lr.mllog",
                                          0.7, first))
        assert failed == {"opt_base_learning_rate"}


def test_the_full_spec_maps_the_references_values():
    spec = load_spec(SPEC)
    keys = mllog_keys(spec)
    assert keys["global_batch_size"] == 256 == keys["num_prompts_per_step"] * keys["num_generations_per_prompt"]
    assert keys["max_sequence_length"] == 65536 and spec.data.eval_tasks == 251 and spec.target.value == 0.69
    assert spec.grpo["rollout_mode"] == "async" and spec.grpo["staleness"] == 1 and spec.data.pass_k == 4
    assert spec.mlperf_benchmark == "qwen35_397b_grpo" and spec.tiers == {"full"}
    assert spec.data.train_file == r2e_gym.TRAIN_FILE and spec.data.val_file == r2e_gym.VAL_FILE


def test_the_tiny_variant_fails_exactly_the_keys_the_rules_fix(tmp_path):
    """A real CPU run of the variant through the harness: every key the rules name is logged once; the failures
    are the values that pin the 397B benchmark (65,536 tokens, 251 tasks, G = 16, the LR and clip of its batch,
    the evaluation cadence of its batch) and nothing else."""
    spec = load_spec(SPEC, {}, "tiny")
    result, path = harness.run(harness.RunRequest(spec=spec, results_dir=tmp_path, threads=1, measure_peak=False))
    assert result.status == "budget", result.error
    assert result.phases["rollout_mode"] == "async" and result.phases["staleness"] == 1
    failed, other = closed_rules_check(GRPO_RULES, path.with_suffix(".mllog"))
    assert not other, other
    assert failed == {"max_sequence_length", "eval_samples", "num_generations_per_prompt", "opt_base_learning_rate",
                      "opt_gradient_clip_norm", "eval_accuracy"}, failed


# ---- the task files --------------------------------------------------------------------------------------------

def _row(i: int, split: str, sif: str = "/inputs/nemo_gym/sif") -> dict:
    """One row as the reference's converter writes it (NeMo Gym's responses_create_params + agent_ref)."""
    commit = f"{i:040x}"
    iid = f"pandas-dev__pandas-{commit}"
    inst = {"FAIL_TO_PASS": [], "PASS_TO_PASS": [], "created_at": "2020-01-01", "hints_text": "", "version": "",
            "instance_id": iid, "base_commit": f"{i + 1:040x}", "repo": "pandas-dev/pandas",
            "problem_statement": f"issue {i}", "repo_name": "pandas", "docker_image": f"x/pandas_final:{commit}",
            "commit_hash": commit, "expected_output_json": json.dumps({"test_a": "PASSED"}),
            "container_formatter": f"{sif}/x_pandas_final_{commit}.sif", "container_id": i,
            "dataset_name": "R2E-Gym/R2E-Gym-Subset", "split": split}
    meta = {"instance_id": iid, "base_commit": inst["base_commit"], "dataset_name": "R2E-Gym/R2E-Gym-Subset",
            "split": split, "problem_statement": f"issue {i}", "hints_text": "", "version": "",
            "created_at": "2020-01-01", "instance_dict": json.dumps(inst), "repo": "pandas-dev/pandas"}
    return {"responses_create_params": {"input": [], "metadata": meta, "model": "default", "temperature": 1.0,
                                        "top_p": 1.0},
            "agent_ref": {"type": "responses_api_agents", "name": "swe_agents_train"}}


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_rows_read_in_file_order_with_their_fields(tmp_path):
    order = [5, 2, 9, 1]  # a curriculum's order, not sorted
    tasks = r2e_gym.read_tasks(_write(tmp_path / "t.jsonl", [_row(i, "train") for i in order]))
    assert [int(t.instance_id.rsplit("-", 1)[1], 16) for t in tasks] == order
    t = tasks[0]
    assert t.repo == "pandas-dev/pandas" and t.problem_statement == "issue 5" and t.line == 1
    assert t.expected_tests == {"test_a": "PASSED"} and t.container.endswith(".sif")


def _broken(kind: str) -> str | dict:
    row = _row(3, "train")
    meta = row["responses_create_params"]["metadata"]
    if kind == "json":
        return '{"responses_create_params": '
    if kind == "metadata":
        del row["responses_create_params"]["metadata"]
    elif kind == "instance_dict":
        meta["instance_dict"] = "{not json"
    elif kind == "container":
        inst = json.loads(meta["instance_dict"])
        del inst["container_formatter"]
        meta["instance_dict"] = json.dumps(inst)
    elif kind == "problem":
        del meta["problem_statement"]
    return row


@pytest.mark.parametrize("kind,message", [
    ("json", r"t\.jsonl:2: not a JSON object"),
    ("metadata", r"t\.jsonl:2: responses_create_params: missing field 'metadata'"),
    ("instance_dict", r"t\.jsonl:2: responses_create_params\.metadata\.instance_dict is not a JSON object"),
    ("container", r"t\.jsonl:2: responses_create_params\.metadata\.instance_dict: missing field "
                  r"'container_formatter'"),
    ("problem", r"t\.jsonl:2: responses_create_params\.metadata: missing field 'problem_statement'"),
])
def test_a_malformed_row_is_refused_naming_file_line_and_field(tmp_path, kind, message):
    path = _write(tmp_path / "t.jsonl", [_row(1, "train"), _broken(kind)])
    with pytest.raises(r2e_gym.DataFormatError, match=message):
        r2e_gym.read_tasks(path)


def _folder(tmp_path: Path, train: list, val: list) -> Path:
    _write(tmp_path / r2e_gym.TRAIN_FILE, train)
    _write(tmp_path / r2e_gym.VAL_FILE, val)
    return tmp_path


def test_load_checks_counts_splits_images_and_the_runtime(tmp_path, monkeypatch):
    folder = _folder(tmp_path, [_row(i, "train") for i in range(3)], [_row(i, "val") for i in range(10, 12)])
    cfg = r2e_gym.Config(path=str(folder), train_tasks=3, eval_tasks=2)
    with pytest.raises(DataMissing, match="sif_dir is not set"):
        r2e_gym.load(cfg)
    with pytest.raises(r2e_gym.DataFormatError, match="3 tasks, data.train_tasks is 685"):
        r2e_gym.load(cfg.model_copy(update={"train_tasks": 685}))
    sif = tmp_path / "sif"
    (sif / "r2egym").mkdir(parents=True)
    tasks = r2e_gym.read_tasks(folder / r2e_gym.TRAIN_FILE) + r2e_gym.read_tasks(folder / r2e_gym.VAL_FILE)
    for n, t in enumerate(tasks):  # both layouts the reference accepts
        (sif / ("r2egym" if n % 2 else "") / f"{t.instance_id}.sif").write_bytes(b"")
    missing = sif / f"{tasks[0].instance_id}.sif"
    missing.unlink()
    with_sif = cfg.model_copy(update={"sif_dir": str(sif)})
    with pytest.raises(DataMissing, match=f"1 task images missing under .*{tasks[0].instance_id}.sif"):
        r2e_gym.load(with_sif)
    missing.write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(DataMissing, match="neither `apptainer` nor `singularity` is on PATH"):
        r2e_gym.load(with_sif)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apptainer").write_text("#!/bin/sh\n")
    (fake / "apptainer").chmod(0o755)
    monkeypatch.setenv("PATH", str(fake))
    assert r2e_gym.container_runtime()[0] == str(fake / "apptainer")
    with pytest.raises(DataMissing, match="agent environment .* is not implemented"):
        r2e_gym.load(with_sif)
    _write(folder / r2e_gym.VAL_FILE, [_row(1, "val"), _row(11, "val")])  # a training task held out too
    with pytest.raises(r2e_gym.DataFormatError, match="1 tasks also in"):
        r2e_gym.load(with_sif)


def test_the_cli_refuses_a_malformed_row_before_the_run_with_exit_2(tmp_path):
    folder = _folder(tmp_path, [_row(1, "train"), _broken("instance_dict")], [_row(9, "val")])
    proc = subprocess.run([sys.executable, "-m", "suite.cli", "run", str(SPEC), "--set", f"data.path={folder}",
                           "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{r2e_gym.TRAIN_FILE}:2" in proc.stdout + proc.stderr
    assert "instance_dict" in proc.stdout + proc.stderr
    assert not list((tmp_path / "results").rglob("*.json"))  # nothing recorded


# ---- the model -------------------------------------------------------------------------------------------------

def _hf_count(cfg: dict) -> int:
    from transformers.models.qwen3_5_moe import configuration_qwen3_5_moe as c
    from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m

    fields = {k: v for k, v in cfg.items() if k != "full_attention_interval"}
    config = c.Qwen3_5MoeTextConfig(**fields, full_attention_interval=cfg["full_attention_interval"])
    with torch.device("meta"):
        model = m.Qwen3_5MoeForCausalLM(config)
    return sum(p.numel() for p in model.parameters())


def test_qwen35_counts_equal_transformers_and_the_published_397b_17b():
    """transformers 5.10's Qwen3_5MoeForCausalLM (built on the meta device) holds exactly the counted parameters,
    at the reference's shape and a tiny one; the shape gives the model card's 397B total, 17B active."""
    from suite.models.qwen35 import model as qwen35

    tiny = {**qwen35.QWEN35_397B, "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 4,
            "num_attention_heads": 4, "head_dim": 8, "linear_num_value_heads": 4, "linear_num_key_heads": 2,
            "linear_key_head_dim": 8, "linear_value_head_dim": 8, "num_experts": 6, "num_experts_per_tok": 2,
            "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24}
    assert qwen35.param_count(tiny) == _hf_count(tiny)
    assert qwen35.param_count() == _hf_count(qwen35.QWEN35_397B)
    assert qwen35.param_count() / 1e9 == pytest.approx(397, abs=1.0)  # 396.3B: no MTP head
    assert qwen35.active_param_count() / 1e9 == pytest.approx(17, abs=0.5)  # 17.3B
    assert qwen35.layer_types(qwen35.QWEN35_397B).count("full_attention") == 15


def test_list_matrix_says_the_task_containers_need_a_runtime(tmp_path):
    """Without apptainer or singularity on PATH the matrix names what the runner must provide; with one, nothing."""
    from support.backend_util import env

    def matrix(path: Path) -> str:
        r = subprocess.run([sys.executable, "-m", "suite.cli", "list", "--matrix", "--why"], capture_output=True, text=True,
                           env={**env(), "PATH": str(path)}, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr
        return r.stdout

    (tmp_path / "empty").mkdir()
    line = [t for t in matrix(tmp_path / "empty").splitlines() if t.startswith("rl/qwen35_397b_grpo (any backend)")]
    assert line and "neither `apptainer` nor `singularity` is on PATH" in line[0] and "data.sif_dir" in line[0]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "singularity").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "singularity").chmod(0o755)
    assert "rl/qwen35_397b_grpo (any backend)" not in matrix(tmp_path / "bin")


def test_data_prepare_checks_the_rows_and_links_the_folder(tmp_path, monkeypatch):
    from suite.data import prepare

    monkeypatch.setenv("TRAINBENCH_DATA", str(tmp_path / "data"))
    assert not prepare.status("r2e_gym")[0]
    (tmp_path / "src").mkdir()
    folder = _folder(tmp_path / "src", [_row(1, "train"), _broken("container")], [_row(9, "val")])
    with pytest.raises(r2e_gym.DataFormatError, match=f"{r2e_gym.TRAIN_FILE}:2: .*container_formatter"):
        prepare.prepare("r2e_gym", folder)
    _write(folder / r2e_gym.TRAIN_FILE, [_row(1, "train"), _row(2, "train")])
    assert "2 training and 1 validation tasks" in prepare.prepare("r2e_gym", folder)
    assert prepare.status("r2e_gym") == (True, str(tmp_path / "data" / "r2e_gym"))
