"""The DiT's training target against an outside reference (issue 50 item 17): one training step of `task: diffusion`
(suite/workloads/diffusion.py's loss, its backward) against torchtitan 0.3.0's own flux training step,
`FluxTrainer.forward_backward_step` (torchtitan/models/flux/trainer.py, the code MLPerf flux1's reference builds on),
called as installed, on identical weights, the same latents and conditioning, and the same noise and timesteps: the
loss and every parameter's gradient agree. torchtitan's step is given what its trainer would hold (an identity
"autoencoder": the latents are the digits' pixels; "text encoders" that look up this batch's conditioning; one
process, no parallelism); nothing of its code is copied here.

The parity test of the model (test_flux.py) compares forward passes only; before this test a training target with
its sign flipped passed every test (validation and sampling share `rectified_flow.velocity`, the loss's own target
did not)."""

from __future__ import annotations

import contextlib
import types

import torch
import torch.nn.functional as F
from test_flux import _randomize, _torchtitan_tiny

from suite import registry
from suite.specload import load_spec
from suite.workloads.contract import Context

torch.set_num_threads(1)


def _their_step(model: torch.nn.Module, x0: torch.Tensor, txt: torch.Tensor, y: torch.Tensor, seed: int
                ) -> torch.Tensor:
    from torchtitan.components.loss import MSELoss
    from torchtitan.models.flux.trainer import FluxTrainer

    trainer = types.SimpleNamespace(
        device=torch.device("cpu"), _dtype=torch.float32,
        autoencoder=types.SimpleNamespace(encode=lambda images: images),  # the pixels are the latents here
        clip_encoder=lambda tokens: y[tokens.long()], t5_encoder=lambda tokens: txt[tokens.long()],
        parallel_dims=types.SimpleNamespace(dp_enabled=False, cp_enabled=False, cp=1),
        model_parts=[model], ntokens_seen=0, config=types.SimpleNamespace(training=types.SimpleNamespace(seq_len=17)),
        train_context=contextlib.nullcontext, loss_fn=MSELoss(MSELoss.Config()))
    from torchtitan.distributed import utils as dist_utils

    rows = torch.arange(len(x0)).unsqueeze(1)
    backend = dist_utils.get_spmd_backend()
    dist_utils.set_spmd_backend("partial_dtensor")  # one process: no device mesh to type the inputs against
    try:
        torch.manual_seed(seed)  # its noise and timesteps come from the global generator
        return FluxTrainer.forward_backward_step(trainer, input_dict={"clip": rows, "t5": rows}, labels=x0.clone())
    finally:
        dist_utils.set_spmd_backend(backend)


def test_one_training_step_matches_torchtitans_flux_step_loss_and_gradients(tmp_path):
    spec = load_spec(registry.find_workload("cv/digits_dit"), {"data.batch_size": 6}, variant="tiny")
    workload = registry.task_class("diffusion")(spec, Context(data_root=tmp_path, seed=0, device=torch.device("cpu")))
    theirs = _torchtitan_tiny(workload.model_cfg)
    _randomize(theirs)
    ours = workload.build_model()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    batch = next(workload.train_batches(0, 1))
    x0 = batch["x0"]

    want = _their_step(theirs, x0, batch["txt"], batch["y"], seed=7)
    torch.manual_seed(7)  # the same draws, in the same order: noise like the latents, then one timestep a sample
    batch = {**batch, "noise": torch.randn_like(x0), "t": torch.rand(len(x0))}
    got = workload.loss(ours, batch)
    got.backward()

    assert float(want) > 0.05
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    grads = dict(theirs.named_parameters())
    compared = 0
    for name, p in ours.named_parameters():
        if grads[name].grad is None:
            assert p.grad is None or not p.grad.any(), name
            continue
        torch.testing.assert_close(p.grad, grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)
        compared += 1
    assert compared == len(grads)

    # the comparison can fail: the target with its sign flipped (the mistake nothing caught) is far off
    with torch.no_grad():
        pred = workload.predict(ours, (1 - batch["t"].view(-1, 1, 1, 1)) * x0 + batch["t"].view(-1, 1, 1, 1)
                                * batch["noise"], batch["t"], batch["txt"], batch["y"])
        flipped = F.mse_loss(pred, x0 - batch["noise"])
    assert abs(float(flipped) - float(want)) > 1e-2 * float(want), (float(flipped), float(want))  # 1000 x rtol
