"""MFU divides by the peak of the dtype each op class runs in (suite/measure/op_dtypes.py).

Devices and switches are faked on CPU: every combination of fp32/tf32 matmul x cuDNN TF32 x bf16 x bf16_master
x fp16 x fp8 on cuda, npu and cpu, the switches read from torch.backends, the per-class record in a result, the
attention convention with the other figure beside, and HFU with a backend that recomputes.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch

from suite.measure import class_peaks, op_dtypes, peaks
from suite.measure.instruments import Instruments
from suite.measure.op_dtypes import BackendFlags

T = 1e12
H100 = "NVIDIA H100 80GB HBM3"
H100_PEAK = {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T, "fp8": 1979 * T}
ASCEND = "Ascend910B2"
ASCEND_PEAK = {"bf16": 320 * T, "fp16": 320 * T}

# (precision, cuda matmul TF32, cuDNN TF32) -> dtype of (matmul, convolution, attention) on CUDA, written out
CUDA_EXPECTED = {
    ("fp32", False, False): ("fp32", "fp32", "fp32"),
    ("fp32", True, False): ("tf32", "fp32", "tf32"),
    ("fp32", False, True): ("fp32", "tf32", "fp32"),
    ("fp32", True, True): ("tf32", "tf32", "tf32"),
    **{(p, mm, cd): (d, d, d) for p, d in (("bf16", "bf16"), ("bf16_master", "bf16"), ("fp16", "fp16"))
       for mm, cd in itertools.product((False, True), repeat=2)},
    **{("fp8", mm, cd): ("fp8", "bf16", "bf16") for mm, cd in itertools.product((False, True), repeat=2)},
}
COMBOS = sorted(CUDA_EXPECTED)


def _dtypes(device: str, precision: str, flags: BackendFlags) -> tuple[str, str, str]:
    d = op_dtypes.op_dtypes(device, precision, flags)
    return d["matmul"].dtype, d["convolution"].dtype, d["attention"].dtype


@pytest.mark.parametrize(("precision", "mm_tf32", "cudnn_tf32"), COMBOS)
def test_every_combination_on_cuda(precision, mm_tf32, cudnn_tf32):
    flags = BackendFlags(cuda_matmul_tf32=mm_tf32, cudnn_conv_tf32=cudnn_tf32)
    expected = CUDA_EXPECTED[(precision, mm_tf32, cudnn_tf32)]
    assert _dtypes("cuda", precision, flags) == expected
    # a CNN: 90% convolution, 10% matmul; the peak is the FLOP-share weighted (as time) one
    shares = {"convolution": 0.9e9, "matmul": 0.1e9}
    res = class_peaks.resolve_by_class("cuda", H100, precision, shares, flags=flags)
    mm, conv = H100_PEAK[expected[0]], H100_PEAK[expected[1]]
    assert res.peak.flops_per_s == pytest.approx(1 / (0.9 / conv + 0.1 / mm))
    assert res.rule == "flop_share_weighted"
    assert {c: cp.dtype for c, cp in res.by_class.items()} == {"convolution": expected[1], "matmul": expected[0]}
    assert res.peak.dtype == (expected[0] if expected[0] == expected[1] else "mixed")
    assert all(cp.why for cp in res.by_class.values())


@pytest.mark.parametrize(("precision", "mm_tf32", "cudnn_tf32"), COMBOS)
def test_every_combination_on_npu(precision, mm_tf32, cudnn_tf32):
    """Ascend: the CUDA switches do nothing; fp32 follows torch.npu's HF32 switches (conv on by default)."""
    flags = BackendFlags(cuda_matmul_tf32=mm_tf32, cudnn_conv_tf32=cudnn_tf32)
    got = _dtypes("npu", precision, flags)
    if precision == "fp32":
        assert got == ("fp32", "hf32", "fp32")
        assert _dtypes("npu", "fp32", BackendFlags(npu_matmul_hf32=True, npu_conv_hf32=False)) == ("hf32", "fp32", "hf32")
    else:
        assert got == CUDA_EXPECTED[(precision, mm_tf32, cudnn_tf32)]
    res = class_peaks.resolve_by_class("npu", ASCEND, precision, {"matmul": 1.0, "attention": 1.0}, flags=flags)
    if precision in ("bf16", "bf16_master", "fp16"):
        assert res.peak is not None and res.peak.flops_per_s == ASCEND_PEAK[got[0]]
        assert any("not from a vendor datasheet" in w for w in res.warnings)  # the 910B figure is "reported"
    else:  # the table has no fp32/hf32/fp8 figure for Ascend: no MFU, and the reason names the classes
        assert res.peak is None and "mfu and hfu are null" in res.warnings[0] and "matmul" in res.warnings[0]


