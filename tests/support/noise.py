"""Parity tolerances measured on the machine that runs the test, not constants one CPU happened to meet.

A layout (DDP, FSDP2, TP, PP, micro-batches), DeepSpeed, Megatron or a compiled model computes the same sums as
the one-process run in another order. fp32 rounds each order differently (~1 ulp per op), and AdamW amplifies it:
its update divides by sqrt(v), so a rounding-sized difference in the gradient of a rarely-seen token becomes a
full-sized step. On the test char GPT two *correct* runs agree to ~1e-5 nats over 12 steps and drift to ~1e-3 by
step 20, by an amount that depends on the CPU's kernels (an fsdp x tp evaluation 2.8e-3 from one process on an
Intel Xeon failed a 2e-3 bound set on AMD EPYC machines: issue 29).

So each parity test first measures how far the reference moves when only its reduction order changes:
- the same samples of every batch in another order (three seeded permutations): the loss mean and every
  weight gradient (a matmul over batch x sequence) are summed in another order, nothing else changes;
- the same run on two threads: the GEMM kernels split their reductions differently.
The largest gap over those runs is the noise scale (per-step loss curve, and each evaluation); a tolerance is a
stated multiple of it (`SAME_MATH`, `OTHER_KERNELS`). `Noise.catches` keeps the tolerance honest: a known
layout bug (a TP qkv row order left regrouped in the evaluation copy) must move the evaluation by more than it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from support.curves import loss_curve

# the perturbations: (what, loss_curve keyword arguments); "threads" is this module's, the rest loss_curve's
REORDERINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("batch order 1", {"permute": 1}),
    ("batch order 2", {"permute": 2}),
    ("batch order 3", {"permute": 3}),
    ("2 threads", {"threads": 2}),
)

# Multiples of the noise scale. The scale is the largest of four draws of "the same math in another order"; a
# layout's gap is one more draw of the same kind, so it exceeds that maximum now and then (about one layout in
# five): twice the maximum leaves room for that. Seen on a 2-core Intel Xeon (1 thread, 20 steps): scale 1.2e-3
# (curve) and 3.7e-3 (evaluation after step 20); the largest layout gaps 8.9e-4 and 2.8e-3 (fsdp x tp, 4 ranks).
SAME_MATH = 2.0
# Megatron's own attention, LayerNorm and vocab-parallel cross-entropy kernels: more ops rounded differently per
# step; seen 1.7e-3 at TP=1 over 20 steps on AMD EPYC, 5.0e-4 on the Intel Xeon (scale there 1.2e-3).
OTHER_KERNELS = 4.0


@dataclass(frozen=True)
class Noise:
    """The reference's own drift under reorderings: the largest gap of the per-step loss and of each evaluation."""

    curve: float
    evals: dict[int, float]  # step -> largest gap of the evaluation metric after that step
    seen: dict[str, dict[str | int, float]] = field(default_factory=dict)  # perturbation -> its gaps
    qkv_bug: dict[int, float] = field(default_factory=dict)  # step -> what a regrouped-qkv evaluation moves

    def tol(self, factor: float = SAME_MATH) -> float:
        return factor * self.curve

    def eval_tol(self, step: int, factor: float = SAME_MATH) -> float:
        return factor * self.evals[step]

    def catches(self, step: int, factor: float = SAME_MATH) -> bool:
        """The evaluation tolerance at `step` is below the gap a known layout bug makes there."""
        return self.eval_tol(step, factor) < self.qkv_bug[step]

    def __str__(self) -> str:
        seen = "; ".join(f"{k}: curve {v['curve']:.1e}, " + ", ".join(f"eval@{s} {g:.1e}" for s, g in v.items()
                                                                       if s != "curve") for k, v in self.seen.items())
        return f"noise scale: curve {self.curve:.2e}, evals {self.evals} ({seen})"


def _curve(spec: Path, steps: int, threads: int = 1, **kwargs: Any) -> tuple[list[float], dict[int, dict]]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        losses = loss_curve(spec, "torch", steps, **kwargs)
    finally:
        torch.set_num_threads(before)
    return losses, dict(loss_curve.last_evals)  # type: ignore[attr-defined]


def _regrouped_qkv_eval(metric: str) -> float:
    """The last trained one-process model evaluated with its qkv rows left in TP=2's per-rank order."""
    from suite.backends.parallel.tensor import qkv_rows_by_rank

    workload, model = loss_curve.last_trained  # type: ignore[attr-defined]
    bad = copy.deepcopy(model)
    with torch.no_grad():
        for name, module in bad.named_modules():
            if name.endswith("qkv"):
                module.weight.copy_(qkv_rows_by_rank(module.weight, 2))
                if module.bias is not None:
                    module.bias.copy_(qkv_rows_by_rank(module.bias, 2))
    return float(workload.evaluate(bad)[metric])


def measure(spec: Path, steps: int, eval_at: tuple[int, ...] = (), metric: str = "val_loss",
            **kwargs: Any) -> tuple[list[float], dict[int, dict], Noise]:
    """The one-process torch reference (its curve and evaluations, as `loss_curve` gives them) and its noise scale.
    `kwargs` (options, overrides, seed) apply to the reference and to every reordering alike."""
    want, want_evals = _curve(spec, steps, eval_at=eval_at, **kwargs)
    bug: dict[int, float] = {}
    if steps not in eval_at:  # the bug's effect after the last step, on the reference's own trained model
        bug[steps] = abs(_regrouped_qkv_eval(metric) - want_evals[steps][metric])
    seen: dict[str, dict[str | int, float]] = {}
    for what, extra in REORDERINGS:
        got, got_evals = _curve(spec, steps, eval_at=eval_at, **kwargs, **extra)
        gaps: dict[str | int, float] = {"curve": max(abs(a - b) for a, b in zip(got, want, strict=True))}
        gaps.update({s: abs(got_evals[s][metric] - want_evals[s][metric]) for s in want_evals})
        seen[what] = gaps
    for s in eval_at:  # the bug at the intermediate steps: one more reference run, stopped there
        _curve(spec, s, **kwargs)
        bug[s] = abs(_regrouped_qkv_eval(metric) - want_evals[s][metric])
    noise = Noise(curve=max(g["curve"] for g in seen.values()),
                  evals={s: max(g[s] for g in seen.values()) for s in want_evals}, seen=seen, qkv_bug=bug)
    return want, want_evals, noise
