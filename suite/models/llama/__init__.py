"""The Llama family (`arch: llama`): the decoder, dense or MoE (`model`), and its named shapes (`presets`: Llama
3.1, gpt-oss, DeepSeek-V3 and their tiny sizes). May import what `suite.models` may.
"""
