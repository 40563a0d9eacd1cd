"""GRPO post-training of a causal LM on verifiable problems (`task: grpo`, its settings in the spec's `grpo:`
block, suite/algorithms/grpo.py). The policy is warm-started in the untimed init (supervised steps on solved
problems, or a checkpoint). One rollout per `grpo.minibatches` harness steps: the batch iterator draws prompts,
samples G completions of each (suite/workloads/grpo_rollout.py), scores them with the reward plug-in, normalises
the rewards in each group and computes old and reference log-probs; each harness step is one clipped
policy-gradient update. Every phase is timed apart (suite/workloads/grpo_phases.py; the Result's `phases`).
Evaluation: greedy (or low-temperature) accuracy on the held-out problems.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from suite.algorithms import grpo, grpo_loss, grpo_rewards
from suite.models.common.generation import Generated, Sampling, generate, token_logprobs
from suite.workloads.base import WorkloadBase
from suite.workloads.checks import GRPOChecks
from suite.workloads.contract import Batch, Context
from suite.workloads.grpo_phases import PhaseClock
from suite.workloads.grpo_rollout import Colocated, RayRollout, require_ray
from suite.workloads.ppo import _unwrap


def _trim_padding(part: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A minibatch's rows without the left-padding columns none of them needs (the rollout pads to its longest
    prompt; an update computes only up to this minibatch's longest)."""
    mask = part.get("prompt_mask")
    if mask is None or bool(mask[:, 0].any()):
        return part
    lead = int(mask.any(0).float().argmax())
    return {**part, "sequences": part["sequences"][:, lead:], "prompt_mask": mask[:, lead:]}


