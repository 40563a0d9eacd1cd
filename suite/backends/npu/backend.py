"""Ascend NPU: the torch backend's loop on device `npu` through torch_npu, hccl across ranks.

torch_npu is never imported here directly: suite.devices probes it with find_spec and imports it inside
try/except, because installed without Ascend's CANN it breaks `import torch` itself (FACTS.md). Autocast,
synchronize, memory statistics and the process-group backend (hccl) all come from suite.devices.Device.
"""

from __future__ import annotations

from typing import Any, ClassVar

from suite import devices
from suite.backends.base import Availability, RunOptions, TrainState
from suite.backends.torch.backend import Options as TorchOptions
from suite.backends.torch.backend import TorchBackend
from suite.backends.torch.backend import supports as torch_supports
from suite.measure.environment import package_version
from suite.workloads.contract import Workload


class Options(TorchOptions):
    """The spec's `backends.npu` block (the torch backend's options: same loop, other device)."""


def supports(spec: Any) -> str | None:
    """Every workload the torch backend runs (the same loop on another device)."""
    try:
        Options.model_validate(spec.backends.get("npu", {}))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"backends.npu: {e}"
    return torch_supports(spec)  # the same loop and layout plans as the torch backend, so the same limits


def version() -> str | None:
    return package_version("torch-npu")


class NpuBackend(TorchBackend):
    name: ClassVar[str] = "npu"
    Options = Options  # type: ignore[assignment]
    supports = staticmethod(supports)

    def available(self) -> Availability:
        reason = devices.npu_unavailable_reason()
        if reason:
            return Availability(False, reason, version())
        if self.device.type != "npu":
            return Availability(False, f"the selected device is {self.device.type!r}, not npu "
                                       "(unset TRAINBENCH_DEVICE or set it to npu)", version())
        return Availability(True, version=version())

    def setup(self, workload: Workload, opts: RunOptions) -> TrainState:
        avail = self.available()
        if not avail.ok:
            raise RuntimeError(f"backend 'npu' is not available here: {avail.reason}")
        opts = RunOptions(precision=opts.precision, compile=opts.compile,
                          options=Options.model_validate(opts.options).model_dump())
        return super().setup(workload, opts)

    def parallel_layout(self) -> dict[str, Any]:
        return {**super().parallel_layout(), "device": "npu", "dist_backend": self.device.dist_backend}
