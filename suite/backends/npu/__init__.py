"""The Ascend NPU backend (`backend.NpuBackend`): the torch loop on `npu` / hccl, torch_npu import-guarded.
May import what `suite.backends` may.
"""