@pytest.mark.parametrize(("precision", "mm_tf32", "cudnn_tf32"), COMBOS)
def test_every_combination_on_cpu(precision, mm_tf32, cudnn_tf32):
    flags = BackendFlags(cuda_matmul_tf32=mm_tf32, cudnn_conv_tf32=cudnn_tf32)
    got = _dtypes("cpu", precision, flags)
    expected = {"fp32": ("fp32",) * 3, "fp8": ("fp8", "bf16", "bf16")}.get(precision, CUDA_EXPECTED[(precision, 0, 0)])
    assert got == expected
    res = class_peaks.resolve_by_class("cpu", "cpu", precision, {"matmul": 1.0}, threads=1, flags=flags)
    if precision == "fp8":
        assert res.peak is None and "no peak for the dtype of matmul" in res.warnings[0]
    else:
        cpu = peaks.cpu_peak(got[0], 1)
        assert res.peak is not None and res.peak.flops_per_s == pytest.approx(cpu.flops_per_s)
        assert res.peak.provenance == "computed"


def test_bf16_master_is_a_bf16_peak_not_fp32():
    """The issue's case: bf16_master used to divide by the FP32 peak (67 instead of 989.5 TFLOP/s on an H100)."""
    res = class_peaks.resolve_by_class("cuda", H100, "bf16_master", {"matmul": 1.0})
    assert res.peak.dtype == "bf16" and res.peak.flops_per_s == 989.5 * T
    assert peaks.matmul_dtype("cuda", "bf16_master") == "bf16"
    assert peaks.resolve("cuda", H100, "bf16_master")[0].flops_per_s == 989.5 * T


def test_unknown_shares_use_the_fastest_allowed_peak():
    """Without a FLOP split the fastest dtype any class may run in bounds MFU from below (never inflated)."""
    flags = BackendFlags(cuda_matmul_tf32=False, cudnn_conv_tf32=True)
    res = class_peaks.resolve_by_class("cuda", H100, "fp32", None, flags=flags)
    assert res.rule == "fastest_allowed" and res.peak.flops_per_s == 494.5 * T
    assert set(res.by_class) == {"matmul", "convolution", "attention"}


