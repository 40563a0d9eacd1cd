"""Workload tasks that fail on purpose, referenced by import path (`task: support.faulty:NaNAt`) in tests."""

from __future__ import annotations

import os
import time

import torch

from suite.workloads.image_classification import ImageClassification


def _at() -> int:
    return int(os.environ.get("FAULT_AT_STEP", "5"))


class NaNAt(ImageClassification):
    """Digits, but the loss turns NaN at step FAULT_AT_STEP."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        loss = super().loss(model, batch)
        return loss * float("nan") if self.calls >= _at() else loss


class RaiseAt(ImageClassification):
    """Digits, but model code raises at step FAULT_AT_STEP."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls >= _at():
            raise RuntimeError("injected fault in model code")
        return super().loss(model, batch)


class OOMAt(ImageClassification):
    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls >= _at():
            raise torch.OutOfMemoryError("injected: CUDA out of memory. Tried to allocate 80.00 GiB")
        return super().loss(model, batch)


class Slow(ImageClassification):
    """Digits with a sleep in every step, so a signal can arrive mid-run; touches FAULT_READY when running."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls == 3 and os.environ.get("FAULT_READY"):
            open(os.environ["FAULT_READY"], "w").close()
        time.sleep(float(os.environ.get("FAULT_SLEEP_S", "0.05")))
        return super().loss(model, batch)


class BrokenData(ImageClassification):
    """A workload whose data set fails to load (in init, before any tensor work)."""

    def __init__(self, spec, ctx):
        raise RuntimeError("injected fault while reading the data set")


class BrokenOptimizer(torch.optim.SGD):
    """An optimizer that resolves and validates, then fails while the backend builds it (during init)."""

    def __init__(self, params, lr: float = 0.1, weight_decay: float = 0.0):
        raise RuntimeError("injected fault while building the optimizer")


class SlowFirstBatch(ImageClassification):
    """Digits whose first training batch takes FAULT_SLEEP_S longer to fetch (a cold data pipeline): MLPerf's
    clock starts before the first batch is touched, so that time is on the clock."""

    def train_batches(self, rank: int, world: int):
        for i, batch in enumerate(super().train_batches(rank, world)):
            if i == 0:
                time.sleep(float(os.environ.get("FAULT_SLEEP_S", "1.5")))
            yield batch


class SlowFirstStep(ImageClassification):
    """Digits whose first training step takes FAULT_SLEEP_S longer (a compile or lazy init): steady-state
    throughput, and the MFU behind it, leave that step out."""

    calls = 0

    def loss(self, model, batch):
        self.calls += 1
        if self.calls == 1:
            time.sleep(float(os.environ.get("FAULT_SLEEP_S", "1.5")))
        return super().loss(model, batch)


PROBE: dict = {}  # what the last Probe was handed (tests run one harness run at a time in a process)


class Probe(ImageClassification):
    """Digits that keeps what the harness hands it: its context, the model attached after the backend's setup,
    and the model each evaluation gets. Constructing it takes FAULT_SLEEP_S longer (a data set read and staged
    during init), each evaluation FAULT_EVAL_SLEEP_S longer, and it describes its data pipeline (as ImageNet's
    reader does)."""

    def __init__(self, spec, ctx):
        time.sleep(float(os.environ.get("FAULT_SLEEP_S", "0")))
        super().__init__(spec, ctx)
        PROBE.clear()
        PROBE.update(ctx=ctx, attached=None, evaluated=[])

    def attach(self, model):
        PROBE["attached"] = model
        super().attach(model)

    def evaluate(self, model):
        PROBE["evaluated"].append(model)
        time.sleep(float(os.environ.get("FAULT_EVAL_SLEEP_S", "0")))
        return super().evaluate(model)

    def data_pipeline(self):
        return {"reader": "probe"}
