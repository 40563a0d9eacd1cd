"""The Mixtral family (`family`): Llama attention with softmax top-k MoE layers. May import what `suite.models` may.
"""
