"""The suite's `llama` model configs as torchtitan 0.3.0 model configs, and the weight map between the two.

A dense spec becomes torchtitan's `Llama3Model` (its `Llama3TransformerBlock`, fused QKV, `ComplexRoPE` with
Llama 3.1 scaling); an MoE spec becomes torchtitan's `DeepSeekV3Model` (its `DeepSeekV3TransformerBlock`, MoE,
`TokenChoiceTopKRouter`, `GroupedExperts`, shared experts, dense-first layers) with torchtitan's `GQAttention` in
place of Multi-head Latent Attention, as the suite's own DeepSeek-V3 preset does. Everything is built from
torchtitan's public config helpers (`make_gqa_config`, `make_ffn_config`, `make_moe_config`, ...), so the module
classes, their forward code and their `parallelize` plans are torchtitan's.

Attention: torchtitan's language models take `flex`, `flex_flash` or `varlen`; `attention="sdpa"` puts its
`ScaledDotProductAttention` (causal, maskless) in every layer instead, which is what trains on CPU (FlexAttention
has no CPU backward).

Weights: `suite_to_titan` / `titan_to_suite` rename, and permute the query/key rows between the suite's rotary layout
(rotate_half, Hugging Face's) and torchtitan's interleaved pairs, the permutation torchtitan's own
`Llama3StateDictAdapter` applies to Hugging Face checkpoints. A suite model with `fused_qkv` (one wqkv, rows
[q; k; v]) is split into the stock wq/wk/wv torchtitan's FusedQKVLinear merges on load; peft's `base_layer` names
read as the plain layer's.

LoRA (`arch: hf_llama` with `lora:`): torchtitan's own LoRAConverter on the config tree (`lora_converter`, the
suite's targets as its module names, `LORA_TARGETS`), peft's dropout as a pre-hook on each `lora_a`
(`add_lora_dropout`), and peft's adapters copied in (`_lora_to_titan`: B's rows moved as the base's).
Imports torchtitan: only the backend calls this.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from suite.models.common.configs import LoraConfig
from suite.models.llama.config import Config as LlamaConfig

ATTENTION = ("sdpa", "flex", "varlen")


def _rope(cfg: LlamaConfig, seq_len: int) -> Any:
    from torchtitan.models.common import ComplexRoPE

    s = cfg.rope_scaling
    scaling = {} if s is None else {"scaling": "llama", "scaling_factor": s.factor, "low_freq_factor": s.low_freq_factor,
                                    "high_freq_factor": s.high_freq_factor,
                                    "original_max_position_embeddings": s.original_max_position_embeddings}
    return ComplexRoPE.Config(dim=cfg.head_size, max_seq_len=seq_len, theta=cfg.rope_theta, **scaling)


def _inner_attention(attention: str) -> Any:
    if attention == "sdpa":
        from torchtitan.models.common.attention import ScaledDotProductAttention

        return ScaledDotProductAttention.Config()
    from torchtitan.models.common.config_utils import get_attention_config

    return get_attention_config(attention)


def use_sdpa(config: Any) -> Any:
    """A built torchtitan LM config with each layer's inner attention replaced by its ScaledDotProductAttention
    (causal, maskless): the one torchtitan attention that trains on CPU; `get_attention_config` refuses "sdpa"."""
    for layer in config.layers:
        layer.attention.inner_attention = _inner_attention("sdpa")
    return config


def titan_config(cfg: LlamaConfig, vocab_size: int, attention: str = "sdpa", seq_len: int | None = None,
                 fuse_qkv: bool = True) -> Any:
    """torchtitan's model config for the suite's `cfg` (its `preset` expanded): Llama3Model.Config when dense,
    DeepSeekV3Model.Config when `cfg.moe` is set. `fuse_qkv` False: torchtitan's QKVLinear (wq, and wk and wv
    built from one config `wkv`) in place of its FusedQKVLinear, for LoRA adapters on separate q/k/v."""
    if attention not in ATTENTION:
        raise ValueError(f"attention {attention!r}: expected one of {', '.join(ATTENTION)}")
    from torchtitan.models.common import Embedding, Linear, RMSNorm
    from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config

    d, init = cfg.d_model, {"weight": torch.nn.init.zeros_, "bias": torch.nn.init.zeros_}
    rope = _rope(cfg, seq_len or cfg.seq_len)

    def norm() -> Any:  # one config object per module: torchtitan's sharding plans set each one's own layout
        return RMSNorm.Config(normalized_shape=d, eps=cfg.norm_eps, param_init={"weight": torch.nn.init.ones_})

    layers = []
    for i in range(cfg.n_layer):
        # qk_norm: torchtitan's GQAttention normalises each head's q and k before rotary (its Qwen3's q_norm, k_norm)
        qk_norm = (RMSNorm.Config(normalized_shape=cfg.head_size, eps=cfg.norm_eps,
                                  param_init={"weight": torch.nn.init.ones_}) if cfg.qk_norm else None)
        attn = make_gqa_config(dim=d, n_heads=cfg.n_head, n_kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                               wqkv_param_init=init, wo_param_init=init, inner_attention=_inner_attention(attention),
                               rope=rope, fuse_qkv=fuse_qkv, qk_norm=qk_norm)
        qkv_linears = ([attn.qkv_linear.wqkv] if fuse_qkv else [attn.qkv_linear.wq, attn.qkv_linear.wkv])
        if cfg.attention_bias or cfg.qkv_bias:  # q, k and v biased; o too with attention_bias
            for linear in qkv_linears:
                linear.bias = True
        if cfg.attention_bias:
            attn.wo.bias = True
        dense = None if cfg.is_moe(i) else make_ffn_config(dim=d, hidden_dim=cfg.ffn_dim, w1_param_init=init,
                                                            w2w3_param_init=init)
        layers.append(dict(attention=attn, attention_norm=norm(), ffn_norm=norm(), feed_forward=dense,
                           moe=_moe(cfg, init) if cfg.is_moe(i) else None))
    common = dict(dim=d, vocab_size=vocab_size, enable_weight_tying=cfg.tie_embeddings, norm=norm(),
                  tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=d,
                                                  param_init={"weight": torch.nn.init.zeros_}),
                  lm_head=Linear.Config(in_features=d, out_features=vocab_size, param_init=init))
    if cfg.moe is None:
        from torchtitan.models.llama3 import Llama3Model, Llama3TransformerBlock

        return Llama3Model.Config(**common, layers=[Llama3TransformerBlock.Config(**layer) for layer in layers])
    from torchtitan.models.deepseek_v3 import DeepSeekV3Model
    from torchtitan.models.deepseek_v3.model import DeepSeekV3TransformerBlock

    return DeepSeekV3Model.Config(**common, layers=[DeepSeekV3TransformerBlock.Config(**layer) for layer in layers])


def _moe(cfg: LlamaConfig, init: dict[str, Any]) -> Any:
    from torchtitan.models.common.config_utils import (
        make_ffn_config,
        make_moe_config,
        make_routed_experts_config,
        make_router_config,
    )

    m, d = cfg.moe, cfg.d_model
    assert m is not None
    experts_init = {name: torch.nn.init.zeros_ for name in ("w1_EFD", "w2_EDF", "w3_EFD")}
    router = make_router_config(dim=d, num_experts=m.experts, gate_param_init=init, top_k=m.top_k,
                                score_func=m.score, route_norm=m.normalize_top_k, route_scale=m.routed_scaling,
                                num_expert_groups=m.groups if m.groups > 1 else None,
                                num_limited_groups=m.topk_groups if m.groups > 1 else None)
    shared = (make_ffn_config(dim=d, hidden_dim=m.expert_ffn_dim * m.shared_experts, w1_param_init=init,
                              w2w3_param_init=init) if m.shared_experts else None)
    # load_balance_coeff: torchtitan's aux-loss-free expert bias (the suite's `score_bias`); None: no bias buffer
    return make_moe_config(num_experts=m.experts, router=router, shared_experts=shared,
                           load_balance_coeff=1e-3 if m.score_bias else None,
                           routed_experts=make_routed_experts_config(dim=d, hidden_dim=m.expert_ffn_dim,
                                                                     num_experts=m.experts, top_k=m.top_k,
                                                                     param_init=experts_init, comm_backend="standard"))


def build(cfg: LlamaConfig, vocab_size: int, attention: str = "sdpa", device: Any = "cpu",
          sequence_parallel: bool | None = None, expert_parallel: bool = False,
          lora: LoraConfig | None = None) -> torch.nn.Module:
    """torchtitan's model for `cfg`, its parameters and buffers initialised by torchtitan (`init_states`).
    `sequence_parallel` not None: torchtitan's tensor-parallel sharding plan (`set_llama3_sharding_config`) set on
    the config before the build, as its Trainer does (`update_from_config`): modules read it when built.
    `expert_parallel` (an MoE `cfg`): torchtitan's plan for a GQA decoder with MoE layers, its Qwen3 one
    (`set_qwen3_sharding_config`: GQA attention, dense FFN where a layer has one, `set_moe_sharding_config` with
    EP), so the routed experts shard over its `ep` mesh and the dispatcher exchanges tokens (all-to-all).
    `lora`: torchtitan's own LoRAConverter run on the config tree (`lora_converter`), after the sharding plan as its
    Trainer orders them: the targets become its LoRALinear (base frozen, `lora_a` / `lora_b`), the rest frozen."""
    config = titan_config(cfg, vocab_size, attention, fuse_qkv=lora is None or lora_fuses_qkv(cfg, lora))
    if expert_parallel:
        if cfg.moe is None:
            raise ValueError("expert parallel needs an MoE model (model.moe or an MoE preset)")
        if sequence_parallel is not None:
            raise ValueError("tensor parallel with an MoE model is not wired (see backend.supports)")
        from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config

        set_qwen3_sharding_config(config, enable_sp=False, enable_ep=True)
    if sequence_parallel is not None:
        if cfg.qk_norm:
            raise ValueError("tensor parallel with model.qk_norm: torchtitan's Llama 3 sharding plan gives the q/k "
                             "norms no layout (its Qwen3 plan does); not wired")
        if cfg.moe is not None:
            raise ValueError("tensor parallel: the suite's MoE presets are built with GQA attention, which "
                             "torchtitan's DeepSeek-V3 sharding plan (written for MLA) does not cover")
        from torchtitan.models.llama3.sharding import set_llama3_sharding_config

        set_llama3_sharding_config(config, enable_sp=sequence_parallel)
    if lora is not None:
        config = lora_converter(cfg, lora).convert(config)
    model = config.build()
    model.to(device)
    model.init_states(buffer_device=torch.device(device))
    if lora is not None and lora.dropout:
        add_lora_dropout(model, lora.dropout)
    return model


# ---- LoRA ------------------------------------------------------------------------------------------------------

# the suite's linear layers (LoraConfig.suite_targets) -> the last name segment torchtitan's LoRAConverter matches
# (its Linear configs: attention.qkv_linear.wqkv fused, or .wq and .wkv (wk and wv built from one config), .wo,
# feed_forward.w1-w3, lm_head)
LORA_TARGETS = {"wqkv": "wqkv", "wq": "wq", "wk": "wkv", "wv": "wkv", "wo": "wo", "w1": "w1", "w2": "w2", "w3": "w3",
                "output": "lm_head"}


def lora_fuses_qkv(cfg: LlamaConfig, lora: LoraConfig) -> bool:
    """torchtitan's fused QKV linear unless the adapters sit on separate q/k/v projections."""
    targets = lora.suite_targets(bool(cfg.fused_qkv))
    return not any(t in targets for t in ("wq", "wk", "wv"))


