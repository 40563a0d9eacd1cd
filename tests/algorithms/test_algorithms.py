"""Built-in algorithms: each trains on real data (digits) and matches its published definition."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch import nn

from suite.algorithms import compression, compression_methods, losses, optimizers, precision, schedules
from suite.algorithms.lion import Lion
from suite.algorithms.muon import Muon, zeropower_via_newtonschulz5
from suite.spec import CompressionSpec, LossSpec, OptimizerSpec, ScheduleSpec

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    bunch = load_digits()
    x = torch.tensor(bunch.data / 16.0, dtype=torch.float32)
    y = torch.tensor(bunch.target, dtype=torch.int64)
    return x[:1024], y[:1024]


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def train(model: nn.Module, opt: torch.optim.Optimizer, data, steps: int = 150, after_step=None,
          loss_fn=F.cross_entropy) -> tuple[float, float]:
    """Full-batch-ish training on real digits: (loss before, loss after, both on the same 1,024 samples)."""
    x, y = data
    with torch.no_grad():
        first = float(F.cross_entropy(model(x), y))
    g = torch.Generator().manual_seed(0)
    for step in range(1, steps + 1):
        idx = torch.randint(0, x.shape[0], (128,), generator=g)
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
        if after_step:
            after_step(step)
    with torch.no_grad():
        last = float(F.cross_entropy(model(x), y))
    return first, last


# ---- optimizers ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,lr,extra", [
    ("adamw", 3e-3, {}), ("sgd_nesterov", 0.1, {}), ("lion", 1e-3, {}), ("muon", 0.02, {"adamw_lr": 3e-3}),
])
def test_builtin_optimizer_trains(name, lr, extra, digits):
    model = mlp()
    opt = optimizers.build_optimizer(OptimizerSpec(name=name, lr=lr, **extra), model.parameters())
    first, last = train(model, opt, digits)
    assert last < 0.5 * first, f"{name}: loss {first:.3f} -> {last:.3f}"


def test_lion_one_step_matches_the_update_rule():
    torch.manual_seed(1)
    p = nn.Parameter(torch.randn(5, 3))
    m0 = torch.randn(5, 3)
    g = torch.randn(5, 3)
    lr, b1, b2, wd = 0.01, 0.9, 0.99, 0.1
    opt = Lion([p], lr=lr, betas=(b1, b2), weight_decay=wd)
    opt.state[p]["exp_avg"] = m0.clone()
    p0 = p.detach().clone()
    p.grad = g.clone()
    opt.step()
    c = b1 * m0 + (1 - b1) * g  # Chen et al. 2023, Algorithm 2
    expected = p0 - lr * (torch.sign(c) + wd * p0)
    torch.testing.assert_close(p.detach(), expected)
    torch.testing.assert_close(opt.state[p]["exp_avg"], b2 * m0 + (1 - b2) * g)


def test_sgd_nesterov_matches_the_update_rule():
    torch.manual_seed(2)
    p = nn.Parameter(torch.randn(4))
    lr, mu = 0.1, 0.9
    opt = optimizers.build_optimizer(OptimizerSpec(name="sgd_nesterov", lr=lr), [p])
    v = torch.zeros(4)
    theta = p.detach().clone()
    for _ in range(3):
        g = torch.randn(4)
        p.grad = g.clone()
        opt.step()
        v = mu * v + g
        theta = theta - lr * (g + mu * v)  # Nesterov in torch's (Sutskever) form
    torch.testing.assert_close(p.detach(), theta)


@pytest.mark.parametrize("shape", [(64, 64), (32, 128), (200, 50)])
def test_newton_schulz_is_near_orthogonal(shape):
    torch.manual_seed(3)
    g = torch.randn(*shape)
    x = zeropower_via_newtonschulz5(g, steps=5)
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    # x = U diag(f(s)) V^T: read f(s) in g's singular basis. The quintic coefficients push every singular
    # value above ~1% of ||g||_F into about [0.68, 1.13] (not exactly 1: speed over exactness); the few
    # below that (a square Gaussian's smallest) grow ~3.4^5-fold but stay under 1 -- the known trade-off.
    f = torch.diag(u.T @ x @ vh.T)
    kept = s / g.norm() > 0.01
    assert int(kept.sum()) >= 0.9 * len(s)
    assert float(f[kept].min()) > 0.6 and float(f[kept].max()) < 1.25, f
    assert float(torch.linalg.svdvals(x).max()) < 1.25
    polar = u @ vh  # the exact orthogonal factor Muon approximates
    assert float((x * polar).sum() / (x.norm() * polar.norm())) > 0.97


def test_muon_update_is_orthogonal_and_the_rest_is_adamw():
    torch.manual_seed(4)
    w = nn.Parameter(torch.randn(48, 16))
    b = nn.Parameter(torch.randn(48))
    lr = 0.02
    opt = Muon([w, b], lr=lr, momentum=0.95, adamw_lr=1e-2, adamw_betas=(0.9, 0.95), weight_decay=0.0)
    ref_b = nn.Parameter(b.detach().clone())
    ref = torch.optim.AdamW([ref_b], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    w0 = w.detach().clone()
    for _ in range(3):
        gw, gb = torch.randn(48, 16), torch.randn(48)
        w.grad, b.grad, ref_b.grad = gw, gb.clone(), gb.clone()
        w_before = w.detach().clone()
        opt.step()
        ref.step()
    update = (w_before - w.detach()) / lr / math.sqrt(48 / 16)  # undo Muon's sqrt(rows/cols) scale
    sv = torch.linalg.svdvals(update)
    assert float(sv.min()) > 0.6 and float(sv.max()) < 1.25, sv
    assert not torch.equal(w.detach(), w0)
    torch.testing.assert_close(b.detach(), ref_b.detach(), rtol=1e-5, atol=1e-6)


def test_muon_flattens_conv_filters():
    conv = nn.Conv2d(3, 8, 3)
    opt = Muon(conv.parameters(), lr=0.02)
    assert [g["use_muon"] for g in opt.param_groups] == [True, False]
    conv(torch.randn(2, 3, 8, 8)).sum().backward()
    opt.step()
    assert torch.isfinite(conv.weight).all()


def test_optimizer_errors_name_the_field(tmp_path, monkeypatch):
    (tmp_path / "notopt.py").write_text("class NotAnOptimizer:\n    def __init__(self, params, lr):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = {
        "nosuchpkg.mod:Opt": "cannot import module",
        "notopt:NotAnOptimizer": "not a torch.optim.Optimizer subclass",
        "notopt:Missing": "has no attribute",
        "rmsprop": "unknown optimizer",
    }
    for name, message in cases.items():
        problems = optimizers.check(OptimizerSpec(name=name, lr=0.1))
        assert problems and problems[0][0] == "optimizer.name" and message in problems[0][1], (name, problems)
    problems = optimizers.check(OptimizerSpec(name="lion", lr=0.1, momentum=0.9))
    assert problems == [("optimizer", "Lion takes no momentum (it takes: lr, betas, weight_decay)")]


# ---- schedules --------------------------------------------------------------------------------------------


def test_schedules_follow_their_definitions(tmp_path, monkeypatch):
    const = schedules.lr_multiplier(ScheduleSpec(name="constant", warmup_steps=4), 100)
    assert [const(s) for s in (0, 3, 4, 99)] == [0.25, 1.0, 1.0, 1.0]
    cos = schedules.lr_multiplier(ScheduleSpec(name="cosine", min_lr_ratio=0.1), 100)
    assert cos(0) == pytest.approx(1.0) and cos(50) == pytest.approx(0.55) and cos(100) == pytest.approx(0.1)
    wsd = schedules.lr_multiplier(ScheduleSpec(name="wsd", warmup_steps=10, decay_fraction=0.2), 100)
    assert wsd(5) == pytest.approx(0.6) and wsd(10) == 1.0 and wsd(79) == 1.0
    assert wsd(90) == pytest.approx(0.5) and wsd(100) == pytest.approx(0.0)
    (tmp_path / "mysched.py").write_text("def halve(step, total):\n    return 0.5 if step >= total // 2 else 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    user = schedules.lr_multiplier(ScheduleSpec(name="mysched:halve"), 10)
    assert [user(s) for s in (0, 4, 5, 9)] == [1.0, 1.0, 0.5, 0.5]
    assert schedules.check(ScheduleSpec(name="mysched:nothere"), 10)[0][0] == "schedule.name"
    assert "unknown schedule" in schedules.check(ScheduleSpec(name="linear"), 10)[0][1]
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = schedules.build_scheduler(ScheduleSpec(name="cosine"), opt, 10)
    for _ in range(10):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-12)


# ---- losses --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_equals_torch_definition(smoothing):
    torch.manual_seed(5)
    logits, target = torch.randn(32, 10), torch.randint(0, 10, (32,))
    fn = losses.build(LossSpec(name="label_smoothing", smoothing=smoothing))
    torch.testing.assert_close(fn(logits, target), F.cross_entropy(logits, target, label_smoothing=smoothing))
    seq_logits, seq_target = torch.randn(4, 7, 11), torch.randint(0, 11, (4, 7))  # (B, T, V) as a language model
    torch.testing.assert_close(fn(seq_logits, seq_target), F.cross_entropy(
        seq_logits.reshape(-1, 11), seq_target.reshape(-1), label_smoothing=smoothing))


def test_label_smoothing_trains(digits):
    model = mlp()
    fn = losses.build(LossSpec(name="label_smoothing", smoothing=0.1))
    first, last = train(model, torch.optim.AdamW(model.parameters(), lr=3e-3), digits, loss_fn=fn)
    assert last < 0.5 * first


def test_loss_errors(tmp_path, monkeypatch):
    (tmp_path / "myloss.py").write_text("def two_args_only(a):\n    return a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(losses.LossError, match="fn\\(logits, target"):
        losses.build(LossSpec(name="myloss:two_args_only"))
    with pytest.raises(losses.LossError, match="unknown loss"):
        losses.build(LossSpec(name="focal"))
    with pytest.raises(losses.LossError, match="unexpected keyword"):
        losses.build(LossSpec(name="label_smoothing", alpha=1))


# ---- compression -----------------------------------------------------------------------------------------


def test_magnitude_pruning_reaches_its_sparsity_while_training(digits):
    model = mlp()
    cfg = compression_methods.MagnitudePruning.Config(sparsity=0.8, end_step=100, every_steps=10)
    pruner = compression_methods.MagnitudePruning(cfg, model, total_steps=150)
    seen = []

    def after(step: int) -> None:
        pruner.after_step(step, lambda p: iter([p]))
        seen.append((step, pruner.target_may_count()))

    first, last = train(model, torch.optim.AdamW(model.parameters(), lr=3e-3), digits, after_step=after)
    assert last < 0.6 * first
    for p in pruner.targets:  # every weight matrix, not only on average
        assert float((p == 0).float().mean()) == pytest.approx(0.8, abs=2 / p.numel())
    assert pruner.report()["measured_sparsity"] == pytest.approx(0.8, abs=0.01)
    assert not dict(seen)[99] and dict(seen)[100]  # the target may only count once the sparsity is in place
    assert pruner.sparsity_at(50) == pytest.approx(0.8 * (1 - 0.5**3))  # Zhu & Gupta's cubic schedule


def test_int8_fake_quant_round_trips():
    torch.manual_seed(6)
    w = torch.randn(16, 9, requires_grad=True)
    q = compression_methods.fake_quant_int8(w, per_channel=True)
    scale = w.detach().abs().amax(dim=1, keepdim=True) / 127
    levels = q.detach() / scale
    torch.testing.assert_close(levels, levels.round(), atol=1e-4, rtol=0)  # on the int8 grid
    assert float(levels.abs().max()) <= 127 + 1e-4
    assert float(((q - w).detach().abs() - scale / 2).max()) <= 1e-6  # rounding error at most half a step
    torch.testing.assert_close(compression_methods.fake_quant_int8(q.detach(), per_channel=True), q.detach())  # idempotent
    q.sum().backward()
    torch.testing.assert_close(w.grad, torch.ones_like(w))  # straight-through estimator


def test_int8_qat_trains_with_quantised_weights(digits):
    model = mlp()
    qat = compression_methods.Int8FakeQuant(compression_methods.Int8FakeQuant.Config(), model)
    first, last = train(model, torch.optim.AdamW(model.parameters(), lr=3e-3), digits)
    assert last < 0.5 * first
    for layer in qat.layers:
        w = layer.weight.detach()  # the parametrised (fake-quantised) weight the forward uses
        assert all(len(torch.unique(row)) <= 255 for row in w)
    assert qat.report()["quantised_layers"] == 2


def test_compression_errors():
    assert compression.check(CompressionSpec(name="magnitude_prune", sparsity=1.5), 100)[0][0] == "compression.sparsity"
    assert "past budget.max_steps" in compression.check(
        CompressionSpec(name="magnitude_prune", sparsity=0.5, end_step=500), 100)[0][1]
    assert "unknown compression method" in compression.check(CompressionSpec(name="distill"), 100)[0][1]
    assert "must be a class" in compression.check(CompressionSpec(name="collections:OrderedDict"), 100)[0][1]


# ---- precision -------------------------------------------------------------------------------------------


def test_bf16_master_keeps_fp32_masters_and_trains(digits):
    model = mlp()
    prec = precision.Precision("bf16_master", "cpu")
    params = prec.prepare(model)
    assert all(p.dtype is torch.bfloat16 for p in model.parameters())
    assert all(p.dtype is torch.float32 for p in params)
    opt = torch.optim.AdamW(params, lr=3e-3)
    x, y = digits
    with torch.no_grad():
        first = float(F.cross_entropy(model(x), y))
    for _ in range(60):
        opt.zero_grad()
        with prec.autocast():
            loss = F.cross_entropy(model(x[:256]), y[:256])
        loss.backward()
        prec.grads_to_master()
        opt.step()
        prec.master_to_model()
    with torch.no_grad():
        last = float(F.cross_entropy(model(x), y))
    assert last < 0.6 * first
    for p, m in prec.pairs:  # the model holds the masters rounded to bf16
        torch.testing.assert_close(p.detach(), m.detach().to(torch.bfloat16))


def test_precision_refusals_give_the_reason():
    assert precision.unsupported_reason("fp32", "cpu") is None
    assert precision.unsupported_reason("bf16", "cpu") is None
    if not torch.cuda.is_available():
        reason = precision.unsupported_reason("fp16", "cuda")
        assert reason is not None and reason.startswith("fp16: not supported on cuda")
    with pytest.raises(precision.PrecisionUnsupported, match="expected one of fp32, bf16, fp16, bf16_master"):
        precision.recipe("fp8")


def test_interfaces_report_user_code_provenance(tmp_path, monkeypatch):
    src = "import torch\nclass Plain(torch.optim.SGD):\n    pass\n"
    (tmp_path / "useropt_prov.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    d = optimizers.describe(OptimizerSpec(name="useropt_prov:Plain", lr=0.1))
    assert d["resolved"] == "useropt_prov:Plain" and d["builtin"] is False
    assert Path(d["file"]) == (tmp_path / "useropt_prov.py").resolve()
    import hashlib

    assert d["sha256"] == hashlib.sha256(src.encode()).hexdigest()
    assert d["hyperparameters"]["lr"] == 0.1 and "momentum" in d["hyperparameters"]
    sys.modules.pop("useropt_prov", None)
