"""The environment contract of a multi-turn, tool-using rollout, and the rollout itself.

An `Environment` gives a first observation (`reset`), takes the policy's action (one turn of text, a tool call)
and returns the tool's output as the next observation (`step`), until it says the episode is done; `reward` then
scores the episode. The rollout (`rollout`) drives a batch of environments with one policy: each turn it generates
every live episode's action (to the stop token), runs the tools, and appends the observation's tokens to the
context. The trajectory keeps every turn (action, observation, tool seconds, why the tool stopped), and the token
batch it yields marks the policy's own tokens 1 and the prompt and tool-output tokens 0 in `mask`: the GRPO loss
(suite/algorithms/grpo.py, `aggregate` over `mask`) never has a tool-output token as a target, as NeMo-RL's
token_loss_mask does for environment messages. `SingleTurn` is the one-turn case: an existing reward plug-in
(fn(completion, answer) -> float) scores the single action, which ends the episode.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn

from suite.models.common.generation import Sampling, generate


@dataclass
class StepResult:
    observation: str
    done: bool
    tool: str | None = None  # the tool the action called (None: no tool, e.g. a malformed action)
    tool_s: float = 0.0  # wall seconds the tool ran
    reason: str = "ok"  # how the tool's run ended: ok, wall_timeout, cpu_limit, path_escape, ...


class Environment(Protocol):
    def reset(self) -> str: ...
    def step(self, action: str) -> StepResult: ...
    def reward(self) -> float: ...
    def close(self) -> None: ...


class Tokenizer(Protocol):
    pad_id: int
    stop_ids: list[int]

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass
class Turn:
    action: str
    observation: str
    tool: str | None
    tool_s: float
    reason: str
    action_tokens: int
    observation_tokens: int


@dataclass
class Trajectory:
    """One episode: the prompt, its turns, the reward, and why it ended (done, max_turns, context_full)."""

    prompt: str
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    end: str = "running"
    reward_s: float = 0.0

    @property
    def policy_tokens(self) -> int:
        return sum(t.action_tokens for t in self.turns)

    @property
    def tool_tokens(self) -> int:
        return sum(t.observation_tokens for t in self.turns)

    @property
    def tool_s(self) -> float:
        return sum(t.tool_s for t in self.turns)

    def record(self) -> dict:
        return {"turns": len(self.turns), "policy_tokens": self.policy_tokens, "tool_tokens": self.tool_tokens,
                "tool_s": self.tool_s, "reward": self.reward, "end": self.end,
                "reasons": [t.reason for t in self.turns]}


@dataclass
class Rollout:
    """A batch of episodes as tensors for the update: `sequences` (B, P + T) = the left-padded prompts then the
    turns (right-padded), `prompt_mask` (B, P) False on the left padding, `mask` (B, T) 1 on the policy's tokens
    only, `logprobs` (B, T) the sampler's log-probabilities of them (0 elsewhere), `rewards` (B,)."""

    sequences: torch.Tensor
    prompt_mask: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    trajectories: list[Trajectory]
    gen_s: float = 0.0
    tool_s: float = 0.0
    reward_s: float = 0.0
    gen_tokens: int = 0
    forward_positions: int = 0  # positions computed by generation (prefills and generated tokens), for FLOPs

    @property
    def prompt_len(self) -> int:
        return self.prompt_mask.shape[1]


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    keys = torch.zeros((len(rows), width), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        keys[i, width - len(r) :] = True
    return ids, keys


def rollout(policy: nn.Module, envs: Sequence[Environment], tok: Tokenizer, sampling: Sampling,
            gen: torch.Generator, max_turns: int, context: int, tool_workers: int = 1) -> Rollout:
    """Run every environment to its end (done, `max_turns` actions, or a context of `context` tokens full) with
    `policy` sampling each turn's action; return the token batch and the trajectories. `tool_workers` > 1 runs a
    turn's tools (and the rewards) of different episodes at once in threads (a tool that waits on a child process
    releases the GIL); the results are placed by episode, so the batch is the same for any number of workers."""
    prompts = [tok.encode(env.reset()) for env in envs]
    trajs = [Trajectory(prompt=tok.decode(p)) for p in prompts]
    body: list[list[int]] = [[] for _ in envs]
    body_mask: list[list[float]] = [[] for _ in envs]
    body_logp: list[list[float]] = [[] for _ in envs]
    live = list(range(len(envs)))
    gen_s = tool_s = 0.0
    gen_tokens = positions = 0
    stop = set(tok.stop_ids)
    for _turn in range(max_turns):
        live = [i for i in live if len(prompts[i]) + len(body[i]) < context]
        if not live:
            break
        room = min(context - len(prompts[i]) - len(body[i]) for i in live)
        s = sampling.model_copy(update={"max_new_tokens": max(1, min(sampling.max_new_tokens, room))})
        ids, keys = _left_pad([prompts[i] + body[i] for i in live], tok.pad_id)
        t = time.perf_counter()
        out = generate(policy, ids, s, gen, pad_id=tok.pad_id, prompt_mask=keys)
        gen_s += time.perf_counter() - t
        gen_tokens += out.tokens
        positions += int(keys.sum()) + out.tokens
        still: list[int] = []
        actions: list[tuple[int, list[int], str]] = []
        for row, i in enumerate(live):
            n = int(out.mask[row].sum())
            action_ids = out.completion[row, :n].tolist()
            body[i] += action_ids
            body_mask[i] += [1.0] * n
            body_logp[i] += out.logprobs[row, :n].tolist()
            actions.append((i, action_ids, tok.decode([a for a in action_ids if a not in stop])))
        t = time.perf_counter()
        results = _map(lambda a: envs[a[0]].step(a[2]), actions, tool_workers)
        tool_s += time.perf_counter() - t
        for (i, action_ids, text), res in zip(actions, results, strict=True):
            n = len(action_ids)
            obs_ids = tok.encode(res.observation)
            body[i] += obs_ids
            body_mask[i] += [0.0] * len(obs_ids)
            body_logp[i] += [0.0] * len(obs_ids)
            trajs[i].turns.append(Turn(text, res.observation, res.tool, res.tool_s, res.reason, n, len(obs_ids)))
            if res.done:
                trajs[i].end = "done"
            else:
                still.append(i)
        live = still
    for tr in trajs:
        if tr.end == "running":
            tr.end = "max_turns" if len(tr.turns) >= max_turns else "context_full"

    def score(i: int) -> float:
        t = time.perf_counter()
        trajs[i].reward = float(envs[i].reward())
        trajs[i].reward_s = time.perf_counter() - t
        return trajs[i].reward

    t = time.perf_counter()
    _map(score, list(range(len(envs))), tool_workers)
    reward_s = time.perf_counter() - t  # wall seconds of the reward phase
    return _batch(prompts, body, body_mask, body_logp, trajs, tok.pad_id, context, gen_s, tool_s, reward_s,
                  gen_tokens, positions)


def _map(fn: Callable, items: list, workers: int) -> list:
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="tool") as pool:
        return list(pool.map(fn, items))


