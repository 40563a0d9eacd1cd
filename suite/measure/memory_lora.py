"""Device memory of one LoRA fine-tuning step of the Llama-class decoder (`arch: hf_llama` with `lora:`): a frozen
base (weights only: no gradients, no optimizer state), the adapters (weights, gradients, AdamW's two slots), the
activations autograd saves, and the loss's logits; sharded layouts divide what they shard. The GPT estimator and
the `fits` check are in suite/measure/memory.py; tests/measure/test_memory_lora.py holds this one against torch's
MemTracker on the CPU.

Per token and layer a block saves for backward (d width, F the SwiGLU width, q = n_head x head_dim, k = n_kv_head x
head_dim, a compute bytes, r rank), as torch's saved-tensor hooks list it: both RMSNorms' fp32 input and rstd
(2 x (4d + 4)), q, k, v and the attention output ((2q + 2k) a) with its log-sum-exp (flash/efficient SDPA keeps no
T x T matrix; with `fused_qkv` v is a view of wqkv's output, which stays held whole: (q + k) a more), SwiGLU's w1
output, silu's output and w3's output (3 a F), each adapter's A output (a r), and the inputs the adapters read: a
frozen linear keeps none (its weight alone gives the input gradient), an adapter keeps the layer's input (dropout
0) or its own dropped copy and bool mask. A frozen RMSNorm weight needs no saved normed
copy. Full activation checkpointing keeps each block's input (a d) and rebuilds one block; backward through a block
also holds the gradients of its widest tensors at once ((2F + 2q) a).
"""

from __future__ import annotations

from typing import Any

from suite.measure.memory import AC_MODES, GIB, MemoryEstimate

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def per_token_layer_bytes(cfg: Any, compute_bytes: int, targets: list[str], rank: int, dropout: float) -> int:
    """What one block of a llama.Config saves for backward per token, with adapters on `targets` (the module
    docstring's sum, read off torch's saved-tensor hooks on the tiny preset)."""
    d, a, f = cfg.d_model, compute_bytes, cfg.ffn_dim
    q, k = cfg.n_head * cfg.head_size, cfg.kv_heads * cfg.head_size
    norms = 2 * (4 * d + 4)  # each RMSNorm's fp32 input (in fp32 the residual tensor itself) and rstd
    attention = (q + 2 * k) * a + q * a + 4 * cfg.n_head  # q, k, v; the attention output (wo's input); lse
    if getattr(cfg, "fused_qkv", False):  # v is a view of wqkv's output: its whole q + 2k storage stays held
        attention += (q + k) * a
    mlp = 3 * f * a  # w1's output (silu), silu's output and w3's output (their product)
    saved = 0
    for width, readers in ((d, ("wq", "wk", "wv", "wqkv")), (q, ("wo",)), (d, ("w1", "w3")), (f, ("w2",))):
        adapted = [t for t in readers if t in targets]
        if not adapted:
            continue  # a frozen linear keeps no input: its weight alone gives the input gradient
        if dropout > 0:  # each adapter reads its own dropped copy (and keeps the bool mask)
            saved += len(adapted) * width * (a + 1)
        elif width != q:  # dropout 0: the adapters read the layer's input itself (wo's is already counted)
            saved += width * a
    adapters = rank * a * len([t for t in targets if t != "output"])  # each A's output, read by B
    return norms + attention + mlp + saved + adapters


