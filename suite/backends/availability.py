"""Whether a backend can run on this host (`Availability`, each engine's check), answered from the installed packages
and the device type without importing torch or the engine: `trainbench env` asks it on a host that shows no
accelerator and imports nothing heavy. The backend classes' `available()` call the same functions; torch's and
torchtitan's classes import their framework (torch's version is torch's own; torchtitan's import is the check), and
`torch_installed` here and `suite/backends/torchtitan/options.py` `available_installed` answer for them from the
installed files where nothing is imported (torchtitan: the package and triton, which its 0.3.0 needs to import,
found; the import itself is not tried).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from suite import devices
from suite.measure.fingerprint import package_version


@dataclass
class Availability:
    ok: bool
    reason: str = ""  # why not, in words a user can act on
    version: str | None = None


def deepspeed(device_type: str) -> Availability:
    if importlib.util.find_spec("deepspeed") is None:
        return Availability(False, "deepspeed is not installed (pip install 'trainbench-suite[deepspeed]')")
    if device_type not in ("cpu", "cuda", "npu"):
        return Availability(False, f"deepspeed does not run on {device_type}", package_version("deepspeed"))
    return Availability(True, version=package_version("deepspeed"))


def megatron(device_type: str) -> Availability:
    if not _has_submodule("megatron", "core"):
        return Availability(False, "megatron-core is not installed (pip install 'trainbench-suite[megatron]')")
    v = package_version("megatron-core")
    if v is not None and int(v.split(".")[0]) == 0 and int(v.split(".")[1]) < 16:
        return Availability(False, f"megatron-core {v} is too old; this backend needs >= 0.16", v)
    if device_type not in ("cpu", "cuda"):
        return Availability(False, f"megatron-core runs on cuda (or cpu through a shim), not {device_type}", v)
    return Availability(True, version=v)


def npu(device_type: str) -> Availability:
    version = package_version("torch-npu")
    reason = devices.npu_unavailable_reason()
    if reason:
        return Availability(False, reason, version)
    if device_type != "npu":
        return Availability(False, f"the selected device is {device_type!r}, not npu "
                                   "(unset TRAINBENCH_DEVICE or set it to npu)", version)
    return Availability(True, version=version)


def verl(device_type: str) -> Availability:
    from suite.backends.verl.options import _not_ready

    reason = _not_ready()
    return Availability(reason is None, reason or "", package_version("verl"))


def torch_installed(device_type: str) -> Availability:
    """torch's availability from its installed files (its class reports torch.__version__, the same string)."""
    from suite.measure.fingerprint import torch_build

    version = package_version("torch") or torch_build("__version__")
    if version is None:
        return Availability(False, "torch is not installed (pip install torch)")
    return Availability(True, version=version)


def _has_submodule(package: str, sub: str) -> bool:
    """`package.sub` is installed, found without importing `package` (find_spec("megatron.core") would import
    megatron/__init__)."""
    from pathlib import Path

    found = importlib.util.find_spec(package)
    if found is None:
        return False
    if not found.submodule_search_locations:
        return False
    return any((Path(loc) / sub).is_dir() or (Path(loc) / f"{sub}.py").is_file()
               for loc in found.submodule_search_locations)
