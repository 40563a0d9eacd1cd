"""The GPT memory estimator (suite/measure/memory.py) against torch's own count on the CPU.

torch's MemTracker (torch.distributed._tools.mem_tracker) follows every tensor storage a step allocates and frees
(a TorchDispatchMode), so its peak is what the step really held: weights, optimizer state, autocast's weight
copies, the activations autograd saved, the logits, the gradients. The estimate must land within 10% of it, in
fp32 and bf16 autocast, with and without activation checkpointing, on a config whose activations dominate.
"""

from __future__ import annotations

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from suite import registry
from suite.backends.parallel.checkpoint import apply_ac
from suite.measure import memory
from suite.models.gpt import model as gpt
from suite.specload import load_spec

torch.set_num_threads(1)
# activation-heavy: 8 x 128 tokens through 2 blocks; the loss reads 90 of 96 logits (a padded vocabulary)
CFG = gpt.Config(n_layer=2, n_head=4, d_model=96, seq_len=128, vocab_size=96, bias=True, gelu="tanh")
MICRO, REAL_VOCAB = 8, 90
AUTOCAST = {"fp32": None, "bf16": torch.bfloat16}


def _model(ac: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = gpt.build(CFG, {})
    if ac != "none":
        apply_ac(model, ac)
    return model


def measured_peak(precision: str, ac: str) -> int:
    """Peak bytes of the second training step (the optimizer's state exists, as in every later step)."""
    model = _model(ac)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randint(0, REAL_VOCAB, (MICRO, CFG.seq_len))
    y = torch.randint(0, REAL_VOCAB, (MICRO, CFG.seq_len))
    dtype = AUTOCAST[precision]

    def step() -> None:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            logits = model(x)[..., :REAL_VOCAB]  # as LanguageModel.loss cuts a padded vocabulary
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, REAL_VOCAB).float(), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        step()
    return int(tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"])


@pytest.mark.parametrize("ac", ["none", "full"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_estimate_is_within_ten_percent_of_torchs_measured_peak(precision, ac):
    est = memory.estimate_gpt(CFG, micro_batch=MICRO, precision=precision, optimizer="adamw", ac=ac,
                              real_vocab=REAL_VOCAB)
    got = measured_peak(precision, ac)
    assert 0.9 <= est.peak_bytes / got <= 1.1, (est.as_dict(), got)
    if ac == "none":  # the activations and logits are most of it: the test holds their model, not the state's
        assert est.activations_bytes + est.logits_bytes > 0.6 * est.peak_bytes


def test_checkpointing_saves_what_torch_saves():
    """The drop that full checkpointing brings, estimated against measured (a relative figure, same config)."""
    for precision in ("fp32", "bf16"):
        est = {ac: memory.estimate_gpt(CFG, micro_batch=MICRO, precision=precision, ac=ac, real_vocab=REAL_VOCAB)
               for ac in ("none", "full")}
        got = {ac: measured_peak(precision, ac) for ac in ("none", "full")}
        est_drop = est["none"].peak_bytes - est["full"].peak_bytes
        got_drop = got["none"] - got["full"]
        assert got_drop > 0 and est_drop == pytest.approx(got_drop, rel=0.25), (precision, est_drop, got_drop)


def test_parameters_and_optimizer_state_are_exact():
    model = _model("none")
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randint(0, 96, (1, 8))).sum().backward()
    opt.step()
    est = memory.estimate_gpt(CFG, micro_batch=1, precision="fp32", optimizer="adamw")
    assert est.params == sum(p.numel() for p in model.parameters())
    slots = sum(t.numel() * t.element_size() for s in opt.state.values() for k, t in s.items() if k != "step")
    assert est.optimizer_bytes == slots
    assert est.weights_bytes == est.grads_bytes == est.params * 4
    master = memory.estimate_gpt(CFG, micro_batch=1, precision="bf16_master")
    assert master.weights_bytes == est.params * (2 + 4)  # bf16 weights and fp32 masters


def test_activations_scale_with_micro_batch_and_sequence():
    one = memory.estimate_gpt(CFG, micro_batch=1, precision="bf16")
    four = memory.estimate_gpt(CFG, micro_batch=4, precision="bf16")
    assert four.activations_bytes == 4 * one.activations_bytes and four.logits_bytes == 4 * one.logits_bytes
    assert four.optimizer_bytes == one.optimizer_bytes


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="precision 'int4'"):
        memory.estimate_gpt(CFG, micro_batch=1, precision="int4")
    with pytest.raises(ValueError, match="ac 'some'"):
        memory.estimate_gpt(CFG, micro_batch=1, ac="some")
    with pytest.raises(ValueError, match="memory estimator models the gpt"):
        memory.estimate_spec(load_spec(registry.workload_files()["cv/digits_cnn"]))


def test_full_tier_gpt2_fits_an_80gb_device_at_its_micro_batch_and_not_without_accumulation():
    """The full tier's "fits the device" check for nlp/gpt2_124m (docs/workloads.md quotes these figures)."""
    path = registry.workload_files()["nlp/gpt2_124m"]
    spec = load_spec(path)
    fit = memory.fits(memory.estimate_spec(spec), 80 * 10**9)
    assert fit.fits, fit.reason
    assert 20 * memory.GIB < fit.estimate.peak_bytes < 40 * memory.GIB, fit.estimate.as_dict()
    whole = memory.fits(memory.estimate_spec(load_spec(path, {"data.micro_batch_size": 512})), 141 * 10**9)
    assert not whole.fits and "does NOT fit" in whole.reason  # 512 x 1024 tokens at once: not even on an H200
