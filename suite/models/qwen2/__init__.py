"""The Qwen2 family (`family`): Llama layers with q/k/v biases and no o bias. May import what `suite.models` may.
"""
