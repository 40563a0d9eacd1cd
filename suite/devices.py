"""Device abstraction (cuda, npu, mps, cpu): pick, synchronize, memory stats, autocast type, dist backend.

torch_npu is only imported when it is installed (probing with find_spec first): installed without Ascend's
CANN, it breaks `import torch` itself, so it must never be imported on a machine that lacks it.

May import: no other suite module.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch is imported where a function needs it: `accelerator_evidence` and a CPU Device's name and count answer
# without it (`trainbench env`, `list --json`)


@cache
def npu_module():
    """torch_npu if it is installed and imports cleanly, else None (with the reason in npu_unavailable_reason)."""
    if importlib.util.find_spec("torch_npu") is None:
        return None
    try:
        import torch_npu  # type: ignore[import-not-found]

        return torch_npu
    except Exception:  # noqa: BLE001 - any failure means "no NPU here"
        return None


def npu_unavailable_reason() -> str:
    if importlib.util.find_spec("torch_npu") is None:
        return "torch_npu is not installed (Ascend runners: pip install torch-npu matching torch, plus CANN)"
    if npu_module() is None:
        return "torch_npu is installed but failed to import (is Ascend CANN installed and set_env.sh sourced?)"
    import torch

    if not torch.npu.is_available():  # type: ignore[attr-defined]
        return "torch_npu imports but sees no NPU device"
    return ""


def npu_available() -> bool:
    import torch

    return npu_module() is not None and bool(torch.npu.is_available())  # type: ignore[attr-defined]


def detect_type() -> str:
    forced = os.environ.get("TRAINBENCH_DEVICE")
    if forced:
        return forced
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if npu_available():
        return "npu"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def accelerator_evidence() -> list[str]:
    """What on this host may be an accelerator torch would see, found without importing torch: NVIDIA's device
    files or driver entries, AMD's ROCm (/dev/kfd), WSL's GPU (/dev/dxg), Ascend's /dev/davinci*, an installed
    torch_npu, a Mac (MPS), or TRAINBENCH_DEVICE naming one. Empty: `detect_type()` would say "cpu", so a caller that
    only needs to know that (`trainbench env`, veRL's `supports`) need not import torch."""
    forced = os.environ.get("TRAINBENCH_DEVICE")
    if forced:
        return [] if forced == "cpu" else [f"TRAINBENCH_DEVICE={forced}"]
    found = [str(p) for pattern in ("nvidia[0-9]*", "nvidiactl", "kfd", "dxg", "davinci[0-9]*")
             for p in sorted(Path("/dev").glob(pattern))]
    found += [str(p) for p in sorted(Path("/proc/driver/nvidia/gpus").glob("*"))]
    if importlib.util.find_spec("torch_npu") is not None:
        found.append("torch_npu installed")
    if sys.platform == "darwin":
        found.append("macOS (MPS)")
    return found


@dataclass(frozen=True)
class Device:
    type: str  # cuda | npu | mps | cpu
    index: int = 0

    @property
    def torch(self) -> torch.device:
        import torch

        return torch.device(self.type) if self.type in ("cpu", "mps") else torch.device(self.type, self.index)

    def _mod(self):
        import torch

        return getattr(torch, self.type, None)

    def set_current(self) -> None:
        if self.type in ("cuda", "npu"):
            self._mod().set_device(self.index)

    def synchronize(self) -> None:
        """Block until queued device work is done: every timer read on an accelerator is preceded by this."""
        if self.type in ("cuda", "npu", "mps"):
            self._mod().synchronize()

    @property
    def dist_backend(self) -> str:
        return {"cuda": "nccl", "npu": "hccl"}.get(self.type, "gloo")

    @property
    def autocast_type(self) -> str:
        return self.type if self.type in ("cuda", "npu", "cpu", "mps") else "cpu"

    def name(self) -> str:
        if self.type in ("cuda", "npu"):
            import torch

        if self.type == "cuda":
            return torch.cuda.get_device_name(self.index)
        if self.type == "npu":
            return str(torch.npu.get_device_name(self.index))  # type: ignore[attr-defined]
        if self.type == "mps":
            return "Apple MPS"
        return cpu_model()

    def count(self) -> int:
        if self.type == "cpu":
            return 1
        import torch

        if self.type == "cuda":
            return torch.cuda.device_count()
        if self.type == "npu":
            return int(torch.npu.device_count())  # type: ignore[attr-defined]
        return 1

    def reset_peak_memory(self) -> None:
        if self.type in ("cuda", "npu"):
            self._mod().reset_peak_memory_stats(self.index)

    def memory_stats(self) -> dict[str, int | str]:
        """Peak memory: the allocator's on cuda/npu; the process's peak RSS on cpu (and always, beside)."""
        stats: dict[str, int | str] = {"host_peak_rss_bytes": peak_rss_bytes()}
        if self.type in ("cuda", "npu"):
            mod = self._mod()
            stats["device_peak_allocated_bytes"] = int(mod.max_memory_allocated(self.index))
            stats["device_peak_reserved_bytes"] = int(mod.max_memory_reserved(self.index))
            stats["source"] = f"torch.{self.type} allocator"
        else:
            stats["source"] = "getrusage ru_maxrss"
        return stats


def peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def current(local_rank: int = 0) -> Device:
    return Device(detect_type(), local_rank)


@cache
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown cpu"


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def busy_host(cores: int) -> bool:
    """Other work already fills the cores: runnable tasks now (/proc/stat procs_running, this one included) or the
    1-minute load above the core count."""
    try:
        running = next(int(line.split()[1]) for line in open("/proc/stat") if line.startswith("procs_running"))
    except (OSError, StopIteration, ValueError, IndexError):
        running = 0
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    return running - 1 >= cores or load > cores


def set_threads(threads: int | None, local_world: int = 1) -> int:
    """Set torch's intra-op threads explicitly: cores / processes (torch's default oversubscribes, FACTS.md); one
    thread on a busy host, where a second thread that waits for a CPU stalls every op on its barrier (issue 49)."""
    n = threads or max(1, cpu_cores() // max(1, local_world))
    if threads is None and n > 1 and busy_host(cpu_cores()):
        n = 1
    import torch

    torch.set_num_threads(n)
    return n
