"""Sampling from the suite's causal LMs for RL rollouts: temperature, top-p, max new tokens and stop tokens, with
a key/value cache (one `LayerCache` per layer, suite/models/common/layers.py) or, for checking it, by recomputing the
whole sequence at every step. The log-probability of each sampled token is that of the temperature-scaled full
softmax (veRL's actor divides the logits by the temperature the same way), not of the top-p truncated one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from suite.models.common.layers import LayerCache


class Sampling(BaseModel):
    model_config = ConfigDict(extra="forbid")
    temperature: float = Field(default=1.0, ge=0, description="0: greedy")
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=16, gt=0)
    stop_tokens: list[int] = Field(default_factory=list, description="ids that end a completion (kept in it)")


@dataclass
class Generated:
    """B completions of prompts of length P. completion[i, j] is the j-th new token (pad after a stop), mask 1 on
    the tokens generated (the stop token included), logprobs their log-probabilities under the sampling policy."""

    prompts: torch.Tensor  # (B, P)
    completion: torch.Tensor  # (B, T) long
    logprobs: torch.Tensor  # (B, T) float32
    mask: torch.Tensor  # (B, T) float32
    steps: int  # forward passes after the prefill
    attended: int  # sum over the generated tokens of the positions each attended to (attention FLOPs)

    @property
    def sequences(self) -> torch.Tensor:
        return torch.cat((self.prompts, self.completion), dim=1)

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def _n_layers(model: nn.Module) -> int:
    layers = getattr(model, "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__} has no `layers`: KV-cached generation needs the suite's Llama "
                        "(suite/models/llama/model.py); pass use_cache=False to recompute each step")
    return len(layers)


def sample_next(logits: torch.Tensor, s: Sampling, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(token, its log-probability) per row of (B, V) logits."""
    logits = logits.float()
    if s.temperature == 0:
        token = logits.argmax(-1)
        return token, torch.log_softmax(logits, -1).gather(-1, token[:, None])[:, 0]
    logp = torch.log_softmax(logits / s.temperature, -1)
    probs = logp.exp()
    if s.top_p < 1.0:  # the smallest set of most likely tokens whose mass reaches top_p
        sorted_p, order = probs.sort(-1, descending=True)
        drop = sorted_p.cumsum(-1) - sorted_p >= s.top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    token = torch.multinomial(probs, 1, generator=gen)[:, 0]
    return token, logp.gather(-1, token[:, None])[:, 0]


@torch.no_grad()
def generate(model: nn.Module, prompts: torch.Tensor, s: Sampling, gen: torch.Generator | None = None,
             pad_id: int = 0, use_cache: bool = True, prompt_mask: torch.Tensor | None = None) -> Generated:
    """Sample up to s.max_new_tokens after each row of `prompts` (B, P): equal lengths, or left-padded with
    `prompt_mask` (B, P) bool False on the padding, which the model then never attends to."""
    was_training = model.training
    model.eval()
    b, p = prompts.shape
    cache = [LayerCache() for _ in range(_n_layers(model))] if use_cache else None
    stop = torch.tensor(s.stop_tokens, dtype=torch.long, device=prompts.device)
    done = torch.zeros(b, dtype=torch.bool, device=prompts.device)
    tokens: list[torch.Tensor] = []
    logps: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    seq = prompts
    keys = prompt_mask.to(prompts.device) if prompt_mask is not None else None
    extra = {"keys": keys} if keys is not None else {}
    logits = model(prompts, cache, **extra) if use_cache else model(prompts, **extra)
    steps, attended = 0, 0
    for j in range(s.max_new_tokens):
        token, logp = sample_next(logits[:, -1], s, gen)
        live = ~done
        attended += int(live.sum()) * (p + j)  # this token's query row attended to the p + j positions before it
        tokens.append(torch.where(live, token, torch.full_like(token, pad_id)))
        logps.append(torch.where(live, logp, torch.zeros_like(logp)))
        masks.append(live.float())
        if stop.numel():
            done = done | torch.isin(token, stop)
        if bool(done.all()) or j == s.max_new_tokens - 1:
            break
        nxt = tokens[-1][:, None]
        seq = torch.cat((seq, nxt), dim=1)
        if keys is not None:
            keys = torch.cat((keys, torch.ones_like(keys[:, :1])), dim=1)
            extra = {"keys": keys}
        logits = model(nxt, cache, **extra) if use_cache else model(seq, **extra)
        steps += 1
    model.train(was_training)
    return Generated(prompts, torch.stack(tokens, 1), torch.stack(logps, 1), torch.stack(masks, 1), steps, attended)


def token_logprobs(model: nn.Module, sequences: torch.Tensor, prompt_len: int, temperature: float = 1.0,
                   prompt_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probabilities (B, T) of the completion tokens sequences[:, prompt_len:] under `model`, logits divided by
    the sampling temperature (1 for greedy). Differentiable: the GRPO loss and old/ref log-probs use it.
    prompt_mask: (B, prompt_len) bool, False on left padding (masked out of attention)."""
    if prompt_mask is None:
        logits = model(sequences[:, :-1])
    else:
        done = torch.ones(sequences.shape[0], sequences.shape[1] - prompt_len, dtype=torch.bool,
                          device=sequences.device)
        keys = torch.cat((prompt_mask.to(sequences.device), done), dim=1)[:, :-1]
        logits = model(sequences[:, :-1], keys=keys)
    logits = logits[:, prompt_len - 1 :].float()
    if temperature > 0:
        logits = logits / temperature
    targets = sequences[:, prompt_len:]
    return torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
