"""Device memory of one training step of a GPT (suite/models/gpt/model.py), estimated from its config: weights,
gradients and optimizer state by precision recipe, the activations autograd saves per layer by micro-batch and
sequence length (with and without activation checkpointing), and the loss's logits. The full tier's "fits the
device" check (`fits`) uses it; tests/measure/test_memory_estimate.py holds it against torch's own count on the CPU.

Per token and layer, a block (pre-LN, fused qkv, SDPA, 4x MLP) saves for backward: both LayerNorm inputs in the
residual stream's dtype and their mean/rstd (fp32), the qkv input in the compute dtype (autocast's copy), q, k
and v, the attention output and its log-sum-exp (fp32, one per head), the projection's input (a reshaped copy),
the MLP's input, the GELU input and output: 2d*r + (7 + 2m)*d*a + 16 + 4h bytes (d model width, m MLP ratio, h
heads, r residual-stream bytes, a compute bytes). Flash/efficient SDPA keeps no T x T matrix (CPU and CUDA alike).
Activation checkpointing `full` keeps each block's input and recomputes one block at a time in backward.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

GIB = 2**30
OPTIMIZER_SLOTS = {"adamw": 2, "adam": 2, "lion": 1, "muon": 1, "lars": 1, "sgd_nesterov": 1, "sgd": 0}
# bytes of (model weights, compute dtype, residual stream) per recipe; bf16_master keeps fp32 masters beside
RECIPE_BYTES = {"fp32": (4, 4, 4), "tf32": (4, 4, 4), "bf16": (4, 2, 4), "fp16": (4, 2, 4), "bf16_master": (2, 2, 2)}
AC_MODES = ("none", "full", "selective")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on one device for one training step in steady state (optimizer state already allocated)."""

    params: int
    weights_bytes: int  # the model's weights (+ fp32 masters for bf16_master)
    grads_bytes: int  # every gradient, at the end of backward (+ the masters' for bf16_master)
    optimizer_bytes: int  # the optimizer's slots, fp32
    weight_copies_bytes: int  # autocast's compute-dtype copies of the matmul weights, held until backward
    activations_bytes: int  # saved for backward at the end of forward (blocks + head), the micro-batch's
    recompute_bytes: int  # one block's activations rebuilt in backward (activation checkpointing), else 0
    logits_bytes: int  # the loss's transients: logits, their cut and fp32 copies, the fp32 log-softmax
    peak_bytes: int
    phase: str  # where the peak falls: forward (the loss) | backward (a recomputed block) | optimizer
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)
        out["peak_gib"] = round(self.peak_bytes / GIB, 3)
        return out


def per_token_layer_bytes(d_model: int, n_head: int, mlp_ratio: int, compute_bytes: int, residual_bytes: int,
                          dropout: float = 0.0) -> int:
    """What one block saves for backward per token (the module docstring's sum)."""
    d, a, r = d_model, compute_bytes, residual_bytes
    saved = 2 * d * r + 2 * 8  # two LayerNorm inputs; their mean and rstd (fp32)
    saved += d * a + 3 * d * a  # qkv's input, q/k/v
    saved += d * a + 4 * n_head  # the attention output, its log-sum-exp
    saved += d * a + d * a  # the projection's input (a reshaped copy), the MLP's input
    saved += 2 * mlp_ratio * d * a  # GELU's input and output
    if dropout > 0:
        saved += 2 * d  # two residual dropout masks (bool); attention dropout lives inside SDPA
    return saved


