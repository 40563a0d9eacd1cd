"""The Megatron-core backend (`backend.MegatronBackend`): the suite GPT and Llama as Megatron GPTModels
(`model`, `llama`), its forward-backward step (`step`), recompute, LoRA (`lora`, `lora_layers`) and the scoped CPU
shim (`cpu`). May import what `suite.backends` may.
"""
