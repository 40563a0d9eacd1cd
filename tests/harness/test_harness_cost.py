"""What the timed loop adds to a step that a bare loop does not (issue 29): no tensor ops of its own in the torch
backend's step, no per-step instrument calls that do nothing, and accelerators' loss reads that never drain
the device queue. The throughput ratio itself is measured by benchmarks/harness_overhead.py, not here (a
loaded shared machine makes a 2% timing band a coin toss)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from suite import devices, harness, registry
from suite.backends.base import RunOptions
from suite.specload import load_spec
from suite.workloads.contract import Context


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def test_the_torch_step_runs_the_ops_of_a_bare_step_and_no_more(digits_path):
    """The backend's train_step on one micro-batch at fp32 issues exactly the aten ops of the hand-written step
    (zero_grad, the workload's loss, backward, optimizer, schedule) on the same model: a running loss sum (zeros, add, div)
    cost ~15 us of a 2.6 ms step."""
    torch.set_num_threads(1)
    spec = load_spec(digits_path, {})
    device = devices.current()
    workload = registry.task_class(spec.task)(spec, Context(Path("."), 0, device.torch))
    backend = registry.backend_class("torch")(device)
    state = backend.setup(workload, RunOptions())
    batch = next(iter(workload.train_batches(0, 1)))
    opt, model, sched = state.optimizer, state.model, state.scheduler

    def bare():
        opt.zero_grad(set_to_none=True)
        loss = workload.loss(model, batch)
        loss.backward()
        opt.step()
        sched.step()
        return loss.detach()

    bare(), backend.train_step(state, batch)  # the optimizer's state exists before either is counted
    with _Ops() as ours:
        out = backend.train_step(state, batch)
    with _Ops() as theirs:
        bare()
    assert ours.ops == theirs.ops, (ours.ops - theirs.ops, theirs.ops - ours.ops)
    assert out.loss.dim() == 0 and not out.loss.requires_grad


def test_a_cpu_run_makes_no_instrument_call_per_step(digits_path, monkeypatch):
    """On CPU without NVTX or a profiler, step_begin/step_end do nothing: the loop does not call them."""
    calls: list[str] = []
    monkeypatch.setattr(harness.Instruments, "step_begin", lambda self: calls.append("begin"))
    monkeypatch.setattr(harness.Instruments, "step_end", lambda self: calls.append("end"))
    spec = load_spec(digits_path, {"budget.max_steps": 5, "eval.every_steps": 1000, "target.value": 1.01})
    result, _ = harness.run(harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False))
    assert result.status == "budget" and result.steps == 5 and calls == []


def test_a_late_loss_read_still_stops_a_diverged_run_and_names_its_step(digits_path, monkeypatch):
    """As on an accelerator: the loss of a checked step is read after the next step is queued, so the run stops
    one step after the non-finite loss, and the error names the step whose loss it was."""
    monkeypatch.setenv("FAULT_AT_STEP", "7")
    spec = load_spec(digits_path, {"task": "support.faults:NaNAt"})
    the_run = harness.Run(harness.RunRequest(spec=spec, results_dir=None, threads=1, measure_peak=False))
    assert the_run.loss_check == (1, False)  # CPU: every step, read at once
    the_run.loss_check = (1, True)
    result = the_run.execute()
    assert result.status == "diverged" and result.steps == 8
    assert "non-finite loss nan at step 7" in result.error
