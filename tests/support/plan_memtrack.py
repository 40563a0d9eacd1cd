"""A CPU-sized Llama step measured by torch's MemTracker, for `trainbench plan`'s test (tests/plan/): the spec
tests/support/specs/tiny_llama.yaml (llama3.1-tiny: 2 x 64, GQA 4/2) at sequence 128, vocabulary 64, batch 4, fp32 AdamW,
trained as tests/measure/test_llm_memory.py measures the estimator's cases."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from support.memtrack import second_step_peak

TESTS = Path(__file__).resolve().parents[1]
SETS = {"model.vocab_size": 64, "model.seq_len": 128, "data.batch_size": 4}


def case_spec():
    from suite.specload import load_spec

    return load_spec(TESTS / "support" / "specs" / "tiny_llama.yaml", SETS)


def measured() -> int:
    """Peak bytes of the second training step of the spec's model (the optimizer's state exists)."""
    from suite.models.llama import config as llama_config
    from suite.models.llama import model as llama

    spec = case_spec()
    cfg = llama_config.Config.model_validate(spec.model.params())
    torch.manual_seed(0)
    model = llama.build(cfg, {})
    opt = torch.optim.AdamW(model.parameters())
    vocab, batch = SETS["model.vocab_size"], SETS["data.batch_size"]
    x, y = torch.randint(0, vocab, (batch, cfg.seq_len)), torch.randint(0, vocab, (batch, cfg.seq_len))

    def step() -> None:
        loss = F.cross_entropy(model(x).reshape(-1, vocab).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return second_step_peak(step, model, opt)