def test_flags_are_read_from_torch_backends(monkeypatch):
    """cuDNN's TF32 switch (on by default) is read, not only the matmul one; the new fp32_precision API wins."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = (matmul.allow_tf32, cudnn.allow_tf32, torch.get_float32_matmul_precision())
    try:
        matmul.allow_tf32, cudnn.allow_tf32 = False, True
        torch.set_float32_matmul_precision("highest")
        flags = op_dtypes.read_flags()
        assert (flags.cuda_matmul_tf32, flags.cudnn_conv_tf32) == (False, True)
        cudnn.allow_tf32 = False
        assert op_dtypes.read_flags().cudnn_conv_tf32 is False
        torch.set_float32_matmul_precision("high")  # "high" lets matmuls use TF32
        assert op_dtypes.read_flags().cuda_matmul_tf32 is True
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])
    assert op_dtypes._tf32_from("tf32", False) is True and op_dtypes._tf32_from("ieee", True) is False
    assert op_dtypes._tf32_from("none", True) is True  # "none": the legacy switch decides


# ---- the record in a result, on a faked H100 ----------------------------------------------------------------


class _Device:
    type = "cuda"
    torch = torch.device("cpu")

    def name(self) -> str:
        return H100


class _Backend:
    """The hooks Instruments calls (backends/base.py declares them; a real backend inherits the defaults)."""

    def __init__(self, recompute: float | None = None):
        self._recompute = recompute

    def recompute_fraction(self):
        return self._recompute

    def comm_dtype(self):
        return None

    def parallel_layout(self):
        return {"dp": 1, "tp": 1, "pp": 1}


class _Workload:
    def __init__(self, by_class: dict[str, float]):
        self.by_class = by_class

    def flops_by_class(self):
        return dict(self.by_class)


def _instruments(precision: str, by_class: dict[str, float], attention: str = "full",
                 backend: _Backend | None = None) -> tuple[Instruments, float]:
    dist = SimpleNamespace(is_main=False, world=1, local_world=1)  # not main: no MLLOG, no energy meter
    inst = Instruments(workload="x/y", seed=0, device=_Device(), dist=dist, precision=precision,
                       measure_peak=False, attention_flops=attention)
    fps = inst.model_flops_per_sample(_Workload(by_class), sum(by_class.values()))
    spec = SimpleNamespace(optimizer=None, data=SimpleNamespace(batch_size=8), name="x/y")
    inst.setup(spec=spec, backend=backend or _Backend(), state=SimpleNamespace(raw_model=torch.nn.Linear(1, 1),
               optimizer=None), platform="p")
    return inst, fps


def _fields(inst: Instruments, fps: float) -> dict:
    return inst.result_fields(flops_per_sample=fps, tokens_per_sample=1, samples=800, steps=100, train_s=1.0,
                              data_wait_s=0.0, host_step_times_s=[0.01] * 100, world=1, reached=False)


def test_result_records_per_class_dtype_peak_and_why():
    inst, fps = _instruments("fp8", {"matmul": 6e9, "attention": 2e9})
    f = _fields(inst, fps)
    peak = f["peak"]
    assert peak.rule == "flop_share_weighted" and peak.dtype == "mixed"
    assert peak.by_class["matmul"]["dtype"] == "fp8" and peak.by_class["matmul"]["flops_per_s"] == 1979 * T
    assert peak.by_class["attention"]["dtype"] == "bf16" and peak.by_class["attention"]["share"] == 0.25
    assert "bf16" in peak.by_class["attention"]["why"]
    expected_peak = 1 / (0.75 / (1979 * T) + 0.25 / (989.5 * T))
    assert peak.flops_per_s == pytest.approx(expected_peak)
    assert f["mfu"] == pytest.approx(fps * 800 / expected_peak)  # 800 samples/s steady (0.01 s x 8)


def test_attention_convention_is_recorded_and_switchable_with_the_other_beside():
    by_class = {"matmul": 6e9, "attention": 2e9}
    full_inst, full_fps = _instruments("bf16", by_class, "full")
    causal_inst, causal_fps = _instruments("bf16", by_class, "causal")
    assert (full_fps, causal_fps) == (8e9, 7e9)  # causal: half the attention products
    full, causal = _fields(full_inst, full_fps), _fields(causal_inst, causal_fps)
    assert full["attention_flops"] == "full" and causal["attention_flops"] == "causal"
    assert causal["flops_by_class"]["attention"] == 1e9
    assert full["mfu_by_attention"]["causal"] == pytest.approx(causal["mfu"])
    assert causal["mfu_by_attention"]["full"] == pytest.approx(full["mfu"])
    assert full["mfu"] / causal["mfu"] == pytest.approx(8 / 7)
    # a model without attention records no convention
    assert _fields(*_instruments("bf16", {"convolution": 1e9}))["attention_flops"] is None


def test_hfu_counts_recomputation_the_backend_reports():
    """The hook for activation checkpointing: a backend's recompute_fraction() (1.0 = the whole forward)."""
    inst, fps = _instruments("bf16", {"matmul": 3e9}, backend=_Backend(recompute=1.0))
    f = _fields(inst, fps)
    assert f["hfu"] / f["mfu"] == pytest.approx(4 / 3)  # 4 forwards' worth instead of 3
    inst, fps = _instruments("bf16", {"matmul": 3e9}, backend=_Backend(recompute=0.5))
    f = _fields(inst, fps)
    assert f["hfu"] / f["mfu"] == pytest.approx(3.5 / 3)
    f = _fields(*_instruments("bf16", {"matmul": 3e9}))
    assert f["hfu"] == f["mfu"]


