"""Device memory of one training step of the Llama-class decoder (suite/models/llama/model.py): grouped-query attention,
SwiGLU, Mixture-of-Experts layers, and their layout over devices (FSDP shards every parameter, gradient and
optimizer slot; expert parallelism `ep` places each expert's on ep-th of the devices, the rest of the FSDP degree
sharding them further, torchtitan's dp_mod_ep). The same phases as the GPT estimator (suite/measure/memory.py):
resident weights and optimizer state, then the larger of the forward's end (activations + the loss's logits) and
the backward (gradients + a recomputed block under activation checkpointing).

Saved for backward per token, per dense layer (d width, H query / G key-value heads of width h, f SwiGLU width, a
compute bytes, r residual-stream bytes): two RMSNorms (their fp32 input and output, 8d + 4 each); the three
projections' input cast (3da, autocast casts it per op); q, k, v and the attention output as SDPA keeps them
((2H + 2G)ha) and its log-sum-exp (4H); the output projection's input (Hha, a copy); SwiGLU's input casts (2da),
w1 and w3 outputs, the SiLU output and the product (4fa). An MoE layer replaces SwiGLU with: router logits and
probabilities in fp32 (8E), and per routed copy of the token (k of them) the gathered input (da), the expert's
input casts (2da), its 4 x f_e activations, its output and the weighted output (2da); shared experts as a SwiGLU of
their width. Under FSDP the weights are gathered per layer in the compute dtype (the MixedPrecisionPolicy of
suite/backends/parallel/fsdp.py): one layer's full weights and gradients are transient; without FSDP, autocast
keeps a compute-dtype copy of every matmul weight until backward. The loss keeps the logits, their fp32 copy and
the fp32 log-softmax (V x (a + 8) per token).
"""

from __future__ import annotations

from typing import Any

from suite.measure import memory
from suite.measure.memory import OPTIMIZER_SLOTS, RECIPE_BYTES, MemoryEstimate


def _cast(a: int) -> int:
    """Bytes of autocast's per-op copy of an fp32 activation (none in fp32)."""
    return 0 if a == 4 else a


def _dense_layer_bytes(cfg: Any, a: int) -> int:
    d, h = cfg.d_model, cfg.head_size
    attention = 3 * d * _cast(a) + (2 * cfg.n_head + 2 * cfg.kv_heads) * h * a + 4 * cfg.n_head + cfg.n_head * h * a
    return 2 * (8 * d + 4) + attention


def per_token_layer_bytes(cfg: Any, layer: int, a: int) -> int:
    """What one block saves for backward per token (the module docstring's sum)."""
    d = cfg.d_model
    base = _dense_layer_bytes(cfg, a)
    if not cfg.is_moe(layer):
        return base + 2 * d * _cast(a) + 4 * cfg.ffn_dim * a
    moe = cfg.moe
    routed = moe.top_k * (3 * d * a + 2 * d * _cast(a) + 4 * moe.expert_ffn_dim * a)
    shared = (2 * d * _cast(a) + 4 * moe.expert_ffn_dim * moe.shared_experts * a) if moe.shared_experts else 0
    return base + 8 * moe.experts + routed + shared


def layer_params(cfg: Any, layer: int) -> tuple[int, int]:
    """(dense, expert) parameters of one block: attention, norms, router and shared experts are dense."""
    from suite.models.common.layers import swiglu_params
    from suite.models.llama import model as llama

    d = cfg.d_model
    dense = llama._attention_params(cfg) + 2 * d
    if not cfg.is_moe(layer):
        return dense + swiglu_params(d, cfg.ffn_dim), 0
    moe = cfg.moe
    dense += d * moe.experts + moe.shared_experts * swiglu_params(d, moe.expert_ffn_dim)
    return dense, moe.experts * swiglu_params(d, moe.expert_ffn_dim)


