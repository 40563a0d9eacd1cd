"""The LoRA memory estimator (suite/measure/memory_lora.py) against torch's MemTracker on the CPU, and the layout
the full llama2_70b_lora spec needs on 8 x H100 80 GB."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
import torch.utils.hooks as hooks
from support.memtrack import in_fresh_process, second_step_peak
from support.promised import require

from suite.measure import memory, memory_lora
from suite.models.common import configs as common_configs
from suite.models.hf import config as hf_config_mod
from suite.models.hf import pretrained

torch.set_num_threads(1)
MICRO, VOCAB = 8, 256


def _cfg(dropout: float = 0.1, **kw) -> hf_config_mod.Config:  # kw: fused_qkv
    return hf_config_mod.Config(**{"preset": "llama3.1-tiny", "seq_len": 128, **kw}, lora=common_configs.LoraConfig(
        rank=4, alpha=8, dropout=dropout, target_modules=["qkv_proj", "o_proj"]))


def allow_frozen_hooks(monkeypatch) -> None:
    """MemTracker hooks every parameter's gradient; a frozen one refuses hooks (it never gets a gradient): let
    those registrations be no-ops, the storages are still tracked."""
    keep: OrderedDict = OrderedDict()
    for name in ("register_hook", "register_post_accumulate_grad_hook"):
        orig = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, hook, orig=orig: orig(self, hook) if self.requires_grad
                            else hooks.RemovableHandle(keep))


def fresh_measure(dtype: str, ac: str, fused: bool = False) -> list[int]:
    """In a fresh interpreter (support.memtrack.in_fresh_process): [peak bytes, the optimizer state's bytes]."""
    allow_frozen_hooks(pytest.MonkeyPatch())
    got, opt = measured_peak(_cfg(fused_qkv=fused), getattr(torch, dtype), ac)
    return [got, sum(t.numel() * t.element_size() for s in opt.state.values() for k, t in s.items() if k != "step")]


def measured_peak(cfg: hf_config_mod.Config, dtype: torch.dtype, ac: str) -> tuple[int, torch.optim.Optimizer]:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    torch.manual_seed(0)
    model = pretrained.build(cfg, {}).to(dtype)
    if ac == "full":
        for i, block in enumerate(model.layers):
            model.layers[i] = checkpoint_wrapper(block, preserve_rng_state=False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    x, y = (torch.randint(0, VOCAB, (MICRO, cfg.seq_len)) for _ in range(2))

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, VOCAB).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return second_step_peak(step, model, opt), opt


CASES = [(d, a) for d in ("float32", "bfloat16") for a in ("none", "full")]
FUSED = ("float32", "none")  # model.fused_qkv: one adapter on wqkv, whose output v keeps held whole


@pytest.fixture(scope="module")
def fresh_peaks() -> dict:
    """Every case's [peak, optimizer-state bytes], from one fresh interpreter (support.memtrack.in_fresh_process)."""
    require("peft")
    got = in_fresh_process("test_memory_lora", f"[fresh_measure(d, a) for d, a in {CASES!r}] "
                                               f"+ [fresh_measure(*{FUSED!r}, fused=True)]")
    return dict(zip([*CASES, ("fused", *FUSED)], got, strict=True))


@pytest.mark.parametrize("ac", ["none", "full"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_estimate_is_within_ten_percent_of_torchs_measured_peak(dtype, ac, fresh_peaks):
    require("peft")
    est = memory_lora.estimate_lora(_cfg(), micro_batch=MICRO, dtype=dtype, ac=ac)
    got, slots = fresh_peaks[dtype, ac]
    assert 0.9 <= est.peak_bytes / got <= 1.1, (est.as_dict(), got)
    # the frozen base has no optimizer state: only the adapters' two AdamW slots, exactly
    assert est.optimizer_bytes == slots


def test_fused_qkv_estimate_is_within_ten_percent_of_torchs_measured_peak(fresh_peaks):
    require("peft")
    est = memory_lora.estimate_lora(_cfg(fused_qkv=True), micro_batch=MICRO, dtype=FUSED[0], ac=FUSED[1])
    got, slots = fresh_peaks[("fused", *FUSED)]
    assert 0.9 <= est.peak_bytes / got <= 1.1, (est.as_dict(), got)
    assert est.optimizer_bytes == slots  # one adapter's A on wqkv, not three
    split = memory_lora.estimate_lora(_cfg(), micro_batch=MICRO, dtype=FUSED[0], ac=FUSED[1])
    assert est.optimizer_bytes < split.optimizer_bytes


def test_full_spec_layout_fits_8_h100_with_zero3_and_checkpointing_only():
    """MLPerf's reference (DeepSpeed ZeRO-3 over 8 GPUs, gradient checkpointing, 1 x 8192 tokens a GPU, bf16):
    ~35 GiB a GPU. Without checkpointing the 80 layers' activations do not fit; unsharded the 138 GB of bf16
    weights alone do not. docs/workloads.md quotes these figures."""
    from suite import registry
    from suite.specload import load_spec

    spec = load_spec(registry.workload_files()["nlp/llama2_70b_lora"])
    h100 = 80 * 10**9

    def fit(**kw):
        return memory.fits(memory_lora.estimate_spec(spec, **kw), h100)

    zero3 = fit(**memory_lora.REFERENCE_LAYOUT)
    assert zero3.fits and 25 * memory.GIB < zero3.estimate.peak_bytes < 45 * memory.GIB, zero3.reason
    assert not fit(shard=8, ac="none").fits
    assert not fit(shard=1, ac="full").fits
    assert fit(tp=8, ac="full").fits


def test_refusals_name_the_field():
    with pytest.raises(ValueError, match="dtype 'int8'"):
        memory_lora.estimate_lora(_cfg(), micro_batch=1, dtype="int8")
    with pytest.raises(ValueError, match="model.lora is not set"):
        memory_lora.estimate_lora(hf_config_mod.Config(preset="llama3.1-tiny"), micro_batch=1)
