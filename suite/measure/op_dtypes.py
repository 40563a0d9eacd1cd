"""Which dtype each op class (matmul, convolution, attention) runs in, and the peak MFU divides by.

The dtype comes from the precision recipe and the backend switches that decide what the hardware does:
autocast dtype, bf16 weights (bf16_master), fp8 recipes, and for fp32 the TF32 switches of CUDA matmuls
(`torch.backends.cuda.matmul`) AND of cuDNN convolutions (`torch.backends.cudnn`, True by default), or
Ascend's HF32 switches (`torch.npu.matmul/conv.allow_hf32`). A recipe's name alone is not enough: an fp32
CNN on CUDA runs its convolutions on TF32 tensor cores by default.

Combining per-class peaks (documented rule): where the workload reports its FLOPs by class, the peak is
FLOP-share weighted as time, 1 / sum(share_c / peak_c), i.e. what the device could do if each class ran at
its own dtype's peak (MFU = sum over classes of achieved/peak). Where the shares are unknown, the fastest
peak among the classes is used, so MFU is a lower bound and never inflated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

OP_CLASSES = ("matmul", "convolution", "attention")
PRECISIONS = ("fp32", "bf16", "fp16", "bf16_master", "fp8", "float8")  # float8: the torchao recipe
# the MLPerf log's names (lowest_numerical_precision_in_*): HF32 is not in its list; TF32 is its closest
MLPERF_DTYPE = {"fp32": "fp32", "tf32": "tf32", "hf32": "tf32", "bf16": "bfloat16", "fp16": "fp16", "fp8": "fp8"}


@dataclass(frozen=True)
class BackendFlags:
    """The switches that change what fp32 math runs as. Defaults are torch's own defaults."""

    cuda_matmul_tf32: bool = False
    cudnn_conv_tf32: bool = True
    npu_matmul_hf32: bool = False
    npu_conv_hf32: bool = True


def _tf32_from(new_api: object, legacy: bool) -> bool:
    # torch >= 2.9: fp32_precision is "tf32" | "ieee" | "none" ("none": defer to the legacy allow_tf32 switch)
    if new_api == "tf32":
        return True
    if new_api == "ieee":
        return False
    return bool(legacy)


def read_flags() -> BackendFlags:
    """The switches as this process has them now (works on CPU builds: the attributes exist everywhere)."""
    matmul = torch.backends.cuda.matmul
    matmul_tf32 = _tf32_from(getattr(matmul, "fp32_precision", None), matmul.allow_tf32) or (
        torch.get_float32_matmul_precision() != "highest")
    cudnn = torch.backends.cudnn
    conv_api = getattr(getattr(cudnn, "conv", None), "fp32_precision", None)
    if conv_api in (None, "none"):
        conv_api = getattr(cudnn, "fp32_precision", None)
    conv_tf32 = _tf32_from(conv_api, cudnn.allow_tf32)
    npu_matmul, npu_conv = False, True
    npu = getattr(torch, "npu", None)
    if npu is not None:
        npu_matmul = bool(getattr(getattr(npu, "matmul", None), "allow_hf32", False))
        npu_conv = bool(getattr(getattr(npu, "conv", None), "allow_hf32", True))
    return BackendFlags(matmul_tf32, conv_tf32, npu_matmul, npu_conv)


@dataclass(frozen=True)
class OpDtype:
    op_class: str
    dtype: str
    why: str


def op_dtypes(device_type: str, precision: str, flags: BackendFlags | None = None) -> dict[str, OpDtype]:
    """The dtype each op class runs in, with the reason."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    flags = flags or read_flags()
    if precision in ("bf16", "fp16"):
        why = f"{precision} autocast: matmuls, convolutions and SDPA run in {precision}"
        return {c: OpDtype(c, precision, why) for c in OP_CLASSES}
    if precision == "bf16_master":
        why = "bf16 weights and activations (the fp32 master copies live only in the optimizer)"
        return {c: OpDtype(c, "bf16", why) for c in OP_CLASSES}
    if precision in ("fp8", "float8"):
        style = "torchao Float8Linear" if precision == "float8" else "Transformer Engine style"
        return {
            "matmul": OpDtype("matmul", "fp8", f"{precision} recipe: linear GEMMs in fp8 ({style})"),
            "convolution": OpDtype("convolution", "bf16", "fp8 recipes keep convolutions in bf16"),
            "attention": OpDtype("attention", "bf16", "fp8 recipe: attention products stay in bf16"),
        }
    if device_type == "cuda":
        mm = "tf32" if flags.cuda_matmul_tf32 else "fp32"
        mm_why = ("fp32 matmul with TF32 allowed (torch.backends.cuda.matmul)" if flags.cuda_matmul_tf32
                  else "fp32 matmul, TF32 off (torch.backends.cuda.matmul)")
        conv = "tf32" if flags.cudnn_conv_tf32 else "fp32"
        conv_why = ("fp32 convolution with cuDNN TF32 allowed (torch.backends.cudnn.allow_tf32, on by default)"
                    if flags.cudnn_conv_tf32 else "fp32 convolution, cuDNN TF32 off")
        return {"matmul": OpDtype("matmul", mm, mm_why), "convolution": OpDtype("convolution", conv, conv_why),
                "attention": OpDtype("attention", mm, "fp32 SDPA runs as matmuls: follows the matmul switch")}
    if device_type == "npu":
        mm = "hf32" if flags.npu_matmul_hf32 else "fp32"
        conv = "hf32" if flags.npu_conv_hf32 else "fp32"
        return {"matmul": OpDtype("matmul", mm, f"fp32 matmul, torch.npu.matmul.allow_hf32={flags.npu_matmul_hf32}"),
                "convolution": OpDtype("convolution", conv,
                                       f"fp32 convolution, torch.npu.conv.allow_hf32={flags.npu_conv_hf32}"),
                "attention": OpDtype("attention", mm, "fp32 attention follows the matmul switch")}
    why = f"fp32 on {device_type}: no reduced-precision switch applies"
    return {c: OpDtype(c, "fp32", why) for c in OP_CLASSES}


def shares(flops_by_class: dict[str, float] | None) -> dict[str, float] | None:
    """FLOP shares of the classes that carry FLOPs, or None when unknown (no breakdown, zero total)."""
    if not flops_by_class:
        return None
    total = sum(v for v in flops_by_class.values() if v > 0)
    if total <= 0:
        return None
    return {c: v / total for c, v in flops_by_class.items() if v > 0}


def combine(peak_by_class: dict[str, float | None], class_shares: dict[str, float] | None
            ) -> tuple[float | None, str, str | None]:
    """(peak FLOP/s, rule, why-null). Weighted by FLOP share (as time) when shares are known, else the
    fastest peak among the classes. A class that carries FLOPs and has no peak makes the whole peak null."""
    if class_shares:
        known_peaks = {c: p for c, p in peak_by_class.items() if p}
        missing = [c for c in class_shares if c not in known_peaks]
        if missing:
            return None, "flop_share_weighted", f"no peak for the dtype of {', '.join(missing)}"
        seconds_per_flop = sum(s / known_peaks[c] for c, s in class_shares.items())
        return 1.0 / seconds_per_flop, "flop_share_weighted", None
    known = [p for p in peak_by_class.values() if p]
    if not known:
        return None, "fastest_allowed", "no peak for any op class's dtype"
    return max(known), "fastest_allowed", None


def causal_flops(flops_by_class: dict[str, float]) -> dict[str, float]:
    """The causal convention: a causal mask skips about half the attention score/value products."""
    return {c: (v / 2 if c == "attention" else v) for c, v in flops_by_class.items()}
