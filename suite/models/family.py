"""What makes a Llama-class model family that family: the interface each family fills in (its `FAMILY`, in its
package `suite/models/<family>/__init__.py`, as torchtitan's `models/<name>/__init__.py` holds that model's
configs), read by the registry (suite/models/families.py) and, through it, by the Hugging Face loader and the preset
table. Nothing outside a family's folder names a family: the loader, the engine adapters (torchtitan, Megatron) and
the memory estimator read the decoder's traits from `llama.Config` (`qkv_bias`, `attention_bias`, `qk_norm`,
`tie_embeddings`, `moe`), and what a family's architecture fixes it declares here.

A family declares:
- `architectures`: the Hugging Face `architectures` names it reads (config.json), `model_type` written back;
- `traits`: the architecture traits (`traits_of`) its Hugging Face architecture has: the loader sets them on the
  config it reads, and a saved model is written as the one family whose traits equal the model's;
- `read` / `write`: the rest of its config.json translation (e.g. an MoE block, a refused sliding window);
- `presets` (`preset:` shapes) and `tiny` (each full-size preset's CPU counterpart).

May import what `suite.models` may; never a family folder or `suite.models.llama.model` (they import this).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# the decoder's architecture traits (llama.Config), by which a Hugging Face architecture is chosen when saving
TRAITS = ("qkv_bias", "qk_norm", "moe")


def traits_of(cfg: Any) -> dict[str, bool]:
    """The architecture traits of a llama.Config: `qkv_bias` q/k/v biases without an o bias (attention_bias puts
    one on all four, which a family's config.json says in its own field), `qk_norm` per-head RMSNorm on q and k
    before rotary, `moe` Mixture-of-Experts layers."""
    return {"qkv_bias": bool(cfg.qkv_bias and not cfg.attention_bias), "qk_norm": bool(cfg.qk_norm),
            "moe": cfg.moe is not None}


@dataclass(frozen=True)
class Family:
    name: str
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    traits: Mapping[str, bool] = field(default_factory=dict)
    # config.json (a dict) -> fields added to the loader's llama.Config fields (it may raise ValueError naming the
    # field); and the written config.json's entries for a model of this family (it may raise ValueError)
    read: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    write: Callable[[Any, dict[str, Any]], None] | None = None
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tiny: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.traits) - set(TRAITS)
        if unknown:
            raise ValueError(f"family {self.name}: traits {sorted(unknown)} are not the decoder's ({', '.join(TRAITS)})")

    def has(self, traits: Mapping[str, bool]) -> bool:
        """Whether a model with these traits (traits_of) is of this family's Hugging Face architecture."""
        return all(bool(self.traits.get(t, False)) == bool(traits.get(t, False)) for t in TRAITS)

    def fields(self) -> dict[str, Any]:
        """The llama.Config fields its traits set on a loaded config (the boolean ones; `moe` is `read`'s)."""
        return {t: True for t, on in self.traits.items() if on and t != "moe"}


def count(hf: Mapping[str, Any], key: str, default: Any = None) -> int:
    """A size field of config.json: a whole number >= 1 (0 heads, 1e400 layers or 2.5 experts name the field)."""
    value = hf.get(key, default) if default is not None else hf[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")) or int(value) != value or value < 1 or value > 2**40:
        raise ValueError(f"field {key!r} is {value!r}: a size must be a whole number from 1 to 2**40")
    return int(value)


def refuse_sliding_window(hf: Mapping[str, Any], fields: dict[str, Any]) -> None:
    """A family's `read` for Qwen-style config.json (use_sliding_window): the suite's decoder attends over the whole
    causal context, so a sliding window is refused, named."""
    if hf.get("use_sliding_window"):
        raise ValueError(f"use_sliding_window with sliding_window {hf.get('sliding_window')} (full causal "
                         "attention only)")


def write_full_attention(cfg: Any, out: dict[str, Any]) -> None:
    """A family's `write` for Qwen-style config.json: no sliding window, every layer full attention."""
    out.update(use_sliding_window=False, sliding_window=None, max_window_layers=cfg.n_layer)
