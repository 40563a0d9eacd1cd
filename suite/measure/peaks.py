"""Dense peak FLOP/s by device and dtype (a table, every entry cited), CPU peaks from the ISA, a GEMM benchmark.

An unknown device has no peak: MFU is then null with a warning, never a guessed figure (torchtitan once fell
back to the A100 peak and printed 152% MFU). Every table value is the dense (no 2:4 sparsity) peak; vendors'
headline tensor figures are often "with sparsity", i.e. twice these.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from suite.measure.op_dtypes import op_dtypes, read_flags

T = 1e12
DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Peak:
    device: str
    dtype: str
    flops_per_s: float
    source: str
    provenance: str  # vendor (a datasheet) | reported (third-party figures) | computed (CPU ISA) | override


@dataclass(frozen=True)
class TableEntry:
    name: str
    pattern: str  # regex on the device name torch reports (case-insensitive)
    flops: dict[str, float]
    source: str
    provenance: str = "vendor"


_NV_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf): FP32 19.5, "
            "TF32 156, BF16/FP16 312 TFLOPS dense (the 624 figures are with sparsity); same for SXM4 and PCIe")
_NV_H100 = ("NVIDIA H100 Tensor Core GPU datasheet (resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-"
            "datasheet): tensor figures there are with sparsity; dense = half")
_NV_H200 = ("NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200): tensor figures there are "
            "with sparsity; dense = half")

# Order matters: the first pattern that matches wins, so specific names (PCIe, NVL) come before generic ones.
TABLE: tuple[TableEntry, ...] = (
    TableEntry("A100 PCIe", r"a100.*pcie", {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
               _NV_A100),
    TableEntry("A100 SXM4", r"a100", {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T}, _NV_A100),
    TableEntry("H100 PCIe", r"h100.*pcie",
               {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756 * T, "fp16": 756 * T, "fp8": 1513 * T},
               _NV_H100 + " (PCIe: FP32 51, TF32 756*, BF16 1,513*, FP8 3,026* TFLOPS)"),
    TableEntry("H100 NVL", r"h100.*nvl",
               {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T, "fp8": 1670.5 * T},
               _NV_H100 + " (NVL: FP32 60, TF32 835*, BF16 1,671*, FP8 3,341* TFLOPS)"),
    TableEntry("H100 SXM5", r"h100",
               {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T},
               _NV_H100 + " (SXM: FP32 67, TF32 989*, BF16 1,979*, FP8 3,958* TFLOPS)"),
    TableEntry("H200 NVL", r"h200.*nvl",
               {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T, "fp8": 1670.5 * T},
               _NV_H200 + " (NVL: FP32 60, TF32 835*, BF16 1,671*, FP8 3,341* TFLOPS)"),
    TableEntry("H200 SXM", r"h200",
               {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T},
               _NV_H200 + " (SXM: FP32 67, TF32 989*, BF16 1,979*, FP8 3,958* TFLOPS)"),
    TableEntry("B200", r"b200",
               {"fp32": 75 * T, "tf32": 1125 * T, "bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T},
               "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx): 8 GPUs give FP32 600 TFLOPS, "
               "TF32 18, BF16/FP16 36, FP8 72 PFLOPS with sparsity; per GPU dense = /8 /2 (torchtitan: 2.25e15)"),
    TableEntry("L40S", r"l40s",
               {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362.05 * T, "fp16": 362.05 * T, "fp8": 733 * T},
               "NVIDIA L40S datasheet (nvidia.com/en-us/data-center/l40s): FP32 91.6, TF32 183 | 366*, "
               "BF16/FP16 362.05 | 733*, FP8 733 | 1,466* TFLOPS (* with sparsity)"),
    TableEntry("MI300X", r"mi300x",
               {"fp32": 163.4 * T, "tf32": 653.7 * T, "bf16": 1307.4 * T, "fp16": 1307.4 * T, "fp8": 2614.9 * T},
               "AMD Instinct MI300X data sheet (amd.com, amd-instinct-mi300x-data-sheet.pdf): FP32 163.4, "
               "TF32 653.7, FP16/BF16 1,307.4, FP8 2,614.9 TFLOPS dense (sparsity doubles the matrix figures)"),
    TableEntry("Ascend 910B", r"ascend\s*910b|910b", {"bf16": 320 * T, "fp16": 320 * T},
               "unverified: Huawei publishes no per-SKU dense peak for the 910B; ~320 TFLOPS FP16 is the figure "
               "third-party reports cite (910B1-B4 differ): pass --peak-tflops with your SKU's number",
               provenance="reported"),
    TableEntry("Ascend 910", r"ascend\s*910(?!b)", {"fp16": 256 * T},
               "Huawei Ascend 910 launch (Aug 2019) and Hot Chips 31 (2019): 256 TFLOPS FP16"),
)


def lookup(device_name: str, dtype: str) -> Peak | None:
    """The table's dense peak for this device and dtype, or None (unknown device or dtype not in the entry)."""
    for entry in TABLE:
        if re.search(entry.pattern, device_name, re.IGNORECASE):
            value = entry.flops.get(dtype)
            if value is None:
                return None
            return Peak(entry.name, dtype, value, entry.source, entry.provenance)
    return None


