"""Parts the model families share: decoder layers (`layers`: RMSNorm, SwiGLU, rotary), the MoE block (`moe`),
sampling for rollouts (`generation`) and LoRA through peft (`lora`). May import what `suite.models` may.
"""
