"""veRL's trainer run by the harness, on the harness's clock: the untimed preparation (the warm-started policy as a
Hugging Face model folder with a tokenizer, the problems as veRL's parquet, the command line composed by veRL's own
Hydra config and checked by its validate_config), then `python -m verl.trainer.main_ppo` as the run's child
(suite/backends/trainer_process.py), its file-logger JSONL followed line by line into the run's steps, evaluations
and stop rules, and its phases into the Result: written through the loop's `Sink` (suite/loop/contract.py).

The clock: veRL's start-up (Ray, its workers, the rollout engine) is init, as the suite's own GRPO builds its model
and rollout in init; the clock starts when veRL's trainer opens its metrics log (`Tracking`, the first thing `fit()`
does) and runs until veRL ends or the run stops it: at the first validation that meets the spec's target
(`reached`; veRL is stopped there, as the harness stops its own loop), at `budget.max_train_s`, at
`budget.max_steps` (veRL's `total_training_steps`: it ends by itself), or on a stop signal. veRL exiting with an
error is recorded as `error`, its own last lines in the message.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import suite
from suite.algorithms import grpo, grpo_rewards
from suite.backends.trainer_process import LineReader, TrainerProcess
from suite.backends.verl import adapt as verl_adapt
from suite.data.base import DataMissing
from suite.loop.contract import BUDGET, CONTINUE, INTERRUPTED, REACHED, Sink

MODULE = "verl.trainer.main_ppo"
_EXCEPTION = re.compile(r"^(\w+\.)*\w*(Error|Exception|Exit)(: .*)?$")  # a traceback's last line
POLL_S = 0.1


class VerlRefused(DataMissing):
    """veRL's own config code refuses the translated spec on this node: bad input (exit 2, nothing recorded)."""


class VerlFailed(RuntimeError):
    """veRL's trainer ended with an error; the message carries its last lines."""


# ---- the preparation (untimed) --------------------------------------------------------------------------------


def compose_cli(args: list[str]) -> Any:
    """The config `python -m verl.trainer.main_ppo ARGS` builds: Hydra's compose of veRL's shipped `ppo_trainer`
    (its defaults list and all) with these very command-line overrides, as its `@hydra.main` does."""
    from importlib.resources import files

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(files("verl.trainer") / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=args)