def test_components_split_their_flops_by_class():
    from suite.models.gpt import model as gpt

    cfg = gpt.Config(n_layer=2, n_head=4, d_model=64, seq_len=32, vocab_size=100)
    by_class = gpt.flops_by_class(cfg, {})
    assert sum(by_class.values()) == pytest.approx(gpt.flops_per_sample(cfg, {}))
    assert by_class["attention"] == 12 * 2 * 4 * 16 * 32 * 32


@pytest.mark.slow  # a real tiny run in bf16_master (bf16 is slow on this CPU)
def test_a_bf16_master_run_records_a_bf16_peak(tmp_path):
    from suite import registry
    from suite.harness import RunRequest, run
    from suite.specload import load_spec

    spec = load_spec(registry.find_workload("cv/digits_cnn"), variant="tiny")
    result, _ = run(RunRequest(spec=spec, threads=1, precision="bf16_master", results_dir=tmp_path,
                               measure_peak=False))
    assert result.status in ("reached", "budget"), result.error
    assert result.peak.dtype == "bf16" and {v["dtype"] for v in result.peak.by_class.values()} == {"bf16"}
    assert set(result.flops_by_class) == {"convolution", "matmul"}
    assert sum(result.flops_by_class.values()) == pytest.approx(result.flops_per_sample)
    assert result.mfu is not None and result.mfu == pytest.approx(
        result.throughput["model_flops_per_s"] / result.peak.flops_per_s)


def test_gemm_benchmark_runs_in_the_dtype_of_the_largest_flop_share(monkeypatch):
    """An fp32 CNN on CUDA: convolutions (90%) on TF32, matmuls on FP32: the measured peak is a TF32 GEMM."""
    asked = []

    def fake_gemm(device, precision, budget_s=1.0, n=None, dtype=None):
        asked.append(dtype)
        return peaks.GemmResult(400 * T, 8192, dtype, 5, 0.1)

    monkeypatch.setattr(peaks, "measure_gemm", fake_gemm)
    monkeypatch.setattr(op_dtypes, "read_flags", lambda: BackendFlags(cuda_matmul_tf32=False, cudnn_conv_tf32=True))
    dist = SimpleNamespace(is_main=False, world=1, local_world=1)
    inst = Instruments(workload="x/y", seed=0, device=_Device(), dist=dist, precision="fp32")
    fps = inst.model_flops_per_sample(_Workload({"convolution": 9e9, "matmul": 1e9}), 1e10)
    inst.setup(spec=SimpleNamespace(optimizer=None, data=SimpleNamespace(batch_size=8), name="x/y"),
               backend=_Backend(), state=SimpleNamespace(raw_model=torch.nn.Linear(1, 1), optimizer=None),
               platform="p")
    assert asked == ["tf32"]
    f = _fields(inst, fps)
    assert f["peak"].measured_dtype == "tf32" and f["peak"].dtype == "mixed"
    assert f["peak"].flops_per_s == pytest.approx(1 / (0.9 / (494.5 * T) + 0.1 / (67 * T)))