def estimate_lora(cfg: Any, *, micro_batch: int, dtype: str = "bfloat16", ac: str = "none", shard: int = 1,
                  tp: int = 1) -> MemoryEstimate:
    """The step's memory on one device for a suite.models.hf.pretrained Config with `lora`, at `micro_batch` sequences
    of cfg.seq_len tokens, weights and compute in `dtype` (the MLPerf reference: bf16 throughout). shard: ZeRO-3 /
    FSDP degree over which the weights and adapter state are split (one layer gathered at a time); tp: tensor
    parallel degree (weights and the blocks' activations split, norms and logits not)."""
    from suite.models.common import lora as lora_mod
    from suite.models.llama import model as llama

    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPE_BYTES)}")
    if ac not in AC_MODES:
        raise ValueError(f"ac {ac!r}: expected one of {', '.join(AC_MODES)}")
    if cfg.lora is None:
        raise ValueError("model.lora is not set: this estimator models a frozen base with adapters")
    a = DTYPE_BYTES[dtype]
    vocab = llama.vocab(cfg, {})
    targets = cfg.lora.suite_targets(cfg.fused_qkv)
    tokens = micro_batch * cfg.seq_len
    notes: list[str] = []
    base = llama.param_count(cfg, {})
    adapters = lora_mod.adapter_param_count(cfg, cfg.lora, vocab)
    split = shard * tp
    weights = (base + adapters) * a // split
    largest_layer = llama.param_count(cfg.model_copy(update={"n_layer": 1}), {}) - 2 * vocab * cfg.d_model
    gathered = 2 * largest_layer * a // tp if shard > 1 else 0  # ZeRO-3 / FSDP: this layer and the prefetched one
    grads = adapters * a // split
    opt_state = 2 * adapters * a // split  # AdamW's two slots, in the adapters' dtype (torch keeps them alike)
    layer = per_token_layer_bytes(cfg, a, targets, cfg.lora.rank, cfg.lora.dropout) * tokens // tp
    head = tokens * (4 * cfg.d_model + 4 + cfg.d_model * a)  # the final norm's fp32 input and rstd; the head's input
    if "output" in targets:  # the head adapter's dropped input and its A output
        head += tokens * (cfg.d_model * (a + 1) * (cfg.lora.dropout > 0) + cfg.lora.rank * a)
    if ac == "full":
        blocks, recompute = cfg.n_layer * tokens * cfg.d_model * a, layer
    else:
        blocks, recompute = cfg.n_layer * layer, 0
        if ac == "selective":
            notes.append("selective checkpointing is counted as none (an upper bound)")
    activations = blocks + head
    # the peak of an unsharded step is where backward starts: every activation still held, with the loss's fp32
    # log-softmax (saved), its gradient and the logits' gradient (the model's bf16 logits are freed once cast)
    logits = tokens * vocab * (4 + 4 + 4)
    resident = weights + opt_state + gathered
    # backward through one block holds the gradients of its widest tensors at once (SwiGLU's three, q/k/v's)
    transient = tokens * (2 * cfg.ffn_dim + 2 * cfg.n_head * cfg.head_size) * a
    phases = {"forward": activations + logits,
              "backward": activations - (tokens * cfg.d_model * a if ac == "full" else 0) + recompute
              + transient // tp + grads,
              "optimizer": grads + adapters * 4 // split}
    if ac == "none":
        phases.pop("backward")
    if shard > 1:
        notes.append(f"checkpoint load (untimed init, host memory a rank): {load_peak_bytes(cfg, dtype, shard) / GIB:.1f} "
                     f"GiB streamed into its ZeRO-3 partitions (suite/backends/deepspeed/zero3.py), not the whole base's "
                     f"{base * a / GIB:.0f} GiB")
    phase = max(phases, key=lambda k: phases[k])
    return MemoryEstimate(params=base + adapters, weights_bytes=weights, grads_bytes=grads,
                          optimizer_bytes=opt_state, weight_copies_bytes=gathered, activations_bytes=activations,
                          recompute_bytes=recompute, logits_bytes=logits, peak_bytes=resident + phases[phase],
                          phase=phase, notes=tuple(notes))


def load_peak_bytes(cfg: Any, dtype: str = "bfloat16", shard: int = 1) -> int:
    """Host memory one rank holds while the base checkpoint loads. Whole (hf_checkpoint.load_llama, shard 1): the
    model plus the one tensor being read. Under ZeRO-3 over `shard` (hf_zero3): the rank's partitions plus the
    larger of zero.Init's one module built whole before it is partitioned (a linear layer, the embedding, an MoE
    layer's stacked experts) and one tensor's share read (never more than that tensor)."""
    from suite.models.llama import model as llama

    a = DTYPE_BYTES[dtype]
    d, vocab = cfg.d_model, llama.vocab(cfg, {})
    largest = max(vocab * d, cfg.ffn_dim * d, cfg.n_head * cfg.head_size * d)
    if getattr(cfg, "fused_qkv", False):  # wqkv: q, k and v in one linear
        largest = max(largest, sum(cfg.qkv_sizes) * d)
    if cfg.moe is not None:
        largest = max(largest, 3 * cfg.moe.experts * cfg.moe.expert_ffn_dim * d)  # Experts: w1, w2, w3 at once
    base = llama.param_count(cfg, {})
    return -(-base // shard) * a + largest * a


# MLPerf llama2_70b_lora's reference layout (configs/default_config.yaml): DeepSpeed ZeRO-3 over 8 GPUs, gradient
# checkpointing (--use_gradient_checkpointing True)
REFERENCE_LAYOUT: dict[str, Any] = {"shard": 8, "ac": "full"}


def estimate_spec(spec: Any, precision: str | None = None, **layout: Any) -> MemoryEstimate:
    """The estimate for an `arch: hf_llama` spec with `lora` at its micro-batch, in the weights' dtype (model.dtype,
    else bf16 for a bf16 recipe, else fp32), with `layout` (shard, tp, ac)."""
    if spec.model.arch != "hf_llama":
        raise ValueError(f"{spec.name}: the LoRA memory estimator models arch hf_llama, not {spec.model.arch!r}")
    from suite.models.hf import config as hf_config_mod

    cfg = hf_config_mod.Config.model_validate(spec.model.params())
    dtype = cfg.dtype or ("bfloat16" if (precision or spec.precision or "fp32").startswith("bf16") else "float32")
    micro = spec.data.micro_batch_size or spec.data.batch_size
    return estimate_lora(cfg, micro_batch=micro, dtype=dtype, **layout)
