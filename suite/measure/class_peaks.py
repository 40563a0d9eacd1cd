"""Per op class, the peak a run's FLOPs are divided by: the dtype each class runs in (suite/measure/op_dtypes.py)
and that dtype's peak (suite/measure/peaks.py), combined by FLOP share or, without a split, the fastest allowed."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from suite.measure import peaks
from suite.measure.op_dtypes import OP_CLASSES, BackendFlags, combine, op_dtypes, shares


@dataclass(frozen=True)
class ClassPeak:
    op_class: str
    dtype: str
    why: str
    flops_per_s: float | None
    share: float | None
    source: str


@dataclass(frozen=True)
class Resolved:
    peak: object | None  # peaks.Peak: the combined peak MFU divides by
    by_class: dict[str, ClassPeak]
    rule: str
    warnings: list[str]


def resolve_by_class(device_type: str, device_name: str, precision: str, flops_by_class: dict[str, float] | None,
                     override_tflops: float | None = None, threads: int | None = None,
                     flags: BackendFlags | None = None) -> Resolved:
    """Per class: the dtype it runs in and that dtype's peak; combined by FLOP share (or fastest allowed)."""
    dtypes = op_dtypes(device_type, precision, flags)
    class_shares = shares(flops_by_class)
    # with known shares only the classes that carry FLOPs matter; without, all three are candidates
    classes = list(class_shares) if class_shares else list(OP_CLASSES)
    warnings: list[str] = []
    by_class: dict[str, ClassPeak] = {}
    for c in classes:
        d = dtypes[c]
        if override_tflops is not None:
            value, source = None, "--peak-tflops (user override)"
        elif device_type == "cpu":
            try:
                p = peaks.cpu_peak(d.dtype, threads)
            except ValueError:
                p = None
            value, source = (p.flops_per_s, p.source) if p else (None, f"no CPU peak for {d.dtype}")
        else:
            p = peaks.lookup(device_name, d.dtype)
            value, source = (p.flops_per_s, p.source) if p else (None, f"no dense {d.dtype} peak for {device_name!r}")
        share = class_shares.get(c) if class_shares else None
        by_class[c] = ClassPeak(c, d.dtype, d.why, value, share, source)
    used = sorted({cp.dtype for cp in by_class.values()})
    dtype = used[0] if len(used) == 1 else "mixed"
    if override_tflops is not None:
        peak = peaks.resolve(device_type, device_name, "fp32", override_tflops, threads)[0]
        assert peak is not None  # an override always gives a peak (or raises ValueError)
        return Resolved(dataclasses.replace(peak, dtype=dtype), by_class, "override",
                        [f"peak overridden with --peak-tflops {override_tflops:g}: MFU is relative to it, "
                         "not to the table"])
    value, rule, why_null = combine({c: cp.flops_per_s for c, cp in by_class.items()}, class_shares)
    if value is None:
        warnings.append(f"{why_null} on {device_name!r} (precision {precision}: "
                        + ", ".join(f"{c} {cp.dtype}" for c, cp in by_class.items())
                        + "): mfu and hfu are null (pass --peak-tflops with the vendor's dense figure, or add a "
                        "cited entry to suite/measure/peaks.py)")
        return Resolved(None, by_class, rule, warnings)
    if device_type == "cpu":
        name, provenance = peaks.cpu_info().model, "computed"
    else:
        entry = next((e for e in peaks.TABLE if re.search(e.pattern, device_name, re.IGNORECASE)), None)
        name, provenance = (entry.name, entry.provenance) if entry else (device_name, "vendor")
        if provenance != "vendor":
            warnings.append(f"peak for {name} is {provenance}, not from a vendor datasheet: {entry.source}")  # type: ignore[union-attr]
    sources = sorted({cp.source for cp in by_class.values()})
    text = f"{rule} over {', '.join(f'{c} {cp.dtype}' for c, cp in by_class.items())}: " + " | ".join(sources)
    return Resolved(peaks.Peak(name, dtype, value, text, provenance), by_class, rule, warnings)
