"""The DeepSeek-V3 family (`family`): its shapes on the suite's MoE decoder. May import what `suite.models` may.
"""
