"""Device check for the CUDA paths of the metrics (run on a GPU machine; prints one JSON object).

    PYTHONPATH=$PWD python benchmarks/gpu_metrics_check.py       # ~30 s on an H100/H200

Exercises what CPU CI cannot: the table lookup for this GPU, the bf16/TF32 GEMM benchmark with CUDA events,
device step timers vs host timers on an async loop, NVML energy over a few seconds of GEMMs, NVTX ranges.
"""

from __future__ import annotations

import json
import time

import torch

from suite import devices
from suite.measure import metrics, peaks
from suite.measure.energy import EnergyMeter
from suite.measure.profiling import Nvtx


def main() -> None:
    assert torch.cuda.is_available(), "needs a CUDA GPU"
    dev = devices.current()
    name = dev.name()
    out: dict = {"device": name}
    for precision in ("bf16", "fp32"):
        peak, warns = peaks.resolve("cuda", name, precision)
        gemm = peaks.measure_gemm(dev.torch, precision, budget_s=2.0)
        out[precision] = {"table_tflops": peak.flops_per_s / 1e12 if peak else None, "warnings": warns,
                          "measured_tflops": gemm.flops_per_s / 1e12, "n": gemm.n,
                          "measured_over_table": gemm.flops_per_s / peak.flops_per_s if peak else None}
    # device vs host step timing on an async loop of matmuls: host times show launch cost only
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    timer, host = metrics.StepTimer("cuda"), []
    meter = EnergyMeter("cuda", [dev.index])
    nv = Nvtx(True)
    meter.start()
    for i in range(200):
        nv.push(f"step {i}")
        t = time.perf_counter()
        timer.begin()
        for _ in range(4):
            a = a @ a
            a = a / a.abs().max()
        timer.end()
        host.append(time.perf_counter() - t)
        nv.pop_all()
    torch.cuda.synchronize()
    meter.stop()
    out["step_time"] = metrics.step_time_report(host, timer.device_times_s())
    out["energy_j"], out["energy_reason"] = meter.energy_j, meter.reason
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
