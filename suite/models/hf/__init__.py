"""Hugging Face model folders: the safetensors validator and reader (`tensors`), checkpoints into the suite's
Llama and back (`checkpoint`), and `arch: hf_llama` (`pretrained`). May import what `suite.models` may.
"""
