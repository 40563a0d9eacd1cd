"""The full tier's recipes do what their references do (docs/workloads.md cites the lines): each piece is
checked against a transcription of the reference's own arithmetic, on small tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from suite.algorithms.airbench import AirbenchSGD
from suite.algorithms.airbench import schedule as airbench_schedule
from suite.algorithms.lars import LARS
from suite.algorithms.optimizers import build_optimizer
from suite.algorithms.schedules import lr_multiplier
from suite.models.vision import airbench
from suite.spec import OptimizerSpec, ScheduleSpec
from suite.workloads.image_classification import airbench_batches
from suite.workloads.language_model import epoch_batches

torch.set_num_threads(1)
META = {"input_shape": (3, 32, 32), "num_classes": 10}


def tiny_airbench(**kw) -> airbench.AirbenchNet:
    torch.manual_seed(0)
    return airbench.AirbenchNet(airbench.Config(widths=[8, 16], **kw), META)


# ---- airbench94 -------------------------------------------------------------------------------------------


def test_airbench_sgd_on_the_mean_loss_steps_as_airbench_on_the_summed_loss():
    """airbench94 lines 359-379 (sum loss, its own lr/wd arithmetic) against AirbenchSGD (mean loss)."""
    net_a, net_b = tiny_airbench(), tiny_airbench()
    net_b.load_state_dict(net_a.state_dict())
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
    bs, momentum = 16, 0.85
    kilostep_scale = 1024 * (1 + 1 / (1 - momentum))
    lr, wd = 11.5 / kilostep_scale, 0.0153 * bs / kilostep_scale
    lr_biases = lr * 64
    norm_biases = [p for k, p in net_a.named_parameters() if p.requires_grad and getattr(p, "airbench_bias_scaled", 0)]
    others = [p for k, p in net_a.named_parameters() if p.requires_grad and not getattr(p, "airbench_bias_scaled", 0)]
    ref = torch.optim.SGD([dict(params=norm_biases, lr=lr_biases, weight_decay=wd / lr_biases),
                           dict(params=others, lr=lr, weight_decay=wd / lr)], momentum=momentum, nesterov=True)
    ours = AirbenchSGD([p for p in net_b.parameters() if p.requires_grad], batch_size=bs)
    for _ in range(3):
        ref.zero_grad()
        F.cross_entropy(net_a(x), y, label_smoothing=0.2, reduction="none").sum().backward()
        ref.step()
        ours.zero_grad()
        F.cross_entropy(net_b(x), y, label_smoothing=0.2).backward()
        ours.step()
    for (k, a), b in zip(net_a.state_dict().items(), net_b.state_dict().values(), strict=True):
        assert torch.allclose(a.float(), b.float(), atol=1e-5, rtol=1e-4), k


def test_airbench_schedule_is_its_piecewise_linear():
    total = 476
    assert airbench_schedule(0, total) == pytest.approx(0.2)
    assert airbench_schedule(int(total * 0.23), total) == pytest.approx(1.0)
    assert airbench_schedule(total, total) == pytest.approx(0.07)


def test_airbench_net_is_airbench94s():
    net = tiny_airbench()
    bns = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    assert all(m.momentum == pytest.approx(0.4) and m.eps == 1e-12 and not m.weight.requires_grad for m in bns)
    assert not net[0].weight.requires_grad and net[0].bias.requires_grad  # whitening: fixed filters, trained bias
    conv = net[2]  # dirac init (airbench94 Conv.reset_parameters): filter i passes input channel i through
    assert torch.equal(conv.weight[:, :, 1, 1], torch.eye(8, 24))
    assert conv.weight[:, :, [0, 2]].abs().sum() == 0


def test_whitening_init_decorrelates_2x2_patches():
    torch.manual_seed(0)
    base = torch.randn(64, 3, 16, 16)
    images = base + 0.8 * base.roll(1, dims=-1)  # neighbouring pixels correlated, as in real images
    net = tiny_airbench(whiten_eps=1e-6)
    net.init_from_data(images)
    with torch.no_grad():
        out = F.conv2d(images, net[0].weight[:12])  # the first 12 filters (the other 12 are their negatives)
    z = out.permute(1, 0, 2, 3).reshape(12, -1)
    cov = z @ z.T / z.shape[1]
    assert torch.allclose(cov, torch.eye(12), atol=0.05), cov.diag()
    assert torch.equal(net[0].weight[12:], -net[0].weight[:12])


def test_lookahead_is_airbench94s_ema_and_the_last_step_copies_it():
    net, ref = tiny_airbench(lookahead_every=5, lookahead_total_steps=10), tiny_airbench()
    ref.load_state_dict(net.state_dict())
    ema = None
    alpha = 0.95**5 * (torch.arange(11) / 10) ** 3
    for step in range(1, 11):
        with torch.no_grad():  # the same "optimizer step" on both
            for a, b in zip(net.parameters(), ref.parameters(), strict=True):
                delta = 0.01 * step * torch.ones_like(a)
                a.add_(delta)
                b.add_(delta)
        net.after_optimizer_step()
        state = ref.state_dict()
        if ema is None:
            ema = {k: v.clone() for k, v in state.items()}
        decay = 1.0 if step == 10 else (alpha[step].item() if step % 5 == 0 else None)
        if decay is not None:
            for k, v in state.items():
                if v.dtype == torch.float:
                    ema[k].lerp_(v, 1 - decay)
                    v.copy_(ema[k])
        for (k, a), b in zip(net.state_dict().items(), ref.state_dict().values(), strict=True):
            assert torch.allclose(a.float(), b.float(), atol=1e-6), (step, k)


def test_whiten_bias_trains_for_its_steps_then_only_lookahead_moves_it():
    net = tiny_airbench(whiten_bias_steps=2)
    for step in range(1, 5):
        with torch.no_grad():
            net[0].bias.add_(1.0)  # what an optimizer step would do
        net.after_optimizer_step()
        if step <= 2:
            assert net[0].bias[0].item() == pytest.approx(step)
        else:
            assert net[0].bias[0].item() == pytest.approx(2.0)  # frozen after 2 steps


def test_tta_averages_mirror_and_translate_views():
    net = tiny_airbench(tta_level=2).eval()
    x = torch.randn(4, 3, 32, 32)
    plain = nn.Sequential(*net)  # the same modules without the TTA forward

    def mirror(v):
        return 0.5 * plain(v) + 0.5 * plain(v.flip(-1))

    padded = F.pad(x, (1,) * 4, "reflect")
    want = 0.5 * mirror(x) + 0.5 * (mirror(padded[:, :, 0:32, 0:32]) + mirror(padded[:, :, 2:34, 2:34])) / 2
    assert torch.allclose(net(x), want, atol=1e-5)
    assert torch.allclose(net.train()(x), plain.train()(x))  # training sees one view


def test_alternating_flip_and_translate():
    x = torch.arange(8 * 3 * 6 * 6, dtype=torch.float32).reshape(8, 3, 6, 6)
    y = torch.arange(8)
    flips = airbench_batches(x, y, 8, 0, 1, seed=0, flip=True, pad=0)
    (e0, y0), (e1, y1) = next(flips), next(flips)
    base0 = {int(lbl): img for img, lbl in zip(e0, y0, strict=True)}
    for img, lbl in zip(e1, y1, strict=True):  # odd epochs: every image mirrored relative to epoch 0
        assert torch.equal(img, base0[int(lbl)].flip(-1))
    shifted = next(airbench_batches(x, y, 8, 0, 1, seed=0, flip=False, pad=2))
    for img, lbl in zip(*shifted, strict=True):  # each a reflect-padded crop of its own image
        padded = F.pad(x[int(lbl)][None], (2,) * 4, "reflect")[0]
        assert any(torch.equal(img, padded[:, 2 + dy : 8 + dy, 2 + dx : 8 + dx])
                   for dy in range(-2, 3) for dx in range(-2, 3))


# ---- llm.c ------------------------------------------------------------------------------------------------


def test_llmc_epochs_visit_every_window_once_and_ranks_split_the_batch():
    shards = [np.arange(1000, 1000 + 101), np.arange(5000, 5000 + 61)]
    seq = 10
    windows = {(s, i) for s, a in enumerate(shards) for i in range((len(a) - 1) // seq)}  # 10 + 6 = 16
    one = epoch_batches(shards, seq, 4, 0, 1, seed=3)
    seen = [tuple(row[:2].tolist()) for _ in range(4) for row in next(one)[0]]
    assert len(seen) == len(set(seen)) == len(windows)  # an epoch: every window once, none twice
    two = [epoch_batches(shards, seq, 2, r, 2, seed=3) for r in (0, 1)]
    again = epoch_batches(shards, seq, 4, 0, 1, seed=3)
    for _ in range(5):
        assert torch.equal(torch.cat([next(it)[0] for it in two]), next(again)[0])
    x, y = next(epoch_batches(shards, seq, 4, 0, 1, seed=3))
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the next tokens


def test_llmc_decays_only_matrices_and_embeddings():
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    opt = build_optimizer(OptimizerSpec(name="adamw", lr=6e-4, weight_decay=0.1, decay="matrices"),
                          model.parameters())
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] == 0.1 for p in g["params"]}
    assert decayed == {id(model[0].weight), id(model[1].weight)}


def test_llmc_cosine_schedule():
    """llmc/schedulers.h get_learning_rate_cosine with -u 700 -q 0.0 over 19,560 steps."""
    mult = lr_multiplier(ScheduleSpec(name="cosine", warmup_steps=700, total_steps=19560, min_lr_ratio=0.0), None)
    for step in (0, 350, 699, 700, 5000, 19559):
        if step < 700:
            want = (step + 1) / 700
        else:
            want = 0.5 * (1 + math.cos(math.pi * (step - 700) / (19560 - 700)))
        assert mult(step) == pytest.approx(want, abs=1e-9)


# ---- MLPerf ResNet-50 -------------------------------------------------------------------------------------


def test_lars_matches_the_reference_formula():
    torch.manual_seed(0)
    w, b = nn.Parameter(torch.randn(4, 3)), nn.Parameter(torch.randn(4))
    w0, b0 = w.detach().clone(), b.detach().clone()
    opt = LARS([w, b], lr=8.5, momentum=0.9, weight_decay=2e-4, eeta=0.001, epsilon=0.0)
    gw, gb = torch.randn(4, 3), torch.randn(4)
    w.grad, b.grad = gw.clone(), gb.clone()
    opt.step()
    ratio = 0.001 * w0.norm() / (gw.norm() + 2e-4 * w0.norm())  # lars_optimizer.py compute_lr
    assert torch.allclose(w.detach(), w0 - 8.5 * ratio * (gw + 2e-4 * w0), atol=1e-6)
    assert torch.allclose(b.detach(), b0 - 8.5 * gb, atol=1e-6)  # skipped: no trust ratio, no decay


def test_mlperf_polynomial_schedule():
    """lars_util.py PolynomialDecayWithWarmup: power 2 over train_steps - warmup + 1, down to end_lr."""
    base, end, warm, total = 8.5, 1e-4, 3125, 25625
    mult = lr_multiplier(ScheduleSpec(name="polynomial", warmup_steps=warm, total_steps=total,
                                      min_lr_ratio=end / base), None)
    decay_steps = total - warm + 1
    for step in (3125, 10000, 25624):
        want = (base - end) * (1 - (step - warm) / decay_steps) ** 2 + end
        assert base * mult(step) == pytest.approx(want, rel=1e-9)


# ---- ImageNet decoded on the device -----------------------------------------------------------------------


def test_device_decode_path_matches_the_pillow_path(tmp_path):
    """The device path (bytes from the workers, decode + crop + normalise where the model runs) on CPU, with
    Pillow standing in for nvJPEG: the same eval images as the Pillow workers' path, up to resampling rounding."""
    pytest.importorskip("PIL")
    from support.datafiles import write_imagefolder

    from suite import registry
    from suite.data.vision import imagenet_device
    from suite.specload import load_spec
    from suite.workloads.contract import Context

    root = write_imagefolder(tmp_path / "inet", classes=2, per_class=4)
    spec = load_spec(registry.workload_files()["cv/imagenet_resnet50"], {"data.path": str(root)}, "tiny")
    w = registry.task_class(spec.task)(spec, Context(tmp_path, 0, torch.device("cpu")))
    assert w.decode_mode() == "pillow"  # auto on a CPU
    cpu = torch.device("cpu")
    dev = list(w._device_stream(False, imagenet_device.pillow_decoder(cpu), batch_size=4, shuffle=False))
    ref = list(w._eval_batches(4))
    assert len(dev) == len(ref)
    for (xd, yd), (xr, yr) in zip(dev, ref, strict=True):
        assert torch.equal(yd, yr) and xd.shape == xr.shape == (xd.shape[0], 3, 32, 32)
        assert (xd - xr).abs().mean() < 0.1, (xd - xr).abs().mean()
    train = w._device_stream(True, imagenet_device.pillow_decoder(cpu), batch_size=4, shuffle=False)
    x, y = next(train)
    assert x.shape == (4, 3, 32, 32) and x.dtype == torch.float32 and y.shape == (4,)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        y0, x0, h, w_ = imagenet_device.crop_box(40, 60, 0.05, g)
        assert 0 <= y0 and y0 + h <= 40 and 0 <= x0 and x0 + w_ <= 60
        assert 0.05 * 2400 * 0.9 <= h * w_ <= 2400
