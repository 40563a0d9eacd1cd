"""Interchangeable training backends (torch, deepspeed, megatron, npu, torchtitan), one class per module.

Owns the Backend contract (`base`), layouts as data (`layout`), the torch backend's parallelisms applied from
outside (`parallel/`: mesh, FSDP2, TP, PP, AC) and the support matrix (`support`). A new backend is one module
here plus a line in `registry.BACKENDS` (docs/writing-a-backend.md). May import: `suite.workloads.contract`,
`suite.algorithms`, `suite.models`, `suite.measure`, `suite.devices`, `suite.registry`, `suite.specload`; never
execution, results or cli.
"""
