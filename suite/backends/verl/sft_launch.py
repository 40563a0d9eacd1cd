"""veRL 0.9.1's SFT trainer (`verl.trainer.sft_trainer`, LoRA by peft on its FSDP engine) run by the harness for a
LoRA `causal_lm_samples` spec (MLPerf's llama2_70b_lora), as suite/backends/verl/launch.py runs its GRPO trainer:
the untimed preparation (the base model as a Hugging Face folder, the workload's own samples as parquet, the
command line composed by veRL's Hydra config and built into its dataclasses), then the trainer as the run's child
under torchrun (veRL's SFT trainer is an SPMD program: `torchrun --nproc_per_node=G -m verl.trainer.sft_trainer`,
as veRL's examples start it), its file-logger JSONL followed line by line into the run's steps, losses,
evaluations and stop rules.

The data: the workload's train and validation samples (after `eval.subset`), their labels as veRL's loss mask
(suite/backends/verl/sft_data.py), read by that module's dataset class (veRL's `data.custom_cls`). The base: the
model the workload builds (its checkpoint, or the tiny variant's random weights, with the same seed), its adapters
left out (B is zero at the start: the same function), written by the suite's saver (a fused qkv is written as
q/k/v_proj: transformers' Llama, which veRL loads, has no fused qkv), with a stand-in tokenizer of the model's
vocabulary (the samples are token ids already; veRL reads only its pad id).

The result: veRL's `train/loss` per step is the run's loss (`phases.train_loss`), `val/loss` is `eval_loss`, the
spec's target. veRL's val/loss is the token-weighted mean loss of each validation batch (batch_size / dp rows; a
last short batch dropped: drop_last), averaged over the batches; the workload's eval_loss is the mean of
per-sample means: the same where every validation row counts the same number of tokens (the synthetic GovReport).
The clock: from the log's creation (veRL's Tracking, the first thing fit() does) to veRL's end, or the run's
stop: the target met at a validation, budget.max_train_s, or a stop signal; budget.max_steps is veRL's
total_training_steps (it ends by itself, after a last validation).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import suite
from suite.backends.verl import adapt as verl_adapt
from suite.backends.verl import launch as verl_launch
from suite.backends.verl import sft, sft_data
from suite.loop.contract import CONTINUE, DIVERGED, REACHED, Sink

MODULE = "verl.trainer.sft_trainer"
LOSS, VAL_LOSS, GRAD_NORM, LR = "train/loss", "val/loss", "train/grad_norm", "train/lr"


# ---- the preparation (untimed) --------------------------------------------------------------------------------


def strip_adapters(model: Any) -> Any:
    """The model with each peft LoRA layer replaced by its base layer, in place (the base, frozen as it was)."""
    for name, module in list(model.named_modules()):
        if hasattr(module, "lora_A") and hasattr(module, "get_base_layer"):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, module.get_base_layer())
    return model


def write_tokenizer(folder: Path, vocab: int, pad_id: int = 0) -> Path:
    """A stand-in Hugging Face tokenizer of `vocab` tokens, `<i>` for id i (tokenizer.json): veRL's HFModelConfig
    loads one from the model folder and its SFT trainer reads its pad id; the samples are token ids already."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"<{i}>": i for i in range(vocab)}, unk_token=f"<{pad_id}>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=f"<{pad_id}>", eos_token=f"<{pad_id}>",
                            unk_token=f"<{pad_id}>").save_pretrained(str(folder))
    return folder


SHARD_BYTES = 5 * 2**30  # transformers' save_pretrained default shard size


def write_model(base: Any, folder: Path) -> Path:
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.llama import model as llama

    hf_checkpoint.save_llama(base, folder, max_shard_bytes=SHARD_BYTES)
    return write_tokenizer(folder, llama.vocab(base.cfg, {}))


def write_data(workload: Any, folder: Path) -> tuple[Path, Path]:
    """(train, val) parquet of the workload's own samples: every training row, the validation rows it evaluates."""
    splits = workload.splits
    train = sft_data.write(splits.train_ids, splits.train_labels, folder / "train.parquet")
    val = sft_data.write(workload.val_ids.numpy(), workload.val_labels.numpy(), folder / "val.parquet")
    return train, val


