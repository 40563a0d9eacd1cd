"""Model FLOPs: analytic layer formulas (forward + backward) and a counted cross-check via FlopCounterMode.

Convention (PaLM appendix B, Kaplan et al. 2020): model FLOPs count the matmul-class work only (dense and
convolution layers, attention score/value products, message-passing aggregation as a sparse matmul);
element-wise ops, norms, activations and biases are left out. One multiply-add is 2 FLOPs. A training step
costs 3x the forward: the backward computes the gradient with respect to the input and with respect to
the weights, each as large as the forward. Recomputation (activation checkpointing) is not model work:
it appears only in hardware FLOPs (HFU, `hardware_flops_per_sample`).

The counted figure runs one real forward + backward of `workload.loss` under
`torch.utils.flop_counter.FlopCounterMode`. Two things it does not count by itself are added here:
fused SDPA kernels (the CPU flash kernel counts zero, FACTS.md), so attention runs under the math kernel;
scatter/index-add aggregation (graph message passing), registered as 2 FLOPs per scattered element; and
sparse matmuls (torch.sparse.mm with an adjacency), 2 FLOPs per stored non-zero per column, where the
counter's shape-only formula would charge a dense N x N matmul (and it does not see the forward at all).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

TRAIN_MULTIPLIER = 3  # forward + backward (input grads + weight grads), the 6N of 2N * 3


# ---- analytic layer formulas (forward FLOPs unless the name says otherwise) -------------------------------


def linear_flops(in_features: int, out_features: int, rows: int = 1) -> float:
    """y = x W^T for `rows` input rows (tokens, nodes, samples): 2 * rows * in * out."""
    return 2.0 * rows * in_features * out_features


def conv2d_flops(
    in_channels: int, out_channels: int, kernel: int | tuple[int, int], out_h: int, out_w: int, groups: int = 1
) -> float:
    """2 * (cin / groups) * kh * kw * cout * out_h * out_w (one sample)."""
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    return 2.0 * (in_channels // groups) * kh * kw * out_channels * out_h * out_w


def conv_out_size(size: int, kernel: int, stride: int = 1, padding: int = 0, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def aggregation_flops(num_edges: int, features: int) -> float:
    """Message passing as a sparse matmul A X with `num_edges` non-zeros: 2 * E * F (forward)."""
    return 2.0 * num_edges * features


def gcn_layer_train_flops(num_nodes: int, num_edges: int, in_features: int, out_features: int) -> float:
    """One GCN layer (Kipf & Welling: A_hat X W), forward + backward.

    The dense transform costs 3 x 2*N*in*out like any linear layer. The aggregation (transform first, then
    aggregate over `num_edges` edges, self-loops included) is 2*E*out forward and 2*E*out backward (the
    gradient flows back through the transposed adjacency; the adjacency has no gradient of its own).
    """
    return TRAIN_MULTIPLIER * linear_flops(in_features, out_features, num_nodes) + 2 * aggregation_flops(
        num_edges, out_features
    )


def attention_flops(seq_len: int, n_head: int, head_dim: int, kv_len: int | None = None) -> float:
    """Forward attention products per sequence: Q K^T and P V, 2 * 2 * H * T * T_kv * d (no causal discount)."""
    kv = seq_len if kv_len is None else kv_len
    return 4.0 * n_head * seq_len * kv * head_dim


def transformer_flops_per_token(n_params: int, n_layer: int, n_head: int, head_dim: int, seq_len: int) -> float:
    """PaLM (Chowdhery et al. 2022, app. B): 6N + 12 * L * H * Q * T per token, forward + backward."""
    return 6.0 * n_params + 12.0 * n_layer * n_head * head_dim * seq_len


def mlp_train_flops(widths: list[int]) -> float:
    """A stack of linear layers with these widths (input first), forward + backward, per sample."""
    return TRAIN_MULTIPLIER * sum(linear_flops(a, b) for a, b in zip(widths, widths[1:], strict=False))


def train_flops(forward_flops: float) -> float:
    return TRAIN_MULTIPLIER * forward_flops


def hardware_flops_per_sample(model_flops_per_sample: float, recompute_forward_fraction: float = 0.0) -> float:
    """Model FLOPs plus recomputation: full activation checkpointing re-runs the forward (fraction 1.0),
    i.e. 4 forwards' worth instead of 3. Selective checkpointing recomputes a fraction of it."""
    if not 0.0 <= recompute_forward_fraction <= 1.0:
        raise ValueError(f"recompute_forward_fraction {recompute_forward_fraction} is outside [0, 1]")
    forward = model_flops_per_sample / TRAIN_MULTIPLIER
    return model_flops_per_sample + recompute_forward_fraction * forward


