"""`WorkloadBase`: the plumbing most tasks share (resolving the spec's model and data components, batch sizes).

The contract itself (`Workload`, `Batch`, `Context`) is suite/workloads/contract.py."""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from suite import registry
from suite.data.base import DataTooSmall
from suite.spec import WorkloadSpec
from suite.workloads.contract import Batch, Context


class WorkloadBase:
    """Shared plumbing: resolves the spec's model and data components and validates their configs."""

    samples_key = "samples"
    # every key evaluate() may return: a target.metric outside it is refused before the run starts
    # (suite/registry.py). None: not declared; the harness then checks the first evaluation instead.
    reported_metrics: ClassVar[frozenset[str] | None] = None

    def __init__(self, spec: WorkloadSpec, ctx: Context):
        self.spec = spec
        self.ctx = ctx
        self.model_component = registry.model_component(spec.model.arch)
        self.model_cfg = self.model_component.Config.model_validate(spec.model.params())
        self.data_component = registry.data_component(spec.data.name)
        self.data_cfg = self.data_component.Config.model_validate(spec.data.params())
        self.device = ctx.device

    def attach(self, model: nn.Module) -> None:
        """Called once the backend has built the model; workloads that act with it (RL rollouts) keep it."""

    def batch_samples(self, batch: Batch) -> int:
        first = batch[0] if isinstance(batch, (tuple, list)) else batch
        if isinstance(first, dict):
            first = next(iter(first.values()))
        return int(first.shape[0])

    def tokens_per_sample(self) -> int:
        return 1

    def flops_by_class(self) -> dict[str, float] | None:
        """flops_per_sample split by op class (matmul, convolution, attention), or None when the model
        component does not say (then MFU divides by the fastest peak the recipe allows)."""
        fn = getattr(self.model_component, "flops_by_class", None)
        meta = getattr(self, "meta", None)
        if fn is None or meta is None:
            return None
        return {k: float(v) for k, v in fn(self.model_cfg, meta).items()}

    def check_batch_fits(self, train_samples: int, unit: str = "samples") -> None:
        """A global batch larger than the training split could never be drawn: say so before the clock starts
        (it used to fail at the first step, an error result with a traceback)."""
        bs = self.spec.data.batch_size
        if bs > train_samples:
            raise DataTooSmall(f"data.batch_size {bs} is larger than the training set of {self.spec.data.name} "
                               f"({train_samples} {unit}): set data.batch_size to at most {train_samples}")

    def local_batch_size(self, world: int) -> int:
        bs = self.spec.data.batch_size
        if bs % world:
            raise ValueError(f"data.batch_size {bs} is not divisible by the data-parallel world size {world}")
        return bs // world