class GRPO(GRPOChecks, WorkloadBase):
    def __init__(self, spec, ctx: Context):
        super().__init__(spec, ctx)
        self.cfg = grpo.Config.model_validate(getattr(spec, "grpo", None) or {})
        self.problems: Any = self.data_component.load(self.data_cfg)
        self.meta = (self.problems.meta() if hasattr(self.problems, "meta") and callable(self.problems.meta)
                     else {"vocab_size": self.problems.vocab_size})
        self.reward_name, self.reward_fn = grpo_rewards.build(self.cfg.reward)
        stops = list(getattr(self.problems, "stop_ids", [self.problems.eos_id]))
        stops += [self.problems.token_id(t) for t in self.cfg.rollout.stop_tokens]
        self.sampling = Sampling(**{**self.cfg.rollout.model_dump(), "stop_tokens": stops})
        self.eval_sampling = Sampling(**{**self.cfg.eval_sampling.model_dump(), "stop_tokens": stops})
        context = int(getattr(self.model_cfg, "seq_len", 0) or 0)
        need = self.problems.prompt_len + max(self.sampling.max_new_tokens, self.eval_sampling.max_new_tokens)
        if context and need > context:
            raise ValueError(f"a prompt of {self.problems.prompt_len} tokens plus grpo.rollout.max_new_tokens "
                             f"({self.sampling.max_new_tokens}) is {need} tokens, longer than the model's context "
                             f"(model.seq_len {context}): raise model.seq_len or lower max_new_tokens")
        ckpt = self.cfg.warm_start.checkpoint
        if ckpt is not None and not Path(ckpt).is_file():
            raise ValueError(f"grpo.warm_start.checkpoint {ckpt!r} is not a file")
        if self.cfg.warm_start.sft_steps and not hasattr(self.problems, "solved"):
            raise ValueError(f"grpo.warm_start.sft_steps: data {spec.data.name!r} has no generated solved problems "
                             "to warm-start on; start from a checkpoint (model.arch hf_llama) with sft_steps: 0")
        if self.cfg.placement == "ray":
            require_ray()
        if not hasattr(self.model_component, "active_matmul_params") or not hasattr(self.model_cfg, "n_head"):
            raise ValueError(f"task grpo needs a decoder with a KV cache (model.arch llama), not {spec.model.arch!r}")
        self._n_active = float(self.model_component.active_matmul_params(self.model_cfg, self.meta))
        self.eval_problems = self.problems.eval_set()
        self.clock = PhaseClock(self.cfg.minibatches)
        self.policy: nn.Module | None = None
        self.ref: nn.Module | None = None
        self.rollout: Any = None
        self._eval_s = 0.0  # evaluation seconds, taken out of the update phase's wall time
        self.warm_start_report: dict[str, Any] | None = None

    # ---- init (untimed) ------------------------------------------------------------------------------

    def build_model(self) -> nn.Module:
        """The warm-started policy: the same for every run seed (it is the pretrained model of this benchmark;
        the seed varies the RL run), from warm_start.seed."""
        ws = self.cfg.warm_start
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ws.seed)
            model = self.model_component.build(self.model_cfg, self.meta).to(self.device)
            if ws.checkpoint is not None:  # the seam a Hugging Face checkpoint loader plugs into
                model.load_state_dict(torch.load(ws.checkpoint, map_location=self.device, weights_only=True))
            if ws.sft_steps:
                self._sft(model)
        return model

    def _sft(self, model: nn.Module) -> None:
        """Supervised warm start: next-token cross-entropy on the answer tokens of generated solved problems, for
        sft_steps, or (sft_until_accuracy) until the policy first solves that share of the probe problems.

        Why a stopping rule: accuracy sits near 0 on a plateau (loss ~1.33) and then jumps to 1.0 within ~150 steps,
        and where that jump starts moves by hundreds of steps with the kernels' rounding alone (docs/grpo.md): a
        fixed step count lands anywhere on the jump. The probe is drawn from the training problems with its own
        seed, so the held-out set never chooses the warm start."""
        ws, p = self.cfg.warm_start, self.problems.prompt_len
        rng = np.random.default_rng([ws.seed, 0x5F7])
        probe = (self.problems.draw(np.random.default_rng([ws.seed, 0x9B0]), ws.probe_problems)
                 if ws.sft_until_accuracy is not None else [])
        opt = torch.optim.AdamW(model.parameters(), lr=ws.sft_lr, weight_decay=0.0)
        self.warm_start_report = {"sft_steps": 0, "probe_accuracy": None}
        for step in range(1, ws.sft_steps + 1):
            model.train()
            rows = self.problems.solved(self.problems.draw(rng, ws.sft_batch_size)).to(self.device)
            logits = model(rows[:, :-1])[:, p - 1 :]
            target = rows[:, p:].masked_fill(rows[:, p:] == self.problems.pad_id, -100)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            self.warm_start_report["sft_steps"] = step
            if probe and step % ws.sft_check_every == 0:
                model.eval()
                with torch.no_grad():
                    accuracy = float(np.mean(self._solve(model, probe, with_rewards=False)[0]))
                model.train()
                self.warm_start_report["probe_accuracy"] = accuracy
                if accuracy >= ws.sft_until_accuracy:  # type: ignore[operator]
                    return
        if probe:
            raise RuntimeError(f"grpo.warm_start: the supervised phase did not reach sft_until_accuracy "
                               f"{ws.sft_until_accuracy} on the {len(probe)} probe problems in sft_steps "
                               f"{ws.sft_steps} (last check {self.warm_start_report['probe_accuracy']}); raise "
                               "sft_steps or lower sft_until_accuracy")

    def attach(self, model: nn.Module) -> None:
        self.policy = model
        net = _unwrap(model)
        if self.cfg.kl_coef > 0:
            self.ref = copy.deepcopy(net).eval().requires_grad_(False)
        if self.cfg.placement == "ray":
            self.rollout = RayRollout(self.spec.model.arch, self.spec.model.params(), self.meta,
                                      self.problems.pad_id, self.cfg.rollout_workers)
        else:
            self.rollout = Colocated(net, self.problems.pad_id)

    def close(self) -> None:
        if self.rollout is not None:
            self.rollout.close()

    # ---- the rollout (on the clock, in the batch iterator) ---------------------------------------------

    def _prompt_mask(self, problems: list[Any], g: int = 1) -> torch.Tensor | None:
        """(B, P) bool, False on the left padding of prompts of different lengths (None: equal lengths)."""
        if not hasattr(self.problems, "prompt_mask"):
            return None
        return self.problems.prompt_mask(problems).repeat_interleave(g, dim=0).to(self.device)

    def _rewards(self, out: Generated, answers: list[str], index: list[int]) -> torch.Tensor:
        texts = [self.problems.decode(row) for row in out.completion]
        return torch.tensor(grpo_rewards.score(self.reward_fn, self.reward_name, texts, answers, index))

    def _count_gen(self, out: Generated) -> None:
        c, n_active = self.clock, self._n_active
        b, p = out.prompts.shape
        cfg = self.model_cfg
        per_position = 4.0 * cfg.n_layer * cfg.n_head * cfg.head_size
        c.tokens_generated += out.tokens
        c.gen_flops += 2.0 * n_active * (b * (p - 1) + out.tokens) + per_position * (out.attended + b * p * (p - 1) / 2)

    def _rollout(self, rng: np.random.Generator, n_prompts: int, seed: int) -> dict[str, torch.Tensor]:
        assert self.policy is not None, "GRPO.attach(model) must be called before rollouts (the harness does)"
        c, g, net = self.clock, self.cfg.group_size, _unwrap(self.policy)
        problems = self.problems.draw(rng, n_prompts)
        prompts = self.problems.prompts(problems).repeat_interleave(g, dim=0).to(self.device)
        pmask = self._prompt_mask(problems, g)
        with c.phase("weight_sync"):
            self.rollout.sync(net)
        with c.phase("gen"):
            out = self.rollout.generate(prompts, self.sampling, seed, g, pmask)
        self._count_gen(out)
        with c.phase("reward"):
            answers = [a for _, a in problems for _ in range(g)]
            index = [i for i in range(n_prompts) for _ in range(g)]
            rewards = self._rewards(out, answers, index)
        adv = grpo_loss.group_advantages(rewards, g, self.cfg.normalize_std).to(self.device)
        seqs, p, temp = out.sequences, prompts.shape[1], self.sampling.temperature
        batch = {"sequences": seqs, "mask": out.mask, "advantages": adv, "rewards": rewards.to(self.device)}
        if pmask is not None:
            batch["prompt_mask"] = pmask
        with c.phase("old_log_prob"), torch.no_grad():
            batch["old_logp"] = (token_logprobs(net, seqs, p, temp, pmask) if self.cfg.old_logprob == "recompute"
                                 else out.logprobs)
        if self.ref is not None:
            with c.phase("ref"), torch.no_grad():
                batch["ref_logp"] = token_logprobs(self.ref, seqs, p, temp, pmask)
        c.rollouts += 1
        return batch

    def train_batches(self, rank: int, world: int) -> Iterator[Batch]:
        bs = self.local_batch_size(world)
        mb = self.cfg.minibatches
        rng = np.random.default_rng([self.ctx.seed, rank, 0x6790])
        try:
            yield from self._updates(rng, bs, mb, self.ctx.seed * 100_003 + rank)
        finally:  # the harness drops the iterator when the run ends: the Ray actors go with it
            self.close()

    def _updates(self, rng: np.random.Generator, bs: int, mb: int, stream: int) -> Iterator[Batch]:
        g, c, step = self.cfg.group_size, self.clock, 0
        while True:
            batch = self._rollout(rng, bs * mb, stream * 1_000_003 + step)
            perm = torch.randperm(bs * mb, generator=torch.Generator().manual_seed(step))
            for i in range(mb):
                rows = (perm[i * bs : (i + 1) * bs, None] * g + torch.arange(g)).reshape(-1).to(self.device)
                part = _trim_padding({k: v[rows] for k, v in batch.items()})
                prompt_tokens = (int(part["prompt_mask"].sum()) if "prompt_mask" in part
                                 else part["sequences"].shape[0] * self.problems.prompt_len)
                tokens = int(part["mask"].sum()) + prompt_tokens
                eval_before, t = self._eval_s, time.perf_counter()
                yield part  # the harness runs the update (and any evaluation) before asking for the next
                # counted once the update is done, so seconds, tokens and FLOPs cover the same updates
                c.seconds["update"] += time.perf_counter() - t - (self._eval_s - eval_before)
                c.updates += 1
                c.tokens_trained += tokens
                c.update_flops += 6.0 * self._n_active * tokens
            step += 1

    def batch_samples(self, batch: Batch) -> int:
        return int(batch["sequences"].shape[0]) // self.cfg.group_size

    def loss(self, model: nn.Module, batch: Batch) -> torch.Tensor:
        seqs = batch["sequences"]
        p = seqs.shape[1] - batch["mask"].shape[1]  # the batch's (padded) prompt width
        logp = token_logprobs(model, seqs, p, self.sampling.temperature, batch.get("prompt_mask"))
        loss, _ = grpo_loss.policy_loss(logp, batch["old_logp"], batch["advantages"], batch["mask"], self.cfg,
                                   batch.get("ref_logp"))
        return loss

    # ---- evaluation (on the clock) ----------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        t = time.perf_counter()
        correct, rewards, lengths = self._solve(_unwrap(model), self.eval_problems)
        self._eval_s += time.perf_counter() - t
        return {"accuracy": float(np.mean(correct)), "mean_reward": float(torch.cat(rewards).mean()),
                "mean_completion_tokens": float(torch.cat(lengths).mean())}

    def _solve(self, net: nn.Module, problems: list[Any], with_rewards: bool = True
               ) -> tuple[list[bool], list[torch.Tensor], list[torch.Tensor]]:
        """Completions of `problems` with eval_sampling, in eval_batch_size chunks: correct or not, rewards, lengths."""
        step = self.cfg.eval_batch_size or len(problems)
        correct: list[bool] = []
        rewards, lengths = [], []
        same = _grader(self.problems)
        for start in range(0, len(problems), step):
            part = problems[start : start + step]
            prompts = self.problems.prompts(part).to(self.device)
            answers = [a for _, a in part]
            out = generate(net, prompts, self.eval_sampling, torch.Generator(device=prompts.device).manual_seed(start),
                           pad_id=self.problems.pad_id, prompt_mask=self._prompt_mask(part))
            if with_rewards:  # the warm start's probe scores answers only: no reward plug-in runs in init
                rewards.append(self._rewards(out, answers, list(range(start, start + len(part)))))
            correct += [same(self.problems.decode(row), a) for row, a in zip(out.completion, answers, strict=True)]
            lengths.append(out.mask.sum(1))
        return correct, rewards, lengths

    # ---- FLOPs and the phase report ---------------------------------------------------------------------

    def tokens_per_sample(self) -> int:
        """Positions the update's forward computes for one prompt: G sequences of prompt + completion - 1."""
        return self.cfg.group_size * (self._prompt_width() + self.sampling.max_new_tokens - 1)

    def _prompt_width(self) -> int:
        """Prompt tokens a sample's FLOPs count: the fixed length, or a data set's mean (left-padded batches)."""
        return int(getattr(self.problems, "typical_prompt_len", self.problems.prompt_len))

    def flops_per_sample(self) -> float:
        """The update of one prompt's G full-length completions: 6N per position plus attention (12 L H Q T, the
        repo's `full` convention), what the harness's MFU divides; the phases carry the measured split."""
        cfg, width = self.model_cfg, self._prompt_width() + self.sampling.max_new_tokens - 1
        attention = 12.0 * cfg.n_layer * cfg.n_head * cfg.head_size * width
        return self.tokens_per_sample() * (6.0 * self._n_active + attention)

    def train_samples(self) -> int:
        """Distinct training problems (MLLOG train_samples): a data set's size, or what the generator can draw."""
        if hasattr(self.problems, "train_size"):
            return int(self.problems.train_size)
        return 10 ** (2 * self.problems.cfg.digits) - len(self.eval_problems)

    def eval_samples(self) -> int:
        return len(self.eval_problems)

    def mllog_samples_per_sample(self) -> int:
        """MLPerf's GRPO samples are completions: each of a step's prompts is G of them in the log's samples_count
        (the result's `samples` stay prompts, the unit of data.batch_size)."""
        return self.cfg.group_size

    def mllog_hyperparameters(self) -> dict[str, Any]:
        """The GRPO keys of MLPerf Training 6.1's qwen35_397b_grpo rules (its global batch counts completions)."""
        opt, cfg = self.spec.optimizer.params(), self.cfg
        prompts = self.spec.data.batch_size * cfg.minibatches
        betas = opt.get("betas", (0.9, 0.999))
        sched = self.spec.schedule
        return {"global_batch_size": prompts * cfg.group_size, "num_prompts_per_step": prompts,
                "num_generations_per_prompt": cfg.group_size,
                "generation_training_rollout_temperature": cfg.rollout.temperature,
                "generation_training_rollout_top_p": cfg.rollout.top_p,
                "generation_validation_rollout_temperature": cfg.eval_sampling.temperature,
                "generation_validation_rollout_top_p": cfg.eval_sampling.top_p,
                "max_sequence_length": self.problems.prompt_len + cfg.rollout.max_new_tokens,
                "init_checkpoint_step": 0, "max_steps": self.spec.budget.max_steps or 0,
                "opt_adamw_beta_1": float(betas[0]), "opt_adamw_beta_2": float(betas[1]),
                "opt_adamw_epsilon": float(opt.get("eps", 1e-8)),
                "opt_adamw_weight_decay": float(opt.get("weight_decay", 0.0)),
                "opt_gradient_clip_norm": float(self.spec.backends.get("torch", {}).get("grad_clip") or 0.0),
                "opt_learning_rate_warmup_steps": int(getattr(sched, "warmup_steps", 0) or 0),
                "opt_learning_rate_decay_schedule": getattr(sched, "name", None) or "constant"}

    def phase_report(self, peak_flops_per_s: float | None, dtype: str) -> dict[str, Any]:
        report = self.clock.report(peak_flops_per_s, dtype)
        report["placement"] = self.cfg.placement
        if self.warm_start_report is not None:  # what the untimed supervised phase took (same for every run seed)
            report["warm_start"] = self.warm_start_report
        return report


def _grader(problems: Any) -> Any:
    """Whether a completion is correct: the built-in reward the problems name as their grader (GSM8K's: veRL's strict
    `#### N` rule, suite/algorithms/grpo_rewards.py) scoring 1, else the problems' own `correct`, else equal text."""
    if (name := getattr(problems, "grader", None)) is not None:
        reward = getattr(grpo_rewards, name)
        return lambda text, answer: reward(text, answer) == 1.0
    return getattr(problems, "correct", lambda text, answer: text == answer)