def lora_targets(cfg: LlamaConfig, lora: LoraConfig) -> list[str]:
    """The recipe's targets as torchtitan's module names (raises where torchtitan cannot place an adapter)."""
    targets = lora.suite_targets(bool(cfg.fused_qkv))
    if ("wk" in targets) != ("wv" in targets):
        raise ValueError(f"lora.target_modules {lora.target_modules}: torchtitan's QKVLinear builds wk and wv from "
                         "one Linear config (`wkv`), so its LoRAConverter adapts both or neither; target both k_proj "
                         "and v_proj (or qkv_proj)")
    out: list[str] = []
    for t in targets:
        if LORA_TARGETS[t] not in out:
            out.append(LORA_TARGETS[t])
    return out


def lora_converter(cfg: LlamaConfig, lora: LoraConfig) -> Any:
    from torchtitan.components.lora import LoRAConverter

    if cfg.moe is not None:
        raise ValueError("LoRA on an MoE model: torchtitan's LoRAConverter adapts Linear configs and would also "
                         "match the shared experts' w1-w3 by name; not wired")
    return LoRAConverter(LoRAConverter.Config(rank=lora.rank, alpha=float(lora.alpha),
                                              target_modules=lora_targets(cfg, lora)))


def add_lora_dropout(model: torch.nn.Module, p: float) -> int:
    """peft's lora_dropout, which torchtitan's LoRALinear lacks (its forward is base(x) + s * B(A(x))): dropout on
    the adapter's input, as a forward pre-hook on each `lora_a` (B(A(dropout(x))), peft's order), only in training.
    Parameter names are torchtitan's own. Returns how many adapters got it."""
    import torch.nn.functional as F

    def hook(module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (F.dropout(args[0], p, module.training), *args[1:])

    n = 0
    for name, module in model.named_modules():
        if name.endswith("lora_a"):
            module.register_forward_pre_hook(hook)
            n += 1
    return n


# ---- weights ------------------------------------------------------------------------------------------------

# suite name -> torchtitan name (the state-dict names torchtitan's modules save and load: FusedQKVLinear saves and
# loads wq/wk/wv through its own state-dict hooks)
SUITE_TO_TITAN: list[tuple[str, str]] = [
    (r"output\.weight", "lm_head.weight"),
    (r"layers\.(\d+)\.attention\.(wq|wk|wv)\.(weight|bias)", r"layers.\1.attention.qkv_linear.\2.\3"),
    (r"layers\.(\d+)\.moe\.router\.weight", r"layers.\1.moe.router.gate.weight"),
    (r"layers\.(\d+)\.moe\.router\.score_bias", r"layers.\1.moe.expert_bias_E"),
    (r"layers\.(\d+)\.moe\.experts\.w1", r"layers.\1.moe.routed_experts.inner_experts.w1_EFD"),
    (r"layers\.(\d+)\.moe\.experts\.w2", r"layers.\1.moe.routed_experts.inner_experts.w2_EDF"),
    (r"layers\.(\d+)\.moe\.experts\.w3", r"layers.\1.moe.routed_experts.inner_experts.w3_EFD"),
    (r"layers\.(\d+)\.moe\.shared\.(w\d)\.weight", r"layers.\1.moe.shared_experts.\2.weight"),
    (r"(.*)", r"\1"),  # the rest is named alike: tok_embeddings, norms, attention.wo, feed_forward.w1-3
]


def _rotary_rows(w: torch.Tensor, heads: int, to_titan: bool) -> torch.Tensor:
    """Query/key rows (and biases) of `heads` heads from the rotate_half layout (halves) to interleaved pairs, or
    back: torchtitan's Llama3StateDictAdapter._reverse_permute / _permute, on any trailing shape."""
    tail = w.shape[1:]
    half = w.shape[0] // heads // 2
    if to_titan:
        return w.reshape(heads, 2, half, *tail).transpose(1, 2).reshape(w.shape).contiguous()
    return w.reshape(heads, half, 2, *tail).transpose(1, 2).reshape(w.shape).contiguous()


# the same pairs read the other way
TITAN_TO_SUITE: list[tuple[str, str]] = [
    (r"lm_head\.weight", "output.weight"),
    (r"layers\.(\d+)\.attention\.qkv_linear\.(wq|wk|wv)\.(weight|bias)", r"layers.\1.attention.\2.\3"),
    (r"layers\.(\d+)\.moe\.router\.gate\.weight", r"layers.\1.moe.router.weight"),
    (r"layers\.(\d+)\.moe\.expert_bias_E", r"layers.\1.moe.router.score_bias"),
    (r"layers\.(\d+)\.moe\.routed_experts\.inner_experts\.(w\d)_E\w\w", r"layers.\1.moe.experts.\2"),
    (r"layers\.(\d+)\.moe\.shared_experts\.(w\d)\.weight", r"layers.\1.moe.shared.\2.weight"),
    (r"(.*)", r"\1"),
]


def _convert(sd: dict[str, torch.Tensor], cfg: LlamaConfig, to_titan: bool) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in sd.items():
        if name.endswith("tokens_per_expert_E"):  # torchtitan's routing counter, not a weight
            continue
        pattern, target = next(p for p in (SUITE_TO_TITAN if to_titan else TITAN_TO_SUITE) if re.fullmatch(p[0], name))
        new = re.sub(pattern, target, name)
        if m := re.search(r"attention\.(?:qkv_linear\.)?(wq|wk)\.", name):
            tensor = _rotary_rows(tensor, cfg.n_head if m.group(1) == "wq" else cfg.kv_heads, to_titan)
        elif re.search(r"attention\.(q_norm|k_norm)\.weight$", name):  # a head's dimensions, permuted as its rows
            tensor = _rotary_rows(tensor, 1, to_titan)
        out[new] = tensor
    return out


def suite_to_titan(sd: dict[str, torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """The suite model's state dict in torchtitan's names and rotary layout (for `load_state_dict`)."""
    return _convert(sd, cfg, to_titan=True)


def titan_to_suite(sd: dict[str, torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """torchtitan's state dict in the suite model's names and rotary layout."""
    return _convert(sd, cfg, to_titan=False)


_PEFT = re.compile(r"(.+)\.lora_([AB])\.default\.weight")


def _titan_module(suite_module: str) -> str:
    """A suite linear layer's name -> torchtitan's (the weight map's names, less `.weight`)."""
    name = suite_module + ".weight"
    pattern, target = next(p for p in SUITE_TO_TITAN if re.fullmatch(p[0], name))
    return re.sub(pattern, target, name)[: -len(".weight")]


def _lora_to_titan(adapters: dict[tuple[str, str], torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """peft's adapters (A: rank x in, B: out x rank) as torchtitan's LoRALinear's `lora_a` / `lora_b` weights. A
    reads the layer's input, whose order both models share; B's rows are the layer's output rows, so they move as
    the base weight's rows do: q and k rows to torchtitan's interleaved rotary pairs, and a fused wqkv's [q; k; v]
    into FusedQKVLinear's per-KV-group order (its own `_merge_qkv_on_load`)."""
    from types import SimpleNamespace

    from torchtitan.models.common.attention import FusedQKVLinear

    out: dict[str, torch.Tensor] = {}
    for (module, ab), t in adapters.items():
        fused = module.endswith(".attention.wqkv")
        target = (module[: -len("wqkv")] + "qkv_linear.wqkv") if fused else _titan_module(module)
        if ab == "A":
            out[f"{target}.lora_a.weight"] = t
            continue
        if fused:
            q, k, v = t.split(list(cfg.qkv_sizes), dim=0)
            part = {"wq.weight": _rotary_rows(q, cfg.n_head, True), "wk.weight": _rotary_rows(k, cfg.kv_heads, True),
                    "wv.weight": v}
            stub = SimpleNamespace(head_dim=cfg.head_size, heads_per_kv=cfg.n_head // cfg.kv_heads)
            FusedQKVLinear._merge_qkv_on_load(stub, part, "")
            t = part["wqkv.weight"]
        elif module.endswith((".attention.wq", ".attention.wk")):
            t = _rotary_rows(t, cfg.n_head if module.endswith("wq") else cfg.kv_heads, True)
        out[f"{target}.lora_b.weight"] = t
    return out


def suite_state_for_titan(sd: dict[str, torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """The suite model's state dict, peft-injected or not, in torchtitan's names and layout: peft's `base_layer`
    names as the plain layer's, a fused wqkv (rows [q; k; v]) as torchtitan's stock wq, wk, wv (FusedQKVLinear
    merges them on load), and each adapter as torchtitan's LoRALinear holds it."""
    from suite.models.llama.model import split_qkv

    base: dict[str, torch.Tensor] = {}
    adapters: dict[tuple[str, str], torch.Tensor] = {}
    for name, t in sd.items():
        if m := _PEFT.fullmatch(name):
            adapters[(m[1], m[2])] = t
        else:
            base[name.replace(".base_layer.", ".")] = t
    return {**suite_to_titan(split_qkv(base, cfg), cfg), **_lora_to_titan(adapters, cfg)}


def load_suite_weights(titan: torch.nn.Module, suite: torch.nn.Module, cfg: LlamaConfig) -> None:
    """Copy the suite model's weights (and its LoRA adapters, when peft put them in) into torchtitan's model of the
    same config; every tensor must land."""
    sd = suite_state_for_titan({k: v.detach() for k, v in suite.state_dict().items()}, cfg)
    missing, unexpected = titan.load_state_dict(sd, strict=False)
    left = [k for k in missing if not k.endswith(("tokens_per_expert_E",)) and "rope.cache" not in k]
    if left or unexpected:
        raise ValueError(f"weight map suite -> torchtitan: missing {left}, unexpected {unexpected}")
