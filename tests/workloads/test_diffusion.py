"""`task: diffusion` (suite/workloads/diffusion.py, rectified_flow.py): refusals before the run, the flow's
algebra, a deterministic validation loss, layout-independent batches, and the sample grid beside the result."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from suite import registry
from suite.spec import SpecError
from suite.specload import load_spec
from suite.workloads import rectified_flow as rf
from suite.workloads.contract import Context

ROOT = Path(__file__).resolve().parents[2]
torch.set_num_threads(1)


def _workload(**sets):
    spec = load_spec(registry.find_workload("cv/digits_dit"), sets or None, variant="tiny")
    return registry.task_class(spec.task)(spec, Context(data_root=ROOT, seed=0, device=torch.device("cpu")))


@pytest.mark.parametrize("sets,field,words", [
    ({"model.patch_size": 3}, "model.patch_size", "does not divide the image size 8x8"),
    ({"model.conditioning": "text"}, "model.conditioning", "has no 'text' conditioning; it offers: label, none"),
    ({"model.timestep_sampling": "cosine"}, "model.timestep_sampling", "'uniform' or 'logit_normal'"),
])
def test_bad_input_is_refused_before_the_run_naming_the_field(sets, field, words):
    with pytest.raises(SpecError) as e:
        load_spec(registry.find_workload("cv/digits_dit"), sets)
    assert f"{field}: " in str(e.value) and words in str(e.value), str(e.value)


def test_the_cli_refuses_a_bad_patch_size_with_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "suite.cli", "run", "cv/digits_dit", "--set", "model.patch_size=3",
                          "--results", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "model.patch_size" in out.stderr, out.stderr
    assert not list(tmp_path.rglob("*.json"))  # nothing ran, nothing recorded


def test_rectified_flow_algebra():
    g = torch.Generator().manual_seed(0)
    x0, noise = torch.randn(4, 1, 2, 2, generator=g), torch.randn(4, 1, 2, 2, generator=g)
    assert torch.equal(rf.interpolate(x0, noise, torch.zeros(4)), x0)  # t = 0 is data
    assert torch.equal(rf.interpolate(x0, noise, torch.ones(4)), noise)  # t = 1 is noise
    t = torch.rand(4, generator=g)
    xt = rf.interpolate(x0, noise, t)
    # the velocity target is the derivative of x_t in t: the path is a straight line
    assert torch.allclose(rf.interpolate(x0, noise, t + 1e-3) - xt, 1e-3 * rf.velocity(x0, noise), atol=1e-6)
    # the exact velocity field of one pair carries the noise back to the data in one Euler step or many
    for steps in (1, 7):
        assert torch.allclose(rf.euler_sample(lambda x, s: noise - x0, noise, steps), x0, atol=1e-6)
    u = rf.sample_timesteps(20_000, "uniform", torch.Generator().manual_seed(0))
    ln = rf.sample_timesteps(20_000, "logit_normal", torch.Generator().manual_seed(0))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    assert abs(ln.mean() - 0.5) < 0.01 and ln.var() < u.var()  # logit-normal: mass in the middle
    means = rf.TimestepMeans(4)
    means.add(torch.tensor([1.0, 3.0, 10.0, 0.0]), torch.tensor([0, 0, 1, 3]))
    assert means.value() == pytest.approx((2.0 + 10.0 + 0.0) / 3)  # timestep 2 unseen: not averaged in


def test_validation_loss_is_deterministic_and_uses_the_fixed_noise_seed():
    w = _workload()
    torch.manual_seed(0)
    model = w.build_model()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    first = w.evaluate(model)["val_loss"]
    torch.manual_seed(123)  # the global generator does not enter validation
    assert w.evaluate(model)["val_loss"] == first
    other = _workload(**{"model.eval_noise_seed": 7}).evaluate(model)["val_loss"]
    assert other != first and abs(other - first) < 0.2 * first
    assert w.data.val_t.tolist()[:9] == [0, 1, 2, 3, 4, 5, 6, 7, 0]  # each sample its fixed timestep i/8


def test_two_ranks_draw_exactly_the_one_process_batch():
    w = _workload(**{"data.batch_size": 8})
    one = [next(iter(w.train_batches(0, 1))) for _ in range(1)][0]
    halves = [next(iter(w.train_batches(r, 2))) for r in range(2)]
    for key in ("x0", "noise", "t", "txt", "y"):
        assert torch.equal(torch.cat([h[key] for h in halves]), one[key]), key
    second = iter(w.train_batches(0, 1))
    next(second)
    assert not torch.equal(next(second)["noise"], one["noise"])  # a fresh draw each step


def test_the_sample_grid_is_a_png_of_one_row_per_class():
    from PIL import Image

    w = _workload()
    torch.manual_seed(0)
    files = w.side_files(w.build_model())
    img = Image.open(io.BytesIO(files[".samples.png"]))
    assert img.mode == "L" and img.size == (8 * 10 * 4, 10 * 10 * 4)  # 8 per class across, 10 classes down, 8+2 px, x4
