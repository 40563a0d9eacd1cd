"""What Megatron refuses of a Llama-family spec (`arch: llama` or `hf_llama`), read from the spec alone (no torch, no
Megatron): `supports` (suite/backends/megatron/options.py) and `trainbench list --json` call it before anything is
built. suite/backends/megatron/llama.py, which builds the model, re-exports these.
"""

from __future__ import annotations

from typing import Any


def is_llama_family(arch: str) -> bool:
    """The suite Llama, by name (`llama`) or from a Hugging Face checkpoint (`hf_llama`, suite/models/hf/pretrained.py)."""
    from suite.backends.layout import is_llama, is_pretrained_llama

    return is_llama(arch) or is_pretrained_llama(arch)


def refusal(spec: Any, tp: int = 1, pp: int = 1) -> str | None:
    """Pure: why Megatron cannot run this llama / hf_llama spec at these degrees (None when it can)."""
    from suite.backends.layout import is_pretrained_llama
    from suite.models.hf import config as pretrained
    from suite.models.llama import config as llama

    pretrained_arch = is_pretrained_llama(spec.model.arch)
    try:
        cfg = (pretrained.Config if pretrained_arch else llama.Config).model_validate(spec.model.params())
    except ValueError as e:
        return f"the model block does not validate: {e}"
    par = spec.parallel
    if cfg.n_head % tp:  # the preset's sizes, which spec.model.params() does not hold
        return f"tensor parallelism tp={tp} does not divide model.n_head={cfg.n_head}"
    try:
        uneven_split(cfg.n_layer, pp)
    except ValueError as e:
        return (f"pipeline parallelism pp={pp} does not divide model.n_layer={cfg.n_layer}, and no uneven split "
                f"(Megatron's first/last stage sizes) fits: {e}")
    if tp > 1 and par is not None and par.sp:
        return ("parallel.sp: the Llama path builds Megatron's local layer spec, whose torch norms refuse sequence "
                "parallelism (Transformer Engine's spec is not mapped for the Llama); set parallel.sp=false")
    if cfg.kv_heads % tp:
        return (f"parallel.tp={tp} does not divide model.n_kv_head={cfg.kv_heads}: Megatron gives each tensor-parallel "
                "rank whole query groups")
    if cfg.moe is not None and tp > 1:
        return (f"parallel.tp={tp} with model.moe: Megatron's MoE layer trains under tensor parallelism only with "
                "sequence parallelism (parallel.sp), which needs Transformer Engine's layer spec; the Llama path "
                "builds the local spec. Split the experts with parallel.ep instead")
    if cfg.tie_embeddings:
        return "model.tie_embeddings: the Megatron Llama path maps untied embeddings only"
    if getattr(cfg, "qk_norm", False) and tp > 1:  # each rank's q/k norm gradients would need summing over tp
        return (f"parallel.tp={tp} with model.qk_norm: the per-head q/k norms' gradients are not summed over the "
                "tensor-parallel group on this path; run it with tp=1")
    m = cfg.moe
    if par is not None and par.ep > 1:
        if m is None:
            return f"--parallel ep={par.ep}: this model is dense (no `moe:` block): there are no experts to split"
        if m.experts % par.ep:
            return f"--parallel ep={par.ep} does not divide model.moe.experts={m.experts}"
    if m is not None and not m.normalize_top_k:
        return ("model.moe.normalize_top_k=false: the Megatron path maps top-k scores renormalised over the k "
                "(softmax over the chosen logits, or sigmoid scores over their sum)")
    if m is not None and m.score_bias and m.score != "sigmoid":
        return "model.moe.score_bias with softmax scores: Megatron's expert bias is for sigmoid routing only"
    if m is not None and m.top_k == 1 and m.score == "softmax":
        return "model.moe.top_k=1 with softmax: Megatron then needs its pre-softmax router, which is another routing"
    return None


def uneven_split(n_layer: int, pp: int) -> tuple[int, int] | None:
    """Megatron-core's uneven pipeline (num_layers_in_first/last_pipeline_stage) where pp does not divide the layers:
    (first, last) with the stages between holding ceil(n_layer / pp) layers each (or the floor, where the ceiling
    leaves the last stage none), the first stage the larger half of the rest. 61 layers over 16 stages: 3, 14 x 4,
    2; over 4: 15, 16, 16, 14. None when pp divides n_layer (Megatron's even split)."""
    if pp <= 1 or n_layer % pp == 0:
        return None
    if n_layer < pp:
        raise ValueError("more pipeline stages than layers")
    for middle in (-(-n_layer // pp), n_layer // pp):
        rest = n_layer - middle * (pp - 2)
        first = -(-rest // 2)
        if rest - first >= 1:
            return first, rest - first
    raise ValueError("no first/last stage sizes leave every stage a layer")
