"""Parallelisms applied from outside to a single-device model (torchtitan's `parallelize_<model>` shape).

Each module is one PyTorch API: tensor.py (DTensor `parallelize_module`), fsdp.py (FSDP2 `fully_shard`),
checkpoint.py (activation checkpointing), pipeline.py (`torch.distributed.pipelining`); mesh.py builds the
`DeviceMesh` they share from a `suite.backends.layout.Layout`. suite/backends/torch/backend.py composes them.
"""
