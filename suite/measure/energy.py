"""Energy in joules from NVML's cumulative counter (nvidia-ml-py) on NVIDIA GPUs; null everywhere else.

nvmlDeviceGetTotalEnergyConsumption returns the board's energy in mJ since the driver loaded (Volta and
newer), so a run's energy is the difference of two reads. The counter updates every ~20-100 ms: runs much
shorter than a second are not measured meaningfully. CPUs, AMD GPUs and NPUs report null (no silent
estimate from TDP).
"""

from __future__ import annotations

import os
from typing import Any

import torch


def _nvml() -> Any | None:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound / DriverNotLoaded: no NVIDIA GPU here
        return None
    return pynvml


def _handle(nvml: Any, index: int) -> tuple[Any | None, str]:
    """NVML's handle for torch's cuda:index. NVML ignores CUDA_VISIBLE_DEVICES, so match by UUID/PCI id."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        for candidate in (text, f"GPU-{text}"):
            try:
                return nvml.nvmlDeviceGetHandleByUUID(candidate), ""
            except Exception:  # noqa: BLE001 - try the next spelling
                pass
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId_v2(pci), ""
        except Exception:  # noqa: BLE001
            pass
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        try:
            return nvml.nvmlDeviceGetHandleByIndex(index), ""
        except Exception as e:  # noqa: BLE001
            return None, f"NVML has no device {index}: {e}"
    return None, "cannot match torch's CUDA device to an NVML device (no UUID/PCI id, CUDA_VISIBLE_DEVICES set)"


class EnergyMeter:
    """Joules used by the given CUDA devices (summed) between start() and stop(), with a mark at the target.

    The harness's rank 0 meters every device of its node (torchrun ranks see all of them), so no collective
    is needed at the end of a run, where a failed peer could leave it hanging.
    """

    def __init__(self, device_type: str, indices: list[int] | None = None):
        self.reason = ""
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._start_mj: int | None = None
        self.energy_j: float | None = None
        self.to_target_j: float | None = None
        if device_type != "cuda" or torch.version.cuda is None:
            self.reason = f"no energy counter on {device_type} (NVML is NVIDIA-only)"
            return
        nvml = _nvml()
        if nvml is None:
            self.reason = "NVML is unavailable (pip install nvidia-ml-py; NVIDIA driver loaded?)"
            return
        handles = []
        for index in indices or [0]:
            handle, why = _handle(nvml, index)
            if handle is None:
                self.reason = why
                return
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            except Exception as e:  # noqa: BLE001 - pre-Volta boards and some vGPUs do not support it
                self.reason = f"NVML energy counter unsupported on GPU {index}: {e}"
                return
            handles.append(handle)
        self._nvml, self._handles = nvml, handles

    @property
    def available(self) -> bool:
        return bool(self._handles) and self._nvml is not None

    def _read_mj(self) -> int | None:
        if self._nvml is None:
            return None
        try:
            return sum(int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._handles)
        except Exception as e:  # noqa: BLE001
            self.reason = f"NVML read failed: {e}"
            self._nvml = None
            return None

    def start(self) -> None:
        self._start_mj = self._read_mj()

    def _since_start_j(self) -> float | None:
        now = self._read_mj()
        if now is None or self._start_mj is None:
            return None
        return (now - self._start_mj) / 1e3

    def mark_target(self) -> None:
        self.to_target_j = self._since_start_j()

    def stop(self) -> None:
        self.energy_j = self._since_start_j()