def estimate_llama(cfg: Any, *, micro_batch: int, vocab_size: int, precision: str = "bf16",
                   optimizer: str = "adamw", ac: str = "none", fsdp: int = 1, ep: int = 1) -> MemoryEstimate:
    """The step's peak on one device for a suite.models.llama.model Config at `micro_batch` sequences of cfg.seq_len."""
    if precision not in RECIPE_BYTES:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(RECIPE_BYTES)}")
    if ac not in ("none", "full", "selective"):
        raise ValueError(f"ac {ac!r}: expected none, full or selective")
    if cfg.moe is not None and cfg.moe.experts % ep:
        raise ValueError(f"ep={ep} does not divide moe.experts ({cfg.moe.experts})")
    w, a, r = RECIPE_BYTES[precision]
    notes: list[str] = []
    tokens, d, v = micro_batch * cfg.seq_len, cfg.d_model, vocab_size
    expert_shards = ep * (fsdp // ep if fsdp >= ep and fsdp % ep == 0 else 1)
    layers = [layer_params(cfg, i) for i in range(cfg.n_layer)]
    embeddings = v * d * (1 if cfg.tie_embeddings else 2) + d
    dense = embeddings + sum(x for x, _ in layers)
    experts = sum(y for _, y in layers)
    params = dense + experts
    local = dense / fsdp + experts / expert_shards  # parameters held on this device
    master = precision == "bf16_master"
    slots = OPTIMIZER_SLOTS.get(optimizer)
    if slots is None:
        slots = 2
        notes.append(f"optimizer {optimizer!r} not in the table: counted as Adam (2 fp32 slots)")
    weights = local * (w + (4 if master else 0))
    grads = local * (w + (4 if master else 0))
    opt_state = local * slots * 4
    if fsdp > 1:  # one block gathered in the compute dtype, and its full gradients before the reduce-scatter
        biggest = max(x + y / ep for x, y in layers)
        copies = int(biggest * (a + 4))
        notes.append("FSDP: one block's gathered weights and gradients counted as transient")
    else:
        copies = int((dense - embeddings + v * d + experts / max(1, ep)) * a) if a != w else 0
    per_layer = [per_token_layer_bytes(cfg, i, a) * tokens for i in range(cfg.n_layer)]
    head = tokens * (8 * d + 4 + d * _cast(a))  # the final norm, the output projection's input
    if ac == "full":
        blocks, recompute = cfg.n_layer * tokens * d * r, max(per_layer)
    else:
        blocks, recompute = sum(per_layer), 0
        if ac == "selective":
            notes.append("selective checkpointing is counted as none (an upper bound)")
    activations = blocks + head
    logits = tokens * v * (a + 4 + (4 if a != 4 else 0))  # logits, fp32 copy (none in fp32), log-softmax
    resident = weights + opt_state
    phases = {"forward": copies + activations + logits,
              "backward": copies + activations + recompute + grads,
              "optimizer": grads + local * 4}
    phase = max(phases, key=lambda k: phases[k])
    return MemoryEstimate(params=int(params), weights_bytes=int(weights), grads_bytes=int(grads),
                          optimizer_bytes=int(opt_state), weight_copies_bytes=copies, activations_bytes=int(activations),
                          recompute_bytes=int(recompute), logits_bytes=int(logits),
                          peak_bytes=int(resident + phases[phase]), phase=phase, notes=tuple(notes))


def estimate_llama_spec(spec: Any, precision: str | None = None, ep: int = 1) -> MemoryEstimate:
    """The estimate for a Llama workload spec at its micro-batch, precision and layout (parallel.fsdp, .ac)."""
    from suite.models.llama import config as llama_config

    cfg = llama_config.Config.model_validate(spec.model.params())
    vocab = cfg.vocab_size or getattr(spec.data, "vocab_size", None) or spec.data.params().get("vocab_size")
    if not vocab:
        raise ValueError(f"{spec.name}: the vocabulary size is unknown (model.vocab_size / data.vocab_size)")
    par = spec.parallel
    return estimate_llama(cfg, micro_batch=spec.data.micro_batch_size or spec.data.batch_size, vocab_size=int(vocab),
                          precision=precision or spec.precision or "fp32", optimizer=spec.optimizer.name,
                          ac=par.ac if par is not None else "none", fsdp=par.fsdp if par is not None else 1,
                          ep=ep)


def estimate_spec(spec: Any, precision: str | None = None) -> MemoryEstimate:
    """Either estimator, by the spec's model.arch: llama here, gpt in suite/measure/memory.py."""
    if spec.model.arch == "llama":
        return estimate_llama_spec(spec, precision)
    return memory.estimate_spec(spec, precision)
