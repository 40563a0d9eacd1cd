"""The fingerprint of where a run happened: hardware, software versions, git state."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from suite import __version__, devices
from suite.measure import fingerprint as fp
from suite.measure.fingerprint import package_version
from suite.results.record import GitInfo, HardwareInfo, slug

load_average = fp.load_average

SOFTWARE_PACKAGES = (
    "torch", "numpy", "deepspeed", "megatron-core", "torch-npu", "torch-geometric", "gymnasium", "ray",
    "mlperf-logging", "scikit-learn", "torchvision", "nvidia-dali-cuda120",
)


def hardware(device: devices.Device, devices_used: int = 1, load_start: list[float] | None = None,
             world: int | None = None, load_max: list[float] | None = None,
             cpu_wait_s: float | None = None) -> HardwareInfo:
    """The machine; `load_start` is the host load captured when the run began (the end load is read now);
    `load_max` and `cpu_wait_s` what a busy host took from the run while its clock ran (suite/measure/host_share.py)."""
    cores = devices.cpu_cores()
    cpu = devices.cpu_model()
    if device.type == "cpu":
        name, hw_slug = cpu, f"cpu-{slug(cpu)}-{cores}c"
    else:
        name = device.name()
        hw_slug = f"{slug(name)}-x{devices_used}"
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        mem = None
    return HardwareInfo(
        slug=os.environ.get("TRAINBENCH_HARDWARE", hw_slug),
        device_type=device.type,
        device_name=name,
        device_count=devices_used,
        cpu_model=cpu,
        cpu_cores=cores,
        memory_bytes=mem,
        hostname=socket.gethostname(),
        **_accelerator(device, devices_used, world or devices_used),
        load_avg_start=load_start,
        load_avg_end=fp.load_average(),
        load_avg_max=load_max,
        cpu_wait_s=cpu_wait_s,
        container_image=fp.container_image(),
        comm_env=fp.comm_env(),
    )


def _accelerator(device: devices.Device, devices_used: int, world: int) -> dict[str, Any]:
    out: dict[str, Any] = {"node_count": fp.node_count(world), "devices": [], "interconnect": None}
    try:
        if device.type == "cuda":
            import torch

            out["devices"], out["interconnect"] = fp.cuda_devices(min(devices_used, torch.cuda.device_count()))
        elif device.type == "npu":
            out["devices"] = fp.npu_devices(devices_used)
    except Exception:  # noqa: BLE001 - the fingerprint never fails a run
        pass
    return out


def fingerprint(devices_used: int = 1) -> tuple[HardwareInfo, dict[str, str | None], GitInfo]:
    """Where a run happens (this machine's current device): hardware, software, git."""
    return hardware(devices.current(), devices_used), software(), git_info()


def software(import_torch: bool = True) -> dict[str, str | None]:
    """Versions of what a run uses. `import_torch=False` (`trainbench env` on a host with no accelerator): torch's
    CUDA build from its version file, and no `torch.threads` (torch's own count, which only torch can say)."""
    out: dict[str, str | None] = {"python": platform.python_version(), "trainbench": __version__,
                                  "platform": platform.platform()}
    for pkg in SOFTWARE_PACKAGES:
        v = package_version(pkg)
        if v is not None:
            out[pkg] = v
    if not import_torch and "torch" not in sys.modules:
        if package_version("torch") is not None:
            out["torch.cuda"] = str(fp.torch_build("cuda"))
    else:
        try:
            import torch

            out["torch.cuda"] = str(torch.version.cuda)
            out["torch.threads"] = str(torch.get_num_threads())
        except Exception:  # noqa: BLE001
            pass
    try:
        out.update(fp.accelerator_software(import_torch))
    except Exception:  # noqa: BLE001 - keys stay present even when probing fails
        out.update(dict.fromkeys(k for k in fp.ACCEL_SOFTWARE_KEYS if k not in out))
    return out


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info(cwd: Path | None = None) -> GitInfo:
    cwd = cwd or Path(__file__).resolve().parents[2]
    sha = os.environ.get("GITHUB_SHA") or _git(["rev-parse", "HEAD"], cwd)
    status = _git(["status", "--porcelain", "--untracked-files=no"], cwd)
    branch = os.environ.get("GITHUB_HEAD_REF") or _git(["rev-parse", "--abbrev-ref", "HEAD"], cwd)
    return GitInfo(sha=sha, dirty=None if status is None else bool(status), branch=branch)
