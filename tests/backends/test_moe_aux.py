"""A Mixture-of-Experts model's load-balancing loss in training (suite/models/common/moe.py): it joins the gradient inside
the model (Megatron's MoEAuxLossAutoScaler), so under gradient accumulation the backend gives it the factor it gives
the language-model loss (1/micro-batches), and the loss a step reports stays the language-model loss.

The check is exact: a batch whose second half repeats its first has, in each half, the same expert shares and
mean router probabilities as the whole, so the load-balancing loss of each micro-batch equals the whole batch's
and two accumulated micro-batches must give the one-batch gradient. With the aux factor left at 1 the router's
gradient would carry the aux term twice.
"""

from __future__ import annotations

import pytest
import torch
from support.backend_util import TESTS
from support.promised import require

from suite import devices, registry
from suite.backends.base import RunOptions
from suite.data.locate import data_root
from suite.harness import seed_everything
from suite.models.common import moe
from suite.specload import load_spec
from suite.workloads.contract import Context

torch.set_num_threads(1)

TINY_MOE = TESTS / "specs" / "tiny_moe.yaml"
AUX = {"model.moe.aux_loss_coeff": 1.0}  # large, so that a wrong aux factor is far outside fp32 rounding
SGD = {"optimizer.name": "sgd", "optimizer.lr": 1.0}


def _step_grads(backend: str, overrides: dict, batch) -> tuple[float, dict[str, torch.Tensor], float]:
    """One training step with plain SGD at lr 1, so that each weight moves by minus its gradient: (the step's
    reported loss, the gradients as read from the weights' moves, the workload's own loss of that batch before the
    step on the model in evaluation mode, where no aux loss is attached)."""
    spec = load_spec(TINY_MOE, {**AUX, **SGD, **overrides})
    seed_everything(0)
    device = devices.current(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=device.torch))
    be = registry.backend_class(backend)(device)
    try:
        state = be.setup(workload, RunOptions(options={}))
        with torch.no_grad():
            lm = float(workload.loss(state.raw_model.eval(), batch))
        state.raw_model.train()
        before = {n: p.detach().clone() for n, p in state.raw_model.named_parameters()}
        loss = float(be.train_step(state, batch).loss)
        grads = {n: before[n] - p.detach() for n, p in state.raw_model.named_parameters()}
    finally:
        be.close()
        moe.set_aux_loss_grad_scale(1.0)
    return loss, grads, lm


def _doubled_batch():
    spec = load_spec(TINY_MOE)
    seed_everything(0)
    workload = registry.task_class(spec.task)(spec, Context(data_root=data_root(), seed=0, device=torch.device("cpu")))
    x, y = next(iter(workload.train_batches(0, 1)))
    half = x.shape[0] // 2
    return torch.cat([x[:half], x[:half]]), torch.cat([y[:half], y[:half]])


@pytest.mark.parametrize("backend", ["torch", "deepspeed"])
def test_accumulated_micro_batches_give_the_one_batch_gradient_aux_included(backend):
    if backend == "deepspeed":
        require("deepspeed")
    batch = _doubled_batch()
    one_loss, one, one_lm = _step_grads(backend, {}, batch)
    two_loss, two, _ = _step_grads(backend, {"data.micro_batch_size": batch[0].shape[0] // 2}, batch)
    assert one.keys() == two.keys() and any("router" in n for n in one)
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-4, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
    # the reported loss is the language-model loss alone (the aux loss, coefficient 1 here, is ~2 more)
    assert one_loss == pytest.approx(one_lm, abs=1e-5) and two_loss == pytest.approx(one_lm, abs=1e-5)


def test_the_aux_loss_is_in_the_router_gradient():
    """The coefficient moves the router's gradient (the aux term reaches training), and the logged loss stays."""
    batch = _doubled_batch()
    with_aux, g_aux, _ = _step_grads("torch", {}, batch)
    without, g_plain, _ = _step_grads("torch", {"model.moe.aux_loss_coeff": 0.0}, batch)
    assert with_aux == pytest.approx(without, abs=1e-6)
    router = "layers.0.moe.router.weight"
    assert float((g_aux[router] - g_plain[router]).abs().max()) > 100 * float(g_plain[router].abs().max()) * 1e-4
