"""The Llama family and the Llama-class decoder every family here builds on (`arch: llama`): the decoder, dense or
MoE (`model`), the Llama family's declaration and shapes (`family`: Llama 3.1, Llama 2) and the union of every
registered family's shapes (`presets`). May import what `suite.models` may.
"""