def write_model(workload: Any, policy: Any, folder: Path) -> Path:
    """The warm-started policy as a Hugging Face model folder (the suite's save path) with the data's tokenizer, and
    the token ids a generation engine stops and pads with."""
    from suite.models.hf import checkpoint as hf_checkpoint
    from suite.models.hf import tensors as hf_tensors

    hf_checkpoint.save_llama(policy, folder)
    workload.problems.save_hf_tokenizer(folder)
    ids = {"eos_token_id": workload.problems.eos_id, "pad_token_id": workload.problems.pad_id}
    config = json.loads((folder / hf_tensors.CONFIG).read_text())
    (folder / hf_tensors.CONFIG).write_text(json.dumps({**config, **ids}, indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps(ids) + "\n")
    return folder


def released_model(workload: Any) -> Path | None:
    """The policy's own Hugging Face folder when the run starts from it untouched (`model.checkpoint`, no supervised
    warm start): veRL loads it, with its tokenizer, as it is; None when the policy was made here (write_model)."""
    from suite.models.hf import config as hf_config_mod
    from suite.models.hf import pretrained

    warm = getattr(getattr(workload, "cfg", None), "warm_start", None)
    if not isinstance(workload.model_cfg, hf_config_mod.Config) or (warm is not None and warm.sft_steps):
        return None
    if warm is not None and warm.checkpoint is not None:
        return None
    return pretrained.checkpoint_path(workload.model_cfg, workload.meta)


def data_files(workload: Any, out_dir: Path) -> tuple[Path, Path] | None:
    """(train, val) parquet a data set already has in veRL's RL layout (suite/data/rl/gsm8k.py: its own files, or its
    jsonl converted as veRL's preprocessing does); None for generated problems."""
    from suite.data.rl import gsm8k

    if isinstance(workload.problems, gsm8k.Problems):
        return gsm8k.verl_files(workload.data_cfg, out_dir)
    return None


@dataclass
class Prepared:
    folder: Path
    args: list[str]
    command: list[str]
    env: dict[str, str]
    metrics: Path
    log: Path
    minibatches: int = 1
    exact_reward: bool = True
    config: Any = field(default=None, repr=False)
    module: str = MODULE  # the trainer's module (python -m): main_ppo, or the SFT trainer (sft_launch.py)
    unexpressed: list[str] = field(default_factory=list)  # what of the spec veRL does not carry (sft.unexpressed)


def prepare(spec: Any, workload: Any, policy: Any, folder: Path, gpus: int, seed: int) -> Prepared:
    """Everything veRL's trainer reads, written under `folder`, and its command line checked by veRL's own code."""
    cfg = grpo.Config.model_validate(spec.grpo or {})
    problems = workload.problems
    model = released_model(workload) or write_model(workload, policy, folder / "model")
    own = data_files(workload, folder / "data")
    if own is not None:  # a public set in veRL's layout (GSM8K): veRL reads it, samples and templates it itself
        train, val = own
    else:  # generated problems: fresh ones for every rollout, batch_size x minibatches prompts each
        prompts = spec.data.batch_size * cfg.minibatches * verl_adapt.rollouts(spec.budget.max_steps,
                                                                               cfg.minibatches)
        train = verl_adapt.write_parquet(problems.draw(np.random.default_rng([seed, 0x7E41]), prompts),
                                         folder / "train.parquet", "train")
        val = verl_adapt.write_parquet(problems.eval_set(), folder / "val.parquet", "test")
    values = verl_adapt.overrides(spec, train, val, str(model), gpus_per_node=gpus, prompt_len=problems.prompt_len)
    values["data.seed"] = seed
    args = verl_adapt.hydra_args(values)
    try:
        config = compose_cli(args)
        verl_adapt.validate(config)
    except Exception as e:  # noqa: BLE001 - veRL's own checks (AssertionError, ValueError, Hydra's errors)
        raise VerlRefused(f"veRL {verl_adapt._verl_version()} refuses the translation of {spec.name} on this node "
                          f"({gpus} GPU(s)): {type(e).__name__}: {e}") from None
    root = str(Path(suite.__file__).resolve().parent.parent)  # veRL's reward workers import suite.* from here
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p),
           "VERL_FILE_LOGGER_PATH": str(folder / "metrics.jsonl"), "HYDRA_FULL_ERROR": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    reward, _ = grpo_rewards.split(cfg.reward)
    return Prepared(folder=folder, args=args, command=[sys.executable, "-m", MODULE, *args], env=env,
                    metrics=folder / "metrics.jsonl", log=folder / "verl.log", minibatches=cfg.minibatches,
                    exact_reward=reward == "exact_match", config=config, module=MODULE)


# ---- the metrics, line by line -----------------------------------------------------------------------------------


def val_scores(data: dict[str, Any], exact_reward: bool) -> dict[str, float]:
    """A validation's scores in the suite's names from veRL's `val-core/<source>/<var>/mean@N` (and val-aux):
    accuracy from `acc` where the reward function reports it, else from the reward's mean when the reward is
    exact_match (each score 0 or 1); mean_reward from `reward`. veRL's own keys are kept beside."""
    out: dict[str, float] = {}
    for key, value in data.items():
        parts = key.split("/")
        if len(parts) != 4 or parts[0] not in ("val-core", "val-aux") or not isinstance(value, int | float):
            continue
        out[key] = float(value)
        var, metric = parts[2], parts[3]
        if not metric.startswith("mean@"):
            continue
        if var == "reward":
            out["mean_reward"] = float(value)
            if exact_reward:
                out.setdefault("accuracy", float(value))
        elif var == "acc":
            out["accuracy"] = float(value)
    return out


