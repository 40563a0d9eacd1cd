"""A per-workload, per-runner noise floor measured by an A/A comparison, stored with the baselines.

`trainbench calibrate --a DIR --b DIR` compares two sides run from the SAME commit (`trainbench ab` with
`--base X --head X`): the largest change its confidence interval cannot exclude is what this runner cannot tell
from itself, and becomes the floor. It is written to `baselines/<hardware>/<domain>/<name>/<backend>.floor.json`
and wins over any floor a spec or a candidate file carries (docs/compare.md, "The noise floor").
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from suite.results.record import ResultError, slug
from suite.results.tree import create_temp

FLOOR_KIND: Final = "trainbench-noise-floor"
FLOOR_SCHEMA_VERSION = 1


class FloorError(ValueError):
    """A noise floor outside [0, 1), or a floor file that cannot be read; the message names where it came from."""


def check_floor(value: Any, where: str) -> float | None:
    """A floor must be a number in [0, 1): 0.99 would let a 2x slowdown pass, a negative one makes no sense."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FloorError(f"{where}: noise floor {value!r} is not a number")
    if not 0 <= value < 1:
        raise FloorError(
            f"{where}: noise floor {value!r} is outside [0, 1): a floor is the relative change (0.03 = 3%) that "
            "compare ignores. Measure one with `trainbench calibrate` (an A/A comparison)")
    return float(value)


class AAMeasurement(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ratio: float = Field(description="A/A ratio of medians (second side / first)")
    ci_low: float
    ci_high: float
    runs_per_side: int
    steps_per_run: int


class NoiseFloor(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = FLOOR_SCHEMA_VERSION
    kind: Literal["trainbench-noise-floor"] = FLOOR_KIND
    hardware: str
    workload: str
    backend: str
    comparison_key: dict[str, Any] = Field(default_factory=dict)
    noise_floor: float = Field(ge=0, lt=1, description="relative change of the median step time compare ignores")
    method: str = "max(ci_high - 1, 1 - ci_low) of an A/A comparison (same commit on both sides)"
    aa: AAMeasurement
    measured_at: str
    git_sha: str | None = None
    _source: str = PrivateAttr(default="")

    @property
    def source(self) -> str:
        return self._source


def parse_floor(data: dict[str, Any], source: str) -> NoiseFloor:
    if data.get("schema_version") != FLOOR_SCHEMA_VERSION:
        raise ResultError(f"{source}: noise floor schema_version {data.get('schema_version')!r}; this trainbench "
                          f"reads {FLOOR_SCHEMA_VERSION} (run `trainbench calibrate` again)")
    try:
        check_floor(data.get("noise_floor"), source)
        floor = NoiseFloor.model_validate(data)
    except FloorError as e:
        raise ResultError(str(e)) from None
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:5])
        raise ResultError(f"{source}: {problems}") from None
    floor._source = source
    return floor


def floor_from_aa(ratio: float, ci_low: float, ci_high: float) -> float:
    """The largest change the A/A interval cannot exclude, rounded up to 0.1%."""
    widest = max(ci_high - 1.0, 1.0 - ci_low, abs(ratio - 1.0), 0.0)
    return math.ceil(widest * 1000) / 1000


def floor_path(root: Path, f: NoiseFloor) -> Path:
    domain, _, name = f.workload.partition("/")
    return root / slug(f.hardware) / slug(domain) / slug(name) / f"{slug(f.backend)}.floor.json"


def write_floor(root: Path, f: NoiseFloor) -> Path:
    """Atomically (temp file + rename); a newer A/A measurement replaces the older one (git keeps history)."""
    path = floor_path(root, f)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp(path.parent)  # the user's umask, as open() would (mkstemp: 0600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(json.dumps(f.model_dump(mode="json"), indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
