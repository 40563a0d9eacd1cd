"""Bytes moved, the efficiency figure of the recommenders (docs/metrics.md, "Bytes moved"): a workload's analytic
embedding bytes per sample times steady samples/s, and its share of the device's memory bandwidth where the device
is in this table. Each peak cites its vendor's datasheet; an unknown device (every CPU) gets no share, never a guess.
"""

from __future__ import annotations

import re
from typing import Any

TB = 1e12
# (pattern over the device name, peak memory bandwidth in bytes/s, source)
PEAK_BANDWIDTH: tuple[tuple[str, float, str], ...] = (
    (r"H100.*(SXM|HBM3)|H100 80GB HBM3", 3.35 * TB, "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM 3.35 TB/s"),
    (r"H100.*(PCIe)", 2.0 * TB, "NVIDIA H100 Tensor Core GPU datasheet: H100 PCIe 2 TB/s"),
    (r"H200", 4.8 * TB, "NVIDIA H200 Tensor Core GPU datasheet: 4.8 TB/s"),
    (r"MI355X", 8.0 * TB, "AMD Instinct MI355X datasheet: 8 TB/s HBM3E"),
    (r"MI300X", 5.3 * TB, "AMD Instinct MI300X datasheet: 5.3 TB/s HBM3"),
)


def peak_bandwidth(device_name: str) -> tuple[float, str] | None:
    for pattern, bytes_per_s, source in PEAK_BANDWIDTH:
        if re.search(pattern, device_name, re.IGNORECASE):
            return bytes_per_s, source
    return None


def bytes_moved_fields(workload: Any, steady_samples_per_s: float | None, world: int,
                       device_name: str) -> dict[str, Any]:
    """{} for a workload without `bytes_per_sample`; else the throughput fields of bytes moved."""
    per_sample = getattr(workload, "bytes_per_sample", None)
    if per_sample is None or not steady_samples_per_s:
        return {}
    rate = float(per_sample()) * steady_samples_per_s
    out: dict[str, Any] = {"embedding_bytes_per_s": rate, "embedding_bytes_per_s_per_device": rate / max(world, 1)}
    peak = peak_bandwidth(device_name)
    if peak is not None:
        out["bandwidth_utilization"] = rate / max(world, 1) / peak[0]
    return out