def estimate_gpt(cfg: Any, *, micro_batch: int, precision: str = "fp32", optimizer: str = "adamw",
                 ac: str = "none", real_vocab: int | None = None, vocab_size: int | None = None) -> MemoryEstimate:
    """The step's memory for a suite.models.gpt.model Config at `micro_batch` sequences of cfg.seq_len tokens."""
    if precision not in RECIPE_BYTES:
        raise ValueError(f"precision {precision!r}: expected one of {', '.join(RECIPE_BYTES)}")
    if ac not in AC_MODES:
        raise ValueError(f"ac {ac!r}: expected one of {', '.join(AC_MODES)}")
    from suite.models.gpt import model as gpt

    v = int(vocab_size or cfg.vocab_size or 0)
    if not v:
        raise ValueError("the vocabulary size is unknown: set model.vocab_size or pass vocab_size")
    meta = {"vocab_size": v}
    v_real = min(int(real_vocab or v), v)
    d, L, m, h = cfg.d_model, cfg.n_layer, cfg.mlp_ratio, cfg.n_head
    w, a, r = RECIPE_BYTES[precision]
    tokens = micro_batch * cfg.seq_len
    notes: list[str] = []

    params = gpt.param_count(cfg, meta, include_position=True)
    matmul_params = L * (3 + 1 + 2 * m) * d * d + v * d  # qkv, proj, fc, fc_out; the LM head (tied or not)
    master = precision == "bf16_master"
    weights = params * w + (params * 4 if master else 0)
    grads = params * w + (params * 4 if master else 0)
    slots = OPTIMIZER_SLOTS.get(optimizer)
    if slots is None:
        slots = 2
        notes.append(f"optimizer {optimizer!r} not in the table: counted as Adam (2 fp32 slots)")
    opt_state = slots * params * 4
    copies = matmul_params * a if a != w else 0  # autocast casts each weight once per forward and saves it

    layer = per_token_layer_bytes(d, h, m, a, r, cfg.dropout) * tokens
    head = tokens * (d * r + 8 + d * a)  # ln_f's input and stats, the LM head's input
    if ac == "full":
        blocks, recompute = L * tokens * d * r, layer  # each block's input; one block rebuilt at a time
    else:
        blocks, recompute = L * layer, 0
        if ac == "selective":
            notes.append("selective checkpointing is counted as none (an upper bound)")
    activations = blocks + head
    cut = v_real * a if v_real < v else 0  # logits[..., :V] then reshape: a copy
    to_fp32 = v_real * 4 if a != 4 else 0
    logits = tokens * (v * a + cut + to_fp32 + v_real * 4)  # + log-softmax's fp32 output (saved)

    resident = weights + opt_state
    phases = {
        "forward": copies + activations + logits,
        "backward": copies + activations - (tokens * d * r if ac == "full" else 0) + recompute + grads,
        "optimizer": grads + params * 4,  # torch's foreach step keeps about one fp32 temporary per parameter
    }
    if ac == "none":
        phases.pop("backward")
    phase = max(phases, key=lambda k: phases[k])
    return MemoryEstimate(params=params, weights_bytes=weights, grads_bytes=grads, optimizer_bytes=opt_state,
                          weight_copies_bytes=copies, activations_bytes=activations, recompute_bytes=recompute,
                          logits_bytes=logits, peak_bytes=resident + phases[phase], phase=phase, notes=tuple(notes))


def estimate_spec(spec: Any, precision: str | None = None) -> MemoryEstimate:
    """The estimate for a GPT workload spec at its micro-batch (data.micro_batch_size, else the batch), in its
    precision (or `precision`), with its activation checkpointing (parallel.ac)."""
    if spec.model.arch != "gpt":
        raise ValueError(f"{spec.name}: the memory estimator models the gpt architecture, not {spec.model.arch!r}")
    from suite.models.gpt import model as gpt

    cfg = gpt.Config.model_validate(spec.model.params())
    micro = spec.data.micro_batch_size or spec.data.batch_size
    ac = spec.parallel.ac if spec.parallel is not None else "none"
    real_vocab = getattr(spec.data, "vocab_size", None) or _tokenizer_vocab(spec)
    return estimate_gpt(cfg, micro_batch=micro, precision=precision or spec.precision or "fp32",
                        optimizer=spec.optimizer.name, ac=ac, real_vocab=real_vocab)


def _tokenizer_vocab(spec: Any) -> int | None:
    """GPT-2's BPE has 50,257 tokens; a spec that pads the model's vocabulary past it (50,304) reads the real one."""
    v = spec.model.params().get("vocab_size")
    return 50257 if v == 50304 else None


@dataclass(frozen=True)
class Fit:
    fits: bool
    estimate: MemoryEstimate
    device_bytes: int
    headroom: float  # the share of the device kept free for the allocator's fragmentation, CUDA context, workspaces

    @property
    def reason(self) -> str:
        need, have = self.estimate.peak_bytes / GIB, self.device_bytes / GIB
        usable = have * (1 - self.headroom)
        verdict = "fits" if self.fits else "does NOT fit"
        return (f"{verdict}: estimated peak {need:.1f} GiB ({self.estimate.phase}) against {usable:.1f} GiB usable "
                f"of {have:.1f} GiB ({self.headroom:.0%} kept for fragmentation and workspaces)")


def fits(estimate: MemoryEstimate, device_bytes: int, headroom: float = 0.2) -> Fit:
    """Whether the estimated peak fits in `device_bytes` with `headroom` of it left free."""
    return Fit(fits=estimate.peak_bytes <= device_bytes * (1 - headroom), estimate=estimate,
               device_bytes=device_bytes, headroom=headroom)