def values(spec: Any, train: Path, val: Path, model: Path, *, gpus: int, seed: int, train_rows: int,
           out_dir: Path) -> dict[str, Any]:
    """sft.overrides plus what this launch adds: the validation file, the dataset class, the seed, enough epochs for
    budget.max_steps, torch's attention (SDPA), fp32 weights in the forward under `precision: fp32` (veRL's FSDP
    default is bf16)."""
    out = sft.overrides(spec, str(train), str(model), gpus_per_node=gpus, out_dir=str(out_dir))
    per_epoch = max(train_rows // spec.data.batch_size, 1)  # veRL's sampler drops the last short batch
    out |= {"data.val_files": str(val), "data.custom_cls.path": sft_data.PATH, "data.custom_cls.name": sft_data.CLASS,
            "data.pad_mode": "no_padding", "data.num_workers": 0, "trainer.seed": seed, "engine.seed": seed,
            # torch's SDPA on padded rows, as the suite's own Llama runs: veRL's default is flash_attention_2 over
            # packed rows (use_remove_padding), which needs flash-attn; the samples are all of one length here
            "+model.override_config.attn_implementation": "sdpa", "model.use_remove_padding": False,
            "trainer.total_epochs": math.ceil(int(spec.budget.max_steps) / per_epoch)}
    if str(spec.precision) == "fp32":
        out |= {f"+engine.mixed_precision.{k}": "fp32" for k in ("param_dtype", "reduce_dtype", "buffer_dtype")}
    return out


def command(args: list[str], gpus: int, module: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={max(gpus, 1)}",
            "-m", module, *args]


def prepare(spec: Any, workload: Any, model: Any, folder: Path, gpus: int, seed: int) -> verl_launch.Prepared:
    """Everything veRL's SFT trainer reads, written under `folder`, its command line checked by veRL's own code."""
    per_rank = spec.data.batch_size // max(gpus, 1)  # veRL's validation batch (drop_last): fewer rows, no val/loss
    if len(workload.val_ids) < per_rank:
        raise verl_launch.VerlRefused(f"{len(workload.val_ids)} validation samples: veRL's SFT trainer validates in "
                                      f"batches of data.batch_size / GPUs = {per_rank} rows and drops a short one, so "
                                      "it would report no val/loss; give eval.subset at least that many")
    base = write_model(strip_adapters(model), folder / "model")
    train, val = write_data(workload, folder / "data")
    vals = values(spec, train, val, base, gpus=gpus, seed=seed, train_rows=len(workload.splits.train_ids),
                  out_dir=folder / "checkpoints")
    try:
        config = sft.compose(vals)
        sft.validate(config)
    except Exception as e:  # noqa: BLE001 - veRL's own checks (Hydra's errors, its dataclasses' asserts)
        raise verl_launch.VerlRefused(f"veRL refuses the translation of {spec.name} into its SFT trainer's config: "
                                      f"{type(e).__name__}: {e}") from None
    args = sft.hydra_args(vals)
    root = str(Path(suite.__file__).resolve().parent.parent)  # veRL imports the dataset class from here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p),
           "VERL_FILE_LOGGER_PATH": str(folder / "metrics.jsonl"), "HYDRA_FULL_ERROR": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    return verl_launch.Prepared(folder=folder, args=args, command=command(args, gpus, MODULE), env=env,
                                metrics=folder / "metrics.jsonl", log=folder / "verl.log", config=config,
                                module=MODULE, unexpressed=sft.unexpressed(spec))


# ---- veRL's log -> the result ------------------------------------------------------------------------------------


@dataclass
class Curve:
    """veRL's SFT log read whole: the training loss per step, the validation losses (step, eval_loss)."""

    steps: list[int]
    loss: list[float]
    grad_norm: list[float]
    lr: list[float]
    val: list[tuple[int, float]]


def read_log(path: Path) -> Curve:
    out = Curve([], [], [], [], [])
    for step, data in verl_adapt.log_records(path):
        if isinstance(loss := data.get(LOSS), int | float):
            out.steps.append(step)
            out.loss.append(float(loss))
            out.grad_norm.append(float(data.get(GRAD_NORM, math.nan)))
            out.lr.append(float(data.get(LR, math.nan)))
        if isinstance(v := data.get(VAL_LOSS), int | float):
            out.val.append((step, float(v)))
    return out


def phases(path: Path) -> dict[str, Any]:
    curve = read_log(path)
    return {"source": "verl_sft", "updates": len(curve.steps), "train_loss": curve.loss,
            "grad_norm": curve.grad_norm, "lr": curve.lr}


class Follow(verl_launch.Follow):
    """launch.Follow with the SFT trainer's log: `train/loss` lines are steps, `val/loss` lines evaluations."""

    def __init__(self, prepared: verl_launch.Prepared):
        super().__init__(prepared)
        self.last_line = 0.0

    def phases(self) -> dict[str, Any]:
        return phases(self.prepared.metrics) if self.prepared.metrics.exists() else {}

    def _record(self, run: Sink, line: str, t0: float) -> int:
        try:
            record = json.loads(line)
            step, data = int(record["step"]), dict(record["data"])
        except (ValueError, KeyError, TypeError) as e:
            raise verl_launch.VerlFailed(f"{self.prepared.metrics}: not a veRL file-logger line "
                                         f"({type(e).__name__}: {e}): {line[:200]}") from None
        now = time.perf_counter()
        if isinstance(loss := data.get(LOSS), int | float):
            run.count_step(step)
            run.step_times.append(now - (self.last_line or t0))  # between veRL's lines: its step, as seen here
            self.last_line = now
            if run.read_loss(step, loss) == DIVERGED:  # type: ignore[attr-defined]
                return DIVERGED
            run.progress(run.step_progress(now - t0))
        if not isinstance(val := data.get(VAL_LOSS), int | float):
            return CONTINUE
        run.eval_s += now - (self.last_line or t0)  # the validation ran after the step's line
        self.last_line = now
        run.inst.eval_begin(run.steps, run.samples)
        if not run.record_eval(now - t0, {"eval_loss": float(val), VAL_LOSS: float(val)}):
            return CONTINUE
        run.reach_target(now - t0)
        return REACHED

