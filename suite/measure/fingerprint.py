"""The accelerator part of a run's fingerprint: driver/CUDA/cuDNN/NCCL/Triton/TE/CANN versions, per-device
clocks, power limit, ECC, MIG, interconnect, node count, host load, container image, NCCL_*/HCCL_* environment;
on Ascend, the SoC, cores and memory per device and CANN/driver versions as torch_npu reports them.

Every key is always present (null when absent), so two results compare key by key. NVML (nvidia-ml-py) is
read when present; tests fake it and torch.cuda's properties on CPU. Nothing here may fail a run: each probe
that raises leaves its value null.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
from collections.abc import Callable
from typing import Any

ACCEL_SOFTWARE_KEYS = ("driver", "cuda_runtime", "cudnn", "nccl", "triton", "transformer_engine", "cann",
                       "torch_npu")
COMM_ENV_PREFIXES = ("NCCL_", "HCCL_")
CONTAINER_ENV = ("TRAINBENCH_CONTAINER_IMAGE", "CONTAINER_IMAGE")


def _try(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a probe that fails is a null, never a failed run
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value)


def _nvml() -> Any:
    from suite.measure.energy import _nvml as load

    return load()


def torch_build(attr: str) -> Any:
    """A value of torch's build record (`torch/version.py`: __version__, cuda, hip, ...) read from the installed file,
    without importing torch; None when torch or the value is not there."""
    import ast
    import importlib.util
    from pathlib import Path

    found = importlib.util.find_spec("torch")
    if found is None or not found.submodule_search_locations:
        return None
    try:
        tree = ast.parse((Path(list(found.submodule_search_locations)[0]) / "version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == attr and getattr(node, "value", None) is not None:
            try:
                return ast.literal_eval(node.value)  # type: ignore[attr-defined]
            except ValueError:
                return None
    return None


def accelerator_software(import_torch: bool = True) -> dict[str, str | None]:
    """driver, cuda_runtime, cudnn, nccl, triton, transformer_engine, cann, torch_npu (null when absent).
    `import_torch=False` (a host with no accelerator, `suite.devices.accelerator_evidence`): torch's CUDA build is read
    from its version file; cudnn, nccl and the driver, which only a visible GPU has, stay null."""
    import importlib.metadata

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    out: dict[str, str | None] = dict.fromkeys(ACCEL_SOFTWARE_KEYS)
    torch: Any = None
    if import_torch or "torch" in sys.modules:
        import torch

        out["cuda_runtime"] = _text(torch.version.cuda)
    else:
        out["cuda_runtime"] = _text(torch_build("cuda"))
    if torch is not None and torch.cuda.is_available():
        out["cudnn"] = _text(_try(torch.backends.cudnn.version))
        nccl = _try(torch.cuda.nccl.version)
        out["nccl"] = ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else _text(nccl)
        nvml = _nvml()
        if nvml is not None:
            out["driver"] = _text(_try(nvml.nvmlSystemGetDriverVersion))
    out["triton"] = version("triton") or version("pytorch-triton")
    out["transformer_engine"] = version("transformer-engine") or version("transformer_engine")
    out["torch_npu"] = version("torch-npu")
    home = os.environ.get("ASCEND_TOOLKIT_HOME") or os.environ.get("ASCEND_HOME_PATH")
    if home:
        out["cann"] = _cann_version(home)
    torch_npu = loaded_torch_npu()
    if torch_npu is not None:
        out["torch_npu"] = out["torch_npu"] or _text(getattr(torch_npu, "__version__", None))
        out["cann"] = npu_component_version(torch_npu, "CANN") or _text(getattr(torch.version, "cann", None)) \
            or out["cann"]
        if out["driver"] is None:
            out["driver"] = npu_component_version(torch_npu, "DRIVER")
    return out


def loaded_torch_npu() -> Any:
    """torch_npu when this process has it loaded (torch autoloads it on an Ascend machine), else None. Never
    imported here: without CANN its import fails (FACTS.md), and a fingerprint must not."""
    return sys.modules.get("torch_npu")


def npu_component_version(torch_npu: Any, module: str) -> str | None:
    """torch_npu's own report of an Ascend component's version (`get_cann_version(module=...)`: CANN, DRIVER,
    RUNTIME, HCCL...; in torch_npu.utils or torch_npu.npu.utils by release). It answers "" for a CANN older than
    8.1.RC1 or an unknown module: None here."""
    for owner in (getattr(torch_npu, "utils", None), getattr(getattr(torch_npu, "npu", None), "utils", None)):
        getter = getattr(owner, "get_cann_version", None)
        if getter is not None:
            value = _text(_try(functools.partial(getter, module=module)))
            if value:
                return value
    return None


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _cann_version(home: str) -> str | None:
    for name in ("version.cfg", "version.info"):
        path = os.path.join(home, name)
        text = _try(functools.partial(_read_text, path))
        if text:
            for line in text.splitlines():
                key, _, value = line.partition("=")
                if "version" in key.lower() and value.strip():
                    return value.strip().strip('"')
    return os.path.basename(os.path.realpath(home)) or None


def cuda_devices(count: int) -> tuple[list[dict[str, Any]], str | None]:
    """Per CUDA device: name, SM/memory clocks now and max (MHz), power limit (W), ECC, MIG; the interconnect."""
    import torch

    from suite.measure.energy import _handle

    nvml = _nvml()
    devices: list[dict[str, Any]] = []
    nvlinks: list[int] = []
    for index in range(count):
        props = _try(functools.partial(torch.cuda.get_device_properties, index))
        entry: dict[str, Any] = {
            "index": index, "name": getattr(props, "name", None),
            "memory_bytes": getattr(props, "total_memory", None),
            "compute_capability": f"{props.major}.{props.minor}" if props is not None else None,
            "sm_count": getattr(props, "multi_processor_count", None),
            "sm_clock_mhz": None, "sm_clock_max_mhz": None, "memory_clock_mhz": None, "memory_clock_max_mhz": None,
            "power_limit_w": None, "ecc": None, "mig": None,
        }
        handle = _handle(nvml, index)[0] if nvml is not None else None
        if handle is not None:
            found, links = _nvml_device(nvml, handle)
            entry.update(found)
            nvlinks.append(links)
        devices.append(entry)
    interconnect = None
    if nvlinks:
        interconnect = (f"NVLink: {', '.join(f'gpu{i} {n} links' for i, n in enumerate(nvlinks))}"
                        if any(nvlinks) else "PCIe (no active NVLink)")
    return devices, interconnect


def _nvml_device(nvml: Any, handle: Any) -> tuple[dict[str, Any], int]:
    """Clocks, power limit, ECC and MIG of one NVML device, and its count of active NVLink links."""
    sm, mem = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    out: dict[str, Any] = {
        "sm_clock_mhz": _try(lambda: nvml.nvmlDeviceGetClockInfo(handle, sm)),
        "sm_clock_max_mhz": _try(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, sm)),
        "memory_clock_mhz": _try(lambda: nvml.nvmlDeviceGetClockInfo(handle, mem)),
        "memory_clock_max_mhz": _try(lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, mem)),
    }
    limit = _try(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))  # milliwatts
    out["power_limit_w"] = limit / 1e3 if limit is not None else None
    ecc = _try(lambda: nvml.nvmlDeviceGetEccMode(handle))  # (current, pending)
    out["ecc"] = bool(ecc[0]) if isinstance(ecc, (tuple, list)) else None
    mig = _try(lambda: nvml.nvmlDeviceGetMigMode(handle))
    out["mig"] = bool(mig[0]) if isinstance(mig, (tuple, list)) else None
    links = 0
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        state = _try(functools.partial(nvml.nvmlDeviceGetNvLinkState, handle, link))
        if state is None:  # no such link (or no NVLink at all)
            break
        links += int(bool(state))
    return out, links


def npu_soc_version(npu: Any) -> int | None:
    """The SoC id torch_npu reports (e.g. 223 for Ascend910B3; 220-225 are the 910B family, 250-255 the 910C)."""
    torch_npu = loaded_torch_npu()
    for getter in (getattr(npu, "get_soc_version", None),
                   getattr(getattr(torch_npu, "npu", None), "get_soc_version", None),
                   getattr(getattr(torch_npu, "_C", None), "_npu_get_soc_version", None)):
        if getter is not None:
            value = _try(getter)
            if isinstance(value, int) and value >= 0:
                return value
    return None


def npu_devices(count: int) -> list[dict[str, Any]]:
    """Per Ascend device, from torch_npu's properties: name (the SoC's, e.g. Ascend910B3), the SoC id, memory,
    cube (matrix) and vector core counts, L2 cache size."""
    import torch

    npu = getattr(torch, "npu", None)
    soc = npu_soc_version(npu) if npu is not None else None
    out = []
    for index in range(count):
        props = _try(functools.partial(npu.get_device_properties, index)) if npu is not None else None
        name = _try(functools.partial(npu.get_device_name, index)) if npu is not None else None
        out.append({
            "index": index, "name": _text(name) or _text(getattr(props, "name", None)), "soc_version": soc,
            "memory_bytes": getattr(props, "total_memory", None),
            "cube_cores": getattr(props, "cube_core_num", None), "vector_cores": getattr(props, "vector_core_num", None),
            "l2_cache_bytes": getattr(props, "L2_cache_size", None),
        })
    return out


def load_average() -> list[float] | None:
    value = _try(os.getloadavg)
    return [round(float(v), 2) for v in value] if value else None


def comm_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(COMM_ENV_PREFIXES)}


def container_image() -> str | None:
    return next((os.environ[k] for k in CONTAINER_ENV if os.environ.get(k)), None)


def node_count(world: int) -> int:
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or 0)
    nnodes = os.environ.get("NNODES") or os.environ.get("SLURM_NNODES")
    if nnodes and nnodes.isdigit():
        return int(nnodes)
    return max(1, world // local) if local else 1


def package_version(dist: str) -> str | None:
    """The installed version of a distribution (`megatron-core`), or None when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
