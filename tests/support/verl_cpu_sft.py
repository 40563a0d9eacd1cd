"""Test-only: veRL 0.9.1's SFT trainer (`python -m verl.trainer.sft_trainer`) on a CPU, given only what veRL lacks
there, each patch named by the line of veRL it answers; then veRL's own `main()` with the command line as it came
(the backend's overrides, untouched). Started as `torchrun ... -m verl_cpu_sft ARGS` with tests/support on
PYTHONPATH, in place of `-m verl.trainer.sft_trainer` (suite/backends/verl/sft_launch.py MODULE).

1. No CPU platform: verl.plugin.platform registers nvidia, huawei and amd only, and a host without one falls back
   to nvidia (platform_manager._detect_platform_name), whose device is cuda. -> `PlatformCPU`: device "cpu",
   torch.cpu as the device module (with the torch.cuda memory and RNG calls veRL makes on it), gloo as the
   collective backend, set as veRL's platform (set_platform).
2. verl/utils/distributed.py:63 asks torch for f"cpu:gloo,{device}:{backend}": 'cpu:gloo,cuda:nccl' (no NCCL in a
   CPU build) or, with the CPU platform, 'cpu:gloo,cpu:gloo' (torch refuses a device named twice).
   -> initialize_global_process_group with backend "gloo", the rest of that function as it is.
3. Its FSDP engine registers for devices cuda and npu only (workers/engine/fsdp/transformer_impl.py:1143:
   EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=["cuda", "npu"])).
   -> the same class registered for device "cpu".
4. auto_set_device (verl/utils/device.py:151) rewrites trainer.device only when the platform is not "cpu", so the
   config's default `trainer.device: cuda` stays, and the trainer moves its token counts there.
   -> trainer.device set to "cpu" (the platform's device).
5. Not a CPU matter, this test host's: fastapi and uvicorn are not installed here. veRL's SFT trainer imports them
   (sft_trainer -> workers.engine_workers -> checkpoint_engine.base -> workers/rollout/utils.py:20-22, `import
   uvicorn`, `from fastapi import FastAPI`: its rollout's HTTP server) and never calls them; the backend asks a
   node for them before launching (suite/backends/verl/options.py SFT_TRAINER_MODULES). -> empty stand-ins with the
   three names that module reads at import (uvicorn.Server, uvicorn.Config, fastapi.FastAPI), only where absent.
"""

from __future__ import annotations

import os
import types
from datetime import timedelta

import torch


def _stand_ins() -> None:  # 5.
    import importlib.util
    import sys

    if importlib.util.find_spec("uvicorn") is None:
        uvicorn = types.ModuleType("uvicorn")
        uvicorn.Server = uvicorn.Config = object  # type: ignore[attr-defined]
        sys.modules["uvicorn"] = uvicorn
    if importlib.util.find_spec("fastapi") is None:
        fastapi = types.ModuleType("fastapi")
        fastapi.FastAPI = object  # type: ignore[attr-defined]
        sys.modules["fastapi"] = fastapi


def _device_module() -> types.ModuleType:
    """torch.cpu with the torch.cuda calls veRL makes on its device module (memory_utils.py, fsdp_utils.py,
    the engine's RNG state, flops_counter.py): the memory figures 0 (a CPU has no caching allocator), the RNG
    torch's own, the device's name "CPU" (what flops_counter.py:78 names torch.cpu)."""
    module = types.ModuleType("verl_cpu_device")
    module.__dict__.update({k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("_")})
    for name in ("memory_reserved", "memory_allocated", "max_memory_reserved", "max_memory_allocated"):
        setattr(module, name, lambda *a, **k: 0)
    module.mem_get_info = lambda *a, **k: (0, 0)
    module.empty_cache = module.set_per_process_memory_fraction = lambda *a, **k: None
    module.get_rng_state, module.set_rng_state = torch.get_rng_state, torch.set_rng_state
    module.get_device_name = lambda *a, **k: "CPU"  # flops_counter.py:80 compares the module with torch.cpu
    return module


def _patch() -> None:
    _stand_ins()
    from verl.plugin.platform import platform_manager
    from verl.plugin.platform.platform_cuda import PlatformCUDA

    class PlatformCPU(PlatformCUDA):  # 1.
        device_name = "cpu"  # type: ignore[assignment]
        vendor_name = "cpu"  # type: ignore[assignment]
        device_module = _device_module()  # type: ignore[assignment]

        def is_available(self) -> bool:
            return True

        def current_device(self) -> str:  # veRL uses get_device_id() as a torch device (fsdp_utils.py:507)
            return "cpu"

        def device_count(self) -> int:
            return 1

        def set_device(self, device_index: int) -> None:
            pass

        def synchronize(self, device_index: int | None = None) -> None:
            pass

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

    platform_manager.PlatformRegistry.register(platform="cpu")(PlatformCPU)
    platform_manager.set_platform(PlatformCPU())

    import verl.utils.distributed as distributed

    def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:  # 2.
        torch.distributed.init_process_group(backend="gloo", timeout=timedelta(seconds=timeout_second),
                                             init_method=os.environ.get("DIST_INIT_METHOD", None))
        return int(os.environ["LOCAL_RANK"]), int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    distributed.initialize_global_process_group = initialize_global_process_group

    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    for backend in ("fsdp", "fsdp2"):  # 3.
        EngineRegistry._engines["language_model"][backend]["cpu"] = FSDPEngineWithLMHead

    from verl.trainer import sft_trainer

    def auto_set_device(config) -> None:  # 4.
        config.trainer.device = "cpu"

    sft_trainer.auto_set_device = auto_set_device


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("TRAINBENCH_TEST_THREADS", "1")))
    _patch()
    from verl.trainer import sft_trainer

    sft_trainer.main()