def tf32_enabled() -> bool:
    """Whether fp32 matmuls on CUDA run on TF32 tensor cores (then the TF32 peak is the right ceiling)."""
    return read_flags().cuda_matmul_tf32


def matmul_dtype(device_type: str, precision: str) -> str:
    """The dtype this run's matmuls run in (bf16_master: bf16; fp32: TF32/HF32 where the switch allows it).
    Convolutions and attention may differ: suite/measure/op_dtypes.py decides each op class."""
    return op_dtypes(device_type, precision)["matmul"].dtype


# ---- CPUs: cores x clock x FLOPs per cycle --------------------------------------------------------------


@dataclass(frozen=True)
class CpuInfo:
    model: str
    vendor: str
    family: int
    flags: frozenset[str]
    logical: int
    threads_per_core: int
    clock_hz: float
    clock_source: str


@cache
def cpu_info() -> CpuInfo:
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        for line in text.split("\n\n", 1)[0].splitlines():  # the first processor's block
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
    except OSError:
        pass
    try:
        logical = len(os.sched_getaffinity(0))
    except AttributeError:
        logical = os.cpu_count() or 1
    siblings, cores = int(fields.get("siblings", 1) or 1), int(fields.get("cpu cores", 1) or 1)
    tpc = max(1, siblings // max(1, cores))
    clock_hz, clock_source = 0.0, "unknown"
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        clock_hz, clock_source = float(max_freq.read_text().strip()) * 1e3, "cpufreq cpuinfo_max_freq (max boost)"
    except (OSError, ValueError):
        if fields.get("cpu MHz"):
            clock_hz, clock_source = float(fields["cpu MHz"]) * 1e6, "/proc/cpuinfo cpu MHz (no cpufreq: VM nominal)"
    return CpuInfo(
        model=fields.get("model name", "unknown cpu"),
        vendor=fields.get("vendor_id", ""),
        family=int(fields.get("cpu family", 0) or 0),
        flags=frozenset(fields.get("flags", "").split()),
        logical=logical,
        threads_per_core=tpc,
        clock_hz=clock_hz,
        clock_source=clock_source,
    )


def cpu_flops_per_cycle(info: CpuInfo, dtype: str) -> tuple[float, str]:
    """FLOPs per cycle per core for dense matmul in `dtype`, and the ISA reasoning behind the number.

    fp32: FMA units x SIMD lanes x 2. AVX-512 parts are assumed to have two 512-bit FMA units (Xeon Gold 6xxx/
    Platinum, AMD Zen 5); AMD Zen 4 (family 0x19) runs 512-bit ops on two 256-bit units. Some Xeon Silver/
    Gold 5xxx parts have one 512-bit unit: for those the figure is 2x too high (MFU 2x too low).
    bf16: AMX-BF16 tiles 1024/cycle (Intel Sapphire Rapids+); AVX512_BF16 VDPBF16PS 2x the fp32 rate;
    otherwise no native bf16, and the fp32 rate bounds it.
    """
    f = info.flags
    if "avx512f" in f:
        zen4 = info.vendor == "AuthenticAMD" and info.family == 0x19
        units, lanes = (2, 8) if zen4 else (2, 16)
        isa = "AVX-512 (Zen 4: 2x256-bit FMA)" if zen4 else "AVX-512 (2 FMA units assumed)"
    elif "avx2" in f and "fma" in f:
        units, lanes, isa = 2, 8, "AVX2+FMA (2 FMA units)"
    elif "avx" in f:
        units, lanes, isa = 1, 8, "AVX (1 add + 1 mul port, no FMA)"
    else:
        units, lanes, isa = 1, 4, "SSE (no AVX)"
    fp32 = units * lanes * 2.0
    fp32_text = f"{isa}: {units} x {lanes} fp32 lanes x 2"
    if dtype in ("fp32", "tf32"):
        return fp32, fp32_text
    if dtype == "bf16":
        if "amx_bf16" in f:
            return 1024.0, "AMX-BF16: 1024 bf16 FLOPs/cycle/core (Intel)"
        if "avx512_bf16" in f:
            return 2 * fp32, f"AVX512_BF16 (VDPBF16PS): 2 x fp32 rate ({fp32_text})"
        return fp32, f"no native bf16: bounded by the fp32 rate ({fp32_text})"
    if dtype == "fp16":
        if "amx_fp16" in f:
            return 1024.0, "AMX-FP16: 1024 fp16 FLOPs/cycle/core (Intel)"
        if "avx512_fp16" in f:
            return 2 * fp32, f"AVX512_FP16: 2 x fp32 rate ({fp32_text})"
        return fp32, f"no native fp16 FMA: bounded by the fp32 rate ({fp32_text})"
    raise ValueError(f"no CPU peak for dtype {dtype!r}")


def cpu_peak(dtype: str, threads: int | None = None, info: CpuInfo | None = None) -> Peak | None:
    """cores x clock x FLOPs/cycle. Cores = physical cores the run's threads can use (SMT siblings share units)."""
    info = info or cpu_info()
    if info.clock_hz <= 0:
        return None
    physical = max(1, info.logical // info.threads_per_core)
    cores = min(physical, threads or torch.get_num_threads())
    fpc, why = cpu_flops_per_cycle(info, dtype)
    flops = cores * info.clock_hz * fpc
    method = (f"{cores} cores x {info.clock_hz / 1e9:.3f} GHz ({info.clock_source}) x {fpc:g} "
              f"FLOPs/cycle/core [{why}]")
    return Peak(info.model, dtype, flops, method, "computed")


# ---- resolving the run's peak --------------------------------------------------------------------------


def resolve(device_type: str, device_name: str, precision: str, override_tflops: float | None = None,
            threads: int | None = None) -> tuple[Peak | None, list[str]]:
    """The peak MFU divides by, and warnings to put in the result. Unknown -> (None, [why])."""
    dtype = matmul_dtype(device_type, precision)
    if override_tflops is not None:
        if not (override_tflops > 0 and math.isfinite(override_tflops)):
            raise ValueError(f"--peak-tflops {override_tflops}: must be a positive number")
        return (Peak(device_name, dtype, override_tflops * T, "--peak-tflops (user override)", "override"),
                [f"peak overridden with --peak-tflops {override_tflops:g}: MFU is relative to it, not to the table"])
    if device_type == "cpu":
        peak = cpu_peak(dtype, threads)
        if peak is None:
            return None, ["no CPU clock found (/proc/cpuinfo, cpufreq): mfu is null"]
        return peak, []
    peak = lookup(device_name, dtype)
    if peak is None:
        return None, [f"no dense {dtype} peak for device {device_name!r} in suite/measure/peaks.py: mfu and hfu are null "
                      "(pass --peak-tflops with the vendor's dense figure, or add a cited entry to the table)"]
    warnings = []
    if peak.provenance != "vendor":
        warnings.append(f"peak for {peak.device} is {peak.provenance}, not from a vendor datasheet: {peak.source}")
    return peak, warnings


# ---- measured peak: a short GEMM benchmark in the run's precision ----------------------------------------

_TORCH_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "hf32": torch.float32, "bf16": torch.bfloat16,
                 "fp16": torch.float16}


@dataclass(frozen=True)
class GemmResult:
    flops_per_s: float
    n: int
    dtype: str
    repeats: int
    seconds: float


def _sync(device: torch.device) -> None:
    mod = getattr(torch, device.type, None)
    if device.type != "cpu" and mod is not None and hasattr(mod, "synchronize"):
        mod.synchronize()


def measure_gemm(device: torch.device, precision: str, budget_s: float = 1.0, n: int | None = None,
                 dtype: str | None = None) -> GemmResult:
    """Best achieved FLOP/s of square n x n matmuls in the run's dtype, within about `budget_s` seconds.

    `dtype` (default: the dtype the run's matmuls run in) picks another op class's dtype, e.g. "tf32" for an
    fp32 CNN whose convolutions run on TF32 while plain matmuls do not: the matmul TF32 switch is then turned
    on for the benchmark only.

    On accelerators the timing uses device events (host timers would measure launch time only); on CPU the
    size grows from 256 until one matmul takes >= 20 ms (capped at 4096), so small CPUs stay in budget.
    """
    dtype_name = dtype or matmul_dtype(device.type, precision)
    if dtype_name == "tf32" and device.type == "cuda" and not tf32_enabled():
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            return measure_gemm(device, precision, budget_s, n, dtype)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
    if dtype_name not in _TORCH_DTYPES:  # fp8: a plain mm has no fp8 path (scaled GEMMs need scales): bf16
        dtype_name = "bf16"
    torch_dtype = _TORCH_DTYPES[dtype_name]
    accel = device.type not in ("cpu", "mps")
    if n is None:
        n = 8192 if accel and torch_dtype is not torch.float32 else 4096 if accel else 256
    # a private generator on the device: the run's global RNG streams stay exactly as seeded, and 8192^2
    # operands are not generated on the host
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        where = device
    except RuntimeError:
        gen, where = torch.Generator().manual_seed(0), torch.device("cpu")
    deadline = time.perf_counter() + budget_s

    def operands(size: int) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.randn(size, size, generator=gen, device=where).to(device=device, dtype=torch_dtype)
        b = torch.randn(size, size, generator=gen, device=where).to(device=device, dtype=torch_dtype)
        return a, b

    a, b = operands(n)
    out = torch.mm(a, b)  # warm-up (kernel selection, lazy init)
    _sync(device)
    if not accel:
        while n < 4096 and time.perf_counter() < deadline:
            t = time.perf_counter()
            torch.mm(a, b, out=out)
            if time.perf_counter() - t >= 0.02:
                break
            n *= 2
            a, b = operands(n)
            out = torch.mm(a, b)
    flops_per_mm = 2.0 * n**3
    # one timed batch is k matmuls lasting >= ~10 ms, so timer resolution and jitter stay small
    k = 5 if accel else 1
    best, repeats, total = 0.0, 0, 0.0
    Event = getattr(getattr(torch, device.type, None), "Event", None)
    while True:
        if accel and Event is not None:
            start, end = Event(enable_timing=True), Event(enable_timing=True)
            start.record()
            for _ in range(k):
                torch.mm(a, b, out=out)
            end.record()
            end.synchronize()
            dt = start.elapsed_time(end) / 1e3
        else:
            t = time.perf_counter()
            for _ in range(k):
                torch.mm(a, b, out=out)
            _sync(device)
            dt = time.perf_counter() - t
        repeats += k
        total += dt
        best = max(best, k * flops_per_mm / dt)
        if not accel and dt < 0.01:
            k *= 2
        if time.perf_counter() > deadline and repeats >= 3:
            break
    del a, b, out
    if device.type == "cuda":
        torch.cuda.empty_cache()  # hand the operands back, so the run's reserved-memory peak does not hold them
    return GemmResult(best, n, dtype_name, repeats, total)


def measure_gemm_cached(device: torch.device, precision: str, budget_s: float = 1.0,
                        dtype: str | None = None) -> GemmResult:
    """`measure_gemm`, measured once per host, device, dtype and thread count for one invocation.

    The launcher names a cache file in $TRAINBENCH_PEAK_CACHE that the runs of one `trainbench run` share, so
    the second seed on a machine does not spend its start-up measuring the same GEMM again. Without it, or
    when the file is unreadable, this measures.
    """
    import json
    import socket

    cache = os.environ.get("TRAINBENCH_PEAK_CACHE")
    if not cache:
        return measure_gemm(device, precision, budget_s, dtype=dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    key = f"{socket.gethostname()}|{name}|{dtype or matmul_dtype(device.type, precision)}|{torch.get_num_threads()}"
    try:
        with open(cache, encoding="utf-8") as f:
            known = json.load(f)
        if key in known:
            return GemmResult(**known[key])
    except (OSError, ValueError, TypeError):
        known = {}
    gemm = measure_gemm(device, precision, budget_s, dtype=dtype)
    try:
        known[key] = dataclasses.asdict(gemm)
        tmp = f"{cache}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(known, f)
        os.replace(tmp, cache)  # a cache, not a record: replacing it whole is the point
    except OSError:
        pass
    return gemm
