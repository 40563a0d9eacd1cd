"""Qwen3.5 MoE (`model`): the counts of MLPerf qwen35_397b_grpo's policy. May import what `suite.models` may.
"""
