"""veRL 0.9.1's SFT trainer trains MLPerf's llama2_70b_lora (the tiny variant, synthetic GovReport) from exactly
the files and overrides the veRL backend writes (suite/backends/verl/sft_launch.py), on a CPU: `torchrun -m
verl_cpu_sft` (tests/support/verl_cpu_sft.py: veRL's own main() after the patches that give it what it lacks on a
CPU, each named by veRL's line) in place of `-m verl.trainer.sft_trainer`. Checked: only the adapters move (the base
in veRL's last checkpoint equals the folder it was given), the validation loss falls, veRL's first step's loss is
the suite's own loss (the torch backend's model and loss) on veRL's first batch, within fp32 rounding, and a mask
off by one token is not; veRL's trained adapters on the suite's model give the suite's eval_loss = veRL's last
val/loss; and the harness turns veRL's log into the Result (steps, eval_curve, the loss curve). From step 2 on veRL's
curve differs run to run (seen: step 2's loss 6.268-6.283 over 3 runs; its adapters' A is drawn at random): the
step-by-step curve is compared through the first step and the end state, not step by step."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import torch
from support.backend_util import ROOT, TESTS, env
from support.datafiles import write_govreport
from support.promised import require

from suite import harness, registry
from suite.backends.verl import sft_data, sft_launch
from suite.specload import load_spec
from suite.workloads.contract import Context

torch.set_num_threads(1)
require("verl")
require("peft")
FULL = registry.workload_files()["nlp/llama2_70b_lora"]
SHIM = "verl_cpu_sft"
# the tiny variant with an lr that moves 6 LoRA steps visibly; fp32 (veRL's FSDP default casts to bf16); one
# adapter per q, k, v (veRL's transformers Llama has no fused qkv) and no dropout (veRL's FSDP LoRA has none)
SETS = {"model.lora.dropout": 0.0, "model.fused_qkv": False, "precision": "fp32", "optimizer.lr": 0.01,
        "budget.max_steps": 12, "schedule.total_steps": 12, "eval.every_steps": 6}


def _data(folder: Path) -> Path:
    """The synthetic GovReport (train rows with prompts of different lengths), its validation rows four of the
    training rows, their second halves counted: 6 LoRA steps cannot learn the unseen phrases of the synthetic
    validation rows (seen: its loss stays within 0.02 of the base's in 40 steps), they can fit seen ones; every
    validation row counts 32 tokens, so veRL's batch-weighted val/loss is the workload's mean of per-row means."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    write_govreport(folder, seq_len=64, vocab=512, train_prompts=True)
    ids = pq.read_table(folder / "train-00000-of-00001.parquet").to_pydict()["input_ids"][:4]
    labels = [[sft_data.IGNORE] * 32 + r[32:] for r in ids]
    pq.write_table(pa.table({"input_ids": ids, "attention_mask": [[1] * 64 for _ in ids], "labels": labels}),
                   folder / "validation-00000-of-00001.parquet")
    return folder


def _spec(data: Path, **extra):
    return load_spec(FULL, {"data.path": str(data), **SETS, **extra}, "tiny")


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    """The backend's preparation for seed 0, then veRL's SFT trainer on it under the CPU shim: 6 steps."""
    from suite.harness import seed_everything

    tmp = tmp_path_factory.mktemp("verl_sft")
    spec = _spec(_data(tmp / "gr"))
    workload = registry.task_class(spec.task)(spec, Context(tmp, 0, torch.device("cpu")))
    seed_everything(0)
    model = workload.build_model()
    prepared = sft_launch.prepare(spec, workload, model, tmp / "verl", gpus=1, seed=0)
    command = [*prepared.command[:prepared.command.index(sft_launch.MODULE)], SHIM,
               *prepared.command[prepared.command.index(sft_launch.MODULE) + 1:]]
    assert command[-len(prepared.args):] == prepared.args  # the backend's overrides, untouched
    started = time.perf_counter()
    done = subprocess.run(command, env=env(PYTHONPATH=f"{ROOT}:{TESTS / 'support'}",
                                           VERL_FILE_LOGGER_PATH=str(prepared.metrics)),
                          cwd=prepared.folder, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - started
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    print(f"veRL SFT on CPU: {wall:.1f} s")
    return spec, workload, model, prepared, wall


def _checkpoint(prepared) -> dict[str, torch.Tensor]:
    step = (prepared.folder / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip()
    state = torch.load(prepared.folder / "checkpoints" / f"global_step_{step}" / "model_world_size_1_rank_0.pt",
                       weights_only=False)
    return {k: (v.to_local() if hasattr(v, "to_local") else v).detach() for k, v in state.items()}


@pytest.mark.slow  # ~40 s of CPU: torchrun, veRL's imports, 12 steps and 2 validations of a 2-layer Llama
def test_veRL_trains_only_the_adapters_from_the_backends_files_and_the_loss_falls(verl_run):
    from safetensors.torch import load_file

    spec, workload, model, prepared, _ = verl_run
    trained = _checkpoint(prepared)
    given = load_file(str(prepared.folder / "model" / "model.safetensors"))
    bases = {k.removeprefix("base_model.model.").replace(".base_layer", ""): v for k, v in trained.items()
             if "lora_" not in k}
    assert bases.keys() == given.keys()
    assert all(torch.equal(bases[k], given[k].to(bases[k].dtype)) for k in given)  # the base frozen
    adapters = {k: v for k, v in trained.items() if "lora_" in k}
    names = {k.split(".")[-4] for k in adapters}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj"}  # the recipe's qkv_proj and o_proj
    assert all(v.abs().max() > 0 for k, v in adapters.items() if "lora_B" in k)  # B starts at zero: it moved
    log = sft_launch.read_log(prepared.metrics)
    assert log.steps == list(range(1, 13)) and [s for s, _ in log.val] == [6, 12]
    before = workload.evaluate(model)["eval_loss"]  # the base's: what veRL's step-0 validation would be
    after = log.val[-1][1]
    print(f"eval_loss {before:.4f} -> {log.val[0][1]:.4f} (step 6) -> {after:.4f} (step 12); "
          f"train/loss {[round(x, 4) for x in log.loss]}")
    assert after < before - 0.1 and log.val[0][1] < before  # seen: 6.243 -> 6.01-6.13 -> 5.97-6.01 over 3 runs
    assert sum(log.loss[-3:]) < sum(log.loss[:3]) - 0.3  # the training loss too


@pytest.mark.slow
def test_veRLs_first_step_loss_is_the_suites_loss_on_veRLs_first_batch(verl_run):
    """Before the first update the adapters add nothing (B = 0): veRL's step-1 train/loss is the base's loss on the
    batch veRL drew (its DistributedSampler, seed 0, epoch 0). The suite's model and loss (what the torch backend
    trains) on those rows agree within fp32 rounding; counting a row's first token too (a mask off by one) does not."""
    spec, workload, model, prepared, _ = verl_run
    sampler = torch.utils.data.DistributedSampler(range(len(workload.splits.train_ids)), num_replicas=1, rank=0,
                                                  shuffle=True, seed=0, drop_last=True)
    sampler.set_epoch(0)
    rows = list(sampler)[:spec.data.batch_size]
    ids = torch.from_numpy(workload.splits.train_ids[rows].astype("int64"))
    labels = torch.from_numpy(workload.splits.train_labels[rows].astype("int64"))
    with torch.no_grad():
        suite_loss = float(workload.loss(model, (ids, labels)))
        first = labels.clone()
        first[:, 1] = ids[:, 1]  # one more counted token a row: what a mask not cleared at position 0 shifts in
        control = float(workload.loss(model, (ids, first)))
    verl_loss = sft_launch.read_log(prepared.metrics).loss[0]
    print(f"step 1: veRL {verl_loss:.7f} suite {suite_loss:.7f} (|d| {abs(verl_loss - suite_loss):.2e}); "
          f"control {control:.7f}")
    assert abs(verl_loss - suite_loss) < 1e-4 * suite_loss
    assert abs(verl_loss - control) > 10 * abs(verl_loss - suite_loss) and abs(verl_loss - control) > 1e-4


@pytest.mark.slow
def test_veRLs_last_val_loss_is_the_suites_eval_loss_of_veRLs_trained_adapters(verl_run):
    """veRL's trained adapters (its last checkpoint) put on the suite's model (peft on wq, wk, wv, wo, what the torch
    backend trains): the workload's eval_loss of it is veRL's last val/loss within fp32 rounding; the base alone is
    not (the adapters moved it by > 0.1)."""
    import copy

    from suite.models.common import lora as lora_mod
    from suite.models.hf.names import to_hf_state_dict

    spec, workload, model, prepared, _ = verl_run
    trained = _checkpoint(prepared)
    suite_model = lora_mod.apply(copy.deepcopy(model), workload.model_cfg.lora)
    state = suite_model.state_dict()
    loaded = 0
    for name in state:
        if "lora_" not in name:
            continue
        module, _, tail = name.partition(".lora_")  # layers.0.attention.wq | A.default.weight
        (hf,) = to_hf_state_dict({f"{module}.weight": state[name]})
        state[name] = trained[f"base_model.model.{hf.removesuffix('.weight')}.lora_{tail}"]
        loaded += 1
    assert loaded == 2 * 4 * spec.model.n_layer
    suite_model.load_state_dict(state)
    suite_eval = workload.evaluate(suite_model)["eval_loss"]
    verl_val = sft_launch.read_log(prepared.metrics).val[-1][1]
    base_eval = workload.evaluate(model)["eval_loss"]
    print(f"last validation: veRL {verl_val:.7f} suite {suite_eval:.7f} (|d| {abs(verl_val - suite_eval):.2e}); "
          f"base {base_eval:.7f}")
    assert abs(verl_val - suite_eval) < 1e-4 * verl_val
    assert abs(base_eval - verl_val) > 0.1


def test_the_mask_is_the_labels_shifted_onto_veRLs_roll():
    ids = torch.arange(12).reshape(2, 6).numpy()
    labels = ids.copy()
    labels[0, :3] = sft_data.IGNORE
    got_ids, mask = sft_data.rows(ids, labels)
    assert got_ids == ids.tolist() and mask == [[0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]]
    bad = labels.copy()
    bad[1, 4] = 0
    with pytest.raises(ValueError, match="labels differ from the input ids"):
        sft_data.rows(ids, bad)


def test_veRLs_log_becomes_the_loss_curve_and_evaluations(tmp_path):
    log = tmp_path / "m.jsonl"
    lines = [{"step": s, "data": {"train/loss": 6.0 - s, "train/grad_norm": 0.5, "train/lr": 1e-3}} for s in (1, 2)]
    lines.append({"step": 2, "data": {"val/loss": 4.5}})
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    got = sft_launch.read_log(log)
    assert (got.steps, got.loss, got.val) == ([1, 2], [5.0, 4.0], [(2, 4.5)])
    assert sft_launch.phases(log)["train_loss"] == [5.0, 4.0] and sft_launch.phases(log)["updates"] == 2


@pytest.fixture
def one_gpu(monkeypatch):
    """A CUDA node with veRL's SFT trainer's imports, as far as the backend's checks can tell."""
    from suite.backends.verl import backend as verl_backend
    from suite.backends.verl import options as verl_options

    monkeypatch.setattr(verl_backend, "_cuda_count", lambda: 1)
    monkeypatch.setattr(verl_options, "_cuda_count", lambda: 1)
    monkeypatch.setattr(verl_options, "TRAINER_MODULES", ())
    monkeypatch.setattr(verl_options, "SFT_TRAINER_MODULES", ())


@pytest.mark.slow  # ~60 s: the same run through the harness
def test_the_harness_runs_veRLs_sft_trainer_into_the_result(tmp_path, monkeypatch, one_gpu):
    monkeypatch.setattr(sft_launch, "MODULE", SHIM)
    monkeypatch.setenv("PYTHONPATH", str(TESTS / "support"))  # the trainer's environment comes from ours
    spec = _spec(_data(tmp_path / "gr"), **{"target.value": 0.1})
    result, _ = harness.run(harness.RunRequest(spec=spec, backend="verl", results_dir=None, threads=1,
                                               measure_peak=False))
    assert result.status == "budget", result.error
    assert result.steps == 12 and result.samples == 12 * spec.data.batch_size
    assert [p.step for p in result.eval_curve] == [6, 12]
    losses = [p.metrics["eval_loss"] for p in result.eval_curve]
    assert losses[1] < losses[0] and all(p.metrics["val/loss"] == p.metrics["eval_loss"] for p in result.eval_curve)
    assert result.phases["source"] == "verl_sft" and len(result.phases["train_loss"]) == 12
    assert result.phases["trainer_exit_code"] == 0 and not result.phases["trainer_stopped_by_run"]
    assert result.config["verl"]["module"] == SHIM and "model.lora_rank=16" in result.config["verl"]["args"]
    assert "unexpressed" not in result.config["verl"]  # dropout 0 and split q/k/v: all of it carried
    assert result.backend == "verl" and result.total_s > 0 and result.init_s > 0


def test_a_validation_set_smaller_than_veRLs_validation_batch_is_refused_before_the_clock(tmp_path):
    from suite.backends.verl.launch import VerlRefused

    spec = _spec(_data(tmp_path / "gr"), **{"eval.subset": 2})  # veRL validates 4 rows a batch on 1 GPU
    workload = registry.task_class(spec.task)(spec, Context(tmp_path, 0, torch.device("cpu")))
    with pytest.raises(VerlRefused, match="2 validation samples: .* batches of data.batch_size / GPUs = 4 rows"):
        sft_launch.prepare(spec, workload, workload.build_model(), tmp_path / "verl", gpus=1, seed=0)
