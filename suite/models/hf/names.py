"""Parameter names, the suite's -> Hugging Face's on-disk ones (`llama.HF_TO_SUITE` read backwards; Mixtral's experts
one by one; a `fused_qkv` model's wqkv split into q/k/v_proj): what `checkpoint.save_llama` writes, and
transformers' LlamaForCausalLM / MixtralForCausalLM read."""

from __future__ import annotations

import re

import torch

from suite.models.llama import config as llama_config
from suite.models.llama import model as llama


def _reverse_rules() -> list[tuple[re.Pattern[str], str]]:
    """llama.HF_TO_SUITE read backwards: each suite name template as a regex, each HF pattern as a template."""
    rules = []
    for hf_pattern, suite_template in llama.HF_TO_SUITE:
        groups = re.findall(r"\((.*?)\)", hf_pattern)
        regex = re.escape(suite_template.replace("w1+w3", "W13"))
        for i, g in enumerate(groups, 1):
            regex = regex.replace(re.escape(f"\\{i}"), f"({g})")
        template, i = hf_pattern, 0
        for g in groups:
            i += 1
            template = template.replace(f"({g})", f"\\{i}", 1)
        rules.append((re.compile(regex), template.replace("\\.", ".")))
    return rules


def to_hf_state_dict(state: dict[str, torch.Tensor], cfg: llama_config.Config | None = None) -> dict[str, torch.Tensor]:
    """The suite's names -> Hugging Face's on-disk ones (Mixtral's experts one by one, as its checkpoints are; a
    `fused_qkv` model's wqkv as separate q/k/v_proj, the layout transformers' LlamaForCausalLM reads)."""
    rules, out = _reverse_rules(), {}
    if cfg is not None and cfg.fused_qkv:
        state = llama.split_qkv(state, cfg)
    for name, t in state.items():
        m = re.fullmatch(r"layers\.(\d+)\.moe\.experts\.(w[123])", name)
        if m:
            for e in range(t.shape[0]):
                out[f"model.layers.{m[1]}.block_sparse_moe.experts.{e}.{m[2]}.weight"] = t[e]
            continue
        if m := re.fullmatch(r"layers\.(\d+)\.moe\.router\.weight", name):
            out[f"model.layers.{m[1]}.block_sparse_moe.gate.weight"] = t
            continue
        for regex, template in rules:
            if regex.fullmatch(name):
                out[regex.sub(template, name)] = t
                break
        else:
            raise KeyError(f"suite parameter {name!r} has no Hugging Face name (llama.HF_TO_SUITE; a fused wqkv "
                           "needs the model's config to be split)")
    return out
