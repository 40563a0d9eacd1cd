"""Interchangeable training backends (torch, deepspeed, megatron, npu, torchtitan), one class per module.

Owns the Backend contract (`base`), layouts as data (`layout`), the torch backend's parallelisms applied from
outside (`parallel/`: mesh, FSDP2, TP, PP, AC) and the support matrix (`support`). A new backend is one module
here plus a line in `registry.BACKENDS` (docs/writing-a-backend.md). A backend that is a whole trainer (veRL)
drives the run through the loop's contract (`suite.loop`: stop codes, `Progress`, the `Sink` it writes into).

May import: `suite.loop`, `suite.workloads.contract`, `suite.algorithms`, `suite.models`, `suite.data` (its
readers' constants and `DataMissing`), `suite.measure`, `suite.devices`, `suite.registry`, `suite.spec`,
`suite.specload`. Never: `suite.harness`, `suite.execution`, `suite.results`, `suite.cli`.
"""