def _release_device_memory() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class Follow:
    """Drives one veRL run on a harness Run's clock (`Backend.own_trainer` hands it to the harness)."""

    def __init__(self, prepared: Prepared):
        self.prepared = prepared
        self.process: TrainerProcess | None = None

    def drive(self, run: Sink) -> None:
        p = self.prepared
        if run.mode != "tta":
            raise VerlRefused(f"--mode {run.mode}: veRL runs its own loop, which has no throughput mode here "
                              "(its perf/throughput is in every run's phases); run it to the target (--mode tta)")
        if run.dist.world > 1:
            raise VerlRefused(f"{run.dist.world} processes (--nproc / torchrun): veRL places its own workers on this "
                              "node's GPUs from one driver; run it as one process")
        run.extra_config["verl"] = {"module": p.module, "args": p.args,
                                    **({"unexpressed": p.unexpressed} if p.unexpressed else {})}
        _release_device_memory()  # the init's warm start and GEMM benchmark: vLLM sizes its cache by what is free
        self.process = proc = TrainerProcess(p.command, p.env, p.folder, p.log).start()
        launched = time.perf_counter()
        reader = LineReader(p.metrics)
        code, t0 = CONTINUE, None
        try:
            while not reader.exists():  # veRL's start-up: init (see the module docstring)
                if proc.poll() is not None:
                    raise self._failure(run, "before its trainer started")
                if run.flag.signum is not None:
                    code = INTERRUPTED
                    break
                time.sleep(POLL_S)
            else:
                t0 = time.perf_counter()
                run.add_init(t0 - launched)
                run.start_clock()  # the instruments' run_start; the clock's zero is t0, the log's creation seen
                run.t0 = t0
                code = self._follow(run, reader, t0)
        finally:
            if proc.poll() is None:
                proc.stop()
            if t0 is not None:
                run.stop_clock(time.perf_counter())
                run.inst.clock_stopped()
        run.reported["phases"] = {**self.phases(), "startup_s": (t0 or time.perf_counter()) - launched,
                                  "trainer_exit_code": proc.poll(), "trainer_stopped_by_run": proc.stopped_by_us}
        if code == CONTINUE:  # veRL ended by itself
            if proc.poll() != 0:
                raise self._failure(run, f"at step {run.steps}")
            code = BUDGET  # its total_training_steps (= budget.max_steps) done, or its data
        run.end(code)
        if code == INTERRUPTED:
            run.error = run.flag.reason or "stopped by a signal; veRL's trainer was stopped"

    def phases(self) -> dict[str, Any]:
        """The Result's phases from veRL's whole log (GRPO: seconds per phase, tokens/s, MFU)."""
        p = self.prepared
        return verl_adapt.read_metrics(p.metrics)["phases"] if p.metrics.exists() else {}

    def _follow(self, run: Sink, reader: LineReader, t0: float) -> int:
        budget = run.spec.budget
        while True:
            exited = self.process.poll() is not None  # type: ignore[union-attr]
            for line in reader.new_lines():
                if code := self._record(run, line, t0):
                    return code
            if exited:
                return CONTINUE
            if run.flag.signum is not None:
                return INTERRUPTED
            if time.perf_counter() - t0 >= budget.max_train_s:
                return BUDGET
            time.sleep(POLL_S)

    def _record(self, run: Sink, line: str, t0: float) -> int:
        """One line of veRL's log: a training step (`timing_s/step`), a validation (`val-core/*`), or both."""
        try:
            record = json.loads(line)
            step, data = int(record["step"]), dict(record["data"])
        except (ValueError, KeyError, TypeError) as e:
            raise VerlFailed(f"{self.prepared.metrics}: not a veRL file-logger line ({type(e).__name__}: {e}): "
                             f"{line[:200]}") from None
        now = time.perf_counter()
        if isinstance(secs := data.get("timing_s/step"), int | float):
            run.count_step(step * self.prepared.minibatches)  # harness steps are optimizer steps
            run.step_times.append(float(secs))
            run.eval_s += float(data.get("timing_s/testing", 0.0))
            run.progress(run.step_progress(now - t0))
        scores = val_scores(data, self.prepared.exact_reward)
        if not scores:
            return CONTINUE
        if step == 0:  # the validation before training: from the log's creation to the line that reports it
            run.eval_s += now - t0
        run.inst.eval_begin(run.steps, run.samples)
        elapsed = now - t0
        if not run.record_eval(elapsed, scores):
            return CONTINUE
        run.reach_target(elapsed)
        return REACHED

    def _failure(self, run: Sink, when: str) -> VerlFailed:
        proc = self.process
        assert proc is not None
        tail = proc.tail()
        errors = [line.strip() for line in tail.splitlines() if _EXCEPTION.match(line.strip())]
        said = f": {errors[-1]}" if errors else ""
        return VerlFailed(f"veRL's trainer (python -m {self.prepared.module}) exited with code {proc.poll()} {when}{said}; its "
                          f"last output:\n{tail}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.stop()
