"""KV-cached generation (suite/models/common/generation.py) against recomputing the whole sequence at every step."""

from __future__ import annotations

import pytest
import torch

from suite.models.common.generation import Sampling, generate, token_logprobs
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama

torch.set_num_threads(1)


def _model(dtype: torch.dtype = torch.float64, **overrides) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = llama_config.Config(preset="llama3.1-tiny", vocab_size=40, **overrides)
    return llama.build(cfg, {}).to(dtype)


@pytest.mark.parametrize("sampling", [
    Sampling(temperature=1.0, top_p=1.0, max_new_tokens=12),
    Sampling(temperature=0.7, top_p=0.9, max_new_tokens=12, stop_tokens=[3, 5]),
    Sampling(temperature=0.0, max_new_tokens=12),
])
def test_kv_cache_gives_the_tokens_and_logprobs_of_recomputation(sampling):
    model = _model()
    prompts = torch.randint(0, 40, (6, 7), generator=torch.Generator().manual_seed(3))
    cached = generate(model, prompts, sampling, torch.Generator().manual_seed(11), use_cache=True)
    full = generate(model, prompts, sampling, torch.Generator().manual_seed(11), use_cache=False)
    assert torch.equal(cached.completion, full.completion)
    assert torch.equal(cached.mask, full.mask)
    torch.testing.assert_close(cached.logprobs, full.logprobs, rtol=0, atol=1e-10)
    # and both are the log-probabilities a plain forward pass over the finished sequences gives (the loss's view)
    rescored = token_logprobs(model, cached.sequences, prompts.shape[1], sampling.temperature) * cached.mask
    torch.testing.assert_close(rescored.float(), cached.logprobs, rtol=0, atol=1e-6)


def test_stop_tokens_end_a_completion_and_mask_what_follows():
    model = _model()
    prompts = torch.randint(0, 40, (16, 5), generator=torch.Generator().manual_seed(4))
    out = generate(model, prompts, Sampling(max_new_tokens=10, stop_tokens=[1, 2, 3, 4, 5, 6]),
                   torch.Generator().manual_seed(0))
    for row, mask in zip(out.completion, out.mask, strict=True):
        n = int(mask.sum())
        stops = [j for j in range(n) if int(row[j]) in range(1, 7)]
        assert stops == ([n - 1] if n < out.completion.shape[1] else stops[-1:]), (row, mask)
        assert mask[:n].eq(1).all() and mask[n:].eq(0).all() and row[n:].eq(0).all()


def test_fp32_cache_matches_recomputation_closely():
    model = _model(torch.float32, n_kv_head=1)  # multi-query attention: one cached K/V head for all query heads
    prompts = torch.randint(0, 40, (4, 9), generator=torch.Generator().manual_seed(5))
    greedy = Sampling(temperature=0.0, max_new_tokens=10)
    cached, full = generate(model, prompts, greedy), generate(model, prompts, greedy, use_cache=False)
    assert torch.equal(cached.completion, full.completion)
    torch.testing.assert_close(cached.logprobs, full.logprobs, rtol=0, atol=1e-5)
