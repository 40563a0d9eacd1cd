"""Whether a backend can run on this host (`Availability`). Each engine answers in its options module
(suite/backends/<engine>/options.py `available_installed(device_type)`), from the installed packages and the device
type without importing torch or the engine: `trainbench env` asks it on a host that shows no accelerator and imports
nothing heavy. The backend classes' `available()` call the same functions, but torch's and torchtitan's, which import
their framework (torch's version is torch's own; torchtitan's import is the check).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass
class Availability:
    ok: bool
    reason: str = ""  # why not, in words a user can act on
    version: str | None = None


def has_submodule(package: str, sub: str) -> bool:
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