# ---- counted FLOPs --------------------------------------------------------------------------------------


def _scatter_formula(*args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    # scatter_add(self, dim, index, src), index_add(self, dim, index, source), scatter_reduce(..., src, ...):
    # the source values are combined into the output, one multiply-add each (a sparse matmul's cost)
    src_shape = args[3] if len(args) > 3 else kwargs.get("src", kwargs.get("source"))
    return 2 * math.prod(src_shape) if src_shape is not None else 0


def _nnz(t: Any) -> int:
    return int(t._nnz()) if isinstance(t, torch.Tensor) and t.is_sparse else 0


def _mm_raw(a: Any, b: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """aten.mm on raw tensors: a sparse operand costs 2 FLOPs per stored non-zero per output column (the
    counter's own formula, from shapes only, would charge a sparse N x N adjacency as a dense matmul)."""
    if a.is_sparse:
        return 2 * _nnz(a) * int(b.shape[-1])
    if b.is_sparse:
        return 2 * _nnz(b) * int(a.shape[0])
    return 2 * int(a.shape[0]) * int(a.shape[1]) * int(b.shape[1])


def _sparse_addmm_raw(inp: Any, sparse: Any, dense: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """torch.sparse.mm's forward (aten._sparse_addmm), which the counter does not know at all."""
    return 2 * _nnz(sparse) * int(dense.shape[-1])


_mm_raw._get_raw = True  # type: ignore[attr-defined]  # FlopCounterMode: pass tensors, not shapes
_sparse_addmm_raw._get_raw = True  # type: ignore[attr-defined]


def _aggregation_ops() -> dict[Any, Callable[..., int]]:
    aten = torch.ops.aten
    ops: dict[Any, Callable[..., int]] = {aten.mm: _mm_raw, aten._sparse_addmm: _sparse_addmm_raw}
    for name in ("scatter_add", "scatter_add_", "index_add", "index_add_", "scatter_reduce", "scatter_reduce_"):
        op = getattr(aten, name, None)
        if op is not None:
            ops[op] = _scatter_formula
    return ops


@contextmanager
def counting() -> Iterator[FlopCounterMode]:
    """FlopCounterMode with attention under the math SDPA kernel and scatter aggregation registered."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    counter = FlopCounterMode(display=False, custom_mapping=_aggregation_ops())
    with sdpa_kernel(SDPBackend.MATH), counter:
        yield counter


def _with_input_grads(batch: Any) -> Any:
    """Floating-point inputs require grad, so the first layer's input gradient is computed and counted too:
    the analytic 3x-forward convention (and PaLM's 6N) includes it."""
    if isinstance(batch, torch.Tensor):
        return batch.detach().clone().requires_grad_(True) if batch.is_floating_point() else batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(_with_input_grads(b) for b in batch)
    if isinstance(batch, dict):
        return {k: _with_input_grads(v) for k, v in batch.items()}
    return batch


def count_train_flops(loss_fn: Callable[[nn.Module, Any], torch.Tensor], model: nn.Module, batch: Any) -> int:
    """FLOPs of one real forward + backward of loss_fn(model, batch), counted op by op."""
    batch = _with_input_grads(batch)
    with counting() as counter:
        loss = loss_fn(model, batch)
        loss.backward()
    model.zero_grad(set_to_none=True)
    return int(counter.get_total_flops())


def count_forward_flops(fn: Callable[[], Any]) -> int:
    with counting() as counter, torch.no_grad():
        fn()
    return int(counter.get_total_flops())


def relative_error(analytic: float, counted: float) -> float:
    if counted == 0:
        return math.inf if analytic else 0.0
    return abs(analytic - counted) / counted
