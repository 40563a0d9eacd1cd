"""LoRA under Megatron-core, the pure part: which of Megatron's linear layers the spec's `lora.target_modules` name,
what the Megatron path refuses, and the adapters' parameter count in Megatron's layout. Imports no framework (the
backend's `supports` calls it); the adapters themselves are in suite/backends/megatron/lora_layers.py.

Megatron fuses q, k and v into one `linear_qkv` and the gate and up projections into one `linear_fc1`, so an adapter
there is ONE low-rank pair over the fused output: for `qkv_proj` that is the MLPerf reference's own adapter (NeMo's
qkv_proj on Megatron), as the torch backend's peft path does on the suite's `model.fused_qkv` wqkv (without it, peft
puts three, on the split q, k, v projections).
"""

from __future__ import annotations

from typing import Any

# the spec's names (Megatron's, Hugging Face's, the suite's) -> the Megatron module that carries the adapter
TARGETS: dict[str, str] = {
    "linear_qkv": "linear_qkv", "qkv_proj": "linear_qkv", "wqkv": "linear_qkv",
    "linear_proj": "linear_proj", "o_proj": "linear_proj", "wo": "linear_proj",
    "linear_fc1": "linear_fc1",
    "linear_fc2": "linear_fc2", "down_proj": "linear_fc2", "w2": "linear_fc2"}
_FUSED_QKV = ("Megatron fuses q, k and v into one linear_qkv: target qkv_proj (or linear_qkv), one adapter over the "
              "fused output as in MLPerf's reference")
_FUSED_FC1 = "Megatron fuses the gate and up projections into one linear_fc1: target linear_fc1 (one adapter over both)"
NO_COUNTERPART: dict[str, str] = {
    **dict.fromkeys(("q_proj", "k_proj", "v_proj", "wq", "wk", "wv"), _FUSED_QKV),
    **dict.fromkeys(("gate_proj", "up_proj", "w1", "w3"), _FUSED_FC1),
    **dict.fromkeys(("output", "lm_head"), "the Megatron path puts no adapter on the vocabulary-parallel output layer"),
}
ATTENTION = ("linear_qkv", "linear_proj")
MLP = ("linear_fc1", "linear_fc2")


def megatron_targets(lora: Any) -> list[str]:
    """The Megatron modules `lora.target_modules` names, in order, each once; a name without a counterpart is refused
    with what to name instead."""
    out: list[str] = []
    for name in lora.target_modules:
        if name in NO_COUNTERPART:
            raise ValueError(f"lora.target_modules: {name!r} has no counterpart under --backend megatron: "
                             f"{NO_COUNTERPART[name]}")
        if name not in TARGETS:
            raise ValueError(f"lora.target_modules: {name!r} is not a linear layer of Megatron's GPTModel; known: "
                             f"{', '.join(TARGETS)}")
        if TARGETS[name] not in out:
            out.append(TARGETS[name])
    return out


def refusal(spec: Any) -> str | None:
    """Pure: why the Megatron path cannot put this spec's LoRA adapters on (None when it can, or when there is no
    `lora:` block)."""
    from suite.models.hf import config as pretrained  # not the loader: it imports torch

    cfg = pretrained.Config.model_validate(spec.model.params())
    if cfg.lora is None:
        return None
    try:
        targets = megatron_targets(cfg.lora)
    except ValueError as e:
        return str(e)
    if cfg.moe is not None and any(t in MLP for t in targets):
        return (f"lora.target_modules {cfg.lora.target_modules}: adapters on the MLP of a Mixture-of-Experts model "
                "(its experts) are not implemented under --backend megatron; target the attention (qkv_proj, o_proj)")
    par = spec.parallel
    if par is not None and par.sp:
        return ("parallel.sp with model.lora: the Megatron LoRA adapters take the full sequence (no sequence-parallel "
                "gather or reduce-scatter of their own); set parallel.sp=false")
    return None


def layer_shapes(cfg: Any) -> dict[str, tuple[int, int, int]]:
    """Megatron module -> (in, out, how many in the model) for a llama.Config's model (fc1: [gate; up] rows)."""
    d, q, kv = cfg.d_model, cfg.n_head * cfg.head_size, cfg.kv_heads * cfg.head_size
    dense = sum(1 for i in range(cfg.n_layer) if not cfg.is_moe(i))
    return {"linear_qkv": (d, q + 2 * kv, cfg.n_layer), "linear_proj": (q, d, cfg.n_layer),
            "linear_fc1": (d, 2 * cfg.ffn_dim, dense), "linear_fc2": (cfg.ffn_dim, d, dense)}


def adapter_param_count(cfg: Any, lora: Any) -> int:
    """rank x (in + out) per adapted Megatron module (A is rank x in, B out x rank), whatever the tp split: MLPerf's
    llama2_70b_lora (r 16 on qkv_proj and o_proj, 80 layers of 8192 wide, 64 query and 8 key/value heads of 128)
    gives 16 x ((8192 + 10240) + (8192 + 8192)) x 80 = 44,564,480, the reference's 44.6 M."""
    shapes = layer_shapes(cfg)
    return sum(lora.rank * (shapes[t][0] + shapes[t][1]) * shapes[t][2] for t in megatron_targets(lora))


def base_model(workload: Any) -> Any:
    """The workload's model without peft's adapters (the base the Megatron weights are copied from; the Megatron
    path attaches its own): built from the workload's model block with `lora` cleared, for this call only."""
    cfg = workload.model_cfg
    workload.model_cfg = cfg.model_copy(update={"lora": None})
    try:
        return workload.build_model()
    finally:
        workload.model_cfg = cfg
