"""Ascend NPU: the torch backend's loop on device `npu` through torch_npu, hccl across ranks.

torch_npu is never imported here directly: suite.devices probes it with find_spec and imports it inside
try/except, because installed without Ascend's CANN it breaks `import torch` itself (FACTS.md). Autocast,
synchronize, memory statistics and the process-group backend (hccl) all come from suite.devices.Device.
"""

from __future__ import annotations

from typing import Any, ClassVar

from suite.backends.availability import Availability
from suite.backends.base import RunOptions, TrainState
from suite.backends.npu.options import Options, available_installed, supports
from suite.backends.torch.backend import TorchBackend
from suite.measure.fingerprint import package_version
from suite.workloads.contract import Workload


def version() -> str | None:
    return package_version("torch-npu")


class NpuBackend(TorchBackend):
    name: ClassVar[str] = "npu"
    Options = Options  # type: ignore[assignment]
    supports = staticmethod(supports)

    def available(self) -> Availability:
        return available_installed(self.device.type)

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        avail = self.available()
        if not avail.ok:
            raise RuntimeError(f"backend 'npu' is not available here: {avail.reason}")
        opts = RunOptions(precision=opts.precision, compile=opts.compile,
                          options=Options.model_validate(opts.options).model_dump())
        return super().setup(workload, opts)

    def parallel_layout(self) -> dict[str, Any]:
        return {**super().parallel_layout(), "device": "npu", "dist_backend": self.device.dist_backend}
