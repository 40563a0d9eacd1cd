"""Interchangeable training backends (torch, deepspeed, megatron, npu), one class per module."""
