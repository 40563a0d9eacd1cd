"""The suite's LoRA fine-tune (`task: causal_lm_samples`, `arch: hf_llama` with `model.lora`: MLPerf's
llama2_70b_lora) in the terms of veRL 0.9.1's SFT trainer (`python -m verl.trainer.sft_trainer`, its Hydra config
`sft_trainer_engine.yaml`): the trainer overrides, composed over veRL's own config (Hydra refuses a key veRL does not
have) and built into veRL's dataclasses (HFModelConfig, FSDPEngineConfig, FSDPOptimizerConfig), and the parts of
the recipe veRL's FSDP LoRA cannot carry, each quoted from the installed veRL (`unexpressed`).

suite/backends/verl/sft_launch.py adds the run's own files (data, base model, seed, epochs, attention) and launches
the trainer on a CUDA node. veRL is imported only inside `compose` and `validate`.
"""

from __future__ import annotations

from typing import Any

from suite.backends.verl.adapt import hydra_args
from suite.models.common.configs import LoraConfig

# the suite's linear names -> transformers' LlamaForCausalLM module names (what veRL hands peft as target_modules)
SUITE_TO_HF = {"wq": "q_proj", "wk": "k_proj", "wv": "v_proj", "wo": "o_proj", "w1": "gate_proj", "w3": "up_proj",
               "w2": "down_proj", "output": "lm_head"}
CONFIG_NAME = "sft_trainer_engine"


def lora(spec: Any) -> LoraConfig:
    block = spec.model.lora
    if block is None:
        raise ValueError(f"{spec.name}: model.lora is not set; veRL's SFT trainer is wired here for LoRA fine-tunes")
    return LoraConfig.model_validate(block if isinstance(block, dict) else block.model_dump())


def hf_targets(cfg: LoraConfig) -> list[str]:
    """The adapters' modules in transformers' Llama (q_proj, k_proj, v_proj: qkv_proj is three linears there)."""
    return sorted({SUITE_TO_HF[t] for t in cfg.suite_targets(False)})


def unexpressed(spec: Any) -> list[str]:
    """What of the spec's LoRA veRL 0.9.1's FSDP engine cannot carry, each with the line of veRL that says so."""
    cfg, out = lora(spec), []
    if cfg.dropout > 0:
        out.append(f"model.lora.dropout {cfg.dropout}: veRL's FSDP engine builds peft's LoraConfig from task_type, r, "
                   "lora_alpha, target_modules, target_parameters, exclude_modules and bias only "
                   "(verl/workers/engine/fsdp/transformer_impl.py:359-368), so peft's lora_dropout default 0.0 "
                   "applies (HFModelConfig's `lora.dropout` is Megatron's); only a pre-made peft adapter folder, loaded by "
                   "PeftModel.from_pretrained from model.lora_adapter_path (transformer_impl.py:342-352), would carry it")
    if getattr(spec.model, "fused_qkv", False) and any(t in ("qkv_proj", "wqkv") for t in cfg.target_modules):
        out.append("model.fused_qkv with qkv_proj: veRL loads the base with transformers' AutoModelForCausalLM "
                   "(verl/workers/engine/fsdp/transformer_impl.py:276), whose Llama attention has separate q_proj, "
                   "k_proj and v_proj: three adapters, not the recipe's ONE adapter on the fused qkv_proj (a fused-qkv "
                   "Llama class given as model.external_lib would be needed)")
    return out


def overrides(spec: Any, train_file: str, model_path: str, *, gpus_per_node: int = 8, nnodes: int = 1,
              out_dir: str = "checkpoints") -> dict[str, Any]:
    """veRL SFT trainer overrides (dotted keys, Hydra's `key=value`) for a LoRA `causal_lm_samples` spec."""
    cfg = lora(spec)
    opt, sched = spec.optimizer, spec.schedule
    grad_clip = (spec.backends or {}).get("torch", {}).get("grad_clip")  # the same clip under every engine
    return {
        "model.path": model_path,
        "model.lora_rank": cfg.rank,
        "model.lora_alpha": cfg.alpha,
        "model.target_modules": hf_targets(cfg),
        "data.train_files": train_file,
        "data.train_batch_size": spec.data.batch_size,
        "data.micro_batch_size_per_gpu": spec.data.micro_batch_size or 1,
        "data.use_dynamic_bsz": False,  # the recipe's fixed micro-batches, not veRL's token budget
        "data.max_length": spec.model.seq_len,
        "optim.lr": float(opt.lr),
        "optim.weight_decay": float(opt.weight_decay),
        "optim.betas": [float(b) for b in opt.betas],
        "optim.lr_scheduler_type": sched.name,
        "optim.lr_warmup_steps": int(sched.warmup_steps or 0),
        "optim.min_lr_ratio": float(sched.min_lr_ratio or 0.0),
        **({"optim.clip_grad": float(grad_clip)} if grad_clip is not None else {}),
        "engine.strategy": "fsdp2",
        "trainer.total_training_steps": int(spec.budget.max_steps),
        "trainer.test_freq": int(spec.eval.every_steps),
        "trainer.save_freq": -1,
        "trainer.logger": ["console", "file"],
        "trainer.project_name": "trainbench",
        "trainer.experiment_name": spec.name.replace("/", "_"),
        "trainer.default_local_dir": out_dir,
        "trainer.resume_mode": "disable",
        "trainer.n_gpus_per_node": gpus_per_node,
        "trainer.nnodes": nnodes,
    }


def compose(values: dict[str, Any]) -> Any:
    """veRL's own SFT config (`sft_trainer_engine.yaml` and its defaults: hf_model, fsdp engine and optimizer) with
    the overrides applied by Hydra, as `python -m verl.trainer.sft_trainer` would; an unknown key is Hydra's error."""
    from importlib.resources import files

    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(files("verl.trainer.config")), version_base=None):
        return hydra_compose(config_name=CONFIG_NAME, overrides=hydra_args(values))


def validate(config: Any, load_tokenizer: bool = False) -> dict[str, Any]:
    """veRL's typed configs built from a composed config as SFTTrainer._build_config does (omega_conf_to_dataclass):
    the model (HFModelConfig: reads the checkpoint's config.json), the FSDP engine and its optimizer."""
    from omegaconf import OmegaConf, open_dict
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig

    config = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    with open_dict(config):
        config.model.load_tokenizer = load_tokenizer
    out = {"model": omega_conf_to_dataclass(config.model), "engine": omega_conf_to_dataclass(config.engine),
           "optim": omega_conf_to_dataclass(config.optim)}
    for name, cls in (("model", HFModelConfig), ("engine", FSDPEngineConfig), ("optim", FSDPOptimizerConfig)):
        if not isinstance(out[name], cls):
            raise TypeError(f"veRL built {type(out[name]).__name__} for {name}, not {cls.__name__}")
    return out
