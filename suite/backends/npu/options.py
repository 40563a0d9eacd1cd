"""What the NPU backend accepts: the torch backend's options and layouts on another device (`Options`, `supports`,
read from the spec alone: no torch, no torch_npu). suite/backends/npu/backend.py re-exports them."""

from __future__ import annotations

from typing import Any

from suite import devices
from suite.backends.availability import Availability
from suite.backends.torch.options import Options as TorchOptions
from suite.backends.torch.options import supports as torch_supports
from suite.measure.fingerprint import package_version


class Options(TorchOptions):
    """The spec's `backends.npu` block (the torch backend's options: same loop, other device)."""


def supports(spec: Any) -> str | None:
    """Every workload the torch backend runs (the same loop on another device)."""
    try:
        Options.model_validate(spec.backends.get("npu", {}))
    except Exception as e:  # noqa: BLE001 - reported, not raised
        return f"backends.npu: {e}"
    return torch_supports(spec)  # the same loop and layout plans as the torch backend, so the same limits


def available_installed(device_type: str) -> Availability:
    version = package_version("torch-npu")
    reason = devices.npu_unavailable_reason()
    if reason:
        return Availability(False, reason, version)
    if device_type != "npu":
        return Availability(False, f"the selected device is {device_type!r}, not npu "
                                   "(unset TRAINBENCH_DEVICE or set it to npu)", version)
    return Availability(True, version=version)


def fsdp_mechanism(device_type: str) -> tuple[str, bool, bool, bool]:
    """What holds `parallel.fsdp` (suite/backends/translate.py): the torch backend's FSDP2 on the NPU."""
    return ("FSDP2", True, True, True)
