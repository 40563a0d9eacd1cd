"""The DeepSpeed backend (`backend.DeepSpeedBackend`: ZeRO 0-3, offload, the ds_config) and its ZeRO-3 loader of
Hugging Face checkpoints (`zero3`: built partitioned, each rank streaming its own partition). May import what
`suite.backends` may.
"""
