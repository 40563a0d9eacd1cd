"""`model.fused_qkv`: the Llama decoder's q, k and v as ONE linear `wqkv` (rows [q; k; v], the layout of MLPerf's
"Llama2-70b-fused-qkv-mlperf" qkv_proj), so that peft puts ONE LoRA adapter on qkv_proj as the MLPerf reference
does (44,564,480 adapter parameters for 70B, not 65,536,000). Against transformers' LlamaForCausalLM (logits,
save/load round trip), a hand-written LoRA update, the unfused model on the same weights, the checkpoint files'
own tensors, and the backends that read wq/wk/wv (Megatron's copy splits wqkv; torchtitan's weight map splits it
into the stock wq/wk/wv its FusedQKVLinear merges on load)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from support.hf_reference import hf_llama, load_into_suite, randomize
from support.promised import require
from test_llama import _max_abs, _tokens

from suite import registry
from suite.data.base import DataMissing
from suite.models.common import configs as common_configs
from suite.models.common import lora
from suite.models.hf import checkpoint as ckpt
from suite.models.hf import config as hf_config_mod
from suite.models.hf import pretrained
from suite.models.hf import tensors as hf_tensors
from suite.models.llama import config as llama_config
from suite.models.llama import model as llama
from suite.specload import load_spec

torch.set_num_threads(1)
TINY = llama_config.Config(preset="llama3.1-tiny")
FUSED = TINY.model_copy(update={"fused_qkv": True})


def _pair() -> tuple[torch.nn.Module, llama.Llama, llama.Llama]:
    """transformers' tiny Llama, the suite's unfused model and the fused one, all holding its weights."""
    hf_model = hf_llama(TINY)
    randomize(hf_model)
    split = load_into_suite(hf_model, TINY)
    fused = llama.Llama(FUSED, 256)
    fused.load_state_dict(llama.fuse_qkv(split.state_dict()), strict=True)
    return hf_model, split, fused.eval()


def test_fused_attention_gives_the_unfused_and_transformers_logits():
    require("transformers")
    hf_model, split, fused = _pair()
    attn = fused.layers[0].attention
    assert not hasattr(attn, "wq") and tuple(attn.wqkv.weight.shape) == (64 + 32 + 32, 64)
    idx = _tokens(TINY)
    with torch.no_grad():
        ours, unfused, theirs = fused(idx), split(idx), hf_model(idx).logits
        noise = _max_abs(theirs, hf_model.double()(idx).logits)
    assert _max_abs(ours, unfused) <= 4 * noise and _max_abs(ours, theirs) <= 4 * noise, noise
    # the split is [q; k; v]: rows in another order give other logits
    swapped = llama.Llama(FUSED, 256).eval()
    state = fused.state_dict()
    w = state["layers.0.attention.wqkv.weight"]
    swapped.load_state_dict({**state, "layers.0.attention.wqkv.weight": torch.cat([w[64:96], w[:64], w[96:]])})
    with torch.no_grad():
        assert _max_abs(swapped(idx), ours) > 100 * noise


def test_mlperf_fused_checkpoint_loads_into_wqkv_whole_and_saves_in_transformers_layout(tmp_path):
    """The MLPerf layout (one qkv_proj, bf16, written with safetensors alone) is read into wqkv as it is on disk (one
    source, no row split); saved, the folder has Hugging Face's q/k/v_proj, which transformers reads with the same
    logits, and which loads back into wqkv (q, k and v concatenated)."""
    require("transformers")
    from safetensors.torch import load_file
    from support.datafiles import write_fused_qkv_llama
    from transformers import LlamaForCausalLM

    folder = write_fused_qkv_llama(tmp_path / "mlperf")
    declared = ckpt.config_for(folder).model_copy(update={"fused_qkv": True, "seq_len": 32})
    cfg = ckpt.config_for(folder, declared)
    assert cfg.fused_qkv  # the spec's choice, kept
    plan = hf_tensors.plan(folder, cfg)
    entry = plan.entries["layers.1.attention.wqkv.weight"]
    assert [(s.name, s.select) for s in entry.sources] == [("model.layers.1.self_attn.qkv_proj.weight", ())]
    model = ckpt.load_llama(folder, cfg, dtype=torch.float32)
    on_disk = load_file(folder / hf_tensors.SINGLE)
    for i in range(cfg.n_layer):
        assert torch.equal(model.layers[i].attention.wqkv.weight, on_disk[f"model.layers.{i}.self_attn.qkv_proj.weight"]
                           .float())
    saved = ckpt.save_llama(model, tmp_path / "saved")
    names = set(load_file(saved / hf_tensors.SINGLE))
    assert "model.layers.0.self_attn.k_proj.weight" in names and not any("qkv_proj" in n for n in names)
    idx = _tokens(cfg)
    theirs = LlamaForCausalLM.from_pretrained(saved).eval()
    back = ckpt.load_llama(saved, cfg)
    with torch.no_grad():
        ours = model.eval()(idx)
        assert _max_abs(ours, theirs(idx).logits) < 1e-4
        assert torch.equal(back(idx), ours)
    entry = hf_tensors.plan(saved, cfg).entries["layers.0.attention.wqkv.weight"]
    assert [s.name.split(".")[-2] for s in entry.sources] == ["q_proj", "k_proj", "v_proj"]


def test_separate_qkv_that_do_not_make_wqkv_are_refused_naming_the_tensor(tmp_path):
    from safetensors.torch import load_file, save_file

    ckpt.save_llama(llama.build(TINY, {}), tmp_path)
    tensors = load_file(tmp_path / hf_tensors.SINGLE)
    k = tensors["model.layers.1.self_attn.k_proj.weight"]
    save_file({**tensors, "model.layers.1.self_attn.k_proj.weight": k[:-2]}, str(tmp_path / hf_tensors.SINGLE))
    with pytest.raises(DataMissing, match=r"k_proj.weight has shape \(30, 64\), .* needs \(32, 64\) \(its rows of "
                                          r"layers.1.attention.wqkv.weight\)"):
        ckpt.load_llama(tmp_path, FUSED)
    del tensors["model.layers.1.self_attn.v_proj.weight"]
    save_file(tensors, str(tmp_path / hf_tensors.SINGLE))
    with pytest.raises(DataMissing, match=r"tensor model.layers.1.self_attn.v_proj.weight is in no file"):
        ckpt.load_llama(tmp_path, FUSED)


def test_one_peft_adapter_on_wqkv_is_the_hand_computed_lora_update():
    """peft on the fused linear: y = x W^T + (x A^T B^T) alpha / r, A (r, d), B (q + k + v, r); its gradients the
    hand formula's; one A per layer, counted by adapter_param_count."""
    require("peft")
    cfg = hf_config_mod.Config(preset="llama3.1-tiny", fused_qkv=True, lora=common_configs.LoraConfig(
        rank=4, alpha=8, target_modules=["qkv_proj", "o_proj"]))
    model = pretrained.build(cfg, {})
    adapters = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert sorted({n.split(".")[3] for n in adapters}) == ["wo", "wqkv"] and len(adapters) == 2 * 2 * cfg.n_layer
    assert sum(p.numel() for p in adapters.values()) == lora.adapter_param_count(cfg, cfg.lora, 256) \
        == cfg.n_layer * 4 * ((64 + 128) + (64 + 64))
    layer = model.layers[0].attention.wqkv
    g = torch.Generator().manual_seed(3)
    a, b = (0.1 * torch.randn(p.weight.shape, generator=g) for p in (layer.lora_A["default"], layer.lora_B["default"]))
    with torch.no_grad():
        layer.lora_A["default"].weight.copy_(a)
        layer.lora_B["default"].weight.copy_(b)
    x = torch.randn(2, 5, 64, generator=g)
    out = layer(x)
    w = layer.base_layer.weight.detach()
    a_ref, b_ref = a.clone().requires_grad_(), b.clone().requires_grad_()
    ref = x @ w.T + (x @ a_ref.T @ b_ref.T) * (8 / 4)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    grad = torch.randn(out.shape, generator=g)
    out.backward(grad)
    ref.backward(grad)
    torch.testing.assert_close(layer.lora_A["default"].weight.grad, a_ref.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(layer.lora_B["default"].weight.grad, b_ref.grad, rtol=1e-5, atol=1e-6)
    assert layer.base_layer.weight.grad is None


def test_mlperf_spec_counts_the_references_44_564_480_adapter_parameters():
    from suite.backends.megatron import lora as megatron_lora

    cfg = hf_config_mod.Config.model_validate(load_spec(registry.workload_files()["nlp/llama2_70b_lora"]).model.params())
    assert cfg.fused_qkv and lora.adapter_param_count(cfg, cfg.lora, 32000) == 44_564_480
    assert megatron_lora.adapter_param_count(cfg, cfg.lora) == 44_564_480
    split = cfg.model_copy(update={"fused_qkv": False})
    assert lora.adapter_param_count(split, split.lora, 32000) == 65_536_000


def test_split_target_names_with_a_fused_model_and_wqkv_without_one_are_refused():
    cfg = common_configs.LoraConfig(rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    with pytest.raises(ValueError, match="'q_proj' with model.fused_qkv: q, k and v are one linear"):
        cfg.suite_targets(fused_qkv=True)
    with pytest.raises(ValueError, match="'wqkv' exists only with model.fused_qkv: true"):
        cfg.model_copy(update={"target_modules": ["wqkv"]}).suite_targets()
    assert cfg.model_copy(update={"target_modules": ["linear_qkv", "wo"]}).suite_targets(True) == ["wqkv", "wo"]


def test_megatron_copy_splits_wqkv_and_torchtitan_maps_it():
    """Megatron's llama_state reads wq/wk/wv: from a fused model it gives exactly the unfused model's tensors;
    torchtitan's model loaded from the fused model gives the logits of the one loaded from the unfused model."""
    from suite.backends.megatron import llama as megatron_llama
    from suite.backends.torchtitan.backend import supports

    split = llama.build(TINY, {})
    fused = llama.Llama(FUSED, 256)
    fused.load_state_dict(llama.fuse_qkv(split.state_dict()))
    for tp_rank in (0, 1):
        a, b = (megatron_llama.llama_state(m, tp=2, tp_rank=tp_rank) for m in (split, fused))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    spec = load_spec(registry.workload_files()["nlp/llama31_8b"], {"model.fused_qkv": True}, variant="tiny")
    assert supports(spec) is None
    require("torchtitan.models.llama3", extra="torchtitan")
    from suite.backends.torchtitan import model as titan_model

    titans = []
    for cfg, ours in ((TINY, split), (FUSED, fused)):
        titan = titan_model.build(cfg, 256, "sdpa")
        titan_model.load_suite_weights(titan, ours, cfg)
        titans.append(titan.eval())
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(titans[0](idx), titans[1](idx))


def test_fused_lora_step_trains_adapters_only_with_the_unfused_loss():
    """One optimizer step of LoRA on the fused model and three adapters on the unfused one: the same loss at
    B = 0 (the same base), then only lora_ tensors move."""
    require("peft")
    _, split, fused = _pair()
    targets = common_configs.LoraConfig(rank=4, alpha=8, target_modules=["qkv_proj", "o_proj"])
    models = [lora.apply(m.train(), targets) for m in (split, fused)]
    idx = _tokens(TINY)
    before = {n: t.clone() for n, t in models[1].state_dict().items()}
    losses = []
    for m in models:
        logits = m(idx)
        losses.append(F.cross_entropy(logits[:, :-1].reshape(-1, 256), idx[:, 1:].reshape(-1)))
    assert losses[0].item() == pytest.approx(losses[1].item(), rel=1e-5)
    opt = torch.optim.SGD(lora.adapter_parameters(models[1]), lr=1.0)
    losses[1].backward()
    opt.step()
    after = models[1].state_dict()
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed == {n for n in before if ".lora_B." in n}  # B from zero; A's gradient is 0 while B is 0