def _batch(prompts, body, body_mask, body_logp, trajs, pad, context, gen_s, tool_s, reward_s, gen_tokens,
           positions) -> Rollout:
    p_ids, p_keys = _left_pad(prompts, pad)
    # every batch is as wide as the context: the update's FLOPs are then the same each step (the analytic figure
    # the harness divides is exact), at the price of computing the padding
    width = max(1, context - p_ids.shape[1], max(len(b) for b in body)) if context > p_ids.shape[1] else \
        max(1, max(len(b) for b in body))
    width = min(width, context - p_ids.shape[1]) if context > p_ids.shape[1] else width
    seq = torch.full((len(body), width), pad, dtype=torch.long)
    mask = torch.zeros((len(body), width))
    logp = torch.zeros((len(body), width))
    for i, b in enumerate(body):
        n = min(len(b), width)
        seq[i, :n] = torch.tensor(b[:n], dtype=torch.long)
        mask[i, :n] = torch.tensor(body_mask[i][:n])
        logp[i, :n] = torch.tensor(body_logp[i][:n])
    rewards = torch.tensor([t.reward for t in trajs])
    return Rollout(torch.cat((p_ids, seq), 1), p_keys, mask, logp, rewards, trajs, gen_s, tool_s, reward_s,
                   gen_tokens, positions)


class SingleTurn:
    """The one-turn case: the prompt is the observation, the policy's one action is the completion, an existing
    GRPO reward plug-in (suite/algorithms/grpo_rewards.py) scores it against the answer."""

    def __init__(self, prompt: str, answer: str, reward_fn: Callable[[str, str], float]):
        self.prompt, self.answer, self.reward_fn = prompt, answer, reward_fn
        self.completion: str | None = None

    def reset(self) -> str:
        self.completion = None
        return self.prompt

    def step(self, action: str) -> StepResult:
        self.completion = action
        return StepResult("", True)

    def reward(self) -> float:
        return float(self.reward_fn(self.completion or "", self.answer))

    def close(self) -> None:
        pass
