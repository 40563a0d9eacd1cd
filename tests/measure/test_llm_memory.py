"""The Llama / MoE memory estimator (suite/measure/llm_memory.py) against torch's own count on the CPU (MemTracker,
as tests/measure/test_memory_estimate.py holds the GPT one), and each full LLM spec's layout against 8 x H100 80 GB."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.memtrack import in_fresh_process, second_step_peak

from suite import registry
from suite.measure import llm_memory, memory
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama
from suite.specload import load_spec

torch.set_num_threads(1)
H100 = 80 * 10**9
VOCAB, MICRO = 64, 4
DENSE = llama_config.Config(n_layer=2, d_model=64, n_head=4, n_kv_head=2, ffn_dim=160, seq_len=128, vocab_size=VOCAB)
MOE = llama_config.Config(n_layer=2, d_model=48, n_head=4, n_kv_head=2, head_dim=16, ffn_dim=48, seq_len=128,
                   vocab_size=VOCAB, moe={"experts": 8, "top_k": 2, "expert_ffn_dim": 48, "shared_experts": 1})
AUTOCAST = {"fp32": None, "bf16": torch.bfloat16}


def measured_peak(cfg: llama_config.Config, precision: str) -> int:
    """Peak bytes of the second training step (the optimizer's state exists, as in every later step)."""
    torch.manual_seed(0)
    model = llama.build(cfg, {})
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randint(0, VOCAB, (MICRO, cfg.seq_len)), torch.randint(0, VOCAB, (MICRO, cfg.seq_len))
    dtype = AUTOCAST[precision]

    def step() -> None:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), y.reshape(-1))  # LanguageModel.loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return second_step_peak(step, model, opt)


@pytest.fixture(scope="module")
def fresh_peaks() -> dict:
    """Every case's measured peak, from one fresh interpreter (support.memtrack.in_fresh_process)."""
    got = in_fresh_process("test_llm_memory", "[measured_peak(c, p) for c in (DENSE, MOE) for p in ('fp32', 'bf16')]")
    return dict(zip([(c, p) for c in ("DENSE", "MOE") for p in ("fp32", "bf16")], got, strict=True))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("cfg", [DENSE, MOE], ids=["gqa_swiglu", "moe_shared"])
def test_estimate_is_within_fifteen_percent_of_torchs_measured_peak(cfg, precision, fresh_peaks):
    est = llm_memory.estimate_llama(cfg, micro_batch=MICRO, vocab_size=VOCAB, precision=precision)
    got = fresh_peaks["MOE" if cfg is MOE else "DENSE", precision]
    assert 0.85 <= est.peak_bytes / got <= 1.15, (est.as_dict(), got)
    assert est.params == sum(p.numel() for p in llama.build(cfg, {}).parameters())


def test_gqa_and_expert_parallelism_shrink_what_they_should():
    mha = llm_memory.estimate_llama(DENSE.model_copy(update={"n_kv_head": 4}), micro_batch=MICRO, vocab_size=VOCAB)
    gqa = llm_memory.estimate_llama(DENSE, micro_batch=MICRO, vocab_size=VOCAB)
    assert gqa.params < mha.params and gqa.activations_bytes < mha.activations_bytes
    one = llm_memory.estimate_llama(MOE, micro_batch=MICRO, vocab_size=VOCAB, fsdp=8)
    ep = llm_memory.estimate_llama(MOE, micro_batch=MICRO, vocab_size=VOCAB, fsdp=8, ep=8)
    dense_part, expert_part = (sum(llm_memory.layer_params(MOE, i)[k] for i in range(2)) for k in (0, 1))
    assert one.optimizer_bytes == pytest.approx(((dense_part + 2 * VOCAB * 48 + 48) + expert_part) / 8 * 8, rel=1e-6)
    assert ep.optimizer_bytes == one.optimizer_bytes  # ep=8 within fsdp=8: experts on 8 devices either way
    alone = llm_memory.estimate_llama(MOE, micro_batch=MICRO, vocab_size=VOCAB, ep=8)  # ep without fsdp
    full = llm_memory.estimate_llama(MOE, micro_batch=MICRO, vocab_size=VOCAB)
    assert full.optimizer_bytes - alone.optimizer_bytes == pytest.approx(expert_part * 7 / 8 * 8, rel=1e-6)
    with pytest.raises(ValueError, match=r"ep=3 does not divide moe.experts \(8\)"):
        llm_memory.estimate_llama(MOE, micro_batch=1, vocab_size=VOCAB, ep=3)


@pytest.mark.parametrize("name", ["nlp/llama31_8b", "nlp/gpt_oss_20b"])
def test_each_full_spec_names_a_layout_that_fits_8_h100s(name):
    """The spec's `parallel` (fsdp=8 with full activation checkpointing, at its micro-batch) fits one H100 80 GB
    of the eight; the same without checkpointing, or without sharding, does not."""
    spec = load_spec(registry.workload_files()[name])
    assert spec.parallel is not None and spec.parallel.fsdp == 8
    fit = memory.fits(llm_memory.estimate_spec(spec), H100)
    assert fit.fits, fit.reason
    no_ac = spec.model_copy(update={"parallel": spec.parallel.model_copy(update={"ac": "none"})})
    assert not memory.fits(llm_memory.estimate_spec(no_ac), H100).fits
    one = spec.model_copy(update={"parallel": None})
    assert not memory.fits(llm_memory.estimate_spec(one), H100).fits


def test_gpt_oss_fits_with_the_references_expert_parallelism_too():
    """The reference's EP 8 (experts spread over the 8 devices, dense parts sharded by FSDP) at its MBS 2."""
    spec = load_spec(registry.workload_files()["nlp/gpt_oss_20b"], {"data.micro_batch_size": 2})
    est = llm_memory.estimate_llama_spec(spec, ep=8)
    assert memory.fits(est, H100).fits, memory.fits(est, H100).reason
    assert 20e9 < est.params < 22e9  # gpt-oss-20b with the Llama 3.1 vocabulary


def test_deepseek_v3_does_not_fit_8_h100s_in_any_layout():
    """671B parameters' weights and AdamW state alone are 16 B each: 10.7 TB, not 8 x 80 GB; the reference runs on
    256 GB300s (64 x 4, EP 64, PP 4)."""
    spec = load_spec(registry.workload_files()["nlp/deepseekv3_671b"])
    cfg = llama_config.Config.model_validate(spec.model.params())
    est = llm_memory.estimate_llama(cfg, micro_batch=1, vocab_size=129280, precision="bf16", ac="full", fsdp=8, ep=8)
    assert 650e9 < est.params < 700e9 and not memory.fits(est, H100).fits
    assert est.weights_bytes + est.optimizer_bytes > 8 * H100
